package pipeline

import (
	"path/filepath"
	"testing"
	"time"

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
	rec := func(off int64, value string) kafka.Message {
		return kafka.Message{Offset: off, Time: time.Now(), Value: []byte(value)}
	}
	const good = `{"event_id":"e","session_id":"s","user_id":"u-7","event_type":"click","ts":1700000000000}`
	gold := &fixedResolver{status: "ok", extra: schemas.NewExtra([]schemas.Attr{schemas.StringAttr("gold")})}

	if rows, _, ok, err := b.appendResolved(rec(0, good), time.Now(), "user_id", gold); !ok || err != nil || rows != 1 {
		t.Fatalf("offset 0: ok %v, %d rows, %v", ok, rows, err)
	}
	if gold.keys[0] != "u-7" {
		t.Fatalf("resolver asked for %q, want u-7", gold.keys[0])
	}
	none := &fixedResolver{}
	if _, _, ok, err := b.appendResolved(rec(1, good), time.Now(), "user_id", none); ok || err != nil {
		t.Fatalf("offset 1 unresolved: ok %v, %v", ok, err)
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
	if r := seg.part.Range; r.From != 0 || r.To != 3 || len(seg.letters) != 1 || seg.letters[0].msg.Offset != 2 {
		t.Fatalf("segment [%d, %d) with %d dead letters, want [0, 3) with offset 2's", r.From, r.To, len(seg.letters))
	}
	rows := seg.part.Rows
	col := func(name string) *array.String {
		i := rows.Schema().FieldIndices(name)
		if len(i) != 1 {
			t.Fatalf("no column %s", name)
		}
		return rows.Column(i[0]).(*array.String)
	}
	status, segment := col("_enrich_status"), col("segment")
	if rows.NumRows() != 2 || status.Value(0) != "ok" || segment.Value(0) != "gold" ||
		status.Value(1) != "miss" || !segment.IsNull(1) {
		t.Fatalf("rows: %v", rows)
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
