package lakehouse_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/internal/unwritable"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
	"github.com/floe-dev/floe/schemas"
)

const topic = "clicks"

type fixture struct {
	dir    string
	props  map[string]string
	schema *schemas.Schema
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	dir := t.TempDir()
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{dir: dir, schema: sc, props: map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"),
		"sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}}
}

func (f *fixture) open(t *testing.T, group string) *lakehouse.Table {
	t.Helper()
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "analytics.clicks", Catalog: f.props, Group: group}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// openFaulty opens the table through a fault-injecting wrapper of the real catalog.
func (f *fixture) openFaulty(t *testing.T, group string) (*lakehouse.Table, *faultcat.Catalog) {
	t.Helper()
	cat, err := lakehouse.OpenCatalog(t.Context(), f.props)
	if err != nil {
		t.Fatal(err)
	}
	fc := faultcat.Wrap(cat)
	tbl, err := lakehouse.OpenIn(t.Context(), fc, lakehouse.Config{Table: "analytics.clicks", Group: group}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl, fc
}

// rows builds valid rows for offsets [from, to) of partition p.
func (f *fixture) rows(t *testing.T, p int32, from, to int64) arrow.RecordBatch {
	t.Helper()
	b := f.schema.NewBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for o := from; o < to; o++ {
		v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, 1732860000000+o, o)
		if err := b.Append([]byte(v), schemas.Meta{Topic: topic, Partition: p, Offset: o, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), "off"); err != nil {
			t.Fatal(err)
		}
	}
	return b.NewRecord()
}

func (f *fixture) part(t *testing.T, p int32, from, to, resume int64) lakehouse.Part {
	return lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: p, From: from, To: to}, Resume: resume, Rows: f.rows(t, p, from, to)}
}

// ids reads the table independently of floe and returns how often each
// (partition, offset) occurs.
func ids(t *testing.T, tbl *lakehouse.Table) map[[2]int64]int {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[[2]int64]int{}
	if it.CurrentSnapshot() == nil {
		return got
	}
	at, err := it.Scan(table.WithSelectedFields(lakehouse.PartitionColumn, lakehouse.OffsetColumn)).ToArrowTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer at.Release()
	tr := array.NewTableReader(at, 0)
	defer tr.Release()
	for tr.Next() {
		rec := tr.RecordBatch()
		ps := rec.Column(int(rec.Schema().FieldIndices(lakehouse.PartitionColumn)[0])).(*array.Int32)
		os := rec.Column(int(rec.Schema().FieldIndices(lakehouse.OffsetColumn)[0])).(*array.Int64)
		for i := 0; i < int(rec.NumRows()); i++ {
			got[[2]int64{int64(ps.Value(i)), os.Value(i)}]++
		}
	}
	return got
}

func assertExactlyOnce(t *testing.T, got map[[2]int64]int, p int32, from, to int64) {
	t.Helper()
	for o := from; o < to; o++ {
		if n := got[[2]int64{int64(p), o}]; n != 1 {
			t.Fatalf("partition %d offset %d present %d times, want 1", p, o, n)
		}
	}
}

// assertHolds checks that the table holds offsets [0, n) of partition 0
// once each, and nothing else.
func assertHolds(t *testing.T, tbl *lakehouse.Table, n int64) {
	t.Helper()
	got := ids(t, tbl)
	assertExactlyOnce(t, got, 0, 0, n)
	if int64(len(got)) != n {
		t.Fatalf("%d distinct ids, want %d", len(got), n)
	}
}

func dataFiles(t *testing.T, dir string) int {
	t.Helper()
	n := 0
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".parquet") {
			n++
		}
		return nil
	})
	return n
}

