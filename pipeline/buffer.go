package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
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
	// schema is the builder's schema; carry holds rows of the current
	// segment built before the last switch to an evolved schema, already
	// conformed to schema (nil: none). evolve, when set, evolves the table
	// for a writer schema that needs it (see evolver).
	schema   *schemas.Schema
	carry    arrow.RecordBatch
	evolve   func(from *schemas.Schema, req *schemas.EvolveRequest) (*schemas.Schema, error)
	maxBytes int
	letters  []deadLetter
	// resume is the watermark the next segment builds on: the table's W(p)
	// at assignment, then the end of the previous segment.
	resume int64
	// from is the first offset of the current segment; next is one past the
	// last offset appended. from == next means the segment is empty.
	from, next int64
	started    bool
	// fetchedFrom is the first record fetched, -1 until one is (see
	// resumeAt).
	fetchedFrom int64
	// firstTS and lastTS are the Kafka timestamps (Unix nanoseconds,
	// recordNanos) of the current segment's first and last records.
	firstTS, lastTS int64
	// held is what the buffer gained since its last take, counted as the
	// window counts it (see window.release).
	held windowCount
	// lag, when set, receives the partition's lag bookkeeping.
	lag *partitionStats
	// gap is called (under mu) when the log skips offsets: retention deleted
	// them before they were read, or compaction removed them. Offsets below
	// gapTo have been reported. absent holds the skipped runs not yet taken
	// with a segment, which records them in the table (lakehouse.Part.Absent)
	// so that verify does not take them for gaps.
	gap    func(from, to int64)
	gapTo  int64
	absent [][2]int64
}

// segment is what one flush takes from one partition.
type segment struct {
	part            lakehouse.Part
	letters         []deadLetter
	firstTS, lastTS int64       // Kafka timestamps of its first and last records
	held            windowCount // what it holds, as the window counted it
}

// windowCount is rows (dead letters included) and their bytes, as the
// window counts them.
type windowCount struct{ rows, bytes int }

func newPartitionBuffer(sc *schemas.Schema, topic string, partition int32, resume int64, maxMessageBytes int, gap func(from, to int64)) *partitionBuffer {
	return &partitionBuffer{
		topic:       topic,
		partition:   partition,
		builder:     sc.NewRecordBuilder(memory.DefaultAllocator, maxMessageBytes),
		schema:      sc,
		maxBytes:    maxMessageBytes,
		resume:      resume,
		gap:         gap,
		fetchedFrom: -1,
	}
}

// resumeAt is where fetching resumes after a failed worker: one past the
// newest buffered record; when nothing was buffered yet, the first record
// fetched (fetched), or else seek. Not seek once a record was fetched: a
// symbolic one (kafka.LastOffset) would resolve anew, past the records a
// lane held when the worker failed.
func (b *partitionBuffer) resumeAt(seek int64) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.started:
		return b.next
	case b.fetchedFrom >= 0:
		return b.fetchedFrom
	}
	return seek
}

// fetched notes the offset of a worker's first fetched record, for
// resumeAt.
func (b *partitionBuffer) fetched(offset int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.started && b.fetchedFrom < 0 {
		b.fetchedFrom = offset
	}
}

// extend makes msg's offset the next one of the current segment (the caller
// covers it by setting next past it): it reports offsets the log skipped,
// opens a segment when none is open and keeps its Kafka timestamps. It
// refuses an offset the buffer has covered already: records must reach it
// in offset order, or the offsets committed with the rows would be wrong.
// b.mu must be held.
func (b *partitionBuffer) extend(msg kafka.Message) error {
	if err := b.inOrder(msg); err != nil {
		return err
	}
	b.mark(msg)
	return nil
}

// inOrder checks that msg comes after what the segment holds.
func (b *partitionBuffer) inOrder(msg kafka.Message) error {
	if b.started && msg.Offset < b.next {
		return fmt.Errorf("buffering %s/%d@%d: offsets up to %d are buffered already: records out of order",
			b.topic, b.partition, msg.Offset, b.next-1)
	}
	return nil
}

