package lakehouse

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
)

// ErrFenced means another member moved a partition's watermark after this
// member resumed from it: this member is a zombie for that partition. The
// flush's files are deleted and nothing is committed; the caller must drop
// its buffers and re-seek from the table's watermarks.
var ErrFenced = errors.New("fenced: another member advanced the watermark")

// Special values of Part.Resume.
const (
	// NoWatermark: the table held no offset for the partition when the
	// worker started.
	NoWatermark int64 = -1
	// Replay: the part backfills an old range. It is not fenced and does not
	// move the watermark (which never goes backwards); the dedupe MERGE alone
	// keeps it idempotent.
	Replay int64 = -2
)

// maxAttempts bounds how often one flush retries after commit conflicts or
// ambiguous failures before giving up (the buffers are then dropped and the
// offsets re-read, which is always safe).
const maxAttempts = 12

// uncommittedMaxAge is the age of written data files a commit no longer
// commits. A maintenance run removes unreferenced files older than its
// orphan age, at least MinOrphanOlderThan: the files of a commit stalled
// that long (a frozen process, a catalog call that hung) may be gone, and
// a snapshot naming them would lose their rows behind advanced watermarks.
// A variable for tests.
var uncommittedMaxAge = MinOrphanOlderThan - maxClockSkew

// maxClockSkew is the most a storage's clock may be off the maintaining
// host's (measured) or a writer's (not measurable) for orphan removal: the
// margin by which files of commits in flight stay younger than the orphan
// age.
const maxClockSkew = MinOrphanOlderThan / 2

// tooOld refuses to commit what (data files) written at written once they
// are uncommittedMaxAge old.
func tooOld(what string, written time.Time) error {
	if age := time.Since(written); age >= uncommittedMaxAge {
		return fmt.Errorf("%s written %s ago, not committed: an orphan clean-up (files older than %s) may have taken them", what, age.Round(time.Second), MinOrphanOlderThan)
	}
	return nil
}

// Part is one partition's share of a flush.
type Part struct {
	// Range is the block of offsets the flush covers. Offsets in it with no
	// row were dead-lettered and must already be acknowledged by the
	// dead-letter topic, or are in Absent.
	Range Range
	// Absent holds the runs [from, to) of offsets the log did not hold when
	// the flush read them (compacted away, deleted by retention before
	// they were read, or no record: a transaction's marker, an aborted
	// transaction's records), in offset order; they may lie just before Range,
	// between the previous flush's range and this one. The commit records
	// them (AbsentOffsetsKey) so that verify tells them from gaps.
	Absent [][2]int64
	// Resume is the watermark W(p) the worker started from, or NoWatermark.
	// The commit is fenced on it: it succeeds only while W(p) still equals it.
	Resume int64
	// Rows holds the partition's rows in offset order; nil when there are none.
	// Commit takes ownership and releases it.
	Rows arrow.RecordBatch
}

// firstOffsets returns the group's first live offsets as tbl holds them,
// with the From of each part that sets its partition's first watermark:
// one that resumed from NoWatermark, which the fence has just let through
// against tbl, so the table holds no watermark of its partition. A
// partition already recorded keeps its offset.
func firstOffsets(tbl *table.Table, group string, parts []Part) (Offsets, error) {
	first, err := FirstOffsetsOf(tbl, group)
	if err != nil {
		return nil, err
	}
	fresh := Offsets{}
	for _, p := range parts {
		if p.Resume != NoWatermark {
			continue
		}
		if from, ok := fresh.Get(p.Range.Topic, p.Range.Partition); !ok || p.Range.From < from {
			fresh.Set(p.Range.Topic, p.Range.Partition, p.Range.From)
		}
	}
	for topic, ps := range fresh {
		for p, from := range ps {
			if _, ok := first.Get(topic, p); !ok {
				first.Set(topic, p, from)
			}
		}
	}
	return first, nil
}