func TestCommitMovesWatermarksAndReadsNoFiles(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	ctx := t.Context()

	res, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 0, 100, lakehouse.NoWatermark), f.part(t, 1, 5, 50, lakehouse.NoWatermark)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 145 || res.Skipped != 0 {
		t.Fatalf("rows %d skipped %d, want 145, 0", res.Rows, res.Skipped)
	}
	for i := int64(1); i <= 3; i++ {
		res, err = tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, i*100, i*100+100, i*100)})
		if err != nil {
			t.Fatal(err)
		}
		if res.FilesScanned != 0 {
			t.Fatalf("flush above the watermark read %d data files, want 0", res.FilesScanned)
		}
	}
	wm, err := tbl.Watermarks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := wm.Get(topic, 0); w != 400 {
		t.Fatalf("W(0) = %d, want 400", w)
	}
	if w, _ := wm.Get(topic, 1); w != 50 {
		t.Fatalf("W(1) = %d, want 50 (carried over from the first commit)", w)
	}
	got := ids(t, tbl)
	assertExactlyOnce(t, got, 0, 0, 400)
	assertExactlyOnce(t, got, 1, 5, 50)
	if len(got) != 445 {
		t.Fatalf("%d distinct ids, want 445", len(got))
	}
}

func TestMergeSkipsOverlappingRanges(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	ctx := t.Context()

	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 0, 100, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	// A replay overlapping the committed range and reaching past it.
	res, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 50, 150, lakehouse.Replay)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 50 || res.Skipped != 50 {
		t.Fatalf("replay: rows %d skipped %d, want 50, 50", res.Rows, res.Skipped)
	}
	if res.FilesScanned == 0 {
		t.Fatal("replay of a committed range read no data files: the MERGE did not look")
	}
	wm, _ := tbl.Watermarks(ctx)
	if w, _ := wm.Get(topic, 0); w != 100 {
		t.Fatalf("replay moved W(0) to %d, want 100", w)
	}
	// The live flush from the watermark overlaps the replayed rows 100..149.
	res, err = tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 100, 200, 100)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 50 || res.Skipped != 50 {
		t.Fatalf("live: rows %d skipped %d, want 50, 50", res.Rows, res.Skipped)
	}
	// The same replay again is a no-op.
	res, err = tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 0, 200, lakehouse.Replay)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 0 || res.Skipped != 200 || res.Files != 0 {
		t.Fatalf("second replay: rows %d skipped %d files %d, want 0, 200, 0", res.Rows, res.Skipped, res.Files)
	}
	assertHolds(t, tbl, 200)
}

func TestFencedCommitDeletesItsFiles(t *testing.T) {
	f := newFixture(t)
	owner := f.open(t, "g")
	zombie := f.open(t, "g")
	ctx := t.Context()

	if _, err := owner.Commit(ctx, []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	before := dataFiles(t, f.dir)
	// The zombie resumed from "no watermark" too, before the owner committed.
	_, err := zombie.Commit(ctx, []lakehouse.Part{f.part(t, 0, 0, 20, lakehouse.NoWatermark)})
	if !errors.Is(err, lakehouse.ErrFenced) {
		t.Fatalf("zombie commit: %v, want ErrFenced", err)
	}
	if after := dataFiles(t, f.dir); after != before {
		t.Fatalf("%d data files after a fenced commit, want %d", after, before)
	}
	assertExactlyOnce(t, ids(t, owner), 0, 0, 10)
}

func TestDeadLetterOnlyFlushMovesWatermark(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{{Range: lakehouse.Range{Topic: topic, Partition: 3, From: 0, To: 7}, Resume: lakehouse.NoWatermark}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 0 || res.Files != 0 {
		t.Fatalf("rows %d files %d, want 0", res.Rows, res.Files)
	}
	wm, _ := tbl.Watermarks(t.Context())
	if w, _ := wm.Get(topic, 3); w != 7 {
		t.Fatalf("W(3) = %d, want 7", w)
	}
}

// TestCommitSurvivesCatalogFaults: a flush of the live job, or a replay's,
// commits its rows once through conflicts, unknown outcomes and an
// unreachable catalog — and through a conflict reported for a commit that
// applied (a Glue UpdateTable resent by the AWS client), whose files were
// deleted as unused, leaving a table that could not be read.
func TestCommitSurvivesCatalogFaults(t *testing.T) {
	for _, tc := range []struct {
		name   string
		faults []faultcat.Fault
	}{
		{"conflict", []faultcat.Fault{faultcat.Conflict, faultcat.Conflict}},
		{"ambiguous applied", []faultcat.Fault{faultcat.Ambiguous}},
		{"unavailable then ok", []faultcat.Fault{faultcat.Unavailable}},
		{"conflict that applied", []faultcat.Fault{faultcat.AppliedConflict}},
	} {
		for _, resume := range []int64{10, lakehouse.Replay} {
			name := tc.name
			if resume == lakehouse.Replay {
				name += ", replay"
			}
			t.Run(name, func(t *testing.T) {
				f := newFixture(t)
				tbl, fc := f.openFaulty(t, "g")
				if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
					t.Fatal(err)
				}
				fc.Inject(tc.faults...)
				res, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 30, resume)})
				if err != nil {
					t.Fatal(err)
				}
				if res.Rows != 20 {
					t.Fatalf("rows %d, want 20", res.Rows)
				}
				assertHolds(t, tbl, 30)
				want := int64(30)
				if resume == lakehouse.Replay {
					want = 10
				}
				wm, _ := tbl.Watermarks(t.Context())
				if w, _ := wm.Get(topic, 0); w != want {
					t.Fatalf("W(0) = %d, want %d", w, want)
				}
			})
		}
	}
}

