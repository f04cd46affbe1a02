package lakehouse_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
)

// commitRounds commits rounds × n rows to each of parts partitions of group
// tbl, starting at offset from, and returns the offset after the last round.
func commitRounds(t *testing.T, f *fixture, tbl *lakehouse.Table, parts []int32, from, rounds, n int64) int64 {
	t.Helper()
	for r := int64(0); r < rounds; r++ {
		lo := from + r*n
		resume := lo
		if lo == 0 {
			resume = lakehouse.NoWatermark
		}
		var ps []lakehouse.Part
		for _, p := range parts {
			ps = append(ps, f.part(t, p, lo, lo+n, resume))
		}
		if _, err := tbl.Commit(t.Context(), ps); err != nil {
			t.Fatal(err)
		}
	}
	return from + rounds*n
}

// warehousePath turns the table's file:// location into a local path.
func warehousePath(t *testing.T, tbl *lakehouse.Table) string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(it.Location())
	if err != nil {
		t.Fatal(err)
	}
	return u.Path
}

func offsetKeys(s *table.Snapshot) []string {
	var ks []string
	for k := range s.Summary.Properties {
		if strings.HasPrefix(k, lakehouse.OffsetsKeyPrefix) {
			ks = append(ks, k)
		}
	}
	return ks
}

// TestMaintainKeepsItsFilesWhenItsReloadFails: a compaction whose commit
// conflicts and whose reload then fails returns the error and keeps the
// files it wrote — a catalog may report a conflict for a commit it applied,
// and only a reload tells — as orphans for a later run; the table holds
// what it held.
func TestMaintainKeepsItsFilesWhenItsReloadFails(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	idsBefore := ids(t, tbl)
	before := dataFilesOnDisk(t, f)
	fc.Inject(faultcat.Conflict)
	// Maintain's load, compaction's, then compaction's reload.
	fc.InjectLoads(faultcat.None, faultcat.None, faultcat.Unavailable)
	_, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if !errors.Is(err, faultcat.ErrInjected) || !strings.Contains(err.Error(), "compacting data files") {
		t.Fatalf("maintain: %v, want compaction's failed reload", err)
	}
	if fc.Injected(faultcat.Conflict) != 1 {
		t.Fatalf("%d conflicts injected, want 1", fc.Injected(faultcat.Conflict))
	}
	after := dataFilesOnDisk(t, f)
	if len(after) == len(before) || slices.ContainsFunc(before, func(b string) bool { return !slices.Contains(after, b) }) {
		t.Fatalf("data files on disk %v, want those before maintenance %v and the compaction's", after, before)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) {
		t.Fatal("the table's ids changed")
	}
}