// Result reports what one flush did.
type Result struct {
	SnapshotID int64
	CommitID   string
	// Rows is how many rows were appended after the dedupe MERGE.
	Rows int64
	// Skipped is how many rows the MERGE found already in the table.
	Skipped int64
	// BusinessDuplicates is how many rows the business-key MERGE skipped
	// (Table.SetDedupe): their key was earlier in the flush or already in
	// the table. Their offsets are covered all the same.
	BusinessDuplicates int64
	// KeyFilesScanned and KeyFilesPruned are the data files the
	// business-key search read, and those of the snapshot it did not read
	// (pruned by partition summaries and column statistics).
	KeyFilesScanned int
	KeyFilesPruned  int
	// Files is how many data files the snapshot added.
	Files int
	// FilesScanned is how many existing data files the MERGE had to read;
	// zero for a normal flush above the watermarks.
	FilesScanned int
	// Attempts is how many catalog commits were tried.
	Attempts int
	// Offsets is the group's offset map as committed (for an earlier
	// attempt CommitAs found, as the table holds it now).
	Offsets Offsets

	// businessAt holds the coordinates of the business-key duplicates.
	businessAt []coord
}

// Commit runs the commit protocol for one flush (DESIGN.md steps 3-5):
// dedupe the rows against the table, write Parquet files (invisible until
// committed), then in a loop reload the table, check each part's fence, and
// append the files with the new offset map in one transaction asserting the
// snapshot it read. A conflict repeats the loop; an ambiguous failure reloads
// and looks for the flush's commit id before retrying. Files of a flush that
// does not commit are deleted. It returns ErrFenced (wrapped) when a fence
// fails.
func (t *Table) Commit(ctx context.Context, parts []Part) (Result, error) {
	return t.CommitAs(ctx, uuid.NewString(), parts)
}