// TestCommitKeepsItsFilesWhenItsReloadFails: a flush whose commit
// conflicts and whose reload then fails (the catalog unreachable, or the
// generation ending) returns the error and keeps the data files it wrote —
// a catalog may report a conflict for a commit it applied (see
// faultcat.AppliedConflict), and only a reload tells — leaving orphans for
// maintenance; the table and its watermark are as before.
func TestCommitKeepsItsFilesWhenItsReloadFails(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	before := dataFilesOnDisk(t, f)
	fc.Inject(faultcat.Conflict)
	fc.InjectLoads(faultcat.None, faultcat.Unavailable) // the commit's first load, then its reload
	_, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 30, 10)})
	if !errors.Is(err, faultcat.ErrInjected) {
		t.Fatalf("commit: %v, want the failed reload's error", err)
	}
	if fc.Injected(faultcat.Conflict) != 1 {
		t.Fatalf("%d conflicts injected, want 1", fc.Injected(faultcat.Conflict))
	}
	after := dataFilesOnDisk(t, f)
	if len(after) == len(before) || slices.ContainsFunc(before, func(b string) bool { return !slices.Contains(after, b) }) {
		t.Fatalf("data files on disk %v, want those of the first commit %v and the flush's", after, before)
	}
	assertHolds(t, tbl, 10)
}

// TestCommitRechecksOffsetsAfterAConflict: a replay's commits do not move
// the watermarks, so the fence does not stop a flush that races one over
// the same offsets; the commit that loses the race re-runs its offset
// anti-join on the reloaded table and writes only what is missing. Each
// case commits [10,20) twice, B's landing between A's MERGE and A's
// commit.
func TestCommitRechecksOffsetsAfterAConflict(t *testing.T) {
	for _, tc := range []struct {
		name   string
		a, b   int64 // each commit's Resume
		wantWM int64
	}{
		{"the live job's flush, a replay landing first", 10, lakehouse.Replay, 20},
		{"a replay, the live job's flush landing first", lakehouse.Replay, 10, 20},
		{"two replays", lakehouse.Replay, lakehouse.Replay, 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			b := f.open(t, "g")
			if _, err := b.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
				t.Fatal(err)
			}
			a, fc := f.openFaulty(t, "g")
			var bErr error
			fc.Before(func() {
				_, bErr = b.Commit(context.Background(), []lakehouse.Part{f.part(t, 0, 10, 20, tc.b)})
			})
			res, err := a.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 20, tc.a)})
			if err != nil || bErr != nil {
				t.Fatalf("commits: A %v, B %v", err, bErr)
			}
			if res.Attempts != 2 || res.Rows != 0 || res.Skipped != 10 {
				t.Fatalf("A: %d attempts, %d rows, %d skipped; want its conflict's retry to find all 10 committed", res.Attempts, res.Rows, res.Skipped)
			}
			assertHolds(t, a, 20)
			wm, _ := a.Watermarks(t.Context())
			if w, _ := wm.Get(topic, 0); w != tc.wantWM {
				t.Fatalf("W(0) = %d, want %d", w, tc.wantWM)
			}
			if files := dataFilesOnDisk(t, f); len(files) != 2 {
				t.Fatalf("data files on disk %v, want B's two: A's first, stale, deleted", files)
			}
		})
	}
}