// TestMaintainCommitsCompactionInBatches: a compaction that writes for
// longer than compactCommitAge commits what it wrote so far before the next
// group (here each group: the age is 0), so that no output waits
// uncommitted long enough for a concurrent run's orphan clean-up to take
// it; every id and watermark stays.
func TestMaintainCommitsCompactionInBatches(t *testing.T) {
	lakehouse.SetCompactAges(t, 0, time.Hour)
	f := newFixture(t)
	tbl := f.open(t, "g")
	next := commitRounds(t, f, tbl, []int32{0, 1, 2}, 0, 4, 20)
	idsBefore := ids(t, tbl)
	wmBefore, _ := tbl.Watermarks(t.Context())
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.CompactedGroups != 3 || rep.FilesRewritten != 12 || rep.FilesWritten != 3 {
		t.Fatalf("compacted %d groups, %d files into %d; want 3, 12 into 3", rep.CompactedGroups, rep.FilesRewritten, rep.FilesWritten)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	compactions := 0
	for _, s := range it.Metadata().Snapshots() {
		if s.Summary != nil && s.Summary.Properties[lakehouse.MaintenanceKey] == "compact" {
			compactions++
		}
	}
	if compactions != 3 {
		t.Fatalf("%d compaction snapshots, want one a group", compactions)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) || len(idsBefore) != 3*int(next) {
		t.Fatal("compaction changed the table's ids")
	}
	if got, _ := tbl.Watermarks(t.Context()); !maps.EqualFunc(got, wmBefore, maps.Equal) {
		t.Fatalf("watermarks %v, before %v", got, wmBefore)
	}
}

// TestMaintainRefusesOldCompactionOutputs: outputs as old as uncommittedMaxAge
// (a catalog that hung, a group that took that long) are not committed but
// deleted: a concurrent clean-up may have taken them for orphans.
func TestMaintainRefusesOldCompactionOutputs(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	lakehouse.SetCompactAges(t, time.Hour, 0)
	idsBefore := ids(t, tbl)
	before := dataFilesOnDisk(t, f)
	_, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if err == nil || !strings.Contains(err.Error(), "not committed") {
		t.Fatalf("maintain: %v, want the outputs refused", err)
	}
	if after := dataFilesOnDisk(t, f); !slices.Equal(after, before) {
		t.Fatalf("data files on disk %v, want those before maintenance %v", after, before)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) {
		t.Fatal("the table's ids changed")
	}
}

// TestMaintainLeavesFilesWithDeletes: rows another engine deleted with
// delete files (a merge-on-read DELETE) stay deleted: compaction skips the
// files that have deletes when it plans, and drops a group whose files got
// them after it planned (the DELETE landing just before its commit).
func TestMaintainLeavesFilesWithDeletes(t *testing.T) {
	for _, race := range []bool{false, true} {
		t.Run(map[bool]string{false: "deleted before", true: "deleted while compacting"}[race], func(t *testing.T) {
			f := newFixture(t)
			tbl, fc := f.openFaulty(t, "g")
			other := f.open(t, "g")
			commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
			// Another engine's row-level DELETE of offsets below 5.
			deleteRows := func() {
				it, err := other.Load(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				tx := it.NewTransaction()
				if err := tx.SetProperties(map[string]string{table.WriteDeleteModeKey: table.WriteModeMergeOnRead}); err != nil {
					t.Error(err)
					return
				}
				if err := tx.Delete(context.Background(), iceberg.LessThan(iceberg.Reference(lakehouse.OffsetColumn), int64(5)), nil); err != nil {
					t.Error(err)
					return
				}
				if _, err := tx.Commit(context.Background()); err != nil {
					t.Error(err)
				}
			}
			if race {
				fc.Before(deleteRows)
			} else {
				deleteRows()
			}
			rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
			if err != nil {
				t.Fatal(err)
			}
			got := ids(t, tbl)
			for o := int64(0); o < 80; o++ {
				if want := map[bool]int{true: 0, false: 1}[o < 5]; got[[2]int64{0, o}] != want {
					t.Fatalf("offset %d present %d times, want %d (compacted %d groups)", o, got[[2]int64{0, o}], want, rep.CompactedGroups)
				}
			}
			if len(got) != 75 {
				t.Fatalf("%d ids, want 75", len(got))
			}
			if race && rep.CompactedGroups != 0 {
				t.Fatalf("compacted %d groups: the group whose file got deletes was committed", rep.CompactedGroups)
			}
		})
	}
}

// setProps commits table properties, as another engine's ALTER TABLE
// SET TBLPROPERTIES would.
func setProps(t *testing.T, tbl *lakehouse.Table, props map[string]string) {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tx := it.NewTransaction()
	if err := tx.SetProperties(props); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// TestMaintainCompactsSplitFiles: a small file larger than
// read.split.target-size with several row groups is planned as several
// split tasks, and is still one input file. Before, each split was taken
// for a file: the group listed the file once a split and counted its rows
// once a split while only the split's rows were read, so the row check
// failed and every Maintain run stopped before expiry and orphan removal;
// the report counted a file once a split too.
func TestMaintainCompactsSplitFiles(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	setProps(t, tbl, map[string]string{table.ParquetRowGroupLimitKey: "10", table.ReadSplitTargetSizeKey: "2048"})
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 100)
	idsBefore := ids(t, tbl)
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Before.DataFiles != 4 || rep.Before.Rows != 400 {
		t.Fatalf("before: %d files, %d rows; want 4 files, 400 rows", rep.Before.DataFiles, rep.Before.Rows)
	}
	if rep.CompactedGroups != 1 || rep.FilesRewritten != 4 || rep.FilesWritten != 1 || rep.After.DataFiles != 1 {
		t.Fatalf("compacted %d groups, %d files into %d (%d after); want 1, 4 into 1",
			rep.CompactedGroups, rep.FilesRewritten, rep.FilesWritten, rep.After.DataFiles)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) || len(idsBefore) != 400 {
		t.Fatal("compaction changed the table's ids")
	}
}

// TestMaintainCompactsAcrossPartitionSpecChange: small files written
// before a partition field was added (Spark's ALTER TABLE ... ADD PARTITION
// FIELD bucket(4, session_id)) are rewritten into the current spec. Before,
// they were written with the clustered writer, and each input file holds
// rows of every new bucket: it refused the second file's rows ("violate the
// clustering assumption"), and every Maintain run failed.
func TestMaintainCompactsAcrossPartitionSpecChange(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	commitRounds(t, f, tbl, []int32{0, 1}, 0, 4, 20)
	idsBefore := ids(t, tbl)
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tx := it.NewTransaction()
	if err := tx.UpdateSpec(true).AddField("session_id", iceberg.BucketTransform{NumBuckets: 4}, "session_bucket").Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.CompactedGroups != 2 || rep.FilesRewritten != 8 || rep.FailedGroups != 0 {
		t.Fatalf("compacted %d groups (%d failed), %d files; want 2 groups of 4", rep.CompactedGroups, rep.FailedGroups, rep.FilesRewritten)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) {
		t.Fatal("compaction changed the table's ids")
	}
	it, err = tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := it.Scan().PlanFiles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if int(task.File.SpecID()) != it.Metadata().DefaultPartitionSpec() {
			t.Fatalf("%s is of spec %d after compaction, want the current one", task.File.FilePath(), task.File.SpecID())
		}
	}
}

// TestMaintainCarriesOnPastAFailedGroup: a compaction group that cannot be
// rewritten (here a file the storage does not serve while the run reads it)
// is left as it was, with no output of it kept; the other groups are
// compacted, snapshots expired and orphans removed, and Maintain reports
// the failed group and returns ErrGroupsFailed. Before, the first failed
// group ended the run: the groups written with it were dropped and expiry
// and orphan removal never ran while it kept failing.
func TestMaintainCarriesOnPastAFailedGroup(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	before := dataFilesOnDisk(t, f)
	commitRounds(t, f, tbl, []int32{1}, 0, 4, 20)
	idsBefore := ids(t, tbl)
	gone, aside := moveAsideNewFile(t, f, before) // a file of partition 1
	orphan := filepath.Join(warehousePath(t, tbl), "data", "orphan.parquet")
	if err := os.WriteFile(orphan, []byte("left by a crashed writer"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(orphan, old, old); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond) // every snapshot is older than ExpireOlderThan

	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2,
		ExpireOlderThan: time.Millisecond, OrphanOlderThan: time.Hour})
	if !errors.Is(err, lakehouse.ErrGroupsFailed) || !strings.Contains(err.Error(), "kafka clicks/1") {
		t.Fatalf("maintain: %v, want partition 1's group reported as failed", err)
	}
	if err := os.Rename(aside, gone); err != nil {
		t.Fatal(err)
	}
	if rep.FailedGroups != 1 || rep.CompactedGroups != 1 || rep.FilesRewritten != 4 {
		t.Fatalf("%d groups failed, %d compacted from %d files; want 1, and 1 from 4", rep.FailedGroups, rep.CompactedGroups, rep.FilesRewritten)
	}
	if rep.SnapshotsExpired == 0 || rep.OrphansRemoved != 1 {
		t.Fatalf("%d snapshots expired, %d orphans removed: the steps after compaction did not run", rep.SnapshotsExpired, rep.OrphansRemoved)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) {
		t.Fatal("the table's ids changed")
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tasks, err := it.Scan().PlanFiles(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, task := range tasks {
		live = append(live, strings.TrimPrefix(task.File.FilePath(), "file://"))
	}
	slices.Sort(live)
	if onDisk := dataFilesOnDisk(t, f); !slices.Equal(onDisk, live) || len(live) != 5 {
		t.Fatalf("data files on disk %v, want the table's 5 %v", onDisk, live)
	}
}

// TestMaintainReportsFailedGroupsWhenALaterStepFails: a compaction group
// fails, then orphan removal is refused (the storage's clock is 2 h
// behind). Maintain returns both, and the report says what ran and where
// it stopped. The later step's error alone was returned: the failed group
// was not reported, and `floe maintain` printed no report.
func TestMaintainReportsFailedGroupsWhenALaterStepFails(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	before := dataFilesOnDisk(t, f)
	commitRounds(t, f, tbl, []int32{1}, 0, 4, 20)
	gone, aside := moveAsideNewFile(t, f, before) // a file of partition 1
	defer os.Rename(aside, gone)
	fc.ClockBehind(2 * time.Hour)
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if !errors.Is(err, lakehouse.ErrGroupsFailed) || !strings.Contains(err.Error(), "removing orphan files") {
		t.Fatalf("maintain: %v; want the failed group and the refused orphan removal", err)
	}
	if rep == nil || rep.FailedGroups != 1 || rep.CompactedGroups != 1 || rep.Stopped != "removing orphan files" || rep.After.DataFiles == 0 {
		t.Fatalf("report %+v; want 1 failed group, 1 compacted, stopped at orphan removal, the table after", rep)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil || !strings.Contains(out.String(), "stopped: removing orphan files failed") {
		t.Fatalf("report text %q, %v", out.String(), err)
	}
}

// TestMaintainWithoutTheTableAfterReportsNothing: a catalog outage after
// Maintain's first load fails a step and the reload after it; Maintain
// returns no report, only its error. It returned one whose table after was
// all zeros, which floe maintain printed (and --json gave) as a table
// emptied.
func TestMaintainWithoutTheTableAfterReportsNothing(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	loads := []faultcat.Fault{faultcat.None}
	for range 100 {
		loads = append(loads, faultcat.Unavailable)
	}
	fc.InjectLoads(loads...)
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if err == nil || !strings.Contains(err.Error(), "compacting data files") {
		t.Fatalf("maintain: %v; want the failed step's error", err)
	}
	if rep != nil {
		t.Fatalf("a report without the table after: before %+v, after %+v", rep.Before, rep.After)
	}
}

// TestMaintainCompactsExpiresAndCleans: many small commits, then Maintain:
// fewer files holding the same ids, every group's watermarks unchanged (also
// a group whose map is deep in the history), old snapshots expired but the
// head carries the offset maps, an old orphan deleted and a fresh one kept,
// and ingestion carries on with a MERGE that still reads no data file.
func TestMaintainCompactsExpiresAndCleans(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	other := f.open(t, "other")
	commitRounds(t, f, other, []int32{7}, 0, 1, 30) // one file; its map only in the first snapshot
	tbl := f.open(t, "g")
	parts := []int32{0, 1, 2}
	next := commitRounds(t, f, tbl, parts, 0, 8, 50)

	dir := warehousePath(t, tbl)
	oldOrphan := filepath.Join(dir, "data", "orphan-old.parquet")
	newOrphan := filepath.Join(dir, "data", "orphan-new.parquet")
	for _, p := range []string{oldOrphan, newOrphan} {
		if err := os.WriteFile(p, []byte("left by a crashed writer"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	fourDays := time.Now().Add(-96 * time.Hour)
	if err := os.Chtimes(oldOrphan, fourDays, fourDays); err != nil {
		t.Fatal(err)
	}

	idsBefore := ids(t, tbl)
	wmG, _ := tbl.Watermarks(ctx)
	wmOther, _ := other.Watermarks(ctx)
	time.Sleep(20 * time.Millisecond) // every snapshot is older than ExpireOlderThan

	rep, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("before %+v after %+v; rewrote %d files into %d, manifests %d→%d, expired %d, orphans %d, conflicts %d",
		rep.Before, rep.After, rep.FilesRewritten, rep.FilesWritten, rep.ManifestsRewritten, rep.ManifestsWritten,
		rep.SnapshotsExpired, rep.OrphansRemoved, rep.Conflicts)

	if rep.Before.DataFiles != 25 || rep.After.DataFiles != 4 {
		t.Errorf("data files %d → %d, want 25 → 4 (one per partition of g, other's single file untouched)",
			rep.Before.DataFiles, rep.After.DataFiles)
	}
	if rep.FilesRewritten != 24 || rep.FilesWritten != 3 || rep.CompactedGroups != 3 {
		t.Errorf("compaction rewrote %d files into %d in %d groups, want 24 into 3 in 3", rep.FilesRewritten, rep.FilesWritten, rep.CompactedGroups)
	}
	if rep.Before.Rows != rep.After.Rows || rep.Before.Rows != 3*next+30 {
		t.Errorf("rows %d → %d, want %d", rep.Before.Rows, rep.After.Rows, 3*next+30)
	}
	if rep.Before.Snapshots != 9 || rep.After.Snapshots != 1 || rep.SnapshotsExpired == 0 {
		t.Errorf("snapshots %d → %d (%d expired), want 9 → 1", rep.Before.Snapshots, rep.After.Snapshots, rep.SnapshotsExpired)
	}
	if rep.After.Manifests >= rep.Before.Manifests {
		t.Errorf("manifests %d → %d, want fewer", rep.Before.Manifests, rep.After.Manifests)
	}
	if rep.OffsetMaps != 2 {
		t.Errorf("report counts %d offset maps, want 2", rep.OffsetMaps)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) {
		t.Fatal("compaction changed the table's (partition, offset) ids")
	}
	for _, p := range parts {
		assertExactlyOnce(t, idsBefore, p, 0, next)
	}
	if got, _ := tbl.Watermarks(ctx); !maps.EqualFunc(got, wmG, maps.Equal) {
		t.Fatalf("watermarks of g %v, before maintenance %v", got, wmG)
	}
	if got, _ := other.Watermarks(ctx); !maps.EqualFunc(got, wmOther, maps.Equal) || len(got) == 0 {
		t.Fatalf("watermarks of other %v, before maintenance %v", got, wmOther)
	}
	it, _ := tbl.Load(ctx)
	if ks := offsetKeys(it.CurrentSnapshot()); len(ks) != 2 {
		t.Errorf("head snapshot carries offset maps %v, want both groups'", ks)
	}

	if _, err := os.Stat(oldOrphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("orphan older than 3 days still there (stat: %v)", err)
	}
	if _, err := os.Stat(newOrphan); err != nil {
		t.Errorf("fresh orphan was removed: %v", err)
	}
	if rep.OrphansRemoved != 1 {
		t.Errorf("%d orphans removed, want 1", rep.OrphansRemoved)
	}

	// Ingestion resumes from the same watermarks; a flush above them still
	// reads no data file, because compacted files keep one Kafka partition.
	res, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, next, next+50, next)})
	if err != nil {
		t.Fatal(err)
	}
	if res.FilesScanned != 0 {
		t.Errorf("the MERGE above the watermark read %d data files after compaction, want 0", res.FilesScanned)
	}
	assertExactlyOnce(t, ids(t, tbl), 0, 0, next+50)

	// A second run with the default retention folds the new small file of
	// partition 0 into its compacted one and expires nothing.
	before := ids(t, tbl)
	again, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if again.FilesRewritten != 2 || again.FilesWritten != 1 || again.SnapshotsExpired != 0 || again.OrphansRemoved != 0 {
		t.Errorf("second run: %+v, want partition 0's two files rewritten into one, nothing expired or removed", again)
	}
	if !maps.Equal(ids(t, tbl), before) {
		t.Fatal("the second compaction changed the table's ids")
	}
}

// TestMaintainExpiryKeepsOffsetMapChain: when the head carries no offset map
// (another engine's commit), expiry keeps every snapshot down to the newest
// one that does, whatever retain-last says, so WatermarksOf still finds it.
func TestMaintainExpiryKeepsOffsetMapChain(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	tbl := f.open(t, "g")
	next := commitRounds(t, f, tbl, []int32{0}, 0, 5, 20)
	wm, _ := tbl.Watermarks(ctx)

	// Two snapshots without a map on top, as another writer would make them.
	for range 2 {
		it, err := tbl.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tx := it.NewTransaction()
		if err := tx.AddFiles(ctx, nil, nil, true); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)

	opts := lakehouse.MaintainOptions{MinInputFiles: 100, ExpireOlderThan: time.Millisecond, DryRun: true}
	dry, err := tbl.Maintain(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	// 7 snapshots: 5 with the map, 2 without. Kept: the 2 and the newest map.
	if dry.SnapshotsExpired != 4 || dry.After.Snapshots != 7 {
		t.Fatalf("dry run would expire %d snapshots (now %d), want 4 of 7", dry.SnapshotsExpired, dry.After.Snapshots)
	}

	opts.DryRun = false
	rep, err := tbl.Maintain(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := tbl.Watermarks(ctx); !maps.EqualFunc(got, wm, maps.Equal) {
		t.Fatalf("watermarks %v after expiry, before %v", got, wm)
	}
	if w, _ := wm.Get(topic, 0); w != next {
		t.Fatalf("W(0) = %d, want %d", w, next)
	}
	t.Logf("expired %d, snapshots %d → %d, manifests %d → %d", rep.SnapshotsExpired, rep.Before.Snapshots,
		rep.After.Snapshots, rep.Before.Manifests, rep.After.Manifests)
	assertExactlyOnce(t, ids(t, tbl), 0, 0, next)
}

// TestMaintainConcurrentWithCommits runs Maintain in a loop while three
// members commit to their own partitions (a flush every 250ms each, far more
// often than commit.interval allows in production): no commit is lost or fenced (a
// fence would mean a watermark moved under its owner), watermarks never go
// backwards, and every offset is in the table exactly once.
func TestMaintainConcurrentWithCommits(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	watcher := f.open(t, "g")
	// At least rounds flushes per member, more (up to a minute) until the
	// maintainer has both rewritten files and expired snapshots while they
	// run: on a loaded machine 15 flushes may all fall between its passes.
	const rounds, n = 15, 40
	deadline := time.Now().Add(time.Minute)
	var flushed [3]int64 // rounds committed, per partition
	var (
		wg, mwg   sync.WaitGroup
		done      = make(chan struct{})
		errs      = make(chan error, 8)
		rewritten atomic.Int64
		conflicts atomic.Int64
		runs      atomic.Int64
		expired   atomic.Int64
		contended atomic.Int64
	)
	for p := range int32(3) {
		member := f.open(t, "g")
		wg.Add(1)
		go func() {
			defer wg.Done()
			resume := lakehouse.NoWatermark
			for r := int64(0); r < rounds || ((rewritten.Load() == 0 || expired.Load() == 0) && time.Now().Before(deadline)); r++ {
				if _, err := member.Commit(context.Background(), []lakehouse.Part{f.part(t, p, r*n, r*n+n, resume)}); err != nil {
					errs <- err
					return
				}
				resume = r*n + n
				flushed[p] = r + 1
				time.Sleep(250 * time.Millisecond) // the next flush
			}
		}()
	}
	mwg.Add(2)
	go func() { // the maintainer
		defer mwg.Done()
		m := f.open(t, "g")
		for {
			rep, err := m.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: 3 * time.Second})
			if errors.Is(err, lakehouse.ErrContended) {
				contended.Add(1) // a step lost 20 races in a row: skipped, not wrong
			} else if err != nil {
				errs <- err
				return
			}
			rewritten.Add(int64(rep.FilesRewritten))
			expired.Add(int64(rep.SnapshotsExpired))
			conflicts.Add(int64(rep.Conflicts))
			runs.Add(1)
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	go func() { // watermarks never go backwards
		defer mwg.Done()
		last := map[int32]int64{}
		for {
			wm, err := watcher.Watermarks(ctx)
			if err != nil {
				errs <- err
				return
			}
			for p, prev := range last {
				if cur, ok := wm.Get(topic, p); !ok || cur < prev {
					t.Errorf("W(%d) went from %d to %d (present %v)", p, prev, cur, ok)
				}
			}
			for p, o := range wm[topic] {
				last[p] = o
			}
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(done)
	mwg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := ids(t, watcher)
	wm, _ := watcher.Watermarks(ctx)
	total := 0
	for p := range int32(3) {
		assertExactlyOnce(t, got, p, 0, flushed[p]*n)
		if w, _ := wm.Get(topic, p); w != flushed[p]*n {
			t.Errorf("W(%d) = %d, want %d", p, w, flushed[p]*n)
		}
		total += int(flushed[p] * n)
	}
	if len(got) != total {
		t.Errorf("%d distinct ids, want %d", len(got), total)
	}
	if rewritten.Load() == 0 || expired.Load() == 0 {
		t.Errorf("maintenance rewrote %d files and expired %d snapshots while commits ran; want both", rewritten.Load(), expired.Load())
	}
	t.Logf("%d maintenance runs (%d with a step skipped after 20 conflicts) rewrote %d files, expired %d snapshots, redid %d commits after conflicts",
		runs.Load(), contended.Load(), rewritten.Load(), expired.Load(), conflicts.Load())
}

// TestMaintainOptionsErrors: bad options are rejected with the option's
// name; good ones on an empty table do nothing.
func TestMaintainOptionsErrors(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{})
	if err != nil {
		t.Fatalf("maintaining an empty table: %v", err)
	}
	if rep.Before != (lakehouse.TableStats{}) || rep.After != (lakehouse.TableStats{}) || rep.FilesRewritten+rep.SnapshotsExpired+rep.OrphansRemoved != 0 {
		t.Fatalf("maintaining an empty table: %+v", rep)
	}
	for _, tc := range []struct {
		opts lakehouse.MaintainOptions
		want string
	}{
		{lakehouse.MaintainOptions{OrphanOlderThan: time.Minute}, "orphan-older-than"},
		{lakehouse.MaintainOptions{RetainLast: -1}, "retain-last"},
		{lakehouse.MaintainOptions{ExpireOlderThan: -time.Hour}, "expire-older-than"},
		{lakehouse.MaintainOptions{TargetFileBytes: -1}, "target file size"},
	} {
		_, err := tbl.Maintain(t.Context(), tc.opts)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("options %+v: error %v, want one naming %q", tc.opts, err, tc.want)
		}
	}
}

// TestMaintainLeavesNestedTables: a table whose location lies under this
// one's (a REST catalog puts a.b.c at <warehouse>/a/b/c, under a.b) has
// files this table does not reference; orphan clean-up took them for
// orphans once they were old enough, deleting a live table. They are left,
// and this table's own old orphan still goes.
func TestMaintainLeavesNestedTables(t *testing.T) {
	f := newFixture(t)
	ctx := t.Context()
	tbl := f.open(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 2, 20)
	it, err := tbl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cat, err := lakehouse.OpenCatalog(ctx, f.props)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cat.CreateTable(ctx, table.Identifier{"analytics", "nested"}, f.schema.Iceberg,
		catalog.WithLocation(strings.TrimSuffix(it.Location(), "/")+"/nested")); err != nil {
		t.Fatal(err)
	}
	nested, err := lakehouse.OpenIn(ctx, cat, lakehouse.Config{Table: "analytics.nested", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nested.Close() })
	commitRounds(t, f, nested, []int32{0}, 0, 2, 20)

	dir := warehousePath(t, tbl)
	orphan := filepath.Join(dir, "data", "orphan-old.parquet")
	if err := os.WriteFile(orphan, []byte("left by a crashed writer"), 0o644); err != nil {
		t.Fatal(err)
	}
	fourDays := time.Now().Add(-96 * time.Hour)
	var nestedFiles []string
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if strings.HasPrefix(p, filepath.Join(dir, "nested")+"/") {
			nestedFiles = append(nestedFiles, p)
		}
		return os.Chtimes(p, fourDays, fourDays)
	})
	if err != nil || len(nestedFiles) < 4 {
		t.Fatalf("walk: %v, %d files of the nested table", err, len(nestedFiles))
	}
	rep, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 100})
	if err != nil {
		t.Fatal(err)
	}
	if rep.OrphansRemoved != 1 {
		t.Errorf("%d orphans removed, want 1 (this table's)", rep.OrphansRemoved)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("this table's old orphan is still there (stat: %v)", err)
	}
	for _, p := range nestedFiles {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("a file of the nested table was deleted: %v", err)
		}
	}
	assertExactlyOnce(t, ids(t, nested), 0, 0, 40)
}

