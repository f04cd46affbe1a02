package lakehouse_test

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// nestedPart builds partition p's part of the payments table covering
// offsets [from, to), one payment per offset, whose struct, list and map
// columns vary with the offset (some null or empty) and whose
// _enrich_status is status(offset).
func (f *payFixture) nestedPart(t *testing.T, p int32, from, to, resume int64, status func(int64) string) lakehouse.Part {
	t.Helper()
	b := f.schema.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for o := from; o < to; o++ {
		country, tags, meta := `null`, `[]`, `null`
		if o%3 != 0 {
			country = fmt.Sprintf(`"C%d"`, o%5)
			tags = fmt.Sprintf(`["t%d","u%d"]`, o, o%4)
			meta = fmt.Sprintf(`{"k%d":"v%d","src":"s%d"}`, o%2, o, p)
		}
		v := fmt.Sprintf(`{"payment_id":"pay-%d-%d","amount":"%d.25","currency":"EUR","status":"SETTLED",`+
			`"created_at":"2024-11-0%dT10:00:00Z","account":{"id":"acc-%d","country":%s,"opened_on":%d},`+
			`"tags":%s,"metadata":%s}`, p, o, o, 1+o%2, o, country, 19000+o, tags, meta)
		m := schemas.Meta{Topic: payTopic, Partition: p, Offset: o, Timestamp: time.UnixMilli(1732860000000)}
		if err := b.Append([]byte(v), m, time.Now(), status(o)); err != nil {
			t.Fatalf("offset %d: %v", o, err)
		}
	}
	return lakehouse.Part{Range: lakehouse.Range{Topic: payTopic, Partition: p, From: from, To: to}, Resume: resume, Rows: b.NewRecord()}
}

// nestedRows reads the whole table independently of floe: "partition@offset"
// → the row's payment id, nested values and _enrich_status, rendered as
// text. It fails the test if a coordinate occurs twice.
func nestedRows(t *testing.T, tbl *lakehouse.Table) map[string]string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	if it.CurrentSnapshot() == nil {
		return got
	}
	_, batches, err := it.Scan().ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		col := func(name string) arrow.Array { return b.Column(b.Schema().FieldIndices(name)[0]) }
		ps, os := col(lakehouse.PartitionColumn).(*array.Int32), col(lakehouse.OffsetColumn).(*array.Int64)
		for i := range int(b.NumRows()) {
			at := fmt.Sprintf("%d@%d", ps.Value(i), os.Value(i))
			if _, dup := got[at]; dup {
				t.Fatalf("row %s occurs twice", at)
			}
			got[at] = fmt.Sprintf("%s account=%s tags=%s metadata=%s status=%s",
				col("payment_id").ValueStr(i), col("account").ValueStr(i), col("tags").ValueStr(i),
				col("metadata").ValueStr(i), col(lakehouse.EnrichStatusColumn).ValueStr(i))
		}
		b.Release()
	}
	return got
}

func always(s string) func(int64) string { return func(int64) string { return s } }