// dataFilesOnDisk lists the Parquet files under the fixture's warehouse.
func dataFilesOnDisk(t *testing.T, f *fixture) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(filepath.Join(f.dir, "warehouse"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".parquet") {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(files)
	return files
}

func TestConcurrentMembersBothCommit(t *testing.T) {
	f := newFixture(t)
	a, b := f.open(t, "g"), f.open(t, "g")
	f.open(t, "g") // create the table once before racing
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, tbl := range []*lakehouse.Table{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resume := lakehouse.NoWatermark
			for round := int64(0); round < 5; round++ {
				_, errs[i] = tbl.Commit(context.Background(), []lakehouse.Part{f.part(t, int32(i), round*10, round*10+10, resume)})
				if errs[i] != nil {
					return
				}
				resume = round*10 + 10
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	got := ids(t, a)
	assertExactlyOnce(t, got, 0, 0, 50)
	assertExactlyOnce(t, got, 1, 0, 50)
	wm, _ := a.Watermarks(t.Context())
	if w0, _ := wm.Get(topic, 0); w0 != 50 {
		t.Fatalf("W(0) = %d", w0)
	}
	if w1, _ := wm.Get(topic, 1); w1 != 50 {
		t.Fatalf("W(1) = %d", w1)
	}
}

func TestTableCreatedWithWriteProperties(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	props := it.Properties()
	for key, want := range map[string]string{
		"write.parquet.compression-codec":                          "zstd",
		"write.parquet.dict-encoding-enabled.column.event_id":      "false",
		"write.parquet.dict-encoding-enabled.column.url":           "false",
		"write.parquet.dict-encoding-enabled.column._kafka_offset": "false",
		"commit.manifest-merge.enabled":                            "true",
		"write.metadata.metrics.column._kafka_topic":               "full",
	} {
		if props[key] != want {
			t.Errorf("property %s = %q, want %q", key, props[key], want)
		}
	}
	if _, ok := props["write.parquet.dict-encoding-enabled.column.session_id"]; ok {
		t.Error("session_id lost its dictionary")
	}
	if spec := it.Spec(); spec.NumFields() != 1 || spec.Field(0).Name != "event_ts_day" {
		t.Errorf("partition spec %v, want day(event_ts) as event_ts_day", spec)
	}
}

// TestCheckWriteRefusesAnUnwritableDataLocation: a table whose data location
// cannot be written opens (loading needs only read access), and CheckWrite
// fails naming the location, with an error that is fs.ErrPermission as a
// commit's is. Before, nothing checked write access: `floe run` started and
// failed every flush.
func TestCheckWriteRefusesAnUnwritableDataLocation(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	if err := tbl.CheckWrite(t.Context()); err != nil {
		t.Fatalf("CheckWrite of a writable table: %v", err)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	data := strings.TrimPrefix(it.Location(), "file://") + "/data"
	if n := dataFiles(t, data); n != 0 {
		t.Fatalf("%d files left under %s", n, data)
	}
	if entries, err := os.ReadDir(data); err != nil || len(entries) != 0 {
		t.Fatalf("%s after CheckWrite: %v, %v; want it empty (the probe deleted)", data, entries, err)
	}
	unwritable.Dir(t, data)

	err = f.open(t, "g").CheckWrite(t.Context())
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), data) {
		t.Fatalf("CheckWrite of a table whose data location is unwritable: %v; want a permission error naming %s", err, data)
	}
	_, err = tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)})
	if !errors.Is(err, fs.ErrPermission) {
		t.Fatalf("Commit to an unwritable data location: %v; want fs.ErrPermission", err)
	}
}