// mark is extend once msg is known to be in order.
func (b *partitionBuffer) mark(msg kafka.Message) {
	expect := b.next
	if !b.started {
		expect = b.resume
	}
	// A record whose append then fails (not for its own fault) comes
	// again: the offsets before it were reported the first time.
	if from := max(expect, b.gapTo); expect >= 0 && msg.Offset > from {
		b.absent = append(b.absent, [2]int64{from, msg.Offset})
		b.gapTo = msg.Offset
		if b.gap != nil {
			b.gap(from, msg.Offset)
		}
	}
	b.stamp(msg.Offset, recordNanos(msg.Time))
}

// stamp opens a segment at from when none is open, and keeps the Kafka
// timestamps of its first and last records. b.mu must be held.
func (b *partitionBuffer) stamp(from, ts int64) {
	if !b.started || b.from == b.next {
		b.from, b.next, b.started = from, from, true
		b.firstTS = ts
		if b.lag != nil {
			// Keeps an older value: a taken segment still being committed.
			b.lag.pending(ts)
		}
	}
	b.lastTS = ts
}

// offResult is the enrichment result of every record when enrichment is off.
var offResult = enrich.Result{Status: "off"}

// appendEnriched decodes msg into the buffer with its enrichment result (the
// values fill the enrichment columns, the status _enrich_status; "off"
// without enrichment). A record that cannot be decoded, or that the
// enrichment policy sends to the dead-letter topic (StatusDead, reason
// enrich_failed unless it cannot be decoded either), becomes a dead letter;
// either way its offset is covered by the segment.
func (b *partitionBuffer) appendEnriched(msg kafka.Message, now time.Time, res enrich.Result) (rowsDelta, bytesDelta int, dead bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.hold(rowsDelta, bytesDelta) }()
	if err := b.extend(msg); err != nil {
		return 0, 0, false, err
	}
	if res.Status == enrich.StatusDead {
		// Decoded first: only a record that would become a row is
		// enrich_failed, a reason of the moment (verify lets a later row
		// supersede it). One that cannot is dead-lettered for its own
		// fault, and one whose decoding fails otherwise (a registry out of
		// reach, an incompatible writer schema under on_incompatible: stop)
		// holds the partition, as without enrichment. The table is not
		// evolved for a record it will not hold.
		var req *schemas.EvolveRequest
		if err := b.builder.Check(msg.Value); err != nil && !errors.As(err, &req) {
			return b.refuse(msg, err)
		}
		detail := "enrichment unavailable"
		if res.Err != nil {
			detail = res.Err.Error()
		}
		b.next = msg.Offset + 1
		b.letters = append(b.letters, deadLetter{msg: msg, reason: ReasonEnrichFailed, detail: detail})
		return 1, recordBytes(&msg), true, nil
	}
	before := b.builder.SizeBytes()
	meta := schemas.Meta{Topic: b.topic, Partition: b.partition, Offset: msg.Offset, Timestamp: msg.Time}
	err = b.builder.AppendEnriched(msg.Value, meta, now, string(res.Status), res.Extra())
	// A writer schema the table does not fit yet: evolve the table, switch
	// to the evolved schema and append again. Another partition may have
	// switched the member's schema in between, hence a few rounds.
	var req *schemas.EvolveRequest
	for round := 0; round < maxEvolveRounds && errors.As(err, &req) && b.evolve != nil; round++ {
		if err = b.switchSchema(req); err == nil {
			before = b.builder.SizeBytes()
			err = b.builder.AppendEnriched(msg.Value, meta, now, string(res.Status), res.Extra())
		}
	}
	if errors.As(err, &req) && b.evolve != nil {
		// Still asking after the rounds: the evolved table and the schema
		// derived from it disagree (evolving again will not help), or
		// other partitions kept switching the schema. Not known to be the
		// record's fault, so held and retried rather than dead-lettered.
		err = fmt.Errorf("%s, still after %d switches to the evolved table's schema", req.Error(), maxEvolveRounds)
	}
	if err != nil {
		return b.refuse(msg, err)
	}
	b.next = msg.Offset + 1
	return 1, b.builder.SizeBytes() - before, false, nil
}

// recordBytes is the size of a record's key, value and headers (names and
// values): what a dead letter, which holds the record until its flush,
// counts towards the window's bytes (commit.max_bytes), and an enrichment
// lane towards its budget.
func recordBytes(m *kafka.Message) int {
	n := len(m.Key) + len(m.Value)
	for _, h := range m.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return n
}

