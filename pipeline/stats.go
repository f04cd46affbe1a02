package pipeline

import (
	"sync/atomic"
	"time"

	"github.com/floe-dev/floe/lakehouse"
)

// Stats counts what members did. Fields are safe for concurrent use; the
// demo's progress line and tests read them.
type Stats struct {
	Consumed          atomic.Int64 // records fetched and decoded (or dead-lettered)
	DeadLettered      atomic.Int64 // records sent to the dead-letter topic
	Rows              atomic.Int64 // rows committed to the table
	Skipped           atomic.Int64 // rows the dedupe MERGE found already present
	Commits           atomic.Int64 // table commits
	CommitAttempts    atomic.Int64 // catalog commit attempts (conflicts retry)
	Fenced            atomic.Int64 // flushes refused because another member moved on
	Generations       atomic.Int64 // consumer-group generations joined
	KafkaCommitErrors atomic.Int64 // advisory Kafka offset commits that failed
	LastCommitNanos   atomic.Int64 // duration of the last table commit
	Assigned          atomic.Int32 // partitions currently assigned
	OffsetGaps        atomic.Int64 // offsets the log skipped (retention, compaction, transaction markers)
	FlushRetries      atomic.Int64 // failed dead-letter writes or table commits retried in place
	lastOffsets       atomic.Pointer[lakehouse.Offsets]
}

func (s *Stats) recordCommit(res lakehouse.Result, took time.Duration) {
	s.Rows.Add(res.Rows)
	s.Skipped.Add(res.Skipped)
	s.Commits.Add(1)
	s.CommitAttempts.Add(int64(res.Attempts))
	s.LastCommitNanos.Store(int64(took))
	o := res.Offsets
	s.lastOffsets.Store(&o)
}

// Offsets returns the offset map of the newest commit this member made, or
// nil before its first.
func (s *Stats) Offsets() lakehouse.Offsets {
	if p := s.lastOffsets.Load(); p != nil {
		return *p
	}
	return nil
}
