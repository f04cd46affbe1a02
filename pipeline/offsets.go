package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// EndOffsets returns each partition's last stable offset of k.Topic: the
// high watermark, or the first offset of the oldest transaction still
// open, which a read_committed reader does not read past until it ends.
// The target of scheduled runs and the end of what replay can read.
func EndOffsets(ctx context.Context, k KafkaConfig) (map[int32]int64, error) {
	return listOffsets(ctx, k, "end", kafka.ReadCommitted, kafka.LastOffsetOf, func(p kafka.PartitionOffsets) int64 { return p.LastOffset })
}

// HighWatermarks returns each partition's high watermark of k.Topic (the
// next offset to be written): the base of lag, and what a table's
// watermark is checked against for a recreated topic. Not EndOffsets: a
// table written by a reader of uncommitted records may hold offsets past
// an open transaction's start.
func HighWatermarks(ctx context.Context, k KafkaConfig) (map[int32]int64, error) {
	return listOffsets(ctx, k, "end", kafka.ReadUncommitted, kafka.LastOffsetOf, func(p kafka.PartitionOffsets) int64 { return p.LastOffset })
}

// FirstOffsets returns each partition's log start offset of k.Topic: what
// retention has not deleted.
func FirstOffsets(ctx context.Context, k KafkaConfig) (map[int32]int64, error) {
	return listOffsets(ctx, k, "first", kafka.ReadCommitted, kafka.FirstOffsetOf, func(p kafka.PartitionOffsets) int64 { return p.FirstOffset })
}

// listOffsets asks for the offset of each partition of k.Topic that of
// names, at isolation level iso, read by pick from the answer; what ("end",
// "first") names it in errors.
func listOffsets(ctx context.Context, k KafkaConfig, what string, iso kafka.IsolationLevel, of func(partition int) kafka.OffsetRequest, pick func(kafka.PartitionOffsets) int64) (map[int32]int64, error) {
	c, done, err := k.Client()
	if err != nil {
		return nil, err
	}
	defer done()
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
			reqs = append(reqs, of(p.ID))
		}
	}
	if len(reqs) == 0 {
		return nil, fmt.Errorf("topic %s %w", k.Topic, errNoPartitions)
	}
	res, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{k.Topic: reqs},
		IsolationLevel: iso})
	if err != nil {
		return nil, fmt.Errorf("%s offsets of %s: %w", what, k.Topic, err)
	}
	out := make(map[int32]int64, len(reqs))
	for _, p := range res.Topics[k.Topic] {
		if p.Error != nil {
			return nil, fmt.Errorf("%s offset of %s/%d: %w", what, k.Topic, p.Partition, p.Error)
		}
		out[int32(p.Partition)] = pick(p)
	}
	return out, nil
}

// errNoPartitions marks a topic the broker listed without partitions.
var errNoPartitions = errors.New("has no partitions (does it exist?)")

// checkSourceTimeout bounds CheckSourceTopic and the same check at the
// start of Member.Run.
const checkSourceTimeout = 30 * time.Second

// CheckSourceTopic asks the brokers for k.Topic's end offsets, as
// Member.Run does first, for a command to ask before it creates a table or
// asks for the dead-letter topic: a misspelt kafka.topic, or brokers out of
// reach, left the table created (and, on a broker that creates topics on
// request, a dead-letter topic named after the misspelling) before the
// member refused them. Its error names kafka.topic when the brokers answer
// without the topic, else kafka.brokers.
func CheckSourceTopic(ctx context.Context, k KafkaConfig) error {
	ctx, cancel := context.WithTimeout(ctx, checkSourceTimeout)
	defer cancel()
	_, err := EndOffsets(ctx, k)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kafka.UnknownTopicOrPartition), errors.Is(err, errNoPartitions),
		errors.Is(err, kafka.TopicAuthorizationFailed), errors.Is(err, kafka.InvalidTopic):
		return fmt.Errorf("kafka.topic %s (kafka.brokers %s): %w", k.Topic, strings.Join(k.Brokers, ","), err)
	}
	return fmt.Errorf("kafka.brokers %s: %w", strings.Join(k.Brokers, ","), err)
}

