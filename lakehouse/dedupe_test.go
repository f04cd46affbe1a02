package lakehouse_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

const payTopic = "payments"

// pay is one payment record at an offset: its payment_id and the day of
// November 2024 it was created on.
type pay struct {
	off int64
	id  string
	day int
}

type payFixture struct {
	dir    string
	props  map[string]string
	schema *schemas.Schema
}

func newPayFixture(t *testing.T) *payFixture { return newPayFixtureB(t) }

func newPayFixtureB(t testing.TB) *payFixture {
	t.Helper()
	dir := t.TempDir()
	sc, err := schemas.Lookup(filepath.Join("..", "schemas", "examples", "payments.avsc"))
	if err != nil {
		t.Fatal(err)
	}
	return &payFixture{dir: dir, schema: sc, props: map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"),
		"sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}}
}

func (f *payFixture) open(t *testing.T) *lakehouse.Table {
	t.Helper()
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "fin.payments", Catalog: f.props, Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// part builds partition p's part covering [from, to) with the given
// payments (offsets within the range; the others count as dead letters).
func (f *payFixture) part(t *testing.T, p int32, from, to, resume int64, pays ...pay) lakehouse.Part {
	t.Helper()
	part, err := f.partB(p, from, to, resume, pays...)
	if err != nil {
		t.Fatal(err)
	}
	return part
}

func (f *payFixture) partB(p int32, from, to, resume int64, pays ...pay) (lakehouse.Part, error) {
	at := make([]payAt, len(pays))
	for i, y := range pays {
		at[i] = payAt{y.off, y.id, fmt.Sprintf(`"2024-11-%02dT10:00:00Z"`, y.day)}
	}
	return f.partAtB(p, from, to, resume, at...)
}

// payAt is one payment record at an offset, created at created (its JSON:
// an RFC 3339 string or a number of microseconds).
type payAt struct {
	off     int64
	id      string
	created string
}

// partAt is part with payments created at any time.
func (f *payFixture) partAt(t *testing.T, p int32, from, to, resume int64, pays ...payAt) lakehouse.Part {
	t.Helper()
	part, err := f.partAtB(p, from, to, resume, pays...)
	if err != nil {
		t.Fatal(err)
	}
	return part
}

func (f *payFixture) partAtB(p int32, from, to, resume int64, pays ...payAt) (lakehouse.Part, error) {
	b := f.schema.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for _, y := range pays {
		v := fmt.Sprintf(`{"payment_id":%q,"amount":"1.00","currency":"EUR","status":"SETTLED",`+
			`"created_at":%s,"account":{"id":"a"},"tags":[]}`, y.id, y.created)
		if err := b.Append([]byte(v), schemas.Meta{Topic: payTopic, Partition: p, Offset: y.off, Timestamp: time.Now()}, time.Now(), "off"); err != nil {
			return lakehouse.Part{}, err
		}
	}
	return lakehouse.Part{Range: lakehouse.Range{Topic: payTopic, Partition: p, From: from, To: to}, Resume: resume, Rows: b.NewRecord()}, nil
}

// payments reads the table independently of floe: payment_id → the
// coordinates "partition@offset" of each of its rows.
func payments(t *testing.T, tbl *lakehouse.Table) map[string][]string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	if it.CurrentSnapshot() == nil {
		return got
	}
	_, batches, err := it.Scan(table.WithSelectedFields("payment_id", lakehouse.PartitionColumn, lakehouse.OffsetColumn)).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		col := func(name string) arrow.Array { return b.Column(b.Schema().FieldIndices(name)[0]) }
		ids, ps, os := col("payment_id").(*array.String), col(lakehouse.PartitionColumn).(*array.Int32), col(lakehouse.OffsetColumn).(*array.Int64)
		for i := range int(b.NumRows()) {
			got[ids.Value(i)] = append(got[ids.Value(i)], fmt.Sprintf("%d@%d", ps.Value(i), os.Value(i)))
		}
		b.Release()
	}
	return got
}

func wantPayments(t *testing.T, got map[string][]string, want map[string]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("table holds %d payment ids %v, want %d %v", len(got), got, len(want), want)
	}
	for id, at := range want {
		if len(got[id]) != 1 || got[id][0] != at {
			t.Errorf("payment %s at %v, want once at %s", id, got[id], at)
		}
	}
}

