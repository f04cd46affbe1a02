package pipeline

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/schemas"
)

// TestGapReportedOnce: offsets the log skipped are reported once, also when
// the record after them comes again because its append failed for a reason
// not its own (the offset stays uncovered and the worker retries it), and
// the record after an unbroken run reports none.
func TestGapReportedOnce(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	type gap struct{ from, to int64 }
	var gaps []gap
	b := newPartitionBuffer(sc, "clicks", 0, 0, 1<<20, func(from, to int64) { gaps = append(gaps, gap{from, to}) })
	t.Cleanup(b.release)
	rec := func(off int64) kafka.Message {
		return kafka.Message{Offset: off, Time: time.Now(), Value: []byte(`{"event_id":"e","session_id":"s","user_id":"u","event_type":"click","ts":1700000000000,"seq":1}`)}
	}
	for _, off := range []int64{0, 1} {
		if _, _, dead, err := b.appendEnriched(rec(off), time.Now(), offResult); err != nil || dead {
			t.Fatalf("offset %d: dead %v, %v", off, dead, err)
		}
	}
	// Offsets 2–4 are gone from the log; offset 5's append fails after
	// extend (as it does when the builder refuses it), and 5 comes again.
	b.mu.Lock()
	err1, err2 := b.extend(rec(5)), b.extend(rec(5))
	b.mu.Unlock()
	if err1 != nil || err2 != nil {
		t.Fatalf("extend: %v, %v", err1, err2)
	}
	if _, _, dead, err := b.appendEnriched(rec(5), time.Now(), offResult); err != nil || dead {
		t.Fatalf("offset 5: dead %v, %v", dead, err)
	}
	if _, _, dead, err := b.appendEnriched(rec(6), time.Now(), offResult); err != nil || dead {
		t.Fatalf("offset 6: dead %v, %v", dead, err)
	}
	if len(gaps) != 1 || gaps[0] != (gap{2, 5}) {
		t.Fatalf("gaps reported %v, want [{2 5}] once", gaps)
	}
}