// CheckBrokers asks k.Brokers for the cluster's metadata, the first
// request of every client, for a command whose first request to them
// would otherwise fail as something else: verify's read of the dead-letter
// topic said the topic could not be read and suggested --no-dlq, which
// reads every dead letter as a gap, for brokers out of reach. Its error
// names kafka.brokers, "unreachable" when no connection was made or
// nothing answered (refused, no such host, no route, timed out).
func CheckBrokers(ctx context.Context, k KafkaConfig) error {
	c, done, err := k.Client()
	if err != nil {
		return err
	}
	defer done()
	// kafka-go answers it from the metadata its first connection fetched,
	// or with that connection's error.
	_, err = c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err == nil {
		return nil
	}
	brokers := strings.Join(k.Brokers, ",")
	// Before net.Error, which a deadline's error is too.
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("kafka.brokers %s: unreachable: no answer: %w", brokers, err)
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return fmt.Errorf("kafka.brokers %s: unreachable: %w", brokers, netErr)
	}
	return fmt.Errorf("kafka.brokers %s: %w", brokers, err)
}

// GroupOffsets returns the offsets k.Group committed for partitions of
// k.Topic; a partition without one is absent, as every one is for a group
// the broker does not know.
func GroupOffsets(ctx context.Context, k KafkaConfig, partitions []int) (map[int32]int64, error) {
	out, _, err := GroupStart(ctx, k, partitions)
	return out, err
}

// GroupStart is GroupOffsets with how many partitions the topic had when
// the job first started, as the group's offsets of partitions tell
// (startPartitions; pass every partition of the topic), or 0 when the group
// has none (the job has not started). A start_offset "latest" job reads a
// partition at or above that count, without a watermark or a group offset,
// from its log start: it was added to the topic since.
func GroupStart(ctx context.Context, k KafkaConfig, partitions []int) (offsets map[int32]int64, started int, err error) {
	commits, err := groupCommits(ctx, k, partitions)
	if err != nil {
		return nil, 0, err
	}
	offsets = make(map[int32]int64, len(commits))
	for p, c := range commits {
		offsets[p] = c.offset
	}
	started, _ = startPartitions(commits)
	return offsets, started, nil
}

// groupCommit is a partition's committed offset and the metadata committed
// with it.
type groupCommit struct {
	offset   int64
	metadata string
}

// groupCommits is GroupOffsets with each offset's metadata.
func groupCommits(ctx context.Context, k KafkaConfig, partitions []int) (map[int32]groupCommit, error) {
	c, done, err := k.Client()
	if err != nil {
		return nil, err
	}
	defer done()
	res, err := c.OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: k.Group, Topics: map[string][]int{k.Topic: partitions}})
	if err == nil {
		err = res.Error
	}
	if errors.Is(err, kafka.GroupIdNotFound) {
		return map[int32]groupCommit{}, nil // not yet: kfake says so where Kafka answers no offsets
	}
	if err != nil {
		return nil, fmt.Errorf("offsets of group %s: %w", k.Group, err)
	}
	out := make(map[int32]groupCommit, len(partitions))
	for _, p := range res.Topics[k.Topic] {
		if errors.Is(p.Error, kafka.GroupIdNotFound) {
			continue
		}
		if p.Error != nil {
			return nil, fmt.Errorf("offset of group %s on %s/%d: %w", k.Group, k.Topic, p.Partition, p.Error)
		}
		if p.CommittedOffset >= 0 {
			out[int32(p.Partition)] = groupCommit{offset: p.CommittedOffset, metadata: p.Metadata}
		}
	}
	return out, nil
}

// pinPrefix starts the metadata of a start_offset "latest" pin: the number
// of partitions the topic had when the job first started follows, then
// pinStamp and the time of the pin's commit, in Unix milliseconds.
const (
	pinPrefix = "floe.start_partitions="
	pinStamp  = ";pinned_at="
)

// pinMetadata is the metadata committed at time at with the pins of a job
// that first started when the topic had n partitions.
func pinMetadata(n int, at time.Time) string {
	return pinPrefix + strconv.Itoa(n) + pinStamp + strconv.FormatInt(at.UnixMilli(), 10)
}

// parsePin reads a pin's metadata: the partition count (0 when it is not a
// pin's or the count is bad) and when the pin was committed (zero for a pin
// committed without it, by a floe before pins recorded it).
func parsePin(metadata string) (n int, at time.Time) {
	v, pin := strings.CutPrefix(metadata, pinPrefix)
	if !pin {
		return 0, time.Time{}
	}
	v, stamp, _ := strings.Cut(v, pinStamp)
	if n, _ = strconv.Atoi(v); n < 0 {
		n = 0
	}
	if ms, err := strconv.ParseInt(stamp, 10, 64); err == nil && ms > 0 {
		at = time.UnixMilli(ms)
	}
	return n, at
}

