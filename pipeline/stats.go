package pipeline

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/lakehouse"
)

// Stats counts what members did. Fields are safe for concurrent use; the
// metrics endpoint, the demo's progress line and tests read them.
type Stats struct {
	Consumed          atomic.Int64 // records fetched and decoded (or dead-lettered)
	DeadLettered      atomic.Int64 // records decoded as dead letters (again when an abandoned flush is redone)
	DeadLettersCut    atomic.Int64 // dead letters written cut, the topic having refused them whole
	Filtered          atomic.Int64 // records another route of the topic takes (routes with where)
	Rows              atomic.Int64 // rows committed to the table
	Skipped           atomic.Int64 // rows the dedupe MERGE found already present
	Commits           atomic.Int64 // table commits
	CommitAttempts    atomic.Int64 // catalog commit attempts (conflicts retry)
	CommitConflicts   atomic.Int64 // attempts after the first of each commit
	Fenced            atomic.Int64 // flushes refused because another member moved on
	Generations       atomic.Int64 // consumer-group generations joined (rebalances)
	KafkaCommitErrors atomic.Int64 // advisory Kafka offset commits that failed
	LastCommitNanos   atomic.Int64 // duration of the last table commit
	Assigned          atomic.Int32 // partitions currently assigned
	OffsetGaps        atomic.Int64 // offsets the log skipped (retention before they were read, compaction)
	FlushRetries      atomic.Int64 // failed dead-letter writes or table commits retried in place
	Stalled           atomic.Bool  // a dead-letter write or table commit is failing right now
	Stopping          atomic.Bool  // told to stop: flushing what it holds before it leaves the group
	// StoppedPartitions counts partitions held after their worker failed
	// (see Member.work), retried in place.
	StoppedPartitions atomic.Int32
	FreshnessNanos    atomic.Int64 // at the newest commit: its time minus the oldest committed record's Kafka timestamp
	// TransactionSkipped counts offsets that hold no record to ingest:
	// transaction markers and aborted transactions' records.
	TransactionSkipped atomic.Int64
	// TopicPartitions is the topic's partition count at the newest
	// generation; PartitionsAdded counts partitions that appeared while the
	// table already had offsets for the topic (the key→partition mapping
	// changed: see partitionsChanged).
	TopicPartitions atomic.Int32
	PartitionsAdded atomic.Int64
	// BusinessDuplicates counts rows the business-key MERGE skipped: same
	// dedupe key as a row in the table or earlier in the flush.
	BusinessDuplicates atomic.Int64

	topic       string
	lastOffsets atomic.Pointer[lakehouse.Offsets]
	partitions  sync.Map // int32 → *partitionStats, assigned partitions only
	flushRows   prometheus.Histogram
	flushBytes  prometheus.Histogram
}

func newStats(topic string) *Stats {
	return &Stats{
		topic: topic,
		flushRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floe_flush_rows",
			Help:    "Records (rows and dead letters) per flush.",
			Buckets: prometheus.ExponentialBuckets(100, 4, 8), // 100 .. 1.6M
		}),
		flushBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "floe_flush_bytes",
			Help:    "Decoded bytes per flush.",
			Buckets: prometheus.ExponentialBuckets(64<<10, 4, 8), // 64 KiB .. 1 GiB
		}),
	}
}

// partitionStats is what a member knows of one assigned partition, for the
// lag gauges. Times are Kafka record timestamps in Unix nanoseconds.
type partitionStats struct {
	highWater atomic.Int64 // log end offset in the newest fetch response
	committed atomic.Int64 // the table's watermark: next offset to commit
	// pendingSince is the timestamp of the oldest fetched record not yet
	// committed (0: none fetched); committedAt that of the newest committed
	// record, the lag-in-seconds estimate while the next record is unread.
	pendingSince atomic.Int64
	committedAt  atomic.Int64
}

// fetched accounts for a record fetched, before it is buffered (a lane may
// hold it a while, waiting for a lookup): the log end offset its fetch
// response gave, never taken back by an older response's, and its time as
// the oldest uncommitted record's when none is older.
func (p *partitionStats) fetched(msg kafka.Message) {
	p.raise(msg.HighWaterMark)
	p.pending(recordNanos(msg.Time))
}