func summary(t *testing.T, tbl *lakehouse.Table, key string) string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return it.CurrentSnapshot().Summary.Properties[key]
}

// TestDedupeWithinFlush: repeats of a payment_id in one flush, in one part
// and across parts, keep the first occurrence in (partition, offset) order;
// the skipped rows' offsets are covered all the same.
func TestDedupeWithinFlush(t *testing.T) {
	f := newPayFixture(t)
	var logs bytes.Buffer
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "fin.payments", Catalog: f.props, Group: "g",
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	if d := tbl.Dedupe(); d.Key != "payment_id" || d.Window != lakehouse.DefaultDedupeWindow {
		t.Fatalf("dedupe from the schema = %+v", d)
	}
	// Partition 1 is listed first: order in the flush must not matter.
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 1, 0, 3, lakehouse.NoWatermark, pay{0, "C", 5}, pay{1, "E", 5}, pay{2, "A", 6}),
		f.part(t, 0, 0, 5, lakehouse.NoWatermark, pay{0, "A", 5}, pay{1, "B", 5}, pay{2, "C", 5}, pay{3, "B", 5}, pay{4, "D", 7}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 5 || res.BusinessDuplicates != 3 || res.Skipped != 0 {
		t.Fatalf("rows %d, business duplicates %d, offset duplicates %d; want 5, 3, 0", res.Rows, res.BusinessDuplicates, res.Skipped)
	}
	wantPayments(t, payments(t, tbl), map[string]string{"A": "0@0", "B": "0@1", "C": "0@2", "D": "0@4", "E": "1@1"})
	for _, want := range []string{
		`msg="business-key duplicate skipped" key=payment_id value=B at=payments/0@3 found=flush first=payments/0@1`,
		`msg="business-key duplicate skipped" key=payment_id value=C at=payments/1@0 found=flush first=payments/0@2`,
		`msg="business-key duplicate skipped" key=payment_id value=A at=payments/1@2 found=flush first=payments/0@0`,
	} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("debug log lacks %s:\n%s", want, logs.String())
		}
	}
	if got := summary(t, tbl, lakehouse.BusinessDuplicatesKey); got != "3" {
		t.Fatalf("summary %s = %q, want 3", lakehouse.BusinessDuplicatesKey, got)
	}
	wm, err := tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if w0, _ := wm.Get(payTopic, 0); w0 != 5 {
		t.Fatalf("watermark of partition 0 = %d, want 5", w0)
	}
	if w1, _ := wm.Get(payTopic, 1); w1 != 3 {
		t.Fatalf("watermark of partition 1 = %d, want 3", w1)
	}
	// Verify: no duplicate keys, and the skipped offsets are no gaps.
	rep, err := tbl.Verify(t.Context(), payTopic, lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DedupeKey != "payment_id" || rep.DistinctKeys != 5 || rep.DuplicateKeys != 0 || rep.BusinessSkipped != 3 || !rep.OK() {
		t.Fatalf("verify: key %q, distinct %d, duplicates %d, skipped %d, OK %v: %+v",
			rep.DedupeKey, rep.DistinctKeys, rep.DuplicateKeys, rep.BusinessSkipped, rep.OK(), rep.Partitions)
	}
	if got, want := summary(t, tbl, lakehouse.BusinessOffsetsKey), `{"payments":{"0":[[3,4]],"1":[[0,1],[2,3]]}}`; got != want {
		t.Fatalf("summary %s = %s, want %s", lakehouse.BusinessOffsetsKey, got, want)
	}
}

