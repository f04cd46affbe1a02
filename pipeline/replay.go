package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// ReplayRange is a block of offsets [From, To) of one partition to backfill.
type ReplayRange struct {
	Partition int32
	From, To  int64
}

// ReplayResult counts what a replay did.
type ReplayResult struct {
	Read         int64 `json:"read"`          // records read from Kafka
	Inserted     int64 `json:"inserted"`      // rows the MERGE added
	Skipped      int64 `json:"skipped"`       // rows already in the table
	DeadLettered int64 `json:"dead_lettered"` // records sent to the dead-letter topic
	Commits      int64 `json:"commits"`
}

// Replay re-reads r from Kafka and commits it with the dedupe MERGE only:
// rows already in the table are skipped, missing ones inserted, and no
// watermark moves, so it is safe while the live job runs. It commits every
// commit.max_records records. Records that cannot be decoded are
// dead-lettered again (verify counts distinct source offsets).
func Replay(ctx context.Context, cfg Config, tbl *lakehouse.Table, sc *schemas.Schema, r ReplayRange, log *slog.Logger) (ReplayResult, error) {
	var res ReplayResult
	if cfg.Enrich != nil {
		return res, errors.New("replay: tables with enrichment cannot be replayed yet (the replayed rows would lack it)")
	}
	if r.From < 0 || r.To <= r.From {
		return res, fmt.Errorf("replay: want 0 <= --from < --to, got [%d, %d)", r.From, r.To)
	}
	k := cfg.Kafka
	end, err := EndOffsets(ctx, k)
	if err != nil {
		return res, fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	last, ok := end[r.Partition]
	if !ok {
		return res, fmt.Errorf("replay: topic %s has no partition %d", k.Topic, r.Partition)
	}
	if r.To > last {
		return res, fmt.Errorf("replay: --to %d is beyond the end of %s/%d (%d)", r.To, k.Topic, r.Partition, last)
	}

	dialer := &kafka.Dialer{Timeout: 10 * time.Second, ClientID: k.ClientID}
	reader, err := openReader(k, r.Partition, dialer, r.From)
	if err != nil {
		return res, err
	}
	defer reader.Close()
	dlq := newDeadLetterWriter(k, &kafka.Transport{Dial: dialer.DialFunc, ClientID: k.ClientID})
	defer dlq.close()
	buf := newPartitionBuffer(sc, k.Topic, r.Partition, lakehouse.Replay, int(k.MaxMessageBytes), nil)
	defer buf.release()

	commit := func() error {
		seg, ok := buf.take()
		if !ok {
			return nil
		}
		seg.part.Resume = lakehouse.Replay
		if err := dlq.write(ctx, seg.letters); err != nil {
			releaseParts([]lakehouse.Part{seg.part})
			return err
		}
		c, err := tbl.Commit(ctx, []lakehouse.Part{seg.part})
		if err != nil {
			return err
		}
		res.Inserted += c.Rows
		res.Skipped += c.Skipped
		res.DeadLettered += int64(len(seg.letters))
		res.Commits++
		log.Info("replay progress", "range", seg.part.Range.String(), "inserted", c.Rows, "skipped", c.Skipped)
		return nil
	}
	for {
		msg, err := reader.FetchMessage(ctx)
		if err != nil {
			return res, fmt.Errorf("reading %s/%d: %w", k.Topic, r.Partition, err)
		}
		if msg.Offset >= r.To {
			break
		}
		if _, _, _, err := buf.appendEnriched(msg, time.Now(), offResult); err != nil {
			return res, err
		}
		res.Read++
		if buf.builder.Len() >= cfg.Commit.MaxRecords || msg.Offset+1 == r.To {
			if err := commit(); err != nil {
				return res, err
			}
		}
		if msg.Offset+1 >= r.To {
			break
		}
	}
	return res, commit()
}