// maxNanoTime is the latest time Unix nanoseconds can hold (2262).
var maxNanoTime = time.Unix(0, math.MaxInt64)

// recordNanos returns a record's Kafka timestamp in Unix nanoseconds for
// the lag and freshness gauges, or, for a record without a usable one, the
// time it is read: kafka-go gives a timestamp of -1 (none: the v0 message
// format, or a producer that set none) or 0 as the zero time.Time, whose
// UnixNano overflows (the gauges read 272 years), and a timestamp past 2262
// (milliseconds written as microseconds) overflows too. The time floe read
// such a record is the nearest bound it has of its age.
func recordNanos(t time.Time) int64 {
	if t.UnixMilli() <= 0 || t.After(maxNanoTime) {
		return time.Now().UnixNano()
	}
	return t.UnixNano()
}

// pending makes ts the oldest uncommitted record's time unless an older
// one is kept: a record a lane held while a commit reset the time to a
// newer record's is buffered later.
func (p *partitionStats) pending(ts int64) {
	for cur := p.pendingSince.Load(); cur == 0 || ts < cur; cur = p.pendingSince.Load() {
		if p.pendingSince.CompareAndSwap(cur, ts) {
			return
		}
	}
}

// raise makes hw the log end offset unless a newer response gave a later
// one: records buffered from a lane carry their older responses' offsets.
func (p *partitionStats) raise(hw int64) {
	for cur := p.highWater.Load(); hw > cur; cur = p.highWater.Load() {
		if p.highWater.CompareAndSwap(cur, hw) {
			return
		}
	}
}

// lag returns the partition's consumer lag in records and seconds at now.
func (p *partitionStats) lag(now time.Time) (records int64, seconds float64) {
	records = p.highWater.Load() - p.committed.Load()
	if records <= 0 {
		return 0, 0
	}
	since := p.pendingSince.Load()
	if since == 0 {
		since = p.committedAt.Load()
	}
	if since == 0 {
		return records, 0
	}
	return records, max(0, now.Sub(time.Unix(0, since)).Seconds())
}

// assign starts tracking exactly the given partitions; committed holds
// their watermarks (lakehouse.NoWatermark when the table has none).
func (s *Stats) assign(committed map[int32]int64) map[int32]*partitionStats {
	s.partitions.Range(func(k, _ any) bool {
		if _, ok := committed[k.(int32)]; !ok {
			s.partitions.Delete(k)
		}
		return true
	})
	out := make(map[int32]*partitionStats, len(committed))
	for p, w := range committed {
		ps := &partitionStats{}
		ps.committed.Store(max(w, 0))
		ps.highWater.Store(max(w, 0))
		s.partitions.Store(p, ps)
		out[p] = ps
	}
	return out
}

func (s *Stats) recordCommit(res lakehouse.Result, took time.Duration, rows, bytes int, oldest time.Time) {
	s.Rows.Add(res.Rows)
	s.Skipped.Add(res.Skipped)
	s.BusinessDuplicates.Add(res.BusinessDuplicates)
	s.Commits.Add(1)
	s.CommitAttempts.Add(int64(res.Attempts))
	s.CommitConflicts.Add(int64(max(res.Attempts-1, 0)))
	s.LastCommitNanos.Store(int64(took))
	if !oldest.IsZero() {
		// At least 0: a producer's clock may run ahead of ours.
		s.FreshnessNanos.Store(int64(max(0, time.Since(oldest))))
	}
	if s.flushRows != nil {
		s.flushRows.Observe(float64(rows))
		s.flushBytes.Observe(float64(bytes))
	}
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

// Lag returns the consumer lag of each assigned partition in records.
func (s *Stats) Lag() map[int32]int64 {
	out := map[int32]int64{}
	now := time.Now()
	s.partitions.Range(func(k, v any) bool {
		out[k.(int32)], _ = v.(*partitionStats).lag(now)
		return true
	})
	return out
}