// CommitAs is Commit under commit id commitID. A caller that retries a
// flush whose Commit failed with an unknown outcome (the commit may have
// applied, and the reload looking for it failed) retries with the same id:
// the fence then finds that commit among the snapshots that moved the
// watermark, and the flush succeeds with it instead of being fenced by its
// own first attempt.
func (t *Table) CommitAs(ctx context.Context, commitID string, parts []Part) (res Result, err error) {
	// The MERGE swaps rows for their deduplicated copies: in a copy of the
	// slice, so the caller's parts are untouched.
	parts = slices.Clone(parts)
	defer func() {
		for _, p := range parts {
			if p.Rows != nil {
				p.Rows.Release()
			}
		}
	}()
	res.CommitID = commitID

	tbl, err := t.Load(ctx)
	if err != nil {
		return res, err
	}
	if err := t.fence(tbl, parts); err != nil {
		if applied, ok := t.applied(tbl, commitID); ok && errors.Is(err, ErrFenced) {
			return applied, nil
		}
		return res, err
	}

	// partFiles[i] holds the data files of parts[i].
	var partFiles [][]iceberg.DataFile
	ambiguous := false
	defer func() {
		if err != nil && !ambiguous {
			if files := slices.Concat(partFiles...); len(files) > 0 {
				t.deleteFiles(tbl, files)
			}
		}
	}()
	spec := t.dedupe.Load()
	// merged is the snapshot the MERGE read (nil: none): a conflict
	// re-checks offsets and business keys against what landed after it.
	merged := snapshotID(tbl)
	written := time.Now() // no file of the flush is older
	partFiles, err = t.prepare(ctx, tbl, parts, spec, &res)
	if err != nil {
		return res, err
	}

	ranges := make([]Range, len(parts))
	for i, p := range parts {
		ranges[i] = p.Range
	}
	sortRanges(ranges)
	rangesJSON, _ := json.Marshal(ranges)

	backoff := 20 * time.Millisecond
	// unsettled: the last attempt conflicted, and no reload has shown the
	// commit absent since (see settleConflict).
	unsettled := false
	for res.Attempts < maxAttempts {
		if res.Attempts > 0 {
			// A catalog may report a conflict for a commit it applied
			// (AWS's client resends a Glue UpdateTable whose answer was
			// lost, and the resend conflicts with it): until a reload
			// shows this flush's commit absent, its files are kept (at
			// worst orphans, for maintenance), and if the reload shows it
			// applied, they may be its files.
			fresh, lerr := t.Load(ctx)
			if lerr != nil {
				ambiguous = true
				err = lerr
				return res, err
			}
			tbl = fresh
			if applied, ok := t.applied(tbl, commitID); ok {
				applied.Attempts = res.Attempts
				return applied, nil
			}
			unsettled = false
		}
		res.Attempts++
		if err = t.fence(tbl, parts); err != nil {
			if !errors.Is(err, ErrFenced) {
				return res, err
			}
			if applied, ok := t.applied(tbl, commitID); ok {
				// An earlier call's commit (see CommitAs): this call has
				// not reached the catalog, so its files are unused.
				t.deleteFiles(tbl, slices.Concat(partFiles...))
				applied.Attempts = res.Attempts
				return applied, nil
			}
			return res, err
		}
		if !sameID(snapshotID(tbl), merged) {
			// The fence covers commits of the live job, which move the
			// watermarks; a replay's do not, and may have written offsets
			// of these parts meanwhile (or, for a replay part, the live
			// job may have).
			if err = t.recheckOffsets(ctx, tbl, parts, partFiles, ambiguous, &res); err != nil {
				return res, err
			}
			if spec != nil {
				if err = t.recheckKeys(ctx, tbl, spec, parts, partFiles, merged, ambiguous, &res); err != nil {
					return res, err
				}
			}
			merged = snapshotID(tbl)
		}
		files := slices.Concat(partFiles...)
		res.Files = len(files)
		offsets, err := WatermarksOf(tbl, t.group)
		if err != nil {
			return res, err
		}
		for _, p := range parts {
			if p.Resume != Replay {
				offsets.Set(p.Range.Topic, p.Range.Partition, p.Range.To)
			}
		}
		offsetsJSON, _ := json.Marshal(offsets)
		props := iceberg.Properties{
			OffsetsKeyPrefix + t.group: string(offsetsJSON),
			CommitIDKey:                res.CommitID,
			RangesKey:                  string(rangesJSON),
			RowsKey:                    strconv.FormatInt(res.Rows, 10),
			DuplicatesKey:              strconv.FormatInt(res.Skipped, 10),
		}
		first, err := firstOffsets(tbl, t.group, parts)
		if err != nil {
			return res, err
		}
		if len(first) > 0 {
			firstJSON, _ := json.Marshal(first)
			props[FirstKeyPrefix+t.group] = string(firstJSON)
		}
		if spec != nil {
			props[BusinessDuplicatesKey] = strconv.FormatInt(res.BusinessDuplicates, 10)
		}
		if len(res.businessAt) > 0 {
			props[BusinessOffsetsKey] = encodeCoords(res.businessAt)
		}
		if absent := absentOf(parts); len(absent) > 0 {
			props[AbsentOffsetsKey] = absent.encode()
		}
		t.partitionCounts.Range(func(topic, n any) bool {
			props[PartitionsKeyPrefix+topic.(string)] = strconv.Itoa(n.(int))
			return true
		})
		t.routing.Range(func(topic, fp any) bool {
			props[RoutingKeyPrefix+topic.(string)] = fp.(string)
			// Always beside the routing, so that an older change's
			// offsets never pass for this routing's.
			since := "{}"
			if v, ok := t.routingSince.Load(topic); ok {
				since = v.(string)
			} else if rec, ok := RoutingOf(tbl, topic.(string)); ok && rec == fp {
				since = routingSinceRaw(tbl, topic.(string))
			}
			props[RoutingSinceKeyPrefix+topic.(string)] = since
			return true
		})
		// Last, after the re-checks, which read files and may take long:
		// files of parts they did not rewrite are as old as the flush's.
		if err = tooOld("commit "+res.CommitID+": its data files", written); err != nil {
			return res, err
		}
		committed, cerr := t.commitOnce(ctx, tbl, files, props)
		var staging *stagingError
		if errors.As(cerr, &staging) {
			// Never reached the catalog: a clean failure.
			err = fmt.Errorf("commit %s: %w", res.CommitID, cerr)
			return res, err
		}
		if cerr == nil {
			res.SnapshotID = committed.CurrentSnapshot().SnapshotID
			res.Offsets = offsets
			return res, nil
		}
		if isConflict(cerr) && ctx.Err() == nil {
			// Looked for after the reload (a conflict may have applied).
			unsettled = true
			t.log.Info("commit conflict, reloading", "commit_id", res.CommitID, "attempt", res.Attempts, "err", cerr)
		} else {
			// Unknown outcome (or a conflict as the flush is stopped:
			// no reload follows to tell): the catalog may have applied
			// it, now or later, so from here on the files are never
			// deleted.
			ambiguous = true
			snap, lerr := t.findCommitAfter(ctx, res.CommitID)
			switch {
			case lerr != nil:
				err = fmt.Errorf("commit %s state unknown (%v), reload failed: %w", res.CommitID, cerr, lerr)
				return res, err
			case snap != nil:
				t.log.Warn("ambiguous commit had applied", "commit_id", res.CommitID, "snapshot", snap.SnapshotID, "err", cerr)
				res.SnapshotID = snap.SnapshotID
				res.Offsets = offsets
				return res, nil
			case ctx.Err() != nil:
				err = fmt.Errorf("commit %s interrupted: %w (%w)", res.CommitID, ctx.Err(), cerr)
				return res, err
			}
			if Denied(cerr) {
				// Refused (a REST catalog's 401 or 403): retrying in this
				// loop does not clear it; the caller decides.
				err = fmt.Errorf("commit %s: %w", res.CommitID, cerr)
				return res, err
			}
			t.log.Warn("ambiguous commit had not applied, retrying", "commit_id", res.CommitID, "err", cerr)
		}
		select {
		case <-ctx.Done():
			err = ctx.Err()
			if unsettled {
				return t.settleConflict(ctx, commitID, res, err, &ambiguous)
			}
			return res, err
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		backoff = min(2*backoff, time.Second)
	}
	err = fmt.Errorf("commit %s: gave up after %d attempts", res.CommitID, res.Attempts)
	if unsettled {
		return t.settleConflict(ctx, commitID, res, err, &ambiguous)
	}
	return res, err
}

// settleConflict ends a commit whose last attempt conflicted with no reload
// since, as the attempts ran out or ctx ended in the backoff: a catalog may
// report a conflict for a commit it applied (see CommitAs's loop), and its
// files, deleted, would leave the table naming files that are gone behind
// an advanced watermark. The table is reloaded (with a fresh deadline once
// ctx has ended) and the commit looked for: applied, it is the result;
// absent, cause is the error and the files may go; a failed reload leaves
// the outcome unknown, and the files are kept (ambiguous).
func (t *Table) settleConflict(ctx context.Context, commitID string, res Result, cause error, ambiguous *bool) (Result, error) {
	octx, cancel := outcomeContext(ctx)
	defer cancel()
	tbl, err := t.Load(octx)
	if err != nil {
		*ambiguous = true
		return res, fmt.Errorf("%w; whether its last attempt, reported as a conflict, applied is unknown (reloading: %w)", cause, err)
	}
	if applied, ok := t.applied(tbl, commitID); ok {
		applied.Attempts = res.Attempts
		return applied, nil
	}
	return res, cause
}

// prepare runs the dedupe MERGE — the offset anti-join of every part, then
// the business-key MERGE across them when spec is set — and writes each
// part's data files, parts in parallel (one per core): it is the CPU-heavy
// half of a flush. It returns the files of each part, also on error, so the
// caller can delete them.
func (t *Table) prepare(ctx context.Context, tbl *table.Table, parts []Part, spec *dedupeSpec, res *Result) ([][]iceberg.DataFile, error) {
	var mu sync.Mutex
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range parts {
		p := &parts[i]
		if p.Rows == nil || p.Rows.NumRows() == 0 {
			continue
		}
		g.Go(func() error {
			rows, scanned, err := t.antiJoin(gctx, tbl, p.Range, p.Rows)
			if err != nil {
				return fmt.Errorf("dedupe MERGE of %s: %w", p.Range, err)
			}
			mu.Lock()
			defer mu.Unlock()
			res.Skipped += p.Rows.NumRows() - rows.NumRows()
			res.FilesScanned += scanned
			p.Rows.Release()
			p.Rows = rows
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if spec != nil {
		st, _, err := t.dedupeKeys(ctx, tbl, spec, parts, keySearch{inFlush: true})
		if err != nil {
			return nil, err
		}
		res.BusinessDuplicates += st.skipped
		res.businessAt = append(res.businessAt, st.at...)
		res.KeyFilesScanned += st.scanned
		res.KeyFilesPruned += st.pruned
	}

	files := make([][]iceberg.DataFile, len(parts))
	g, gctx = errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range parts {
		p := &parts[i]
		if p.Rows == nil || p.Rows.NumRows() == 0 {
			continue
		}
		g.Go(func() error {
			written, err := t.writeFiles(gctx, tbl, p.Rows)
			mu.Lock()
			defer mu.Unlock()
			files[i] = written
			if err != nil {
				return fmt.Errorf("writing data files of %s: %w", p.Range, err)
			}
			res.Rows += p.Rows.NumRows()
			return nil
		})
	}
	err := g.Wait()
	return files, err
}

// recheckKeys runs after a conflict, on the reloaded tbl, when commits
// landed since the MERGE read snapshot merged: another member may have
// committed the same business keys from another partition meanwhile. It
// compares the parts' keys with the files appended since (only those), and
// rewrites the data files of every part that lost rows, deleting the stale
// ones unless an earlier attempt's outcome was unknown (ambiguous): those
// may yet be referenced.
func (t *Table) recheckKeys(ctx context.Context, tbl *table.Table, spec *dedupeSpec, parts []Part, partFiles [][]iceberg.DataFile, merged *int64, ambiguous bool, res *Result) error {
	st, changed, err := t.dedupeKeys(ctx, tbl, spec, parts, keySearch{incremental: true, since: merged})
	if err != nil {
		// The snapshot read may be gone (expired, rolled back): search the
		// table afresh.
		t.log.Info("incremental business-key re-check failed; searching the table", "err", err)
		st, changed, err = t.dedupeKeys(ctx, tbl, spec, parts, keySearch{})
		if err != nil {
			return fmt.Errorf("re-checking business keys after a conflict: %w", err)
		}
	}
	res.BusinessDuplicates += st.skipped
	res.businessAt = append(res.businessAt, st.at...)
	res.Rows -= st.skipped
	res.KeyFilesScanned += st.scanned
	if st.skipped > 0 {
		t.log.Info("business keys committed concurrently, rewriting files", "commit_id", res.CommitID, "skipped", st.skipped)
	}
	for i, ch := range changed {
		if ch {
			if err := t.rewritePart(ctx, tbl, parts[i], partFiles, i, ambiguous); err != nil {
				return err
			}
		}
	}
	return nil
}

// recheckOffsets runs after a conflict, on the reloaded tbl, when commits
// landed since the MERGE read the table: it runs each part's offset
// anti-join again and rewrites the data files of every part that lost rows,
// as recheckKeys does. Planning prunes by the files' offset statistics, so
// it reads files only when another commit wrote offsets in a part's range.
func (t *Table) recheckOffsets(ctx context.Context, tbl *table.Table, parts []Part, partFiles [][]iceberg.DataFile, ambiguous bool, res *Result) error {
	for i := range parts {
		p := &parts[i]
		if p.Rows == nil || p.Rows.NumRows() == 0 {
			continue
		}
		rows, scanned, err := t.antiJoin(ctx, tbl, p.Range, p.Rows)
		if err != nil {
			return fmt.Errorf("re-checking the offsets of %s after a conflict: %w", p.Range, err)
		}
		res.FilesScanned += scanned
		dropped := p.Rows.NumRows() - rows.NumRows()
		if dropped == 0 {
			rows.Release()
			continue
		}
		t.log.Info("offsets committed concurrently, rewriting files", "commit_id", res.CommitID, "range", p.Range, "skipped", dropped)
		res.Skipped += dropped
		res.Rows -= dropped
		p.Rows.Release()
		p.Rows = rows
		if err := t.rewritePart(ctx, tbl, *p, partFiles, i, ambiguous); err != nil {
			return err
		}
	}
	return nil
}

// rewritePart writes part p's rows (the i-th part) again, after a re-check
// took some of them out, and replaces partFiles[i] by the new files,
// deleting the stale ones unless an earlier attempt's outcome was unknown
// (ambiguous): those may yet be referenced.
func (t *Table) rewritePart(ctx context.Context, tbl *table.Table, p Part, partFiles [][]iceberg.DataFile, i int, ambiguous bool) error {
	stale := partFiles[i]
	partFiles[i] = nil
	if p.Rows.NumRows() > 0 {
		written, err := t.writeFiles(ctx, tbl, p.Rows)
		partFiles[i] = written
		if err != nil {
			partFiles[i] = append(written, stale...) // the caller deletes both
			return fmt.Errorf("rewriting data files of %s: %w", p.Range, err)
		}
	}
	if !ambiguous {
		t.deleteFiles(tbl, stale)
	}
	return nil
}

// snapshotID is tbl's current snapshot ID, nil for an empty table.
func snapshotID(tbl *table.Table) *int64 {
	if s := tbl.CurrentSnapshot(); s != nil {
		id := s.SnapshotID
		return &id
	}
	return nil
}

func sameID(a, b *int64) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func (t *Table) commitOnce(ctx context.Context, tbl *table.Table, files []iceberg.DataFile, props iceberg.Properties) (*table.Table, error) {
	tx := tbl.NewTransaction()
	if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
		return nil, err
	}
	var err error
	if len(files) == 0 {
		// An empty snapshot still moves the watermarks (a flush of only
		// dead-lettered records).
		err = tx.AddFiles(ctx, nil, props, true)
	} else {
		err = tx.AddDataFiles(ctx, files, props, table.WithoutDuplicateCheck())
	}
	if err != nil {
		return nil, &stagingError{err}
	}
	return tx.Commit(ctx)
}

// stagingError is a failure to build the transaction, before the catalog
// was contacted: the commit certainly did not apply.
type stagingError struct{ err error }

func (e *stagingError) Error() string { return "staging append: " + e.err.Error() }
func (e *stagingError) Unwrap() error { return e.err }

// isConflict reports a commit the catalog rejected without applying it.
// iceberg-go's SQL catalog reports a failed requirement (the branch moved)
// as a plain error whose text starts "requirement failed:", checked before
// anything is staged, so it is as clean as ErrCommitFailed. A conflict
// through keepFilesCatalog is one too.
func isConflict(err error) bool {
	return errors.Is(err, table.ErrCommitFailed) || errors.Is(err, errReportedConflict) ||
		strings.Contains(err.Error(), "requirement failed:")
}

// fence checks that every part's partition still has the watermark the
// worker resumed from (DESIGN.md step 3).
func (t *Table) fence(tbl *table.Table, parts []Part) error {
	wm, err := WatermarksOf(tbl, t.group)
	if err != nil {
		return err
	}
	for _, p := range parts {
		if p.Resume == Replay {
			continue
		}
		cur, ok := wm.Get(p.Range.Topic, p.Range.Partition)
		if !ok {
			cur = NoWatermark
		}
		if cur != p.Resume {
			return fmt.Errorf("%w: %s/%d is at %d, this member resumed from %d",
				ErrFenced, p.Range.Topic, p.Range.Partition, cur, p.Resume)
		}
	}
	return nil
}

// applied reports whether tbl's ancestry holds commit commitID (an earlier
// attempt of the flush whose outcome was not known, or that was reported as
// a conflict), and its Result: the snapshot, its counts and offset map.
func (t *Table) applied(tbl *table.Table, commitID string) (Result, bool) {
	snap := commitIn(tbl.Metadata(), commitID)
	if snap == nil {
		return Result{}, false
	}
	offsets, err := WatermarksOf(tbl, t.group)
	if err != nil {
		return Result{}, false
	}
	count := func(key string) int64 {
		n, _ := strconv.ParseInt(snap.Summary.Properties[key], 10, 64)
		return n
	}
	t.log.Warn("the flush's earlier commit had applied", "commit_id", commitID, "snapshot", snap.SnapshotID)
	return Result{SnapshotID: snap.SnapshotID, CommitID: commitID, Rows: count(RowsKey), Skipped: count(DuplicatesKey),
		BusinessDuplicates: count(BusinessDuplicatesKey), Offsets: offsets}, true
}

// commitIn returns the snapshot carrying commitID in the current branch's
// ancestry of meta, or nil.
func commitIn(meta table.Metadata, commitID string) *table.Snapshot {
	for snap := meta.CurrentSnapshot(); snap != nil; {
		if snap.Summary != nil && snap.Summary.Properties[CommitIDKey] == commitID {
			return snap
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return nil
}

// outcomeContext is ctx while it lasts, and once it has ended (a commit
// interrupted by shutdown) a fresh one of outcomeTimeout: long enough to
// learn a commit's outcome, short enough that a catalog that stalls cannot
// hold a stopped process.
func outcomeContext(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Err() == nil {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), outcomeTimeout)
}

// OutcomeTimeout is how long a commit interrupted by shutdown takes at most
// to learn its outcome (outcomeContext).
const OutcomeTimeout = 10 * time.Second

// outcomeTimeout is OutcomeTimeout, a variable for tests.
var outcomeTimeout = OutcomeTimeout

// findCommitAfter reloads the table and returns the snapshot carrying
// commitID in the current branch's ancestry, or nil. When ctx is already done
// (a commit interrupted by shutdown) it looks with a short fresh deadline, so
// the caller still learns whether the offsets moved.
func (t *Table) findCommitAfter(ctx context.Context, commitID string) (*table.Snapshot, error) {
	ctx, cancel := outcomeContext(ctx)
	defer cancel()
	tbl, err := t.Load(ctx)
	if err != nil {
		return nil, err
	}
	return commitIn(tbl.Metadata(), commitID), nil
}

// writeFiles sorts rows by the schema's key (stable, so a session's rows stay
// in offset order) and writes them as Parquet data files.
func (t *Table) writeFiles(ctx context.Context, tbl *table.Table, rows arrow.RecordBatch) ([]iceberg.DataFile, error) {
	// Columns by name, with the (possibly evolved) table's field ids.
	rows, err := alignToTable(rows, tbl.Schema())
	if err != nil {
		return nil, err
	}
	defer rows.Release()
	sorted := rows
	if idx := rows.Schema().FieldIndices(t.schema.KeyField); len(idx) == 1 {
		s, err := sortByKey(ctx, rows, idx[0])
		if err != nil {
			return nil, fmt.Errorf("sorting by %s: %w", t.schema.KeyField, err)
		}
		sorted = s
		defer s.Release()
	}
	// WriteRecords releases what it consumes, but may fail before consuming.
	sorted.Retain()
	yielded := false
	defer func() {
		if !yielded {
			sorted.Release()
		}
	}()
	var one iter.Seq2[arrow.RecordBatch, error] = func(yield func(arrow.RecordBatch, error) bool) {
		yielded = true
		yield(sorted, nil)
	}
	want := sorted.NumRows()
	var out []iceberg.DataFile
	for df, err := range table.WriteRecords(ctx, tbl, sorted.Schema(), one,
		table.WithTargetFileSize(t.target), table.WithWriteUUID(uuid.New()), table.WithMaxWriteWorkers(1)) {
		if err != nil {
			return out, err
		}
		out = append(out, df)
	}
	if written := rowCount(out); written != want {
		// iceberg-go 0.7.0's partitioned writer can lose a file's write
		// error: a partition's writer that fails leaves the writers that
		// closeAll waits for before it gets there, and WriteRecords ends
		// without an error or that partition's file. Committed, the flush's
		// offsets would move past rows no file holds. The write probe finds
		// the cause when it is the storage refusing (fs.ErrPermission).
		err := fmt.Errorf("writing data files: %d of %d rows written, with no error from the writer", written, want)
		if perr := t.CheckWrite(ctx); perr != nil {
			err = fmt.Errorf("%w (%w)", err, perr)
		}
		return out, err
	}
	return out, nil
}

// rowCount is how many rows files hold.
func rowCount(files []iceberg.DataFile) int64 {
	var n int64
	for _, f := range files {
		n += f.Count()
	}
	return n
}

// deleteFiles removes data files of a flush that did not commit. Failures
// leave orphans for maintenance, never wrong data, so they are only logged.
func (t *Table) deleteFiles(tbl *table.Table, files []iceberg.DataFile) {
	fs, err := tbl.FS(context.Background())
	if err != nil {
		t.log.Warn("cannot delete files of aborted commit", "err", err)
		return
	}
	for _, f := range files {
		if err := fs.Remove(f.FilePath()); err != nil {
			t.log.Warn("cannot delete file of aborted commit", "file", f.FilePath(), "err", err)
		}
	}
}

// Name returns the table's dotted name.
func (t *Table) Name() string { return strings.Join(t.ident, ".") }
