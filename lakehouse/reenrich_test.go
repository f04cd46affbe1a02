package lakehouse_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
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
// duplicating a row — and through a conflict reported for a commit that
// applied (a Glue UpdateTable resent by the AWS client), after which its
// files were deleted as unused and the table could not be read.
func TestReenrichReplacesSkippedAndMissRows(t *testing.T) {
	t.Run("conflict", func(t *testing.T) { testReenrich(t, faultcat.Conflict, 2) })
	t.Run("conflict that applied", func(t *testing.T) { testReenrich(t, faultcat.AppliedConflict, 1) })
}

// testReenrich re-enriches through fault, in attempts commit attempts.
func testReenrich(t *testing.T, fault faultcat.Fault, attempts int) {
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
	fc.Inject(fault)
	res, err := tbl.Reenrich(ctx, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.Replay, Rows: f.statusRows(t, 0, 0, 100, now)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced != 60 || res.Unchanged != 40 || res.Attempts != attempts {
		t.Fatalf("replaced %d, unchanged %d in %d attempts; want 60 (10-49 skipped→ok, 50-59 and 70-79 miss→ok), 40, %d",
			res.Replaced, res.Unchanged, res.Attempts, attempts)
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

// TestReenrichKeepsTheRestOfEveryFile: the copy of a file that held
// replaced rows keeps all its other rows also when the table is partitioned
// by a column the search filters on (iceberg-go attaches the filter's
// residual to each planned file, and reading applied it: the copy held only
// the replaced rows, then none) and when the file is planned in several
// splits (each split was copied as if it were the file).
func TestReenrichKeepsTheRestOfEveryFile(t *testing.T) {
	for _, tc := range []struct {
		name      string
		partition string                  // a column the table is partitioned by (identity), or ""
		props     map[string]string       // table properties set before writing
		skipped   func(offset int64) bool // rows stored as skipped, re-enriched as ok
	}{
		{"partitioned by _kafka_partition", lakehouse.PartitionColumn, nil, func(o int64) bool { return o < 10 }},
		{"partitioned by _kafka_topic", lakehouse.TopicColumn, nil, func(o int64) bool { return o < 10 }},
		{"split file, one split's rows", "", map[string]string{table.ParquetRowGroupLimitKey: "20", table.ReadSplitTargetSizeKey: "64"},
			func(o int64) bool { return o == 0 }},
		{"split file, two splits' rows", "", map[string]string{table.ParquetRowGroupLimitKey: "20", table.ReadSplitTargetSizeKey: "64"},
			func(o int64) bool { return o == 0 || o == 50 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			if tc.partition != "" {
				id := 1000
				spec, err := iceberg.NewPartitionSpecOpts(iceberg.AddPartitionFieldByName(tc.partition, tc.partition+"_p",
					iceberg.IdentityTransform{}, f.schema.Iceberg, &id))
				if err != nil {
					t.Fatal(err)
				}
				f.schema.Spec = spec
			}
			tbl := f.open(t, "g")
			if tc.props != nil {
				it, err := tbl.Load(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				tx := it.NewTransaction()
				if err := tx.SetProperties(tc.props); err != nil {
					t.Fatal(err)
				}
				if _, err := tx.Commit(t.Context()); err != nil {
					t.Fatal(err)
				}
			}
			stored := func(o int64) string {
				if tc.skipped(o) {
					return "skipped"
				}
				return "ok"
			}
			whole := lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100}
			if _, err := tbl.Commit(t.Context(), []lakehouse.Part{{Range: whole, Resume: lakehouse.NoWatermark, Rows: f.statusRows(t, 0, 0, 100, stored)}}); err != nil {
				t.Fatal(err)
			}
			res, err := tbl.Reenrich(t.Context(), lakehouse.Part{Range: whole, Resume: lakehouse.Replay,
				Rows: f.statusRows(t, 0, 0, 100, func(int64) string { return "ok" })})
			if err != nil {
				t.Fatal(err)
			}
			got := statuses(t, tbl, 0)
			assertHolds(t, tbl, 100)
			for o, st := range got {
				if st != "ok" {
					t.Fatalf("offset %d is %q after re-enrichment (%+v)", o, st, res)
				}
			}
		})
	}
}

// TestReenrichRebasesOnLiveAppends: the live job appending between the
// re-enrichment's read of the table and its commit, three times running,
// costs a commit each, not a rewrite: the files written are committed again
// on the new snapshot with its offset maps, so the live job's watermarks
// and rows stay, and every replaced row is there once.
func TestReenrichRebasesOnLiveAppends(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	live := f.open(t, "g")
	ctx := t.Context()
	if _, err := tbl.Commit(ctx, []lakehouse.Part{{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.NoWatermark, Rows: f.statusRows(t, 0, 0, 100, func(int64) string { return "skipped" })}}); err != nil {
		t.Fatal(err)
	}
	next := int64(0) // the live job's next offset of partition 1
	var appendLive func()
	appendLive = func() {
		resume := next
		if next == 0 {
			resume = lakehouse.NoWatermark
		}
		if _, err := live.Commit(ctx, []lakehouse.Part{f.part(t, 1, next, next+50, resume)}); err != nil {
			t.Errorf("live commit at %d: %v", next, err)
			return
		}
		if next += 50; next < 150 {
			fc.Before(appendLive)
		}
	}
	fc.Before(appendLive)
	res, err := tbl.Reenrich(ctx, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.Replay, Rows: f.statusRows(t, 0, 0, 100, func(int64) string { return "ok" })})
	if err != nil {
		t.Fatal(err)
	}
	if res.Replaced != 100 || res.Attempts != 4 || res.Rebased != 3 {
		t.Fatalf("replaced %d in %d attempts, %d rebased; want 100 in 4, 3 rebased", res.Replaced, res.Attempts, res.Rebased)
	}
	got := ids(t, tbl)
	assertExactlyOnce(t, got, 0, 0, 100)
	assertExactlyOnce(t, got, 1, 0, 150)
	for o, s := range statuses(t, tbl, 0) {
		if s != "ok" {
			t.Fatalf("offset %d: status %q, want ok", o, s)
		}
	}
	wm, err := tbl.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	w0, _ := wm.Get(topic, 0)
	w1, _ := wm.Get(topic, 1)
	if w0 != 100 || w1 != 150 {
		t.Fatalf("watermarks %d and %d, want 100 and 150 (the live job's)", w0, w1)
	}
}

// TestReenrichRewritesAfterManyRebases: rebases on the live job's appends
// do not use up the budget of whole attempts: after 12 of them, a conflict
// with another re-enrichment (an overwrite) is read and written again and
// commits, where the re-enrichment failed with "13 commit attempts
// conflicted".
func TestReenrichRewritesAfterManyRebases(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	live := f.open(t, "g")
	ctx := t.Context()
	skipped := func(int64) string { return "skipped" }
	ok := func(int64) string { return "ok" }
	if _, err := tbl.Commit(ctx, []lakehouse.Part{{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.NoWatermark, Rows: f.statusRows(t, 0, 0, 100, skipped)}}); err != nil {
		t.Fatal(err)
	}
	const liveAppends = 12
	next := int64(0) // the live job's next offset of partition 1
	var hook func()
	hook = func() {
		if next == liveAppends*10 {
			// Not an append: another re-enrichment, of partition 1.
			if _, err := live.Reenrich(ctx, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 1, From: 0, To: 10},
				Resume: lakehouse.Replay, Rows: f.statusRows(t, 1, 0, 10, ok)}); err != nil {
				t.Errorf("the other re-enrichment: %v", err)
			}
			return
		}
		resume := next
		if next == 0 {
			resume = lakehouse.NoWatermark
		}
		if _, err := live.Commit(ctx, []lakehouse.Part{{Range: lakehouse.Range{Topic: topic, Partition: 1, From: next, To: next + 10},
			Resume: resume, Rows: f.statusRows(t, 1, next, next+10, skipped)}}); err != nil {
			t.Errorf("live commit at %d: %v", next, err)
			return
		}
		next += 10
		fc.Before(hook)
	}
	fc.Before(hook)
	res, err := tbl.Reenrich(ctx, lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: 100},
		Resume: lakehouse.Replay, Rows: f.statusRows(t, 0, 0, 100, ok)})
	if err != nil {
		t.Fatalf("re-enrichment after %d rebases and a conflict with an overwrite: %v", res.Rebased, err)
	}
	if res.Replaced != 100 || res.Rebased != liveAppends || res.Attempts != liveAppends+2 {
		t.Fatalf("%+v: want 100 replaced in %d attempts, %d of them rebased", res, liveAppends+2, liveAppends)
	}
	for o, s := range statuses(t, tbl, 0) {
		if s != "ok" {
			t.Fatalf("offset %d: status %q, want ok", o, s)
		}
	}
	got := ids(t, tbl)
	assertExactlyOnce(t, got, 0, 0, 100)
	assertExactlyOnce(t, got, 1, 0, liveAppends*10)
}