// TestMaintainCompactionReportedAsConflictButApplied: a compaction commit
// that applied but was reported as a conflict (a Glue UpdateTable resent by
// the AWS client) is recognised by its commit id: its outputs are kept and
// the table reads whole. The redo found its inputs rewritten (by itself)
// and deleted its outputs, the files the table held.
func TestMaintainCompactionReportedAsConflictButApplied(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	idsBefore := ids(t, tbl)
	fc.Inject(faultcat.AppliedConflict)
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2})
	if err != nil {
		t.Fatal(err)
	}
	if fc.Injected(faultcat.AppliedConflict) != 1 || rep.CompactedGroups != 1 || rep.Conflicts != 0 {
		t.Fatalf("%d applied conflicts injected, %d groups compacted, %d conflicts; want 1, 1, 0",
			fc.Injected(faultcat.AppliedConflict), rep.CompactedGroups, rep.Conflicts)
	}
	if !maps.Equal(ids(t, tbl), idsBefore) {
		t.Fatal("the table's ids changed")
	}
}

// TestMaintainManifestRewriteReportedAsConflict: a manifest rewrite whose
// commit is reported as a conflict is redone, or, when it had applied (a
// Glue UpdateTable resent by the AWS client), recognised by its commit id;
// either way the head's manifests are all there and ingestion carries on.
// iceberg-go deleted the merged manifests on the conflict, and the applied
// rewrite left a head naming them: no scan, MERGE or maintenance could read
// the table again.
func TestMaintainManifestRewriteReportedAsConflict(t *testing.T) {
	for _, tc := range []struct {
		name      string
		fault     faultcat.Fault
		conflicts int
	}{
		{"applied", faultcat.AppliedConflict, 0},
		{"not applied", faultcat.Conflict, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tbl, fc := f.openFaulty(t, "g")
			next := commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
			idsBefore := ids(t, tbl)
			fc.Inject(tc.fault) // no compaction: the rewrite's is the first commit
			rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 100})
			if err != nil {
				t.Fatal(err)
			}
			if fc.Injected(tc.fault) != 1 || rep.ManifestsRewritten != 4 || rep.Conflicts != tc.conflicts {
				t.Fatalf("%d faults injected, %d manifests rewritten, %d conflicts; want 1, 4, %d",
					fc.Injected(tc.fault), rep.ManifestsRewritten, rep.Conflicts, tc.conflicts)
			}
			it, err := tbl.Load(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			fsys, err := it.FS(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			mans, err := it.CurrentSnapshot().Manifests(fsys)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range mans {
				if _, err := os.Stat(strings.TrimPrefix(m.FilePath(), "file://")); err != nil {
					t.Errorf("the head's manifest: %v", err)
				}
			}
			if !maps.Equal(ids(t, tbl), idsBefore) {
				t.Fatal("the table's ids changed")
			}
			if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, next, next+20, next)}); err != nil {
				t.Fatalf("the next flush: %v", err)
			}
		})
	}
}

