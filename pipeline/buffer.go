package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// partitionBuffer holds the decoded, not yet committed records of one
// partition: rows in offset order plus the dead letters among them. Its
// worker appends; the flusher takes a segment [from, next) at a time.
type partitionBuffer struct {
	topic     string
	partition int32

	mu      sync.Mutex
	builder schemas.RecordBuilder
	letters []deadLetter
	// resume is the watermark the next segment builds on: the table's W(p)
	// at assignment, then the end of the previous segment.
	resume int64
	// from is the first offset of the current segment; next is one past the
	// last offset appended. from == next means the segment is empty.
	from, next int64
	started    bool
	// firstTS and lastTS are the Kafka timestamps (Unix nanoseconds) of the
	// current segment's first and last records.
	firstTS, lastTS int64
	// lag, when set, receives the partition's lag bookkeeping.
	lag *partitionStats
	// gap is called (under mu) when the log skips offsets: retention deleted
	// them before they were read, compaction removed them, or they were
	// transaction markers.
	gap func(from, to int64)
}

// segment is what one flush takes from one partition.
type segment struct {
	part            lakehouse.Part
	letters         []deadLetter
	firstTS, lastTS int64 // Kafka timestamps of its first and last records
}

func newPartitionBuffer(sc *schemas.Schema, topic string, partition int32, resume int64, maxMessageBytes int, gap func(from, to int64)) *partitionBuffer {
	return &partitionBuffer{
		topic:     topic,
		partition: partition,
		builder:   sc.NewRecordBuilder(memory.DefaultAllocator, maxMessageBytes),
		resume:    resume,
		gap:       gap,
	}
}

// offResult is the enrichment result of every record when enrichment is off.
var offResult = enrich.Result{Status: "off"}

// appendEnriched decodes msg into the buffer with its enrichment result (the
// values fill the enrichment columns, the status _enrich_status; "off"
// without enrichment). A record that cannot be decoded, or that the
// enrichment policy sends to the dead-letter topic (StatusDead, reason
// enrich_failed), becomes a dead letter; either way its offset is covered by
// the segment.
func (b *partitionBuffer) appendEnriched(msg kafka.Message, now time.Time, res enrich.Result) (rowsDelta, bytesDelta int, dead bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	expect := b.next
	if !b.started {
		expect = b.resume
	}
	if expect >= 0 && msg.Offset > expect && b.gap != nil {
		b.gap(expect, msg.Offset)
	}
	ts := msg.Time.UnixNano()
	if !b.started || b.from == b.next {
		b.from, b.next, b.started = msg.Offset, msg.Offset, true
		b.firstTS = ts
		if b.lag != nil {
			// Keeps an older value: a taken segment still being committed.
			b.lag.pendingSince.CompareAndSwap(0, ts)
		}
	}
	b.lastTS = ts
	if res.Status == enrich.StatusDead {
		detail := "enrichment unavailable"
		if res.Err != nil {
			detail = res.Err.Error()
		}
		b.next = msg.Offset + 1
		b.letters = append(b.letters, deadLetter{msg: msg, reason: ReasonEnrichFailed, detail: detail})
		return 1, len(msg.Value), true, nil
	}
	before := b.builder.SizeBytes()
	err = b.builder.AppendEnriched(msg.Value, schemas.Meta{
		Topic: b.topic, Partition: b.partition, Offset: msg.Offset, Timestamp: msg.Time,
	}, now, string(res.Status), res.Values)
	var de *schemas.DecodeError
	switch {
	case err == nil:
		b.next = msg.Offset + 1
		return 1, b.builder.SizeBytes() - before, false, nil
	case errors.As(err, &de):
		b.next = msg.Offset + 1
		b.letters = append(b.letters, deadLetter{msg: msg, reason: de.Reason, field: de.Field, detail: de.Detail})
		return 1, len(msg.Value), true, nil
	default:
		// Not the record's fault (commit.max_bytes keeps the builder far
		// from full); the offset stays uncovered.
		return 0, 0, false, fmt.Errorf("buffering %s/%d@%d: %w", b.topic, b.partition, msg.Offset, err)
	}
}

// take returns the current segment and starts a new one that builds on it.
// ok is false when nothing was appended since the last take.
func (b *partitionBuffer) take() (seg segment, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started || b.from == b.next {
		return seg, false
	}
	seg.part = lakehouse.Part{
		Range:  lakehouse.Range{Topic: b.topic, Partition: b.partition, From: b.from, To: b.next},
		Resume: b.resume,
	}
	if b.builder.Len() > 0 {
		seg.part.Rows = b.builder.NewRecord()
	}
	seg.letters = b.letters
	seg.firstTS, seg.lastTS = b.firstTS, b.lastTS
	b.letters = nil
	b.resume = b.next
	b.from = b.next
	return seg, true
}

// committed updates the lag bookkeeping once seg is in the table: the
// oldest uncommitted record is now the current segment's first, if any.
func (b *partitionBuffer) committed(seg segment) {
	if b.lag == nil {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.lag.committed.Store(seg.part.Range.To)
	b.lag.committedAt.Store(seg.lastTS)
	if b.from == b.next {
		b.lag.pendingSince.Store(0)
	} else {
		b.lag.pendingSince.Store(b.firstTS)
	}
}

func (b *partitionBuffer) release() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.builder.Release()
}

// window bounds what a member holds in memory: records decoded but not yet
// taken by a flush. Workers wait in acquire while it is full, so a slow
// commit stops fetching (and only fetching: heartbeats run elsewhere).
type window struct {
	mu       sync.Mutex
	cond     *sync.Cond
	rows     int
	bytes    int
	maxRows  int
	maxBytes int
	full     chan struct{} // signalled (non-blocking) when a trigger is reached
	closed   bool
}

func newWindow(maxRows, maxBytes int) *window {
	w := &window{maxRows: maxRows, maxBytes: maxBytes, full: make(chan struct{}, 1)}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// wait blocks while the window is full; it returns ctx's error if ctx ends
// first.
func (w *window) wait(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || (w.rows < w.maxRows && w.bytes < w.maxBytes) {
		return ctx.Err()
	}
	// Wake this waiter if ctx ends first (a failed sibling worker).
	stop := context.AfterFunc(ctx, func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.cond.Broadcast()
	})
	defer stop()
	for !w.closed && (w.rows >= w.maxRows || w.bytes >= w.maxBytes) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		w.cond.Wait()
	}
	return ctx.Err()
}

// add accounts for appended records and signals the flusher at a trigger.
func (w *window) add(rows, bytes int) {
	w.mu.Lock()
	w.rows += rows
	w.bytes += bytes
	full := w.rows >= w.maxRows || w.bytes >= w.maxBytes
	w.mu.Unlock()
	if full {
		w.kick()
	}
}

// kick asks the flusher for a flush now.
func (w *window) kick() {
	select {
	case w.full <- struct{}{}:
	default:
	}
}

// reset empties the window after a flush took everything, waking workers,
// and returns what it held.
func (w *window) reset() (rows, bytes int) {
	w.mu.Lock()
	rows, bytes = w.rows, w.bytes
	w.rows, w.bytes = 0, 0
	w.mu.Unlock()
	w.cond.Broadcast()
	return rows, bytes
}

// close wakes every waiter for good (generation over).
func (w *window) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.cond.Broadcast()
}

// wakeOn broadcasts when ctx ends so waiters can observe it.
func (w *window) wakeOn(ctx context.Context) {
	<-ctx.Done()
	w.close()
}