// lastPinned returns when the newest of the pins among commits was
// committed: zero when none says (no pin, or pins committed without the
// time).
func lastPinned(commits map[int32]groupCommit) time.Time {
	var last time.Time
	for _, c := range commits {
		if _, at := parsePin(c.metadata); at.After(last) {
			last = at
		}
	}
	return last
}

// startPartitions returns how many partitions the topic had when the job
// first started, as far as the group's committed offsets of the topic
// (commits) tell, and whether they tell: the least count its pins
// recorded; else, for offsets committed without one (by a floe before pins
// recorded it), one past the highest partition with an offset — partition
// numbers only grow, so every partition below it existed; nothing when the
// group has no offset of the topic (the job's first start).
func startPartitions(commits map[int32]groupCommit) (int, bool) {
	least, highest := -1, -1
	for p, c := range commits {
		highest = max(highest, int(p))
		if n, _ := parsePin(c.metadata); n > 0 && (least < 0 || n < least) {
			least = n
		}
	}
	switch {
	case least > 0:
		return least, true
	case highest >= 0:
		return highest + 1, true
	}
	return 0, false
}

// pinRefresh, when not 0, replaces half the brokers' offsets retention as
// the age at which pins are refreshed (see Member.started).
var pinRefresh time.Duration

// pinRefreshAfter returns the age at which a scheduled run refreshes the
// group's pins: half of offsets.retention.minutes, how long the brokers
// keep an empty group's offsets, or 12 hours when they do not say (the
// broker's config may be closed to this principal): Kafka's default has
// been 7 days since 2.0, 1 day before.
func pinRefreshAfter(ctx context.Context, k KafkaConfig) time.Duration {
	if pinRefresh != 0 {
		return pinRefresh
	}
	ret, err := offsetsRetention(ctx, k)
	if err != nil || ret <= 0 {
		return 12 * time.Hour
	}
	return ret / 2
}

// groupHasMembers reports whether k.Group has members: the brokers keep
// the offsets of such a group, whatever their age.
func groupHasMembers(ctx context.Context, k KafkaConfig) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, done, err := k.Client()
	if err != nil {
		return false, err
	}
	defer done()
	res, err := c.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{k.Group}})
	if err != nil {
		return false, fmt.Errorf("describing group %s: %w", k.Group, err)
	}
	for _, g := range res.Groups {
		if g.Error != nil {
			return false, fmt.Errorf("describing group %s: %w", k.Group, g.Error)
		}
		if g.GroupID == k.Group && len(g.Members) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// offsetsRetention returns a broker's offsets.retention.minutes.
func offsetsRetention(ctx context.Context, k KafkaConfig) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, done, err := k.Client()
	if err != nil {
		return 0, err
	}
	defer done()
	md, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{}})
	if err != nil {
		return 0, err
	}
	if len(md.Brokers) == 0 {
		return 0, errors.New("the cluster's metadata lists no broker")
	}
	const name = "offsets.retention.minutes"
	res, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeBroker, ResourceName: strconv.Itoa(md.Brokers[0].ID), ConfigNames: []string{name}}}})
	if err != nil {
		return 0, err
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			return 0, r.Error
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				m, err := strconv.ParseInt(e.ConfigValue, 10, 64)
				if err != nil {
					return 0, fmt.Errorf("%s %q: %w", name, e.ConfigValue, err)
				}
				return time.Duration(m) * time.Minute, nil
			}
		}
	}
	return 0, fmt.Errorf("the broker did not answer %s", name)
}

// timestampType returns k.Topic's message.timestamp.type: "CreateTime" or
// "LogAppendTime".
func timestampType(ctx context.Context, k KafkaConfig) (string, error) {
	c, done, err := k.Client()
	if err != nil {
		return "", err
	}
	defer done()
	const name = "message.timestamp.type"
	res, err := c.DescribeConfigs(ctx, &kafka.DescribeConfigsRequest{Resources: []kafka.DescribeConfigRequestResource{{
		ResourceType: kafka.ResourceTypeTopic, ResourceName: k.Topic, ConfigNames: []string{name}}}})
	if err != nil {
		return "", fmt.Errorf("describing %s's configs: %w", k.Topic, err)
	}
	for _, r := range res.Resources {
		if r.Error != nil {
			return "", fmt.Errorf("describing %s's configs: %w", k.Topic, r.Error)
		}
		for _, e := range r.ConfigEntries {
			if e.ConfigName == name {
				return e.ConfigValue, nil
			}
		}
	}
	return "", fmt.Errorf("describing %s's configs: no %s in the answer", k.Topic, name)
}
