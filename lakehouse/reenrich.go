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
}

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
	for res.Attempts < maxAttempts {
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
		done, err := t.replaceRows(ctx, tbl, p, ids, mask, res.Replaced)
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
	return res, fmt.Errorf("re-enriching %s: %d commit attempts conflicted", p.Range, res.Attempts)
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
// rows ids of p.Range and the insertion of p.Rows' rows selected by mask. It
// returns false on a clean conflict (nothing applied).
func (t *Table) replaceRows(ctx context.Context, tbl *table.Table, p Part, ids []int64, mask []bool, n int64) (bool, error) {
	sel, err := filterRows(ctx, p.Rows, mask)
	if err != nil {
		return false, err
	}
	defer sel.Release()
	files, err := t.writeFiles(ctx, tbl, sel)
	if err != nil {
		t.deleteFiles(tbl, files)
		return false, fmt.Errorf("writing re-enriched rows of %s: %w", p.Range, err)
	}
	props := iceberg.Properties{CommitIDKey: uuid.NewString(), ReplacedKey: strconv.FormatInt(n, 10)}
	for k, v := range offsetMaps(tbl) {
		props[k] = v
	}
	tx := tbl.NewTransaction()
	filter := iceberg.NewAnd(iceberg.NewAnd(
		iceberg.EqualTo(iceberg.Reference(TopicColumn), p.Range.Topic),
		iceberg.EqualTo(iceberg.Reference(PartitionColumn), p.Range.Partition)),
		iceberg.IsIn(iceberg.Reference(OffsetColumn), ids...))
	staged := tx.AssertRefSnapshotID(table.MainBranch)
	if staged == nil {
		staged = tx.Delete(ctx, filter, props)
	}
	if staged == nil {
		staged = tx.AddDataFiles(ctx, files, props, table.WithoutDuplicateCheck())
	}
	if staged != nil {
		t.deleteFiles(tbl, files)
		return false, fmt.Errorf("staging the re-enrichment of %s: %w", p.Range, staged)
	}
	if _, err := tx.Commit(ctx); err != nil {
		if isConflict(err) {
			t.deleteFiles(tbl, files)
			return false, nil
		}
		// The outcome may be unknown: keep the files (a retry of the whole
		// re-enrichment is idempotent, the rows being ok by then).
		return false, fmt.Errorf("committing the re-enrichment of %s: %w", p.Range, err)
	}
	return true, nil
}

// storedStatuses returns offset → _enrich_status of r's rows in tbl whose
// status is re-enrichable.
func storedStatuses(ctx context.Context, tbl *table.Table, r Range) (map[int64]string, error) {
	out := map[int64]string{}
	if tbl.CurrentSnapshot() == nil {
		return out, nil
	}
	filter := iceberg.NewAnd(rangeFilter(r), iceberg.IsIn(iceberg.Reference(EnrichStatusColumn), reenrichable...))
	_, batches, err := tbl.Scan(table.WithRowFilter(filter), table.WithSelectedFields(OffsetColumn, EnrichStatusColumn)).ToArrowRecords(ctx)
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
