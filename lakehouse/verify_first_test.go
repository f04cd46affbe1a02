package lakehouse_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
)

// dropFiles removes from the table (an overwrite snapshot, as a broken
// compaction or a manual DELETE would) every data file holding a row of
// partition p with an offset below below: rows the table had committed.
func (f *fixture) dropFiles(t *testing.T, tbl *lakehouse.Table, p int32, below int64) {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := it.Scan(table.WithRowFilter(iceberg.NewAnd(
		iceberg.EqualTo(iceberg.Reference(lakehouse.PartitionColumn), p),
		iceberg.LessThan(iceberg.Reference(lakehouse.OffsetColumn), below)))).PlanFiles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, task := range tasks {
		paths = append(paths, task.File.FilePath())
	}
	if len(paths) == 0 {
		t.Fatalf("no file of partition %d below %d", p, below)
	}
	tx := it.NewTransaction()
	if err := tx.ReplaceDataFiles(t.Context(), paths, nil, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestVerifyCountsGapsFromTheFirstLiveOffset: the rows of partition 0's
// first flush ([0,50)) and every row of partition 1 disappear from the
// table (their data files dropped, as a broken compaction, a DELETE or a
// lost file would). Verify counted gaps only from the lowest offset it still
// found, and reported OK with 80 committed rows gone; it counts them from
// the first offset the job's commits covered (floe.first.<group>).
func TestVerifyCountsGapsFromTheFirstLiveOffset(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	f.commitEvents(t, tbl, 0, 0, 50, lakehouse.NoWatermark, clean(0, 0, 50))
	f.commitEvents(t, tbl, 1, 0, 30, lakehouse.NoWatermark, clean(1, 0, 30))
	f.commitEvents(t, tbl, 0, 50, 100, 50, clean(0, 50, 100))
	if r := verify(t, tbl, lakehouse.DeadLetters{}); !r.OK() || r.Rows != 130 {
		t.Fatalf("before the loss:\n%s", text(t, r))
	}
	f.dropFiles(t, tbl, 0, 50)
	f.dropFiles(t, tbl, 1, 30)

	r := verify(t, tbl, lakehouse.DeadLetters{})
	s := text(t, r)
	if r.Rows != 50 {
		t.Fatalf("rows %d after dropping the files, want 50", r.Rows)
	}
	if r.OK() {
		t.Fatalf("OK with 80 committed rows (clicks/0 [0,50), clicks/1 [0,30)) gone:\n%s", s)
	}
	for p, want := range map[int32]string{0: "[[0,50)]", 1: "[[0,30)]"} {
		if pr := partitionOf(t, r, p); fmt.Sprint(pr.Gaps) != want {
			t.Errorf("partition %d: gaps %v, want %s", p, pr.Gaps, want)
		}
	}
	for _, line := range []string{"!! partition 0 gaps: [0,50)", "!! partition 1 gaps: [0,30)"} {
		if !strings.Contains(s, line) {
			t.Errorf("text has no %q:\n%s", line, s)
		}
	}
	if strings.Contains(s, "gaps not checked") {
		t.Errorf("text says gaps are not checked:\n%s", s)
	}
}

// TestVerifyReplayBelowTheFirstLiveOffset: the job started its partition
// at offset 100 (start_offset: latest; nothing below it is expected,
// ARCHITECTURE invariant 6), then a replay backfilled [0,50). Verify counted
// gaps from the lowest offset seen, 0, and reported [50,100), which no
// watermark ever claimed, as lost. Rows below the first live offset are the
// replay's: information, not gaps; a gap above it still counts.
func TestVerifyReplayBelowTheFirstLiveOffset(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	f.commitEvents(t, tbl, 0, 100, 200, lakehouse.NoWatermark, clean(0, 100, 200))
	f.commitEvents(t, tbl, 0, 0, 50, lakehouse.Replay, clean(0, 0, 50))
	f.commitEvents(t, tbl, 0, 200, 210, 200, clean(0, 200, 210))

	r := verify(t, tbl, lakehouse.DeadLetters{})
	s := text(t, r)
	if !r.OK() {
		t.Fatalf("a backfill below where the job started made gaps:\n%s", s)
	}
	if p := partitionOf(t, r, 0); p.MinOffset != 0 || p.GapOffsets != 0 || r.Rows != 160 {
		t.Fatalf("partition 0: %+v (rows %d)", p, r.Rows)
	}
	if !strings.Contains(s, "partition 0: 50 offsets below 100, where the job's first commit of it started") {
		t.Fatalf("text has no line on the backfill:\n%s", s)
	}

	// Dead letters below the first live offset are the replay's too.
	if r = verify(t, tbl, dead(0, 60)); !r.OK() || !strings.Contains(text(t, r), "partition 0: 51 offsets below 100") {
		t.Fatalf("with a dead letter at 60:\n%s", text(t, r))
	}

	f.dropFiles(t, tbl, 0, 150) // the replay's rows and [100,200)
	r = verify(t, tbl, lakehouse.DeadLetters{})
	if p := partitionOf(t, r, 0); r.OK() || fmt.Sprint(p.Gaps) != "[[100,200)]" {
		t.Fatalf("after losing [100,200), gaps %v:\n%s", p.Gaps, text(t, r))
	}
}

// TestVerifyRoutesCountsGapsFromTheFirstLiveOffset: VerifyRoutes counted a
// partition's gaps from the lowest offset any table held, so the first rows
// of every table lost passed; it counts them from the least of the routes'
// first live offsets, and takes a replay's rows below it for information.
func TestVerifyRoutesCountsGapsFromTheFirstLiveOffset(t *testing.T) {
	f := newFixture(t)
	a := f.openNamed(t, "shop.a", "g.a")
	b := f.openNamed(t, "shop.b", "g.b")
	split := func(from, to int64) (even, odd []ev) {
		for _, e := range clean(0, from, to) {
			if e.off%2 == 0 {
				even = append(even, e)
			} else {
				odd = append(odd, e)
			}
		}
		return even, odd
	}
	even, odd := split(100, 120)
	f.commitEvents(t, a, 0, 100, 120, lakehouse.NoWatermark, even)
	f.commitEvents(t, b, 0, 100, 120, lakehouse.NoWatermark, odd)
	even, odd = split(0, 10)
	f.commitEvents(t, a, 0, 0, 10, lakehouse.Replay, even)
	f.commitEvents(t, b, 0, 0, 10, lakehouse.Replay, odd)
	even, odd = split(120, 140)
	f.commitEvents(t, a, 0, 120, 140, 120, even)
	f.commitEvents(t, b, 0, 120, 140, 120, odd)

	routes := func() (*lakehouse.RoutesReport, string) {
		t.Helper()
		rep, err := lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, lakehouse.DeadLetters{}.Read)
		if err != nil {
			t.Fatal(err)
		}
		var buf strings.Builder
		if err := rep.WriteText(&buf); err != nil {
			t.Fatal(err)
		}
		return rep, buf.String()
	}
	rep, s := routes()
	if p := rep.Partitions[0]; !rep.OK() || p.GapOffsets != 0 {
		t.Errorf("a replay below where the routes started: %+v\n%s", p, s)
	} else if !strings.Contains(s, "partition 0: 10 offsets below 100") {
		t.Errorf("text has no line on the backfill:\n%s", s)
	}

	f.dropFiles(t, a, 0, 120) // a's replayed rows and its first flush
	f.dropFiles(t, b, 0, 120)
	rep, s = routes()
	if p := rep.Partitions[0]; rep.OK() || fmt.Sprint(p.Gaps) != "[[100,120)]" {
		t.Fatalf("the routes' first flushes lost: %+v\n%s", p, s)
	}
}