// TestDedupeAgainstTable: a payment already committed (by another
// partition's flush) is skipped, and a replay of the same range skips
// nothing twice.
func TestDedupeAgainstTable(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, 0, 3, lakehouse.NoWatermark, pay{0, "A", 3}, pay{1, "B", 3}, pay{2, "C", 4}),
	}); err != nil {
		t.Fatal(err)
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 1, 0, 3, lakehouse.NoWatermark, pay{0, "B", 3}, pay{1, "X", 4}, pay{2, "C", 4}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || res.BusinessDuplicates != 2 || res.KeyFilesScanned == 0 {
		t.Fatalf("rows %d, business duplicates %d, key files scanned %d; want 1, 2, > 0", res.Rows, res.BusinessDuplicates, res.KeyFilesScanned)
	}
	// A replay of partition 1: offsets 0 and 2 are absent from the table
	// but their keys are present; offset 1 is present. Nothing is added.
	rep, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 1, 0, 3, lakehouse.Replay, pay{0, "B", 3}, pay{1, "X", 4}, pay{2, "C", 4}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 0 || rep.Skipped != 1 || rep.BusinessDuplicates != 2 {
		t.Fatalf("replay: rows %d, offset duplicates %d, business duplicates %d; want 0, 1, 2", rep.Rows, rep.Skipped, rep.BusinessDuplicates)
	}
	wantPayments(t, payments(t, tbl), map[string]string{"A": "0@0", "B": "0@1", "C": "0@2", "X": "1@1"})
}

// TestDedupeSearchIsBounded: the search reads only files whose day
// partitions and statistics can hold the flush's keys within the window; a
// copy outside the window is not read (so not found), and without a window
// it is.
func TestDedupeSearchIsBounded(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	if err := tbl.SetDedupe(lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	// Ten flushes, one per day 1, 3, ..., 19, of 20 payments each.
	off, resume := int64(0), lakehouse.NoWatermark
	for d := 1; d < 20; d += 2 {
		var ps []pay
		for i := range 20 {
			ps = append(ps, pay{off + int64(i), fmt.Sprintf("p-%02d-%02d", d, i), d})
		}
		if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, off, off+20, resume, ps...)}); err != nil {
			t.Fatal(err)
		}
		off += 20
		resume = off
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	total := it.CurrentSnapshot().Summary.Properties["total-data-files"]

	// Day 19: a retried payment of day 19 (found), and a payment_id of
	// day 1 reused 18 days later (outside the window: not read).
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, off, off+3, off, pay{off, "p-19-04", 19}, pay{off + 1, "p-01-04", 19}, pay{off + 2, "new", 19}),
	})
	if err != nil {
		t.Fatal(err)
	}
	off += 3
	if res.BusinessDuplicates != 1 || res.Rows != 2 {
		t.Fatalf("rows %d, business duplicates %d; want 2, 1", res.Rows, res.BusinessDuplicates)
	}
	// Days 1-15 lie outside the window (day partitions pruned); of days 17
	// and 19 only files of the keys' buckets whose payment_id bounds
	// include a key remain: the one day-19 file holding p-19-04.
	if res.KeyFilesScanned != 1 || fmt.Sprint(res.KeyFilesScanned+res.KeyFilesPruned) != total {
		t.Fatalf("key files scanned %d, pruned %d of %s", res.KeyFilesScanned, res.KeyFilesPruned, total)
	}
	if got := payments(t, tbl)["p-01-04"]; len(got) != 2 {
		t.Fatalf("p-01-04 outside the window: %v, want two rows (the search is bounded)", got)
	}

	// Unbounded: the reused id of day 1 is found.
	if err := tbl.SetDedupe(lakehouse.Dedupe{Key: "payment_id"}); err != nil {
		t.Fatal(err)
	}
	res, err = tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, off, off+1, off, pay{off, "p-03-07", 19})})
	if err != nil {
		t.Fatal(err)
	}
	if res.BusinessDuplicates != 1 || res.Rows != 0 {
		t.Fatalf("unbounded: rows %d, business duplicates %d; want 0, 1", res.Rows, res.BusinessDuplicates)
	}
}

