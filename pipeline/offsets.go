package pipeline

import (
	"context"
	"fmt"
	"time"

	"github.com/segmentio/kafka-go"
)

// EndOffsets returns each partition's high watermark (the next offset to be
// written) of k.Topic: the target of scheduled runs and the base of lag.
func EndOffsets(ctx context.Context, k KafkaConfig) (map[int32]int64, error) {
	tr, err := k.transport()
	if err != nil {
		return nil, err
	}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 10 * time.Second, Transport: tr}
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{k.Topic}})
	if err != nil {
		return nil, fmt.Errorf("metadata of %s: %w", k.Topic, err)
	}
	var reqs []kafka.OffsetRequest
	for _, t := range md.Topics {
		if t.Name != k.Topic {
			continue
		}
		if t.Error != nil {
			return nil, fmt.Errorf("metadata of %s: %w", k.Topic, t.Error)
		}
		for _, p := range t.Partitions {
			reqs = append(reqs, kafka.LastOffsetOf(p.ID))
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions (does it exist?)", k.Topic)
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{k.Topic: reqs}})
	if err != nil {
		return nil, fmt.Errorf("end offsets of %s: %w", k.Topic, err)
	}
	out := make(map[int32]int64, len(reqs))
	for _, p := range res.Topics[k.Topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("end offset of %s/%d: %w", k.Topic, p.Partition, p.Error)
		}
		out[int32(p.Partition)] = p.LastOffset
	}
	return out, nil
}