// TestMaintainRefusesOrphanRemovalUnderClockSkew: with the storage's clock
// two hours behind, a flush's files look two hours old the moment they are
// written; a maintenance run beside the flush refuses to remove orphans,
// naming the skew, and the flush's rows stay readable. Orphan ages were read
// against the maintainer's clock: the run deleted the flush's files, and
// the flush's commit (aging them on its own clock) landed naming them.
func TestMaintainRefusesOrphanRemovalUnderClockSkew(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	maint, err := lakehouse.OpenIn(t.Context(), fc, lakehouse.Config{Table: "analytics.clicks", Group: "m"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { maint.Close() })
	commitRounds(t, f, tbl, []int32{0}, 0, 1, 10)
	fc.ClockBehind(2 * time.Hour)
	var merr error
	fc.Before(func() { // the flush's files are written, not committed
		_, merr = maint.Maintain(t.Context(), lakehouse.MaintainOptions{OrphanOlderThan: time.Hour})
	})
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 20, 10)}); err != nil {
		t.Fatal(err)
	}
	if merr == nil || !strings.Contains(merr.Error(), "2h0m0s behind") {
		t.Errorf("maintain beside the flush: %v, want orphan removal refused for a clock 2h behind", merr)
	}
	assertHolds(t, tbl, 20)
}