// TestDedupeWindowAroundEachRow: the window is matched around each row's
// own event time, not the flush's. payment_id p-old, committed on day 1, is
// reused on day 20: beyond the 72h window, a distinct payment, kept when
// its flush held only recent rows. A flush that also held an unrelated
// late record of day 2 searched [day 2 − 72h, day 20 + 72h], found day 1's
// copy and skipped the reuse as a duplicate: a lost payment that verify,
// counting its offset as a skipped duplicate, reported OK. A reuse within
// the window (p-mid, days 18 and 20) is still skipped.
func TestDedupeWindowAroundEachRow(t *testing.T) {
	for _, withLate := range []bool{false, true} {
		f := newPayFixture(t)
		tbl := f.open(t)
		if err := tbl.SetDedupe(lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}); err != nil {
			t.Fatal(err)
		}
		if _, err := tbl.Commit(t.Context(), []lakehouse.Part{
			f.part(t, 0, 0, 2, lakehouse.NoWatermark, pay{0, "p-old", 1}, pay{1, "p-mid", 18}),
		}); err != nil {
			t.Fatal(err)
		}
		pays := []pay{{2, "p-old", 20}, {3, "p-mid", 20}}
		if withLate {
			pays = append(pays, pay{4, "late-unrelated", 2})
		}
		res, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 2, 2+int64(len(pays)), 2, pays...)})
		if err != nil {
			t.Fatal(err)
		}
		got := payments(t, tbl)
		if len(got["p-old"]) != 2 || len(got["p-mid"]) != 1 || res.BusinessDuplicates != 1 {
			t.Errorf("with a late row in the flush %v: p-old at %v (day 1, reused on day 20), p-mid at %v (days 18 and 20), business duplicates %d; want p-old twice, p-mid once, 1",
				withLate, got["p-old"], got["p-mid"], res.BusinessDuplicates)
		}
		rep := verifyPay(t, tbl)
		if !rep.OK() || rep.KeysBeyondWindow != 1 || rep.DuplicateKeys != 0 || rep.BusinessSkipped != 1 {
			t.Errorf("with a late row in the flush %v: verify OK %v, beyond window %d, duplicate keys %d, skipped %d; want true, 1, 0, 1",
				withLate, rep.OK(), rep.KeysBeyondWindow, rep.DuplicateKeys, rep.BusinessSkipped)
		}
	}
}

// TestDedupeWindowWithinFlush: repeats of a key in one flush follow the
// window too: a repeat is skipped only for a copy kept earlier in the flush
// within the window of its own event time. The first occurrence won
// whatever the distance: A of day 20 and 21 were skipped for A of day 1, a
// reuse beyond the window lost.
func TestDedupeWindowWithinFlush(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	if err := tbl.SetDedupe(lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 1, 0, 2, lakehouse.NoWatermark, pay{0, "A", 21}, pay{1, "B", 7}),
		f.part(t, 0, 0, 3, lakehouse.NoWatermark, pay{0, "A", 1}, pay{1, "B", 5}, pay{2, "A", 20}),
	})
	if err != nil {
		t.Fatal(err)
	}
	// In (partition, offset) order: A of day 1 and of day 20 (19 days
	// apart) kept, A of day 21 skipped for day 20's; B of day 7 skipped for
	// day 5's.
	got := payments(t, tbl)
	if fmt.Sprint(slices.Sorted(slices.Values(got["A"]))) != "[0@0 0@2]" || fmt.Sprint(got["B"]) != "[0@1]" || res.Rows != 3 || res.BusinessDuplicates != 2 {
		t.Fatalf("A at %v, B at %v, rows %d, business duplicates %d; want A at [0@0 0@2], B at [0@1], 3, 2",
			got["A"], got["B"], res.Rows, res.BusinessDuplicates)
	}
	rep := verifyPay(t, tbl)
	if !rep.OK() || rep.KeysBeyondWindow != 1 || rep.DuplicateKeys != 0 || rep.BusinessSkipped != 2 {
		t.Fatalf("verify OK %v, beyond window %d, duplicate keys %d, skipped %d; want true, 1, 0, 2",
			rep.OK(), rep.KeysBeyondWindow, rep.DuplicateKeys, rep.BusinessSkipped)
	}
}

type localIO interface {
	iceio.WriteFileIO
	iceio.ReadFileIO
	iceio.ListableIO
	iceio.StatIO
}

// slowReadIO: reading a data file takes delay (a slow storage, a big file).
type slowReadIO struct {
	localIO
	delay *atomic.Int64
}

func (s slowReadIO) Open(name string) (iceio.File, error) {
	if d := s.delay.Load(); d > 0 && strings.HasSuffix(name, ".parquet") {
		time.Sleep(time.Duration(d))
	}
	return s.localIO.Open(name)
}