// TestCompactNestedTable: several small flushes of a table with struct,
// list and map columns are compacted into fewer files holding the same
// rows with the same nested values, and the watermarks and offset maps are
// unchanged.
func TestCompactNestedTable(t *testing.T) {
	f := newPayFixture(t)
	ctx := t.Context()
	tbl := f.open(t)
	const flushes, n = 4, 12
	for i := int64(0); i < flushes; i++ {
		resume := i * n
		if i == 0 {
			resume = lakehouse.NoWatermark
		}
		if _, err := tbl.Commit(ctx, []lakehouse.Part{f.nestedPart(t, 0, i*n, (i+1)*n, resume, always("off"))}); err != nil {
			t.Fatalf("flush %d: %v", i, err)
		}
	}
	before := nestedRows(t, tbl)
	if len(before) != flushes*n {
		t.Fatalf("table holds %d rows before compaction, want %d", len(before), flushes*n)
	}
	if before["0@1"] == "" || before["0@1"] == before["0@2"] {
		t.Fatalf("rows do not carry distinct nested values: %q, %q", before["0@1"], before["0@2"])
	}
	wm, err := tbl.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}

	rep, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("data files %d → %d, rewrote %d into %d in %d groups", rep.Before.DataFiles, rep.After.DataFiles,
		rep.FilesRewritten, rep.FilesWritten, rep.CompactedGroups)
	if rep.CompactedGroups == 0 || rep.FilesWritten >= rep.FilesRewritten || rep.After.DataFiles >= rep.Before.DataFiles {
		t.Errorf("compaction rewrote %d files into %d in %d groups (data files %d → %d), want fewer files",
			rep.FilesRewritten, rep.FilesWritten, rep.CompactedGroups, rep.Before.DataFiles, rep.After.DataFiles)
	}
	if rep.Before.Rows != flushes*n || rep.After.Rows != flushes*n {
		t.Errorf("rows %d → %d, want %d", rep.Before.Rows, rep.After.Rows, flushes*n)
	}
	if after := nestedRows(t, tbl); !maps.Equal(after, before) {
		for at, v := range before {
			if after[at] != v {
				t.Errorf("row %s after compaction %q, before %q", at, after[at], v)
			}
		}
		t.Fatalf("compaction changed the rows: %d before, %d after", len(before), len(after))
	}
	if got, _ := tbl.Watermarks(ctx); !maps.EqualFunc(got, wm, maps.Equal) {
		t.Errorf("watermarks %v after compaction, before %v", got, wm)
	}
	it, err := tbl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if ks := offsetKeys(it.CurrentSnapshot()); len(ks) != 1 {
		t.Errorf("head snapshot carries offset maps %v, want group g's", ks)
	}

	// Ingestion goes on from the same watermark on the compacted files.
	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.nestedPart(t, 0, flushes*n, flushes*n+n, flushes*n, always("off"))}); err != nil {
		t.Fatal(err)
	}
	if got := nestedRows(t, tbl); len(got) != flushes*n+n {
		t.Errorf("table holds %d rows after the next flush, want %d", len(got), flushes*n+n)
	}
}

// TestReenrichNestedTable: re-enrichment of a table with struct, list and
// map columns (the payments schema) replaces exactly the skipped rows that
// are ok now, keeps every other row and every nested value, and leaves the
// watermarks alone.
func TestReenrichNestedTable(t *testing.T) {
	f := newPayFixture(t)
	ctx := t.Context()
	tbl := f.open(t)
	stored := func(o int64) string {
		if o%4 == 0 {
			return "ok"
		}
		return "skipped"
	}
	const n = 40
	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.nestedPart(t, 0, 0, n, lakehouse.NoWatermark, stored)}); err != nil {
		t.Fatal(err)
	}
	// A second Kafka partition whose skipped rows the MERGE must not touch.
	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.nestedPart(t, 1, 0, n, lakehouse.NoWatermark, always("skipped"))}); err != nil {
		t.Fatal(err)
	}
	before := nestedRows(t, tbl)
	wm, err := tbl.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Re-enriched: ok now, except offsets 0-9, still skipped.
	now := func(o int64) string {
		if o < 10 {
			return "skipped"
		}
		return "ok"
	}
	res, err := tbl.Reenrich(ctx, f.nestedPart(t, 0, 0, n, lakehouse.Replay, now))
	if err != nil {
		t.Fatal(err)
	}
	// Skipped and ok now: offsets 10-39 not divisible by 4.
	if res.Replaced != 23 || res.Unchanged != n-23 {
		t.Fatalf("replaced %d, unchanged %d; want 23, %d", res.Replaced, res.Unchanged, n-23)
	}
	after := nestedRows(t, tbl)
	if len(after) != len(before) {
		t.Fatalf("table holds %d rows after re-enrichment, %d before", len(after), len(before))
	}
	replaced := 0
	for at, was := range before {
		want := was
		var p, o int64
		fmt.Sscanf(at, "%d@%d", &p, &o)
		if p == 0 && stored(o) == "skipped" && now(o) == "ok" {
			want = strings.Replace(was, "status=skipped", "status=ok", 1)
			replaced++
		}
		if after[at] != want {
			t.Errorf("row %s: %q, want %q", at, after[at], want)
		}
	}
	if replaced != 23 {
		t.Fatalf("test expects 23 replaced rows, computed %d", replaced)
	}
	if got, _ := tbl.Watermarks(ctx); !maps.EqualFunc(got, wm, maps.Equal) {
		t.Errorf("watermarks %v after re-enrichment, before %v", got, wm)
	}
	it, err := tbl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := it.Scan().PlanFiles(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if task.File.Count() == 0 {
			t.Errorf("re-enrichment left an empty data file %s", task.File.FilePath())
		}
	}
}