// refuse is appendEnriched for msg, which cannot be appended for err: a
// *DecodeError makes it a dead letter; any other error is not the record's
// fault (commit.max_bytes keeps the builder far from full), and its offset
// stays uncovered. b.mu must be held.
func (b *partitionBuffer) refuse(msg kafka.Message, err error) (rowsDelta, bytesDelta int, dead bool, _ error) {
	var de *schemas.DecodeError
	if errors.As(err, &de) {
		b.next = msg.Offset + 1
		b.letters = append(b.letters, deadLetter{msg: msg, reason: de.Reason, field: de.Field, detail: de.Detail})
		return 1, recordBytes(&msg), true, nil
	}
	return 0, 0, false, fmt.Errorf("buffering %s/%d@%d: %w", b.topic, b.partition, msg.Offset, err)
}

// unbuildable reports whether value cannot become a row for its own fault
// (a schemas.DecodeError: a dead letter whatever its enrichment).
func (b *partitionBuffer) unbuildable(value []byte) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var de *schemas.DecodeError
	return errors.As(b.builder.Check(value), &de)
}

// resolvingBuilder is a builder that reads a row's enrichment key as it
// decodes it (schemas.Builder.AppendResolved).
type resolvingBuilder interface {
	AppendResolved(value []byte, m schemas.Meta, ingestedAt time.Time, keyField string, res schemas.Resolver) error
}

// appendResolved is appendEnriched for a record whose builder reads its
// key field as it decodes it and asks res for the record's enrichment: one
// parse of the record, where reading its key first costs another. ok is
// false, with nothing buffered, when the builder cannot, res does not
// resolve the key, or the record cannot be decoded: the caller then takes
// it the usual way (which dead-letters a record that cannot be decoded).
func (b *partitionBuffer) appendResolved(msg kafka.Message, now time.Time, keyField string, res schemas.Resolver) (rowsDelta, bytesDelta int, ok bool, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	defer func() { b.hold(rowsDelta, bytesDelta) }()
	rb, can := b.builder.(resolvingBuilder)
	if !can {
		return 0, 0, false, nil
	}
	if err := b.inOrder(msg); err != nil {
		return 0, 0, false, err
	}
	before := b.builder.SizeBytes()
	meta := schemas.Meta{Topic: b.topic, Partition: b.partition, Offset: msg.Offset, Timestamp: msg.Time}
	err = rb.AppendResolved(msg.Value, meta, now, keyField, res)
	var de *schemas.DecodeError
	switch {
	case err == nil:
		// Only now: a record not taken here leaves the segment as it was
		// (its times feed the lag gauges) until it is buffered the usual
		// way.
		b.mark(msg)
		b.next = msg.Offset + 1
		return 1, b.builder.SizeBytes() - before, true, nil
	case errors.Is(err, schemas.ErrUnresolved), errors.As(err, &de):
		return 0, 0, false, nil
	default:
		return 0, 0, false, fmt.Errorf("buffering %s/%d@%d: %w", b.topic, b.partition, msg.Offset, err)
	}
}

// hold counts what an append added, which the caller adds to the window.
// b.mu must be held.
func (b *partitionBuffer) hold(rows, bytes int) {
	b.held.rows += rows
	b.held.bytes += bytes
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
	if b.carry != nil {
		seg.part.Rows = appendBatch(b.carry, seg.part.Rows)
		b.carry = nil
	}
	// A run reported for a record whose append then failed lies past the
	// segment: it goes with the segment that record opens.
	n := 0
	for n < len(b.absent) && b.absent[n][1] <= b.next {
		n++
	}
	if n > 0 {
		seg.part.Absent = slices.Clone(b.absent[:n])
		b.absent = slices.Delete(b.absent, 0, n)
	}
	seg.letters = b.letters
	seg.firstTS, seg.lastTS = b.firstTS, b.lastTS
	seg.held, b.held = b.held, windowCount{}
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
	if b.carry != nil {
		b.carry.Release()
		b.carry = nil
	}
}

// maxEvolveRounds bounds how often one record switches schemas.
const maxEvolveRounds = 4