// TestMaintainAgesOrphansOnTheStoragesClock: with the storage's clock 20
// minutes behind (within the margin), an orphan is aged on the storage's
// clock: one stamped 70 minutes ago by this host's is 50 minutes old and
// stays, one stamped 100 minutes ago goes; the clock probe is gone too.
// They were aged on the maintainer's clock, 20 minutes too old.
func TestMaintainAgesOrphansOnTheStoragesClock(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 2, 10)
	fc.ClockBehind(20 * time.Minute)
	dir := warehousePath(t, tbl)
	young := filepath.Join(dir, "data", "orphan-young.parquet")
	old := filepath.Join(dir, "data", "orphan-old.parquet")
	for p, ago := range map[string]time.Duration{young: 70 * time.Minute, old: 100 * time.Minute} {
		if err := os.WriteFile(p, []byte("left by a crashed writer"), 0o644); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-ago)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{OrphanOlderThan: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("the orphan 50 minutes old on the storage's clock: %v", err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the orphan 80 minutes old on the storage's clock is still there (stat: %v)", err)
	}
	if rep.OrphansRemoved != 1 {
		t.Errorf("%d orphans removed, want 1", rep.OrphansRemoved)
	}
	probes, _ := filepath.Glob(filepath.Join(dir, "floe-clock-probe-*"))
	if len(probes) > 0 {
		t.Errorf("clock probes left: %v", probes)
	}
	assertHolds(t, tbl, 20)
}