// TestAppendResolved: a record whose key the resolver answers is buffered
// with its enrichment in one call; one it does not answer, or that cannot
// be decoded, leaves nothing behind and is then buffered the usual way
// (the latter as a dead letter), in order. A builder that cannot read
// keys (a schema file's) declines without asking.
func TestAppendResolved(t *testing.T) {
	base, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := WithEnrichment(base, &enrich.Config{Fields: []enrich.Field{{Name: "segment", Type: enrich.TypeString}}})
	if err != nil {
		t.Fatal(err)
	}
	b := newPartitionBuffer(sc, "clicks", 0, 0, 1<<20, func(from, to int64) { t.Errorf("gap %d-%d reported", from, to) })
	t.Cleanup(b.release)
	times := []time.Time{time.Unix(1700000000, 0), time.Unix(1700000001, 0), time.Unix(1700000002, 0)}
	rec := func(off int64, value string) kafka.Message {
		return kafka.Message{Offset: off, Time: times[off], Value: []byte(value)}
	}
	const good = `{"event_id":"e","session_id":"s","user_id":"u-7","event_type":"click","ts":1700000000000}`
	gold := &fixedResolver{status: "ok", extra: schemas.NewExtra([]schemas.Attr{schemas.StringAttr("gold")})}

	if rows, _, ok, err := b.appendResolved(rec(0, good), time.Now(), "user_id", gold); !ok || err != nil || rows != 1 {
		t.Fatalf("offset 0: ok %v, %d rows, %v", ok, rows, err)
	}
	if gold.keys[0] != "u-7" {
		t.Fatalf("resolver asked for %q, want u-7", gold.keys[0])
	}
	// A record not taken leaves the segment as it was: its offset and its
	// time (which the lag gauges read) are not the segment's.
	none := &fixedResolver{}
	if _, _, ok, err := b.appendResolved(rec(1, good), time.Now(), "user_id", none); ok || err != nil {
		t.Fatalf("offset 1 unresolved: ok %v, %v", ok, err)
	}
	first, ok := b.take()
	if !ok {
		t.Fatal("offset 0 not buffered")
	}
	defer first.part.Rows.Release()
	if r := first.part.Range; r.From != 0 || r.To != 1 || first.lastTS != times[0].UnixNano() {
		t.Fatalf("segment [%d, %d) last at %d, want [0, 1) last at offset 0's time %d", r.From, r.To, first.lastTS, times[0].UnixNano())
	}
	if _, _, ok, err := b.appendResolved(rec(1, good), time.Now(), "user_id", none); ok || err != nil {
		t.Fatalf("offset 1 unresolved again: ok %v, %v", ok, err)
	}
	if seg, ok := b.take(); ok {
		t.Fatalf("an unresolved record opened a segment: [%d, %d)", seg.part.Range.From, seg.part.Range.To)
	}
	if _, _, dead, err := b.appendEnriched(rec(1, good), time.Now(), enrich.Result{Status: enrich.StatusMiss}); dead || err != nil {
		t.Fatalf("offset 1 the usual way: dead %v, %v", dead, err)
	}
	if _, _, ok, err := b.appendResolved(rec(2, `{"user_id":`), time.Now(), "user_id", gold); ok || err != nil {
		t.Fatalf("offset 2 malformed: ok %v, %v", ok, err)
	}
	if _, _, dead, err := b.appendEnriched(rec(2, `{"user_id":`), time.Now(), enrich.Result{Status: enrich.StatusMiss}); !dead || err != nil {
		t.Fatalf("offset 2 the usual way: dead %v, %v; want a dead letter", dead, err)
	}
	if len(gold.keys) != 1 {
		t.Fatalf("the malformed record's key was asked for: %q", gold.keys)
	}

	seg, ok := b.take()
	if !ok {
		t.Fatal("nothing buffered")
	}
	defer seg.part.Rows.Release()
	if r := seg.part.Range; r.From != 1 || r.To != 3 || len(seg.letters) != 1 || seg.letters[0].msg.Offset != 2 {
		t.Fatalf("segment [%d, %d) with %d dead letters, want [1, 3) with offset 2's", r.From, r.To, len(seg.letters))
	}
	col := func(rows arrow.RecordBatch, name string) *array.String {
		i := rows.Schema().FieldIndices(name)
		if len(i) != 1 {
			t.Fatalf("no column %s", name)
		}
		return rows.Column(i[0]).(*array.String)
	}
	if rows := first.part.Rows; rows.NumRows() != 1 || col(rows, "_enrich_status").Value(0) != "ok" || col(rows, "segment").Value(0) != "gold" {
		t.Fatalf("offset 0's row: %v", rows)
	}
	if rows := seg.part.Rows; rows.NumRows() != 1 || col(rows, "_enrich_status").Value(0) != "miss" || !col(rows, "segment").IsNull(0) {
		t.Fatalf("offset 1's row: %v", rows)
	}

	// A schema file's builder does not read keys.
	gen, err := schemas.LoadFile(filepath.Join("..", "schemas", "examples", "payments.avsc"))
	if err != nil {
		t.Fatal(err)
	}
	g := newPartitionBuffer(gen, "payments", 0, 0, 1<<20, nil)
	t.Cleanup(g.release)
	if _, _, ok, err := g.appendResolved(rec(0, `{}`), time.Now(), "user_id", gold); ok || err != nil || len(gold.keys) != 1 {
		t.Fatalf("schema file: ok %v, %v, %d keys asked for", ok, err, len(gold.keys))
	}
}

// fixedResolver resolves every key to status and extra, or none when
// status is empty, recording the keys.
type fixedResolver struct {
	status string
	extra  schemas.Extra
	keys   []string
}

func (r *fixedResolver) Resolve(key []byte) (string, schemas.Extra, bool) {
	r.keys = append(r.keys, string(key))
	return r.status, r.extra, r.status != ""
}