// switchSchema evolves the table for req and moves the buffer to the
// evolved schema: the rows buffered so far are conformed to it (new
// columns null, widened ones cast) and carried into the segment, so a
// flush still commits one batch per partition. A change the table refuses
// becomes req.Refuse's error: a dead letter or a stopped partition.
func (b *partitionBuffer) switchSchema(req *schemas.EvolveRequest) error {
	next, err := b.evolve(b.schema, req)
	var conflict *lakehouse.ColumnConflictError
	if errors.As(err, &conflict) {
		return req.Refuse(conflict.Column, conflict.Detail)
	}
	if err != nil {
		return fmt.Errorf("evolving the table for schema id %d: %w", req.SchemaID, err)
	}
	// The builder's rows join the carry first, still in the old schema
	// like the emptied builder, so that a failed conversion leaves the
	// buffer consistent and every covered offset's row in it.
	if b.builder.Len() > 0 {
		rows := b.builder.NewRecord()
		if b.carry != nil {
			rows = appendBatch(b.carry, rows)
		}
		b.carry = rows
	}
	if b.carry != nil {
		carry, err := next.Conform(context.Background(), b.carry)
		if err != nil {
			return fmt.Errorf("converting buffered rows to the evolved schema: %w", err)
		}
		b.carry.Release()
		b.carry = carry
	}
	b.builder.Release()
	b.builder = next.NewRecordBuilder(memory.DefaultAllocator, b.maxBytes)
	b.schema = next
	return nil
}

// appendBatch returns a followed by b (nil: none), releasing both. They
// have the same schema by construction (both conformed to the buffer's).
func appendBatch(a, b arrow.RecordBatch) arrow.RecordBatch {
	if b == nil {
		return a
	}
	defer a.Release()
	defer b.Release()
	cols := make([]arrow.Array, a.NumCols())
	for i := range cols {
		c, err := array.Concatenate([]arrow.Array{a.Column(i), b.Column(i)}, memory.DefaultAllocator)
		if err != nil {
			panic(fmt.Sprintf("pipeline: joining buffered batches of one schema: %v", err))
		}
		defer c.Release()
		cols[i] = c
	}
	return array.NewRecordBatch(b.Schema(), cols, a.NumRows()+b.NumRows())
}

// evolver evolves the table for the partition buffers of one member, one
// evolution at a time, and keeps the newest schema they share: a partition
// meeting a writer schema another partition already evolved the table for
// just switches to it.
type evolver struct {
	table   *lakehouse.Table
	mu      sync.Mutex
	current *schemas.Schema
	// refused remembers, by schema id, the change the table refused, so
	// that each further record of that writer schema (dead-lettered with
	// on_incompatible: dlq) costs no catalog round trip. A restart forgets.
	refused map[int]error
}

// schema returns the newest schema, for new partition buffers.
func (e *evolver) schema() *schemas.Schema {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.current
}

// evolve returns the schema a buffer on schema from should switch to for
// req: the member's newer one if there is one (the buffer tries again),
// else the schema of the table evolved for req.
func (e *evolver) evolve(ctx context.Context, from *schemas.Schema, req *schemas.EvolveRequest) (*schemas.Schema, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.current != from {
		return e.current, nil
	}
	if err, ok := e.refused[req.SchemaID]; ok {
		return nil, err
	}
	ts, err := e.table.Evolve(ctx, req.Changes)
	var conflict *lakehouse.ColumnConflictError
	if errors.As(err, &conflict) {
		if e.refused == nil {
			e.refused = map[int]error{}
		}
		e.refused[req.SchemaID] = err
	}
	if err != nil {
		return nil, err
	}
	next, err := e.current.WithTable(ts)
	if err != nil {
		return nil, err
	}
	e.current = next
	return next, nil
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

// hasRoom reports whether a record may be added now (wait would not block):
// the window is open and not full.
func (w *window) hasRoom() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.closed && w.rows < w.maxRows && w.bytes < w.maxBytes
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

// release takes what a flush took from the buffers out of the window,
// waking workers. Only that: a worker may append to a buffer the flush
// has already taken before the flush is done taking the others (one may
// wait minutes on a buffer's lock through a schema evolution), and what it
// appended stays in the window. A record is counted by its buffer before
// the worker adds it to the window, so the window may briefly fall below
// what the buffers hold (even below zero), never stay there.
func (w *window) release(took windowCount) {
	w.mu.Lock()
	w.rows -= took.rows
	w.bytes -= took.bytes
	w.mu.Unlock()
	w.cond.Broadcast()
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
