package lakehouse_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
	"github.com/floe-dev/floe/schemas"
)

// statusRows builds rows for offsets [from, to) of partition p whose
// _enrich_status is status(offset).
func (f *fixture) statusRows(t *testing.T, p int32, from, to int64, status func(int64) string) arrow.RecordBatch {
	t.Helper()
	b := f.schema.NewBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for o := from; o < to; o++ {
		v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, 1732860000000+o, o)
		if err := b.Append([]byte(v), schemas.Meta{Topic: topic, Partition: p, Offset: o, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), status(o)); err != nil {
			t.Fatal(err)
		}
	}
	return b.NewRecord()
}

// statuses reads offset → _enrich_status of partition p from the table.
func statuses(t *testing.T, tbl *lakehouse.Table, p int32) map[int64]string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := it.Scan(table.WithSelectedFields(lakehouse.PartitionColumn, lakehouse.OffsetColumn, lakehouse.EnrichStatusColumn)).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]string{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		ps := b.Column(b.Schema().FieldIndices(lakehouse.PartitionColumn)[0]).(*array.Int32)
		os := b.Column(b.Schema().FieldIndices(lakehouse.OffsetColumn)[0]).(*array.Int64)
		st := b.Column(b.Schema().FieldIndices(lakehouse.EnrichStatusColumn)[0]).(*array.String)
		for i := 0; i < int(b.NumRows()); i++ {
			if ps.Value(i) == p {
				out[os.Value(i)] = st.Value(i)
			}
		}
		b.Release()
	}
	return out
}

// TestReenrichReplacesSkippedAndMissRows: the MERGE replaces exactly the
// stored rows that were skipped or missed and are better now, in one
// snapshot, through a commit conflict, without moving watermarks or
// duplicating a row.
func TestReenrichReplacesSkippedAndMissRows(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	ctx := t.Context()
	stored := func(o int64) string {
		switch {
		case o < 50:
			return "skipped"
		case o < 80:
			return "miss"
		}
		return "ok"
	}
	if _, err := tbl.Commit(ctx, []lakehouse.Part{{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.NoWatermark, Rows: f.statusRows(t, 0, 0, 100, stored)}}); err != nil {
		t.Fatal(err)
	}
	before, err := tbl.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Re-enriched: still skipped for 0-9 (the service is down again for
	// them), still unknown for 60-69, ok for the rest.
	now := func(o int64) string {
		switch {
		case o < 10:
			return "skipped"
		case o >= 60 && o < 70:
			return "miss"
		}
		return "ok"
	}
	fc.Inject(faultcat.Conflict)
	res, err := tbl.Reenrich(ctx, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.Replay, Rows: f.statusRows(t, 0, 0, 100, now)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced != 60 || res.Unchanged != 40 || res.Attempts != 2 {
		t.Fatalf("replaced %d, unchanged %d in %d attempts; want 60 (10-49 skipped→ok, 50-59 and 70-79 miss→ok), 40, 2 (one conflict)",
			res.Replaced, res.Unchanged, res.Attempts)
	}
	assertExactlyOnce(t, ids(t, tbl), 0, 0, 100)
	got := statuses(t, tbl, 0)
	count := map[string]int{}
	for o, s := range got {
		count[s]++
		want := stored(o)
		if better := now(o); (want == "skipped" && better != "skipped") || (want == "miss" && better == "ok") {
			want = better
		}
		if s != want {
			t.Errorf("offset %d: status %q, want %q", o, s, want)
		}
	}
	if count["skipped"] != 10 || count["miss"] != 10 || count["ok"] != 80 {
		t.Fatalf("statuses %v, want skipped 10, miss 10, ok 80", count)
	}
	after, err := tbl.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w0, _ := before.Get(topic, 0); func() int64 { w, _ := after.Get(topic, 0); return w }() != w0 {
		t.Fatalf("watermarks moved: %v → %v", before, after)
	}
	// Idempotent: a second pass finds nothing better to do.
	res, err = tbl.Reenrich(ctx, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.Replay, Rows: f.statusRows(t, 0, 0, 100, now)})
	if err != nil || res.Replaced != 0 {
		t.Fatalf("second pass replaced %d (err %v), want 0", res.Replaced, err)
	}
}
