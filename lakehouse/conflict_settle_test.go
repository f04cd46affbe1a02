package lakehouse_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
)

// checkCommitted fails t unless the table's watermark of partition 0 is
// want and every data file the table names can be read.
func checkCommitted(t *testing.T, tbl *lakehouse.Table, want int64) {
	t.Helper()
	wm, err := tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := wm.Get(topic, 0); w != want {
		t.Fatalf("W(0) = %d, want %d", w, want)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := it.Scan().ToArrowTable(t.Context()); err != nil {
		t.Fatalf("the table names a data file that is gone: %v", err)
	}
}

// TestLastAttemptsAppliedConflictKeepsItsFiles: the last of a commit's 12
// attempts is reported as a conflict, but the catalog applied it (Glue's
// resent UpdateTable, faultcat.AppliedConflict). The commit is looked for
// before its files go, and found: it succeeded. Without a reload after
// the last attempt, "gave up" deleted the files the table's head names,
// its watermark past them; the pipeline's retry then found the commit
// applied and committed Kafka offsets too.
func TestLastAttemptsAppliedConflictKeepsItsFiles(t *testing.T) {
	f := newFixture(t)
	tbl, fc := f.openFaulty(t, "g")
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	fc.Inject(append(slices.Repeat([]faultcat.Fault{faultcat.Conflict}, 11), faultcat.AppliedConflict)...)
	if _, err := tbl.CommitAs(t.Context(), "flush-1", []lakehouse.Part{f.part(t, 0, 10, 30, 10)}); err != nil {
		t.Fatalf("commit whose last attempt applied: %v", err)
	}
	checkCommitted(t, tbl, 30)
}

// cancelAfterCommit cancels the flush's context shortly after a commit
// returns: the generation ending (commit.grace over, SIGTERM) while the
// commit loop sleeps its backoff after a conflict.
type cancelAfterCommit struct {
	catalog.Catalog
	cancel context.CancelFunc
}

func (c cancelAfterCommit) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	md, loc, err := c.Catalog.CommitTable(ctx, ident, reqs, updates)
	time.AfterFunc(3*time.Millisecond, c.cancel)
	return md, loc, err
}

// TestStopAfterAnAppliedConflictKeepsItsFiles: a conflict the catalog
// reported for a commit it applied, then the flush's context ends in the
// backoff, before the reload that would tell: the commit is looked for
// (with a fresh deadline) and found. It returned the context's error and
// deleted the files the table's head names.
func TestStopAfterAnAppliedConflictKeepsItsFiles(t *testing.T) {
	f := newFixture(t)
	cat, err := lakehouse.OpenCatalog(t.Context(), f.props)
	if err != nil {
		t.Fatal(err)
	}
	fc := faultcat.Wrap(cat)
	tbl, err := lakehouse.OpenIn(t.Context(), fc, lakehouse.Config{Table: "analytics.clicks", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	stopping, err := lakehouse.OpenIn(t.Context(), cancelAfterCommit{fc, cancel}, lakehouse.Config{Table: "analytics.clicks", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	fc.Inject(faultcat.AppliedConflict)
	if _, err := stopping.CommitAs(ctx, "flush-2", []lakehouse.Part{f.part(t, 0, 10, 30, 10)}); err != nil {
		t.Fatalf("commit that applied, stopped in its backoff: %v", err)
	}
	checkCommitted(t, tbl, 30)
}