// TestAppendCachedNeedsRoomAndAnIdleLane: the fetcher buffers a record
// itself only while the commit window has room and nothing is in its lane;
// otherwise the record takes the usual way (which waits for room, or keeps
// its place behind the lane's records), and nothing is buffered.
func TestAppendCachedNeedsRoomAndAnIdleLane(t *testing.T) {
	ecfg := enrich.Config{URL: "http://127.0.0.1:1/lookup", Key: "user_id", Fields: []enrich.Field{{Name: "segment", Type: enrich.TypeString}}}
	st, err := enrich.NewStage(ecfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	base, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := WithEnrichment(base, &ecfg)
	if err != nil {
		t.Fatal(err)
	}
	b := newPartitionBuffer(sc, "clicks", 0, 0, 1<<20, nil)
	t.Cleanup(b.release)
	m := &Member{cfg: Config{Enrich: &ecfg}, stats: &Stats{}}
	lane := st.NewQueue()
	defer lane.Abort()
	r := &cachedResolver{lane: lane}
	win := newWindow(1, 1<<30)
	// No user_id: a miss, which needs no lookup.
	rec := func(off int64) kafka.Message {
		return kafka.Message{Offset: off, Time: time.Now(), Value: []byte(`{"event_id":"e","session_id":"s","event_type":"click","ts":1700000000000}`)}
	}
	if done, err := m.appendCached(b, rec(0), r, win, -1, func() {}); !done || err != nil {
		t.Fatalf("offset 0 with room on an idle lane: done %v, %v", done, err)
	}
	if done, err := m.appendCached(b, rec(1), r, win, -1, func() {}); done || err != nil {
		t.Fatalf("offset 1 with the window full: done %v, %v", done, err)
	}
	win.release(windowCount{rows: win.rows, bytes: win.bytes}) // a flush
	if err := lane.Pass(t.Context(), "another route's record", 0); err != nil {
		t.Fatal(err)
	}
	if done, err := m.appendCached(b, rec(1), r, win, -1, func() {}); done || err != nil {
		t.Fatalf("offset 1 behind a record in its lane: done %v, %v", done, err)
	}
	seg, ok := b.take()
	if !ok {
		t.Fatal("nothing buffered")
	}
	defer seg.part.Rows.Release()
	if r := seg.part.Range; r.From != 0 || r.To != 1 || m.stats.Consumed.Load() != 1 {
		t.Fatalf("segment [%d, %d), %d consumed; want [0, 1) and 1", r.From, r.To, m.stats.Consumed.Load())
	}
}

// TestResumeAtFirstFetched: a worker that fails before buffering anything
// resumes at the first record it fetched, not at its symbolic seek (which
// for "latest" would skip what its lane held), and once records are
// buffered, after the newest.
func TestResumeAtFirstFetched(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	b := newPartitionBuffer(sc, "clicks", 0, -1, 1<<20, nil)
	t.Cleanup(b.release)
	if got := b.resumeAt(kafka.LastOffset); got != kafka.LastOffset {
		t.Fatalf("nothing fetched: resumeAt = %d, want the seek", got)
	}
	b.fetched(42)
	b.fetched(57) // a later worker's first record: the first stays
	if got := b.resumeAt(kafka.LastOffset); got != 42 {
		t.Fatalf("fetched from 42, nothing buffered: resumeAt = %d, want 42", got)
	}
	value := []byte(`{"event_id":"e","session_id":"s","user_id":"u","event_type":"click","ts":1700000000000,"seq":1}`)
	for _, off := range []int64{42, 43} {
		if _, _, dead, err := b.appendEnriched(kafka.Message{Offset: off, Time: time.Now(), Value: value}, time.Now(), offResult); err != nil || dead {
			t.Fatalf("offset %d: dead %v, %v", off, dead, err)
		}
	}
	if got := b.resumeAt(kafka.LastOffset); got != 44 {
		t.Fatalf("buffered 42 and 43: resumeAt = %d, want 44", got)
	}
}

// TestLagSecondsOfARecordALaneHeldAcrossACommit: a record an enrichment
// lane holds while the flush before it commits is still the oldest
// uncommitted one once buffered. The commit, finding the buffer empty,
// reset the lag's time, the next record fetched took it, and the held
// record could not take it back: lag in seconds read from the newer record
// until the next commit (for a whole outage under pause).
func TestLagSecondsOfARecordALaneHeldAcrossACommit(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	b := newPartitionBuffer(sc, "clicks", 0, 0, 1<<20, nil)
	t.Cleanup(b.release)
	b.lag = &partitionStats{}
	base := time.Now().Add(-time.Hour)
	msg := func(off int64, at time.Time) kafka.Message {
		return kafka.Message{Offset: off, Time: at, HighWaterMark: 100}
	}
	for off := range int64(10) {
		m := msg(off, base.Add(time.Duration(off)*time.Second))
		b.lag.fetched(m)
		if err := b.skip(m); err != nil { // buffered (as another route's: no row to decode)
			t.Fatal(err)
		}
	}
	seg, ok := b.take()
	if !ok {
		t.Fatal("nothing taken")
	}
	held := msg(10, base.Add(10*time.Second)) // in the lane, its lookup pending
	b.lag.fetched(held)
	b.committed(seg) // the flush of 0-9 lands
	b.lag.fetched(msg(11, base.Add(40*time.Minute)))
	if err := b.skip(held); err != nil { // answered: the drainer buffers it
		t.Fatal(err)
	}
	if _, secs := b.lag.lag(time.Now()); secs < time.Since(held.Time).Seconds()-1 {
		t.Fatalf("lag %.0f s; the oldest uncommitted record is %.0f s old", secs, time.Since(held.Time).Seconds())
	}
}

// TestWindowKeepsWhatAFlushDidNotTake: a record a worker appends to its
// partition's buffer after the flush took that buffer, while the flush
// takes the others, stays counted in the commit window until the next
// flush takes it. The flush used to empty the window instead: with the
// flush waiting on another buffer (a schema evolution holds its lock for
// minutes), a whole window could fill uncounted.
func TestWindowKeepsWhatAFlushDidNotTake(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	a := newPartitionBuffer(sc, "clicks", 0, 0, 1<<20, nil)
	b := newPartitionBuffer(sc, "clicks", 1, 0, 1<<20, nil)
	t.Cleanup(a.release)
	t.Cleanup(b.release)
	m := &Member{stats: &Stats{}}
	win := newWindow(1000, 1<<30)
	rec := func(off int64) kafka.Message {
		return kafka.Message{Offset: off, Time: time.Now(), Value: []byte(`{"event_id":"e","session_id":"s","event_type":"click","ts":1700000000000}`)}
	}
	appendTo := func(buf *partitionBuffer, off int64) {
		t.Helper()
		if err := m.append(buf, rec(off), offResult, win, -1, func() {}); err != nil {
			t.Fatal(err)
		}
	}
	appendTo(a, 0)
	appendTo(b, 0)
	segA, _ := a.take()
	appendTo(a, 1) // after a was taken, before b is
	segB, _ := b.take()
	defer segA.part.Rows.Release()
	defer segB.part.Rows.Release()
	win.release(windowCount{rows: segA.held.rows + segB.held.rows, bytes: segA.held.bytes + segB.held.bytes})
	if win.rows != 1 || win.bytes != a.held.bytes || a.held.bytes <= 0 {
		t.Fatalf("after the flush the window counts %d rows and %d bytes; want the 1 row of %d bytes buffered after it took its partition",
			win.rows, win.bytes, a.held.bytes)
	}
	if segA.held.rows != 1 || segB.held.rows != 1 {
		t.Fatalf("segments hold %d and %d rows as the window counted them, want 1 each", segA.held.rows, segB.held.rows)
	}
}
