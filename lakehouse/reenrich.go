package lakehouse

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// EnrichStatusColumn holds each row's enrichment outcome.
const EnrichStatusColumn = "_enrich_status"

// ReplacedKey holds how many rows a re-enrichment snapshot replaced.
const ReplacedKey = "floe.replaced"

// Statuses of rows whose enrichment a re-enrichment may improve: written
// without it while the service was unavailable (skipped: the breaker was
// open; error: the lookup failed under policy passthrough), or for a key the
// service did not know then (miss).
var reenrichable = []string{"skipped", "error", "miss"}

// ReenrichResult counts what Reenrich did with one part.
type ReenrichResult struct {
	Replaced  int64 // stored rows replaced by their re-enriched version
	Unchanged int64 // rows of the part left alone (enriched already, absent, or no better now)
	Attempts  int   // catalog commit attempts
	// Rebased counts the attempts that followed a conflict with appends
	// alone (the live job's commits): the files written stayed right, and
	// were committed again on the new snapshot without being rewritten.
	Rebased int
}

// maxRebases bounds the commits of one set of written files on snapshots
// the live job appended to meanwhile. A rebase costs a commit, not a
// rewrite, so it is allowed far more often than a whole attempt: beside a
// job committing every few seconds, a rewrite that takes longer would
// otherwise never commit.
const maxRebases = 100