// TestMaintainExpiryReportedAsFailedButApplied: an expiry that applied but
// was reported as a conflict (a Glue UpdateTable resent) or as an unknown
// outcome (a timeout) is recognised by its snapshots being gone: it is
// counted, the expired snapshots' files are deleted, and orphan removal
// runs. It was counted as a conflict with nothing expired (or failed the
// run as an unknown outcome, skipping orphan removal), and the expired
// snapshots' files stayed.
func TestMaintainExpiryReportedAsFailedButApplied(t *testing.T) {
	for name, fault := range map[string]faultcat.Fault{"conflict": faultcat.AppliedConflict, "unknown": faultcat.Ambiguous} {
		t.Run(name, func(t *testing.T) {
			f := newFixture(t)
			tbl, fc := f.openFaulty(t, "g")
			commitRounds(t, f, tbl, []int32{0}, 0, 6, 20)
			it, err := tbl.Load(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			before := it.Metadata().Snapshots()
			time.Sleep(20 * time.Millisecond) // every snapshot is older than ExpireOlderThan
			// No compaction: the manifest rewrite's commit, then the expiry's.
			fc.Inject(faultcat.None, fault)
			rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 100, ExpireOlderThan: 5 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if it, err = tbl.Load(t.Context()); err != nil {
				t.Fatal(err)
			}
			var expired []table.Snapshot
			for _, s := range before {
				if it.Metadata().SnapshotByID(s.SnapshotID) == nil {
					expired = append(expired, s)
				}
			}
			// The manifest rewrite added two snapshots (the rewrite, the
			// offset maps).
			gone := len(before) + 2 - len(it.Metadata().Snapshots())
			if fc.Injected(fault) != 1 || len(expired) == 0 || rep.SnapshotsExpired != gone || rep.Conflicts != 0 {
				t.Fatalf("%d faults injected, %d snapshots expired, reported %d expired and %d conflicts; want 1, some, %d and 0",
					fc.Injected(fault), gone, rep.SnapshotsExpired, rep.Conflicts, gone)
			}
			for _, s := range expired {
				if _, err := os.Stat(strings.TrimPrefix(s.ManifestList, "file://")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("the manifest list of expired snapshot %d is still there (stat: %v)", s.SnapshotID, err)
				}
			}
			assertHolds(t, tbl, 120)
		})
	}
}

// TestMaintainStopsWhenTheCatalogStalls: maintenance stopped during a
// commit (SIGTERM cancels the request) looks for the commit's outcome for a
// bounded time: a catalog that then takes requests and never answers held
// it forever (only SIGKILL ended `floe maintain`).
func TestMaintainStopsWhenTheCatalogStalls(t *testing.T) {
	lakehouse.SetOutcomeTimeout(t, 100*time.Millisecond)
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 4, 20)
	ctx, stop := context.WithCancel(t.Context())
	fc.Before(stop)
	fc.Inject(faultcat.Unavailable)
	// Maintain's load, compaction's, then the look for the outcome.
	fc.InjectLoads(faultcat.None, faultcat.None, faultcat.Stall)
	done := make(chan error, 1)
	go func() {
		_, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2})
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "unknown") {
			t.Fatalf("maintain: %v, want the commit's state unknown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("maintenance still running 10 s after it was stopped, the catalog stalling")
	}
}