// TestFlushFailingForOneDayFails: a flush whose rows fall in many
// partitions (days), one of which the storage refuses (its directory not
// writable), fails, and the watermark stays. iceberg-go's partitioned
// writer lost the error of a partition whose writer failed before it
// closed the others, and returned the others' files without an error: the
// commit moved the offsets past that day's rows, which no file held.
func TestFlushFailingForOneDayFails(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	day := strings.TrimPrefix(it.Location(), "file://") + "/data/event_ts_day=2024-11-29"
	if err := os.MkdirAll(day, 0o755); err != nil {
		t.Fatal(err)
	}
	unwritable.Dir(t, day)
	b := f.schema.NewBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	const n = 5000
	for o := range int64(n) {
		ts := 1732860000000 + (o%40)*24*3600*1000 // 40 days
		v := fmt.Sprintf(`{"session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, o%7, ts, o)
		if err := b.Append([]byte(v), schemas.Meta{Topic: topic, Partition: 0, Offset: o, Timestamp: time.UnixMilli(ts)}, time.Now(), "off"); err != nil {
			t.Fatal(err)
		}
	}
	part := lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: 0, To: n}, Resume: lakehouse.NoWatermark, Rows: b.NewRecord()}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{part}); err == nil {
		t.Fatalf("Commit of 40 days' rows, one day's directory unwritable, succeeded")
	}
	wm, err := tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if w, ok := wm.Get(topic, 0); ok {
		t.Fatalf("the watermark moved to %d, past rows no file holds", w)
	}
}

func TestOpenCatalogErrorsAreClear(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{map[string]string{"type": "rest", "uri": "http://127.0.0.1:1"}, "rest catalog"},
		{map[string]string{"type": "nosuch", "uri": "x"}, "nosuch"},
		{map[string]string{"type": "sql", "uri": "file:" + f.dir + "/c.db", "sql.dialect": "sqlite", "warehouse": f.props["warehouse"]}, "driver"},
	} {
		_, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "a.b", Catalog: tc.props, Group: "g"}, f.schema)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%v) = %v, want an error mentioning %q", tc.props, err, tc.want)
		}
	}
	_, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "nonamespace", Catalog: f.props, Group: "g"}, f.schema)
	if err == nil || !strings.Contains(err.Error(), "table.name") {
		t.Errorf("bad table name: %v", err)
	}
}

// TestOpenCatalogRefusesMissingURI: OpenCatalog refuses a catalog type
// that connects to a uri without one, naming the key, before it opens
// anything. Before, a sql catalog without uri opened a SQLite database
// named "?_pragma=busy_timeout…" in the working directory.
func TestOpenCatalogRefusesMissingURI(t *testing.T) {
	f := newFixture(t)
	cwd := t.TempDir()
	t.Chdir(cwd)
	noURI := maps.Clone(f.props)
	delete(noURI, "uri")
	for _, tc := range []struct {
		props map[string]string
		want  string
	}{
		{noURI, "table.catalog.uri: required for catalog type sql"},
		{map[string]string{"type": "rest"}, "table.catalog.uri: required for catalog type rest"},
		{map[string]string{"type": "hive"}, "table.catalog.uri: required for catalog type hive"},
	} {
		cat, err := lakehouse.OpenCatalog(t.Context(), tc.props)
		if c, ok := cat.(interface{ Close() error }); ok {
			c.Close()
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("OpenCatalog(%v) = %v, want an error containing %q", tc.props, err, tc.want)
		}
	}
	if files, _ := os.ReadDir(cwd); len(files) > 0 {
		t.Errorf("files left in the working directory: %v", files)
	}
}

// TestSQLCatalogWithoutWarehouse: a sql catalog without a warehouse serves
// the tables it holds (verify, maintain, a job whose table exists), and a
// table it would create is refused at once naming table.catalog.warehouse.
// A warehouse was briefly required of every sql catalog, refusing ones
// that worked; before that, the create failed with iceberg-go's "no default
// path set", tried five times as if it could pass.
func TestSQLCatalogWithoutWarehouse(t *testing.T) {
	f := newFixture(t)
	f.open(t, "g")
	props := maps.Clone(f.props)
	delete(props, "warehouse")
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "analytics.clicks", Catalog: props, Group: "g"}, f.schema)
	if err != nil {
		t.Fatalf("opening the existing table without a warehouse: %v", err)
	}
	tbl.Close()
	started := time.Now()
	_, err = lakehouse.Open(t.Context(), lakehouse.Config{Table: "analytics.other", Catalog: props, Group: "g"}, f.schema)
	if err == nil || !strings.Contains(err.Error(), "set table.catalog.warehouse") {
		t.Fatalf("creating a table without a warehouse: %v, want an error naming table.catalog.warehouse", err)
	}
	if took := time.Since(started); took > 2*time.Second {
		t.Errorf("the refusal took %s: tried again as if it could pass", took)
	}
}

// TestCatalogFromIcebergGoConfigFile: a uri and warehouse given in
// iceberg-go's configuration file (.iceberg-go.yaml in $GOICEBERG_HOME or
// the home directory, for the catalog named "floe") serve a sql catalog
// whose properties lack them. iceberg-go reads the file when it starts, so
// the test runs itself again in a child process with GOICEBERG_HOME set.
func TestCatalogFromIcebergGoConfigFile(t *testing.T) {
	if dir := os.Getenv("FLOE_TEST_ICEBERG_HOME"); dir != "" {
		props := map[string]string{"type": "sql", "sql.dialect": "sqlite", "sql.driver": "sqlite"}
		sc, _ := schemas.Lookup(schemas.Clickstream)
		tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "analytics.clicks", Catalog: props, Group: "g"}, sc)
		if err != nil {
			t.Fatal(err)
		}
		tbl.Close()
		if _, err := os.Stat(filepath.Join(dir, "catalog.db")); err != nil {
			t.Fatalf("the catalog is not where the file's uri says: %v", err)
		}
		return
	}
	home := t.TempDir()
	cfg := "catalog:\n  floe:\n    uri: file:" + filepath.Join(home, "catalog.db") + "\n    warehouse: file://" + filepath.Join(home, "wh") + "\n"
	if err := os.WriteFile(filepath.Join(home, ".iceberg-go.yaml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCatalogFromIcebergGoConfigFile$", "-test.count=1")
	cmd.Env = append(os.Environ(), "FLOE_TEST_ICEBERG_HOME="+home, "GOICEBERG_HOME="+home)
	cmd.Dir = t.TempDir()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("opening a catalog with the uri and warehouse of .iceberg-go.yaml: %v\n%s", err, out)
	}
	if files, _ := os.ReadDir(cmd.Dir); len(files) > 0 {
		t.Errorf("files left in the working directory: %v", files)
	}
}

// TestOpenSQLCatalogErrorNamesItsURI: a sql catalog whose database cannot
// be opened fails naming its uri, with the password masked. Before, the
// error was the driver's alone: "loading sql catalog: unable to open
// database file (14)".
func TestOpenSQLCatalogErrorNamesItsURI(t *testing.T) {
	f := newFixture(t)
	p := maps.Clone(f.props)
	p["uri"] = "file:" + f.dir + "/no-such-dir/catalog.db"
	_, err := lakehouse.OpenCatalog(t.Context(), p)
	if err == nil || !strings.Contains(err.Error(), "loading sql catalog "+p["uri"]+": ") {
		t.Errorf("err = %v; want it to name %s", err, p["uri"])
	}
	p["uri"] = "file:" + f.dir + "/no-such-dir/catalog.db?_auth&_auth_user=floe&_auth_pass=s3cret"
	if _, err := lakehouse.OpenCatalog(t.Context(), p); err == nil || strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "/no-such-dir/catalog.db") {
		t.Errorf("err = %v; want it to name the uri without its password", err)
	}
}

// TestOpenNewSQLiteCatalogConcurrently: processes opening one new SQLite
// catalog at the same instant all open it. Before, SQLite refused all but
// one switch of the new database to WAL with SQLITE_BUSY at once, without
// waiting out busy_timeout, and floe run exited ("loading sql catalog …:
// database is locked (5) (SQLITE_BUSY)"; CI, TestRoutingExactlyOnce: about
// one round in 40 here fails).
func TestOpenNewSQLiteCatalogConcurrently(t *testing.T) {
	for round := range 150 {
		dir := t.TempDir()
		p := map[string]string{"type": "sql", "sql.dialect": "sqlite", "sql.driver": "sqlite",
			"uri": "file:" + dir + "/catalog.db", "warehouse": "file://" + dir}
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				cat, err := lakehouse.OpenCatalog(t.Context(), p)
				if err != nil {
					t.Errorf("round %d: %v", round, err)
					return
				}
				if _, err := cat.ListNamespaces(t.Context(), nil); err != nil {
					t.Errorf("round %d: listing namespaces: %v", round, err)
				}
			})
		}
		wg.Wait()
		if t.Failed() {
			return
		}
	}
}

// TestOpenSQLCatalogKeyValueURIPasswordMasked: a sql catalog whose uri is
// a key/value connection string (libpq's, for PostgreSQL) fails naming it
// as written, its password masked. Before, it was taken for a URL's path:
// "loading sql catalog
// host=127.0.0.1%20port=1%20user=floe%20password=PGPASS%20dbname=db: sql:
// unknown driver", the password printed.
func TestOpenSQLCatalogKeyValueURIPasswordMasked(t *testing.T) {
	_, err := lakehouse.OpenCatalog(t.Context(), map[string]string{"type": "sql", "sql.dialect": "postgres", "sql.driver": "no-such-driver",
		"uri": "host=127.0.0.1 port=1 user=floe password='PG PASS' dbname=db"})
	want := `loading sql catalog host=127.0.0.1 port=1 user=floe password=REDACTED dbname=db: sql: unknown driver "no-such-driver"`
	if err == nil || !strings.HasPrefix(err.Error(), want) || strings.Contains(err.Error(), "PASS") {
		t.Errorf("err = %v; want it to start %s", err, want)
	}
}

// TestCommitRefusesFilesTooOldToCommit: a commit stalled until its data
// files are as old as uncommittedMaxAge (here by a conflict after a pause)
// commits nothing and deletes them: an orphan clean-up may have taken them,
// and a snapshot naming deleted files would lose their rows behind advanced
// watermarks. The flush done again commits.
func TestCommitRefusesFilesTooOldToCommit(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	commitRounds(t, f, tbl, []int32{0}, 0, 1, 20)
	before := dataFilesOnDisk(t, f)
	lakehouse.SetCompactAges(t, time.Hour, time.Second)
	fc.Inject(faultcat.Conflict)
	fc.Before(func() { time.Sleep(1200 * time.Millisecond) }) // the stall
	_, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 20, 40, 20)})
	if err == nil || !strings.Contains(err.Error(), "not committed") {
		t.Fatalf("commit after the stall: %v, want its files refused", err)
	}
	if after := dataFilesOnDisk(t, f); !slices.Equal(after, before) {
		t.Fatalf("data files on disk %v, want those before the commit %v", after, before)
	}
	wm, _ := tbl.Watermarks(t.Context())
	if w, _ := wm.Get(topic, 0); w != 20 {
		t.Fatalf("W(0) = %d after the refused commit, want 20", w)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 20, 40, 20)}); err != nil {
		t.Fatal(err)
	}
	assertExactlyOnce(t, ids(t, tbl), 0, 0, 40)
}

// TestCommitAsFindsItsAppliedAttempt: a commit that applied while its
// caller saw an error, and whose check then failed (the outcome unknown),
// is found by the flush retried under the same commit id, which succeeds
// with it; under another id the same flush is fenced, as a zombie's is.
func TestCommitAsFindsItsAppliedAttempt(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	ctx := t.Context()
	commitRounds(t, f, tbl, []int32{0}, 0, 1, 20)
	before := dataFilesOnDisk(t, f)
	fc.Inject(faultcat.Ambiguous)
	fc.Before(func() { fc.InjectLoads(faultcat.Unavailable) }) // the check's reload fails
	first, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 20, 40, 20)})
	if err == nil || !strings.Contains(err.Error(), "state unknown") {
		t.Fatalf("commit: %v, want its outcome unknown", err)
	}
	files := dataFilesOnDisk(t, f)
	if _, err := tbl.CommitAs(ctx, "another-flush", []lakehouse.Part{f.part(t, 0, 20, 40, 20)}); !errors.Is(err, lakehouse.ErrFenced) {
		t.Fatalf("the flush under another id: %v, want it fenced", err)
	}
	res, err := tbl.CommitAs(ctx, first.CommitID, []lakehouse.Part{f.part(t, 0, 20, 40, 20)})
	if err != nil {
		t.Fatalf("the flush retried under its id: %v", err)
	}
	it, err := tbl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.SnapshotID != it.CurrentSnapshot().SnapshotID || res.Rows != 20 {
		t.Fatalf("retried flush: snapshot %d, %d rows; want the applied attempt's %d and its 20 rows", res.SnapshotID, res.Rows, it.CurrentSnapshot().SnapshotID)
	}
	if w, _ := res.Offsets.Get(topic, 0); w != 40 {
		t.Fatalf("offsets %v, want W(0) = 40", res.Offsets)
	}
	assertExactlyOnce(t, ids(t, tbl), 0, 0, 40)
	if after := dataFilesOnDisk(t, f); !slices.Equal(after, files) || len(files) != len(before)+1 {
		t.Fatalf("data files %d before, %d after the applied attempt, %d after the retries; want one more, then no change", len(before), len(files), len(after))
	}
}

// TestCommitSurvivesAStalledCatalog: a catalog that takes a request and
// never answers (iceberg-go's REST client has no timeout) holds a flush for
// at most the call timeout: a stalled commit is an unknown outcome, looked
// for and retried; a stalled load fails the flush, which the member retries.
// Both held the flush forever.
func TestCommitSurvivesAStalledCatalog(t *testing.T) {
	lakehouse.SetCatalogCallTimeout(t, 200*time.Millisecond)
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	within := func(what string, fn func() error) error {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- fn() }()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatalf("%s still waiting for the stalled catalog after 10 s", what)
			return nil
		}
	}
	fc.Inject(faultcat.Stall)
	if err := within("the commit", func() error {
		_, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 10, 20, 10)})
		return err
	}); err != nil {
		t.Fatalf("commit through a stalled attempt: %v", err)
	}
	fc.InjectLoads(faultcat.Stall)
	err := within("the load", func() error {
		_, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 20, 30, 20)})
		return err
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("commit whose load stalled: %v, want the deadline's error", err)
	}
	assertHolds(t, tbl, 20)
}

// TestCommitStoppedAtAConflictLooksForIt: a conflict reported as the
// flush is stopped (commit.grace over) is looked for like any unknown
// outcome — it may have applied (see faultcat.AppliedConflict) — and its
// files are kept: they were deleted at once, the applied snapshot and the
// watermark pointing at missing files.
func TestCommitStoppedAtAConflictLooksForIt(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(t.Context())
	fc.Before(stop)
	fc.Inject(faultcat.AppliedConflict)
	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 10, 30, 10)}); err != nil {
		t.Fatalf("a commit that applied, stopped at its conflict: %v", err)
	}
	assertHolds(t, tbl, 30)
	wm, _ := tbl.Watermarks(t.Context())
	if w, _ := wm.Get(topic, 0); w != 30 {
		t.Fatalf("W(0) = %d, want 30", w)
	}
}