// hookCatalog runs before once, just before the first table commit goes to
// the real catalog: another member's commit can land between this one's
// MERGE and its commit. Once readDelay (when set) is positive, opening a
// data file of its tables takes that long (a slow storage).
type hookCatalog struct {
	catalog.Catalog
	once      sync.Once
	before    func()
	readDelay *atomic.Int64
}

func (c *hookCatalog) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	tbl, err := c.Catalog.LoadTable(ctx, ident)
	if err != nil {
		return nil, err
	}
	fs := tbl.FS
	if c.readDelay != nil {
		fs = func(ctx context.Context) (iceio.IO, error) {
			inner, err := tbl.FS(ctx)
			if err != nil {
				return nil, err
			}
			return slowReadIO{inner.(localIO), c.readDelay}, nil
		}
	}
	return table.New(ident, tbl.Metadata(), tbl.MetadataLocation(), fs, c), nil
}

func (c *hookCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	c.once.Do(c.before)
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// TestDedupeConcurrentCommitRace: two members commit the same payment_id
// from two partitions at once. Member b's commit lands between member a's
// MERGE and a's catalog commit; a's commit conflicts, re-checks its keys
// against b's files only, drops the duplicate, rewrites its file, deletes
// the stale one and commits.
func TestDedupeConcurrentCommitRace(t *testing.T) {
	f := newPayFixture(t)
	b := f.open(t)
	cat, err := lakehouse.OpenCatalog(t.Context(), f.props)
	if err != nil {
		t.Fatal(err)
	}
	var bres lakehouse.Result
	var berr error
	hc := &hookCatalog{Catalog: cat, before: func() {
		bres, berr = b.Commit(context.Background(), []lakehouse.Part{
			f.part(t, 1, 0, 2, lakehouse.NoWatermark, pay{0, "K", 10}, pay{1, "L", 10}),
		})
	}}
	a, err := lakehouse.OpenIn(t.Context(), hc, lakehouse.Config{Table: "fin.payments", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ares, err := a.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, 0, 3, lakehouse.NoWatermark, pay{0, "J", 10}, pay{1, "K", 10}, pay{2, "M", 11}),
	})
	if err != nil || berr != nil {
		t.Fatalf("a: %v, b: %v", err, berr)
	}
	if bres.Rows != 2 || bres.BusinessDuplicates != 0 {
		t.Fatalf("b: rows %d, business duplicates %d", bres.Rows, bres.BusinessDuplicates)
	}
	if ares.Attempts != 2 || ares.Rows != 2 || ares.BusinessDuplicates != 1 {
		t.Fatalf("a: attempts %d, rows %d, business duplicates %d; want 2, 2, 1", ares.Attempts, ares.Rows, ares.BusinessDuplicates)
	}
	// The MERGE found nothing in the empty table; the re-check read only
	// b's file holding K (L's bucket or bounds exclude a's keys).
	if ares.KeyFilesScanned != 1 {
		t.Fatalf("a: key files scanned %d, want 1 (b's file of K)", ares.KeyFilesScanned)
	}
	wantPayments(t, payments(t, a), map[string]string{"J": "0@0", "K": "1@0", "L": "1@1", "M": "0@2"})
	if got := summary(t, a, lakehouse.BusinessDuplicatesKey); got != "1" {
		t.Fatalf("summary %s = %q, want 1", lakehouse.BusinessDuplicatesKey, got)
	}
	// The stale file is gone: every Parquet file is referenced.
	it, err := a.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if n, want := dataFiles(t, f.dir), it.CurrentSnapshot().Summary.Properties["total-data-files"]; fmt.Sprint(n) != want {
		t.Fatalf("%d Parquet files in the warehouse, the table references %s", n, want)
	}
	rep, err := a.Verify(t.Context(), payTopic, lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.DuplicateKeys != 0 {
		t.Fatalf("verify: %+v", rep)
	}
}

// TestDedupeRecheckWindowAroundEachRow: the re-check after a conflict
// matches the window around each row's own event time, as the MERGE does.
// Member b commits K and L of day 1 between member a's MERGE and its
// commit; a's flush holds K of day 20 (a reuse beyond the 72h window) and
// L of day 2 (a retry). The re-check searched [day 2 − 72h, day 20 + 72h]
// and skipped K as well.
func TestDedupeRecheckWindowAroundEachRow(t *testing.T) {
	f := newPayFixture(t)
	b := f.open(t)
	cat, err := lakehouse.OpenCatalog(t.Context(), f.props)
	if err != nil {
		t.Fatal(err)
	}
	var berr error
	hc := &hookCatalog{Catalog: cat, before: func() {
		_, berr = b.Commit(context.Background(), []lakehouse.Part{
			f.part(t, 1, 0, 2, lakehouse.NoWatermark, pay{0, "K", 1}, pay{1, "L", 1}),
		})
	}}
	a, err := lakehouse.OpenIn(t.Context(), hc, lakehouse.Config{Table: "fin.payments", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	if err := a.SetDedupe(lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	ares, err := a.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, 0, 2, lakehouse.NoWatermark, pay{0, "K", 20}, pay{1, "L", 2}),
	})
	if err != nil || berr != nil {
		t.Fatalf("a: %v, b: %v", err, berr)
	}
	got := payments(t, a)
	if ares.Attempts != 2 || ares.Rows != 1 || ares.BusinessDuplicates != 1 || fmt.Sprint(slices.Sorted(slices.Values(got["K"]))) != "[0@0 1@0]" || fmt.Sprint(got["L"]) != "[1@1]" {
		t.Fatalf("a: attempts %d, rows %d, business duplicates %d, K at %v, L at %v; want 2, 1, 1, [0@0 1@0], [1@1]",
			ares.Attempts, ares.Rows, ares.BusinessDuplicates, got["K"], got["L"])
	}
}

// TestVerifyReportsDuplicateBusinessKeys: a copy written while the
// business-key MERGE was off (behind its back) is reported with both
// copies' coordinates, and the report is not OK.
func TestVerifyReportsDuplicateBusinessKeys(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, 0, 2, lakehouse.NoWatermark, pay{0, "A", 3}, pay{1, "B", 3}),
	}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.SetDedupe(lakehouse.Dedupe{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 1, 0, 2, lakehouse.NoWatermark, pay{0, "B", 3}, pay{1, "C", 3}),
	}); err != nil {
		t.Fatal(err)
	}
	// Without a dedupe key, verify does not look at business keys.
	rep, err := tbl.Verify(t.Context(), payTopic, lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DedupeKey != "" || rep.DuplicateKeys != 0 {
		t.Fatalf("without a key: %q, %d", rep.DedupeKey, rep.DuplicateKeys)
	}
	if err := tbl.SetDedupe(lakehouse.SchemaDedupe(f.schema)); err != nil {
		t.Fatal(err)
	}
	rep, err = tbl.Verify(t.Context(), payTopic, lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	if rep.DuplicateKeys != 1 || rep.DistinctKeys != 3 || rep.OK() {
		t.Fatalf("duplicate keys %d, distinct %d, OK %v; want 1, 3, false", rep.DuplicateKeys, rep.DistinctKeys, rep.OK())
	}
	if want := "B (payments/0@1, payments/1@0)"; len(rep.DuplicateKeyExamples) != 1 || rep.DuplicateKeyExamples[0] != want {
		t.Fatalf("examples %v, want [%s]", rep.DuplicateKeyExamples, want)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"NOT OK", "!! 1 duplicate business key (same payment_id, other offset)", "!! duplicate payment_id: B (payments/0@1, payments/1@0)"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, out.String())
		}
	}
}