// TestMaintainListsAgainWhenAFileVanishes: orphan removal whose listing of
// the table's location meets a file deleted meanwhile (a commit beside it
// deleting the metadata file it replaced) lists again and removes the
// orphans. iceberg-go's listing failed on the file it could no longer
// stat, and so did the run ("lstat …metadata.json: no such file").
func TestMaintainListsAgainWhenAFileVanishes(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 2, 10)
	dir := warehousePath(t, tbl)
	replaced := filepath.Join(dir, "metadata", "00000-replaced.metadata.json")
	orphan := filepath.Join(dir, "data", "orphan.parquet")
	at := time.Now().Add(-2 * time.Hour)
	for _, p := range []string{replaced, orphan} {
		if err := os.WriteFile(p, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
	}
	fc.RemoveWhileListed("00000-replaced.metadata.json")
	rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{OrphanOlderThan: time.Hour})
	if err != nil {
		t.Fatalf("maintain with a file deleted while it listed: %v", err)
	}
	if _, err := os.Stat(orphan); !errors.Is(err, os.ErrNotExist) || rep.OrphansRemoved != 1 {
		t.Errorf("orphans removed %d (stat of the orphan: %v), want it removed", rep.OrphansRemoved, err)
	}
	assertHolds(t, tbl, 20)
}

// TestMaintainExpiresPastTenThousandAbsentRuns: a compacted topic records
// a run of absent offsets per removed record; past 10,000 runs maintenance
// carries their union coarsened, so expiry goes on and verify still counts
// every recorded offset absent. The union was no longer carried, expiry
// kept every snapshot recording runs, and none expired again.
func TestMaintainExpiresPastTenThousandAbsentRuns(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	const runs = 10001
	var next int64
	for r := range 6 {
		n := int64(runs / 6)
		if r == 5 {
			n = runs - 5*(runs/6)
		}
		// Every other offset removed by the cleaner, then 10 rows.
		var absent [][2]int64
		for i := range n {
			absent = append(absent, [2]int64{next + 2*i, next + 2*i + 1})
		}
		lo, resume := next+2*n, next
		if next == 0 {
			resume = lakehouse.NoWatermark
		}
		p := f.part(t, 0, lo, lo+10, resume)
		p.Range.From, p.Absent = next, absent
		if _, err := tbl.Commit(t.Context(), []lakehouse.Part{p}); err != nil {
			t.Fatal(err)
		}
		next = lo + 10
	}
	for round := range 2 {
		time.Sleep(20 * time.Millisecond)
		rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 100, ExpireOlderThan: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		if rep.After.Snapshots > 2 {
			t.Fatalf("round %d: %d snapshots kept after expiry (expired %d), want at most 2", round, rep.After.Snapshots, rep.SnapshotsExpired)
		}
	}
	r, err := tbl.Verify(t.Context(), topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Counted from the first row on: the first flush's runs lie below it.
	if want := int64(runs - runs/6); r.AbsentFromLog < want {
		t.Errorf("verify counts %d offsets absent after expiry, want the %d recorded above the first row at least", r.AbsentFromLog, want)
	}
}

// TestMaintainCoarsensAbsentRunsOfManyPartitions: 12 partitions of a
// transactional topic, a marker every third offset (an absent run each,
// the holes between them all of one size), 12,000 runs in all and 50 more
// per partition and round: every maintenance run commits, and expiry goes
// on. The holes the coarsening filled were picked among equal ones in the
// maps' random order, so the union maintenance computed for its check
// differed from the one it staged: every run refused to commit ("floe.
// absent.carried would change"), and nothing was compacted or expired
// again.
func TestMaintainCoarsensAbsentRunsOfManyPartitions(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	markers := func(from, n int64) [][2]int64 {
		var absent [][2]int64
		for i := range n {
			absent = append(absent, [2]int64{from + 3*i, from + 3*i + 1})
		}
		return absent
	}
	next := map[int32]int64{}
	for p := range int32(12) {
		part := f.part(t, p, 3000, 3010, lakehouse.NoWatermark)
		part.Range.From, part.Absent = 0, markers(0, 1000)
		if _, err := tbl.Commit(t.Context(), []lakehouse.Part{part}); err != nil {
			t.Fatal(err)
		}
		next[p] = 3010
	}
	for round := range 3 {
		for p := range int32(12) {
			lo := next[p] + 150
			part := f.part(t, p, lo, lo+10, next[p])
			part.Range.From, part.Absent = next[p], markers(next[p], 50)
			if _, err := tbl.Commit(t.Context(), []lakehouse.Part{part}); err != nil {
				t.Fatal(err)
			}
			next[p] = lo + 10
		}
		time.Sleep(20 * time.Millisecond)
		rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: time.Millisecond})
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if rep.After.Snapshots > 2 {
			t.Fatalf("round %d: %d snapshots kept after expiry, want at most 2", round, rep.After.Snapshots)
		}
	}
}