// Reenrich is the MERGE of a re-enrichment: WHEN MATCHED AND the stored
// _enrich_status is skipped, error or miss AND the new row's status is
// better (ok, or miss for a skipped or error row) THEN UPDATE — the stored row is replaced
// by p.Rows' row with the same (topic, partition, offset). Rows not in the
// table are not inserted (use Commit with Resume Replay for that). The
// delete and the insert land in one catalog commit, which asserts the
// snapshot it was planned on and is redone after a conflict, so it is safe
// beside the live job; watermarks are untouched (its snapshots carry the
// base's offset maps). Reenrich releases p.Rows.
func (t *Table) Reenrich(ctx context.Context, p Part) (res ReenrichResult, err error) {
	if p.Rows == nil {
		return res, nil
	}
	defer p.Rows.Release()
	newStatus, offsets, err := statusAndOffsets(p.Rows)
	if err != nil {
		return res, err
	}
	backoff := 20 * time.Millisecond
	// rounds counts the rows chosen and written afresh: rebases on the
	// live job's appends (res.Rebased) are not among them.
	for rounds := 0; rounds < maxAttempts; rounds++ {
		tbl, err := t.Load(ctx)
		if err != nil {
			return res, err
		}
		stored, err := storedStatuses(ctx, tbl, p.Range)
		if err != nil {
			return res, err
		}
		mask := make([]bool, offsets.Len())
		var ids []int64
		for i := range mask {
			old, ok := stored[offsets.Value(i)]
			if ok && better(old, newStatus.Value(i)) {
				mask[i] = true
				ids = append(ids, offsets.Value(i))
			}
		}
		res.Replaced = int64(len(ids))
		res.Unchanged = p.Rows.NumRows() - res.Replaced
		if len(ids) == 0 {
			return res, nil
		}
		res.Attempts++
		done, err := t.replaceRows(ctx, tbl, p, ids, mask, &res)
		if err != nil || done {
			return res, err
		}
		t.log.Info("re-enrichment conflict, reloading", "range", p.Range.String(), "attempt", res.Attempts)
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
	return res, fmt.Errorf("re-enriching %s: %d commit attempts conflicted (%d of them after the live job's appends)", p.Range, res.Attempts, res.Rebased)
}

// better reports whether a row stored with status old should be replaced by
// one re-enriched to status now.
func better(old, now string) bool {
	switch now {
	case "ok":
		return old == "skipped" || old == "error" || old == "miss"
	case "miss":
		return old == "skipped" || old == "error"
	}
	return false
}

// replaceRows commits, in one snapshot of tbl's successor, the deletion of
// rows ids of p.Range and the insertion of p.Rows' rows selected by mask
// (res.Replaced of them). It returns false on a clean conflict (nothing
// applied) with anything but appends: the rows must be chosen again. After
// appends alone it commits the same files on the new snapshot, carrying its
// offset maps, up to maxRebases times (counted in res), and while they are
// younger than uncommittedMaxAge.
//
// The deletion is a copy-on-write done here (rewriteWithout) rather than by
// iceberg-go's Transaction.Delete, which v0.7.0 cannot do on a table with a
// map column (see compactGroup): the files holding ids are replaced by
// copies without those rows, and the snapshot (an overwrite) swaps them and
// adds the re-enriched rows.
func (t *Table) replaceRows(ctx context.Context, tbl *table.Table, p Part, ids []int64, mask []bool, res *ReenrichResult) (bool, error) {
	sel, err := filterRows(ctx, p.Rows, mask)
	if err != nil {
		return false, err
	}
	defer sel.Release()
	written := time.Now() // no file written below is older
	files, err := t.writeFiles(ctx, tbl, sel)
	if err != nil {
		t.deleteFiles(tbl, files)
		return false, fmt.Errorf("writing re-enriched rows of %s: %w", p.Range, err)
	}
	old, kept, err := t.rewriteWithout(ctx, tbl, p.Range, ids)
	files = append(files, kept...)
	if err != nil {
		t.deleteFiles(tbl, files)
		return false, fmt.Errorf("rewriting the files holding the rows of %s to replace: %w", p.Range, err)
	}
	for {
		if err := tooOld("re-enriched rows of "+p.Range.String(), written); err != nil {
			// Written again from the start, by the next attempt.
			t.log.Warn("re-enrichment not committed", "err", err)
			t.deleteFiles(tbl, files)
			return false, nil
		}
		// The snapshot carries its base's offset maps: the watermarks stay
		// the live job's.
		props := iceberg.Properties{CommitIDKey: uuid.NewString(), ReplacedKey: strconv.FormatInt(res.Replaced, 10)}
		for k, v := range offsetMaps(tbl) {
			props[k] = v
		}
		tx := tbl.NewTransaction()
		staged := tx.AssertRefSnapshotID(table.MainBranch)
		if staged == nil {
			staged = tx.ReplaceDataFilesWithDataFiles(ctx, old, files, props)
		}
		if staged != nil {
			t.deleteFiles(tbl, files)
			return false, fmt.Errorf("staging the re-enrichment of %s: %w", p.Range, staged)
		}
		_, err := tx.Commit(ctx)
		if err == nil {
			return true, nil
		}
		if !isConflict(err) {
			// The outcome may be unknown: keep the files (a retry of the
			// whole re-enrichment is idempotent, the rows being ok by then).
			return false, fmt.Errorf("committing the re-enrichment of %s: %w", p.Range, err)
		}
		// A catalog may report a conflict for a commit it applied (see
		// Commit): until the reload shows it did not, the files are kept.
		next, err := t.Load(ctx)
		if err != nil {
			return false, err
		}
		if commitIn(next.Metadata(), props[CommitIDKey]) != nil {
			t.log.Warn("re-enrichment commit reported as a conflict had applied", "range", p.Range.String())
			return true, nil
		}
		// Appends remove no file and, their offsets being new to the table,
		// add none of the rows replaced: old still holds exactly them.
		if res.Rebased == maxRebases || !onlyAppendsSince(next, snapshotID(tbl)) {
			t.deleteFiles(tbl, files)
			return false, nil
		}
		res.Rebased++
		res.Attempts++
		t.log.Info("re-enrichment conflict with appends, committing again on the new snapshot", "range", p.Range.String(), "attempt", res.Attempts)
		tbl = next
	}
}

// rewriteWithout finds the data files of tbl holding rows ids of r and
// writes copies of them without those rows. It returns the files holding
// them (old) and the copies written (kept: none for a file that held only
// such rows). A file whose statistics overlap ids but that holds none of
// them is left alone (its copy, written while reading it, is deleted).
func (t *Table) rewriteWithout(ctx context.Context, tbl *table.Table, r Range, ids []int64) (old, kept []iceberg.DataFile, err error) {
	filter := iceberg.NewAnd(iceberg.NewAnd(
		iceberg.EqualTo(iceberg.Reference(TopicColumn), r.Topic),
		iceberg.EqualTo(iceberg.Reference(PartitionColumn), r.Partition)),
		iceberg.IsIn(iceberg.Reference(OffsetColumn), ids...))
	planned, err := tbl.Scan(table.WithRowFilter(filter)).PlanFiles(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("planning the scan of %s: %w", r, err)
	}
	tasks := wholeFiles(planned)
	want, err := writeArrowSchema(tbl)
	if err != nil {
		return nil, nil, err
	}
	found := 0
	drop := make(map[int64]bool, len(ids))
	for _, id := range ids {
		drop[id] = true
	}
	for _, task := range tasks {
		// Every row of the file, its delete files applied.
		_, batches, err := tbl.Scan().ReadTasks(ctx, []table.FileScanTask{task})
		if err != nil {
			return old, kept, fmt.Errorf("reading %s: %w", task.File.FilePath(), err)
		}
		removed, read := 0, int64(0)
		var readErr error
		records := func(yield func(arrow.RecordBatch, error) bool) {
			for b, err := range batches {
				if err != nil {
					readErr = err
					yield(nil, err)
					return
				}
				read += b.NumRows()
				out, n, err := withoutRows(ctx, b, r, drop, want)
				b.Release()
				if err != nil {
					readErr = err
					yield(nil, err)
					return
				}
				removed += n
				if !yield(out, nil) { // WriteRecords releases out
					return
				}
			}
		}
		var copies []iceberg.DataFile
		for df, err := range table.WriteRecords(ctx, tbl, want, records) {
			if err != nil {
				if readErr != nil {
					err = readErr
				}
				return old, append(kept, copies...), fmt.Errorf("copying %s: %w", task.File.FilePath(), err)
			}
			copies = append(copies, df)
		}
		if !hasDeletes(task) && read != task.File.Count() {
			// The copy would not hold every other row of the file.
			t.deleteFiles(tbl, copies)
			return old, kept, fmt.Errorf("copying %s: read %d of its %d rows", task.File.FilePath(), read, task.File.Count())
		}
		if written := rowCount(copies); written != read-int64(removed) {
			// A write error iceberg-go's writer lost (see writeFiles).
			t.deleteFiles(tbl, copies)
			return old, kept, fmt.Errorf("copying %s: %d of its %d other rows written, with no error from the writer",
				task.File.FilePath(), written, read-int64(removed))
		}
		if removed == 0 {
			t.deleteFiles(tbl, copies)
			continue
		}
		old = append(old, task.File)
		kept = append(kept, copies...)
		found += removed
	}
	if found < len(ids) {
		return old, kept, fmt.Errorf("found %d of the %d rows of %s to replace", found, len(ids), r)
	}
	return old, kept, nil
}

// wholeFiles turns planned scan tasks into one task per data file reading
// all of it: a file larger than read.split.target-size is planned as
// several splits, and a task of a partitioned table carries the filter's
// residual, which ReadTasks applies, so either would read only part of a
// file whose copy replaces all of it.
func wholeFiles(tasks []table.FileScanTask) []table.FileScanTask {
	var out []table.FileScanTask
	seen := map[string]bool{}
	for _, t := range tasks {
		if seen[t.File.FilePath()] {
			continue
		}
		seen[t.File.FilePath()] = true
		t.Start, t.Length, t.Residual = 0, t.File.FileSizeBytes(), nil
		out = append(out, t)
	}
	return out
}

// withoutRows returns b, relabelled to want, without its rows of r
// whose offset is in drop, and how many rows it dropped.
func withoutRows(ctx context.Context, b arrow.RecordBatch, r Range, drop map[int64]bool, want *arrow.Schema) (arrow.RecordBatch, int, error) {
	col := func(name string) arrow.Array {
		if idx := b.Schema().FieldIndices(name); len(idx) == 1 {
			return b.Column(idx[0])
		}
		return nil
	}
	tp, ok1 := col(TopicColumn).(*array.String)
	ps, ok2 := col(PartitionColumn).(*array.Int32)
	offs, ok3 := col(OffsetColumn).(*array.Int64)
	if !ok1 || !ok2 || !ok3 {
		return nil, 0, fmt.Errorf("rows lack the %s, %s or %s column", TopicColumn, PartitionColumn, OffsetColumn)
	}
	mask := make([]bool, b.NumRows())
	n := 0
	for i := range mask {
		mask[i] = !(drop[offs.Value(i)] && ps.Value(i) == r.Partition && tp.Value(i) == r.Topic)
		if !mask[i] {
			n++
		}
	}
	f, err := filterRows(ctx, b, mask)
	if err != nil {
		return nil, 0, err
	}
	defer f.Release()
	return relabel(f, want), n, nil
}

// storedStatuses returns offset → _enrich_status of r's rows in tbl whose
// status is re-enrichable.
func storedStatuses(ctx context.Context, tbl *table.Table, r Range) (map[int64]string, error) {
	out := map[int64]string{}
	if tbl.CurrentSnapshot() == nil {
		return out, nil
	}
	filter := iceberg.NewAnd(rangeFilter(r), iceberg.IsIn(iceberg.Reference(EnrichStatusColumn), reenrichable...))
	// withNested: iceberg-go v0.7.0 misreads this projected, filtered scan
	// on a table with nested columns unless they are selected too.
	cols := withNested(tbl.Schema(), []string{OffsetColumn, EnrichStatusColumn}, TopicColumn, PartitionColumn)
	_, batches, err := tbl.Scan(table.WithRowFilter(filter), table.WithSelectedFields(cols...)).ToArrowRecords(ctx)
	if err != nil {
		return nil, fmt.Errorf("scanning %s: %w", r, err)
	}
	for b, err := range batches {
		if err != nil {
			return nil, fmt.Errorf("scanning %s: %w", r, err)
		}
		offs := b.Column(b.Schema().FieldIndices(OffsetColumn)[0]).(*array.Int64)
		st := b.Column(b.Schema().FieldIndices(EnrichStatusColumn)[0]).(*array.String)
		for i := 0; i < offs.Len(); i++ {
			out[offs.Value(i)] = st.Value(i)
		}
		b.Release()
	}
	return out, nil
}

// statusAndOffsets returns the _enrich_status and offset columns of rows.
func statusAndOffsets(rows arrow.RecordBatch) (*array.String, *array.Int64, error) {
	si, oi := rows.Schema().FieldIndices(EnrichStatusColumn), rows.Schema().FieldIndices(OffsetColumn)
	if len(si) != 1 || len(oi) != 1 {
		return nil, nil, fmt.Errorf("rows lack the %s or %s column", EnrichStatusColumn, OffsetColumn)
	}
	st, ok1 := rows.Column(si[0]).(*array.String)
	offs, ok2 := rows.Column(oi[0]).(*array.Int64)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%s or %s has an unexpected type", EnrichStatusColumn, OffsetColumn)
	}
	return st, offs, nil
}