// TestSetDedupeRejectsBadSettings: errors name the key and the problem.
func TestSetDedupeRejectsBadSettings(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	noTime, err := schemas.ParseAvsc("no-time.avsc", []byte(`{"type":"record","name":"R","fields":[
		{"name":"id","type":"string"},{"name":"n","type":"long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	nt, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "fin.notime", Catalog: f.props, Group: "g"}, noTime)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nt.Close() })
	for _, c := range []struct {
		tbl  *lakehouse.Table
		d    lakehouse.Dedupe
		want string
	}{
		{tbl, lakehouse.Dedupe{Key: "paymentid"}, `dedupe key "paymentid": schema`},
		{tbl, lakehouse.Dedupe{Key: "account.id"}, `dedupe key "account.id": schema`},
		{tbl, lakehouse.Dedupe{Key: "account"}, `dedupe key "account": column is struct`},
		{tbl, lakehouse.Dedupe{Key: "amount"}, `dedupe key "amount": column is decimal(18, 2)`},
		{tbl, lakehouse.Dedupe{Key: "payment_id", Window: -time.Hour}, `dedupe key "payment_id": window -1h0m0s is negative`},
		{nt, lakehouse.Dedupe{Key: "id", Window: time.Hour}, `dedupe key "id": a window (1h0m0s) bounds the search in event time, but schema no-time.avsc declares no event-time column`},
	} {
		err := c.tbl.SetDedupe(c.d)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SetDedupe(%+v) = %v, want %q", c.d, err, c.want)
		}
	}
	for _, d := range []lakehouse.Dedupe{{Key: "id"}, {Key: "n"}} {
		if err := nt.SetDedupe(d); err != nil {
			t.Errorf("SetDedupe(%+v) = %v", d, err)
		}
	}
}

// TestCheckDedupeRefusesAddedColumns: a Kafka metadata column or an
// enrichment column is no business key (many records share its value),
// also when a caller skips the configuration's check.
func TestCheckDedupeRefusesAddedColumns(t *testing.T) {
	base, err := schemas.Lookup("clickstream")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := base.WithColumns([]schemas.Column{{Name: "segment", Type: iceberg.PrimitiveTypes.String}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, want string }{
		{"_kafka_topic", `dedupe key "_kafka_topic": the column is a metadata column floe adds to every row, not a field of the record`},
		{"_kafka_offset", `dedupe key "_kafka_offset": the column is a metadata column`},
		{"_enrich_status", `dedupe key "_enrich_status": the column is a metadata column`},
		{"segment", `dedupe key "segment": the column is an enrichment column, not a field of the record`},
	} {
		err := lakehouse.CheckDedupe(sc, lakehouse.Dedupe{Key: c.key})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CheckDedupe(%s) = %v, want %q", c.key, err, c.want)
		}
	}
	if err := lakehouse.CheckDedupe(sc, lakehouse.Dedupe{Key: "event_id", Window: time.Hour}); err != nil {
		t.Errorf("CheckDedupe(event_id) = %v", err)
	}
}

// BenchmarkCommitDedupe measures a flush of 10,000 new payments into a table
// already holding ten such flushes of the same day, with the business-key
// MERGE off and on (window 72h), for keys that grow with time (sequential:
// files' bounds prune them) and random keys (every file of the window is
// read): the cost of the bounded search.
func BenchmarkCommitDedupe(b *testing.B) {
	for _, c := range []struct {
		name       string
		on, random bool
	}{{"off", false, false}, {"sequential", true, false}, {"random", true, true}} {
		on := c.on
		b.Run(c.name, func(b *testing.B) {
			f := newPayFixtureB(b)
			tbl, err := lakehouse.Open(b.Context(), lakehouse.Config{Table: "fin.payments", Catalog: f.props, Group: "g"}, f.schema)
			if err != nil {
				b.Fatal(err)
			}
			defer tbl.Close()
			d := lakehouse.Dedupe{}
			if on {
				d = lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}
			}
			if err := tbl.SetDedupe(d); err != nil {
				b.Fatal(err)
			}
			const n = 10000
			off, resume := int64(0), lakehouse.NoWatermark
			flush := func() lakehouse.Result {
				ps := make([]pay, n)
				for i := range ps {
					id := fmt.Sprintf("%08d-payment", off+int64(i))
					if c.random {
						id = fmt.Sprintf("%016x", uint64(off+int64(i))*0x9e3779b97f4a7c15)
					}
					ps[i] = pay{off + int64(i), id, 5}
				}
				part, err := f.partB(0, off, off+n, resume, ps...)
				if err != nil {
					b.Fatal(err)
				}
				res, err := tbl.Commit(b.Context(), []lakehouse.Part{part})
				if err != nil {
					b.Fatal(err)
				}
				off += n
				resume = off
				return res
			}
			for range 10 {
				flush()
			}
			b.ResetTimer()
			var scanned int
			for b.Loop() {
				scanned += flush().KeyFilesScanned
			}
			b.ReportMetric(float64(scanned)/float64(b.N), "files-scanned/op")
		})
	}
}