// TestCommitCoarsensItsAbsentRuns: a flush that skipped more than 10,000
// runs of offsets (a compacted topic with every other record removed)
// records them coarsened, within the bound, each still counted absent by
// verify (with some of the offsets between them: here no rows, in a real
// flush the records the cleaner kept). Its snapshot's summary held every
// run: hundreds of kilobytes a flush, kept in the metadata with every
// snapshot.
func TestCommitCoarsensItsAbsentRuns(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	const runs = 20000
	var absent [][2]int64
	for i := range int64(runs) {
		absent = append(absent, [2]int64{10 + 2*i, 10 + 2*i + 1})
	}
	first := f.part(t, 0, 0, 10, lakehouse.NoWatermark)
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{first}); err != nil {
		t.Fatal(err)
	}
	p := f.part(t, 0, 10+2*runs, 10+2*runs+10, 10)
	p.Range.From, p.Absent = 10, absent
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{p}); err != nil {
		t.Fatal(err)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	raw := it.CurrentSnapshot().Summary.Properties[lakehouse.AbsentOffsetsKey]
	if n := strings.Count(raw, "],["); n >= 10000 {
		t.Errorf("the summary records %d runs (%d bytes), want at most 10,000", n+1, len(raw))
	}
	r, err := tbl.Verify(t.Context(), topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if r.AbsentFromLog < runs {
		t.Errorf("verify counts %d offsets absent, want the %d recorded at least", r.AbsentFromLog, runs)
	}
}

// TestMaintainExpiresPastTenThousandSkippedRuns: a long-running job with a
// dedupe key records a run per skipped business duplicate, and their union
// only grows; past 10,000 runs maintenance carries the newest of them and
// records where it dropped the rest, so expiry goes on, verify counts the
// uncovered offsets there as unchecked, and a loss below or above them is
// still a gap. The union was no longer carried past 10,000 runs: expiry kept
// every snapshot from then on, the metadata growing by one a flush for good.
func TestMaintainExpiresPastTenThousandSkippedRuns(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	// Partition 0: 10,001 keys each sent twice, 10,001 runs none adjacent;
	// partition 1: 3 of them. The partition with the most gives up runs.
	// Below them in partition 0, offsets [0, 10) with offset 3 lost.
	const n = 10001
	var first []pay
	for i := range int64(10) {
		if i != 3 {
			first = append(first, pay{i, fmt.Sprintf("A%d", i), 5})
		}
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark, first...)}); err != nil {
		t.Fatal(err)
	}
	commitTwice := func(p int32, from int64, prefix string, keys int64) int64 {
		pays := make([]pay, 0, 2*keys)
		for i := range keys {
			id := fmt.Sprintf("%s%d", prefix, i)
			pays = append(pays, pay{from + 2*i, id, 5}, pay{from + 2*i + 1, id, 5})
		}
		resume := from
		if from == 0 {
			resume = lakehouse.NoWatermark
		}
		res, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, p, from, from+2*keys, resume, pays...)})
		if err != nil {
			t.Fatal(err)
		}
		if res.BusinessDuplicates != keys {
			t.Fatalf("partition %d: business duplicates %d, want %d", p, res.BusinessDuplicates, keys)
		}
		return from + 2*keys
	}
	next := commitTwice(0, 10, "K", n)
	commitTwice(1, 0, "L", 3)
	snapshots := make([]int, 0, 4)
	for round := range 4 {
		// Ten ordinary flushes between maintenance runs, the last one
		// leaving offset next+9 out: a loss above the dropped runs.
		for i := range int64(10) {
			pays := []pay{{next, fmt.Sprintf("N%d", next), 5}}
			if round == 3 && i == 9 {
				pays = nil
			}
			if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, next, next+1, next, pays...)}); err != nil {
				t.Fatal(err)
			}
			next++
		}
		time.Sleep(20 * time.Millisecond)
		rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		snapshots = append(snapshots, rep.After.Snapshots)
	}
	if slices.Max(snapshots) > 2 {
		t.Fatalf("snapshots after each maintenance run (expire older than 1ms): %v, want at most 2", snapshots)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	props := it.CurrentSnapshot().Summary.Properties
	if got, want := props[lakehouse.BusinessDroppedKey], `{"payments":{"0":[[11,18]]}}`; got != want {
		t.Errorf("head's %s = %q, want %s (partition 0's 4 oldest runs dropped)", lakehouse.BusinessDroppedKey, got, want)
	}
	var carried map[string]map[string][][2]int64
	if err := json.Unmarshal([]byte(props[lakehouse.BusinessCarriedKey]), &carried); err != nil {
		t.Fatal(err)
	}
	if got := carried["payments"]; len(got["0"]) != 9997 || len(got["1"]) != 3 || got["0"][0] != [2]int64{19, 20} {
		t.Errorf("head's %s holds %d runs from %v of partition 0 and %d of partition 1, want 9,997 from [19, 20) and 3",
			lakehouse.BusinessCarriedKey, len(got["0"]), got["0"][0], len(got["1"]))
	}
	r, err := tbl.Verify(t.Context(), "payments", nil)
	if err != nil {
		t.Fatal(err)
	}
	var gaps int64
	for _, p := range r.Partitions {
		gaps += p.GapOffsets
	}
	if r.BusinessSkipped != n+3-4 || r.Unchecked != 4 || gaps != 2 || r.OK() {
		t.Fatalf("verify: skipped %d, unchecked %d, gap offsets %d, OK %v; want %d, 4 (offsets 11, 13, 15, 17), 2 (3 and the one lost later) and not OK",
			r.BusinessSkipped, r.Unchecked, gaps, r.OK(), n+3-4)
	}
	var out strings.Builder
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "4 offsets not checked") {
		t.Errorf("verify's report does not tell of the unchecked offsets:\n%s", out.String())
	}
}

// moveAsideNewFile moves a data file written since before (dataFilesOnDisk)
// out of the warehouse and returns where it was and where it is now.
func moveAsideNewFile(t *testing.T, f *fixture, before []string) (gone, aside string) {
	t.Helper()
	for _, p := range dataFilesOnDisk(t, f) {
		if !slices.Contains(before, p) {
			gone = p
			break
		}
	}
	aside = filepath.Join(t.TempDir(), "aside.parquet")
	if err := os.Rename(gone, aside); err != nil {
		t.Fatal(err)
	}
	return gone, aside
}
