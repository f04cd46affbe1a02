package lakehouse

import (
	"context"
	"errors"
	"fmt"
	"io"
	stdfs "io/fs"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
	"github.com/google/uuid"
)

// Defaults of MaintainOptions.
const (
	// DefaultCompactTargetBytes is the compaction target when neither the
	// options nor the table's write.target-file-size-bytes set one.
	DefaultCompactTargetBytes = 128 << 20
	// DefaultExpireOlderThan is how old a snapshot must be to be expired.
	DefaultExpireOlderThan = 7 * 24 * time.Hour
	// DefaultRetainLast is how many snapshots of the main branch are always kept.
	DefaultRetainLast = 1
	// DefaultOrphanOlderThan is how old an unreferenced file must be before
	// it is deleted.
	DefaultOrphanOlderThan = 3 * 24 * time.Hour
	// MinOrphanOlderThan is the shortest orphan age accepted: a younger
	// unreferenced file may belong to a commit still in flight (written,
	// not yet committed, or retried through a catalog outage).
	MinOrphanOlderThan = time.Hour
	// DefaultMinInputFiles is how many small files of one Kafka partition
	// and table partition it takes to be worth a rewrite.
	DefaultMinInputFiles = 5
)

// Summary keys of maintenance snapshots. They also carry every
// floe.offsets.<group> map of their base snapshot (see Maintain).
const (
	// MaintenanceKey names the maintenance operation that made the snapshot.
	MaintenanceKey = "floe.maintenance"
	// MaintenanceIDKey is the commit's unique id (the run's id, a slash and
	// the commit's number in the run), so that a maintenance commit whose
	// outcome was unknown, or reported as a conflict, can be recognised
	// after a reload.
	MaintenanceIDKey = "floe.maintenance-id"
)

// maintainAttempts bounds how often one maintenance step reloads and redoes
// its commit after conflicts with concurrent ingestion commits.
const maintainAttempts = 20

// ErrContended means a maintenance step lost the race against concurrent
// commits maintainAttempts times in a row and was skipped; the other steps
// still ran. Nothing is wrong with the table: run maintenance again later.
var ErrContended = fmt.Errorf("gave up after %d conflicting attempts with concurrent commits", maintainAttempts)

// ErrGroupsFailed means compaction could not rewrite some groups of small
// files (each logged, with its error): their outputs were deleted and their
// files left as they were, while the other groups were committed and the
// later steps ran. Maintain returns it wrapped with the first group's error.
var ErrGroupsFailed = errors.New("compaction groups failed")

// MaintainOptions tunes Maintain. The zero value means the defaults above.
type MaintainOptions struct {
	// TargetFileBytes is the compacted file size: files below 3/4 of it are
	// rewritten. 0: the table's write.target-file-size-bytes, else 128 MiB.
	TargetFileBytes int64
	// MinInputFiles is the fewest small files rewritten together. 0: 5.
	MinInputFiles int
	// ExpireOlderThan: snapshots older than this, and superseded by a newer
	// head for at least this long, are expired, except the newest
	// RetainLast and the chain from the head to the newest snapshot carrying
	// each group's offset map. It must exceed the longest time a reader or
	// committer works on one loaded snapshot. 0: 7 days.
	ExpireOlderThan time.Duration
	// RetainLast is the fewest snapshots kept. 0: 1.
	RetainLast int
	// OrphanOlderThan: unreferenced files under the table location older
	// than this are deleted. 0: 3 days; below one hour is an error.
	OrphanOlderThan time.Duration
	// DryRun plans every step and reports what it would do; it writes and
	// deletes nothing (the manifest rewrite, which must write to plan, is
	// skipped).
	DryRun bool
}

func (o *MaintainOptions) finish(tbl *table.Table) error {
	switch {
	case o.TargetFileBytes < 0:
		return fmt.Errorf("maintain target file size: must be positive, got %d", o.TargetFileBytes)
	case o.MinInputFiles < 0:
		return fmt.Errorf("maintain min input files: must be positive, got %d", o.MinInputFiles)
	case o.ExpireOlderThan < 0:
		return fmt.Errorf("maintain expire-older-than: must be positive, got %s", o.ExpireOlderThan)
	case o.RetainLast < 0:
		return fmt.Errorf("maintain retain-last: must be at least 1, got %d", o.RetainLast)
	case o.OrphanOlderThan < 0 || (o.OrphanOlderThan > 0 && o.OrphanOlderThan < MinOrphanOlderThan):
		return fmt.Errorf("maintain orphan-older-than: %s is below %s; younger unreferenced files may belong to a commit in flight",
			o.OrphanOlderThan, MinOrphanOlderThan)
	}
	if o.TargetFileBytes == 0 {
		o.TargetFileBytes = tbl.Properties().GetInt64(table.WriteTargetFileSizeBytesKey, DefaultCompactTargetBytes)
	}
	if o.MinInputFiles == 0 {
		o.MinInputFiles = DefaultMinInputFiles
	}
	if o.ExpireOlderThan == 0 {
		o.ExpireOlderThan = DefaultExpireOlderThan
	}
	if o.RetainLast == 0 {
		o.RetainLast = DefaultRetainLast
	}
	if o.OrphanOlderThan == 0 {
		o.OrphanOlderThan = DefaultOrphanOlderThan
	}
	return nil
}

// TableStats counts what the current snapshot holds.
type TableStats struct {
	DataFiles int   `json:"data_files"`
	DataBytes int64 `json:"data_bytes"`
	Rows      int64 `json:"rows"`
	Manifests int   `json:"manifests"`
	Snapshots int   `json:"snapshots"`
}

// MaintainReport says what one Maintain run did (or, in a dry run, would do).
type MaintainReport struct {
	Table  string `json:"table"`
	DryRun bool   `json:"dry_run"`
	// Before and After describe the current snapshot at the start and the
	// end; After includes what concurrent ingestion committed meanwhile.
	Before TableStats `json:"before"`
	After  TableStats `json:"after"`
	// Compaction: groups of small files rewritten, files and bytes removed
	// and written (in a dry run: planned input only).
	CompactedGroups int   `json:"compacted_groups"`
	FilesRewritten  int   `json:"files_rewritten"`
	FilesWritten    int   `json:"files_written"`
	BytesRewritten  int64 `json:"bytes_rewritten"`
	BytesWritten    int64 `json:"bytes_written"`
	// FailedGroups could not be rewritten and were left as they were
	// (Maintain then returns ErrGroupsFailed).
	FailedGroups int `json:"failed_groups,omitempty"`
	// ManifestsRewritten were merged into ManifestsWritten.
	ManifestsRewritten int `json:"manifests_rewritten"`
	ManifestsWritten   int `json:"manifests_written"`
	// SnapshotsExpired were removed from the table metadata.
	SnapshotsExpired int `json:"snapshots_expired"`
	// OrphansRemoved unreferenced files (OrphanBytes in all) were deleted.
	OrphansRemoved int   `json:"orphans_removed"`
	OrphanBytes    int64 `json:"orphan_bytes"`
	// Conflicts counts maintenance commits redone because a concurrent
	// commit (usually ingestion) landed first.
	Conflicts int `json:"conflicts"`
	// Contended lists the steps skipped after too many conflicts in a row
	// (Maintain then returns ErrContended).
	Contended []string `json:"contended,omitempty"`
	// Stopped names the step that failed, the later ones not run (Maintain
	// then returns its error, beside ErrGroupsFailed or ErrContended for
	// the steps before it).
	Stopped string `json:"stopped,omitempty"`
	// OffsetMaps is how many consumer groups' offset maps the table carries;
	// each is identical before and after (checked before every commit).
	OffsetMaps int           `json:"offset_maps"`
	Elapsed    time.Duration `json:"elapsed_ns"`
}

// WriteText prints the report for people.
func (r *MaintainReport) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	mode := ""
	if r.DryRun {
		mode = " (dry run: nothing written or deleted)"
	}
	ew.printf("maintained %s in %s%s\n", r.Table, r.Elapsed.Round(time.Millisecond), mode)
	ew.printf("  %-10s %10s %10s\n", "", "before", "after")
	ew.printf("  %-10s %10d %10d\n", "data files", r.Before.DataFiles, r.After.DataFiles)
	ew.printf("  %-10s %10d %10d\n", "bytes", r.Before.DataBytes, r.After.DataBytes)
	ew.printf("  %-10s %10d %10d\n", "rows", r.Before.Rows, r.After.Rows)
	ew.printf("  %-10s %10d %10d\n", "manifests", r.Before.Manifests, r.After.Manifests)
	ew.printf("  %-10s %10d %10d\n", "snapshots", r.Before.Snapshots, r.After.Snapshots)
	ew.printf("compaction: %s in %s rewritten (%d bytes) into %s (%d bytes)\n",
		plural(r.FilesRewritten, "file"), plural(r.CompactedGroups, "group"), r.BytesRewritten,
		plural(r.FilesWritten, "file"), r.BytesWritten)
	if r.FailedGroups > 0 {
		ew.printf("compaction: %s failed and left as they were (see the log)\n", plural(r.FailedGroups, "group"))
	}
	ew.printf("manifests: %d merged into %d\n", r.ManifestsRewritten, r.ManifestsWritten)
	ew.printf("snapshots expired: %d (offset maps of %s kept)\n", r.SnapshotsExpired, plural(r.OffsetMaps, "group"))
	ew.printf("orphan files removed: %d (%d bytes)\n", r.OrphansRemoved, r.OrphanBytes)
	ew.printf("commit conflicts redone: %d\n", r.Conflicts)
	if len(r.Contended) > 0 {
		ew.printf("skipped after %d conflicts in a row: %s\n", maintainAttempts, strings.Join(r.Contended, ", "))
	}
	if r.Stopped != "" {
		ew.printf("stopped: %s failed (the error follows); the steps after it did not run\n", r.Stopped)
	}
	return ew.err
}

// Maintain compacts small data files, rewrites manifests, expires old
// snapshots and deletes old orphan files, in that order. It is safe to run
// while floe commits to the table (and while other Maintain runs do):
//
//   - Every maintenance commit asserts the snapshot it was planned on; a
//     concurrent commit makes it reload and redo (bounded), so it never
//     replaces an ingestion commit. Compaction redoes cheaply: the files it
//     wrote stay valid as long as every file they replace is still live.
//   - Every maintenance snapshot carries the floe.offsets.<group> maps (and
//     floe.partitions.<topic> counts) of its base, so WatermarksOf finds
//     each group's map at the head; before each commit the staged metadata
//     is checked to yield the same maps, or nothing is committed.
//   - Expiry always keeps the chain from the head down to the newest
//     snapshot carrying each group's map (whatever RetainLast says), and
//     every snapshot that was the head less than ExpireOlderThan ago.
//   - Compaction only rewrites files of one Kafka partition together (so the
//     offset statistics the MERGE prunes on stay tight) and checks that the
//     row counts match before it commits. A group that fails is left as it
//     was: the other groups and the later steps still run, and Maintain
//     then returns ErrGroupsFailed.
//   - Orphan files must be older than OrphanOlderThan (at least an hour), so
//     files of a commit in flight are never taken for orphans; compaction
//     commits what it wrote every 10 minutes, and refuses outputs older than
//     30, so that its own are not either.
func (t *Table) Maintain(ctx context.Context, opts MaintainOptions) (*MaintainReport, error) {
	started := time.Now()
	tbl, err := t.Load(ctx)
	if err != nil {
		return nil, err
	}
	if err := opts.finish(tbl); err != nil {
		return nil, err
	}
	rep := &MaintainReport{Table: t.Name(), DryRun: opts.DryRun}
	if rep.Before, err = statsOf(ctx, tbl); err != nil {
		return nil, err
	}
	for k := range offsetMaps(tbl) {
		if strings.HasPrefix(k, OffsetsKeyPrefix) {
			rep.OffsetMaps++
		}
	}
	m := &maintenance{t: t, opts: opts, rep: rep, id: uuid.NewString()}

	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"compacting data files", m.compact},
		{"rewriting manifests", m.rewriteManifests},
		{"expiring snapshots", m.expireSnapshots},
		{"removing orphan files", m.removeOrphans},
	}
	var contended []string
	var stopped error
	for _, s := range steps {
		err := s.run(ctx)
		if errors.Is(err, ErrContended) {
			contended = append(contended, s.name)
			continue
		}
		if err != nil {
			// What the steps before it did is reported with its error,
			// failed groups included.
			rep.Stopped, stopped = s.name, fmt.Errorf("%s: %w", s.name, err)
			break
		}
	}
	rep.Contended = contended
	var errs []error
	if stopped != nil {
		errs = append(errs, stopped)
	}
	if rep.FailedGroups > 0 {
		errs = append(errs, fmt.Errorf("%w (%d, the first: %w)", ErrGroupsFailed, rep.FailedGroups, m.groupErr))
	}
	if len(contended) > 0 {
		errs = append(errs, fmt.Errorf("%w: %s skipped", ErrContended, strings.Join(contended, ", ")))
	}

	tbl, err = t.Load(ctx)
	if err == nil {
		rep.After, err = statsOf(ctx, tbl)
	}
	if err != nil {
		// No report without the table after it: its zeros would read
		// as a table emptied. The error still names what failed.
		return nil, fmt.Errorf("maintaining %s: %w", t.Name(), errors.Join(append(errs, err)...))
	}
	rep.Elapsed = time.Since(started)
	t.log.Info("table maintained", "table", t.Name(), "dry_run", opts.DryRun,
		"data_files_before", rep.Before.DataFiles, "data_files_after", rep.After.DataFiles,
		"manifests_before", rep.Before.Manifests, "manifests_after", rep.After.Manifests,
		"snapshots_before", rep.Before.Snapshots, "snapshots_after", rep.After.Snapshots,
		"files_rewritten", rep.FilesRewritten, "files_written", rep.FilesWritten,
		"snapshots_expired", rep.SnapshotsExpired, "orphans_removed", rep.OrphansRemoved,
		"failed_groups", rep.FailedGroups, "conflicts", rep.Conflicts, "contended", contended,
		"elapsed", rep.Elapsed.Round(time.Millisecond))
	if len(errs) > 0 {
		return rep, fmt.Errorf("maintaining %s: %w", t.Name(), errors.Join(errs...))
	}
	return rep, nil
}

// maintenance is the state of one Maintain run.
type maintenance struct {
	t       *Table
	opts    MaintainOptions
	rep     *MaintainReport
	id      string
	commits int // props made so far
	// groupErr is the first compaction group's error (see FailedGroups).
	groupErr error
}

// props are the summary properties of a maintenance snapshot based on tbl:
// the operation, a new commit id, and every group's offset map as its base
// has it.
func (m *maintenance) props(tbl *table.Table, op string) iceberg.Properties {
	m.commits++
	p := iceberg.Properties{MaintenanceKey: op, MaintenanceIDKey: m.id + "/" + strconv.Itoa(m.commits)}
	maps.Copy(p, offsetMaps(tbl))
	return p
}

// commitResult classifies one attempt to commit a maintenance transaction.
type commitResult int

const (
	// committed: the commit applied.
	committed commitResult = iota
	// conflicted: it certainly did not apply; reload and redo.
	conflicted
	// unknown: it may have applied, now or later; its files must be kept.
	unknown
)

// commit commits tx. A failed commit is looked for in a reload, applied
// telling whether the reloaded table holds it (hasMark for a commit that
// adds a snapshot): a catalog may report a conflict for a commit it
// applied (AWS's client resends a Glue UpdateTable whose answer was lost,
// and the resend conflicts with it), and the redo would then find its
// inputs rewritten and delete its outputs, the files the table now holds.
// A clean conflict is reported as conflicted, after a jittered pause, for
// the caller to reload and redo (with ctx's error if it ends during the
// pause); an outcome the search cannot resolve as unknown, with an error
// (op names the step).
func (m *maintenance) commit(ctx context.Context, tx *table.Transaction, attempt int, op string, applied func(*table.Table) bool) (commitResult, error) {
	after, err := tx.Commit(ctx)
	switch {
	case err == nil:
		return committed, nil
	case after != nil:
		// Committed; only the post-commit clean-up (deleting the files of
		// expired snapshots) failed. Leftovers are orphans for a later run.
		m.t.log.Warn("maintenance committed, clean-up failed", "table", m.t.Name(), "op", op, "err", err)
		return committed, nil
	}
	found, lerr := m.landed(ctx, applied)
	switch {
	case lerr != nil:
		return unknown, fmt.Errorf("commit state unknown (%v), reload failed: %w", err, lerr)
	case found:
		m.t.log.Warn("maintenance commit that failed had applied", "table", m.t.Name(), "op", op, "err", err)
		return committed, nil
	}
	if isConflict(err) {
		m.rep.Conflicts++
		m.t.log.Info("maintenance commit conflict, reloading", "table", m.t.Name(), "op", op, "attempt", attempt, "err", err)
		// Short: the redo is what takes time, and a long pause only lets
		// more ingestion commits land before it.
		backoff := min(5*time.Millisecond<<min(attempt, 4), 80*time.Millisecond)
		select {
		case <-ctx.Done():
			return conflicted, ctx.Err()
		case <-time.After(backoff/2 + rand.N(backoff)):
		}
		return conflicted, nil
	}
	return unknown, fmt.Errorf("commit state unknown: %w", err)
}

// landed reloads the table and reports whether applied finds the commit in
// it. Once ctx has ended (the commit interrupted) it looks with a short
// fresh deadline, so a catalog that stalls cannot hold a stopped run.
func (m *maintenance) landed(ctx context.Context, applied func(*table.Table) bool) (bool, error) {
	ctx, cancel := outcomeContext(ctx)
	defer cancel()
	tbl, err := m.t.Load(ctx)
	if err != nil {
		return false, err
	}
	return applied(tbl), nil
}

// hasMark returns whether a table's head ancestry holds the maintenance
// commit mark.
func hasMark(mark string) func(*table.Table) bool {
	return func(tbl *table.Table) bool {
		meta := tbl.Metadata()
		for snap := meta.CurrentSnapshot(); snap != nil; {
			if snap.Summary != nil && snap.Summary.Properties[MaintenanceIDKey] == mark {
				return true
			}
			if snap.ParentSnapshotID == nil {
				break
			}
			snap = meta.SnapshotByID(*snap.ParentSnapshotID)
		}
		return false
	}
}

// checkMaps fails when the staged metadata of tx would change any carried
// key (want: offsetMaps of its base), such as a group's offset map as
// WatermarksOf sees it or its first live offsets as FirstOffsetsOf does:
// the guard against a watermark regression, checked before anything is
// committed.
func checkMaps(tx *table.Transaction, want map[string]string) error {
	staged, err := tx.StagedTable()
	if err != nil {
		return fmt.Errorf("staging: %w", err)
	}
	got := offsetMaps(staged.Table)
	for k, v := range want {
		if got[k] != v {
			return fmt.Errorf("refusing to commit: %s would change from %s to %q", k, v, got[k])
		}
	}
	return nil
}

// rewriteManifests merges small manifests. iceberg-go's manifest rewrite
// takes no summary properties, so the same transaction stages an empty
// append carrying the offset maps on top of it. It commits through
// keepFilesCatalog: after ErrCommitFailed iceberg-go deletes the merged
// manifests, which the head names when the conflict was reported for a
// commit that applied (found by commit's search for its id).
func (m *maintenance) rewriteManifests(ctx context.Context) error {
	if m.opts.DryRun {
		return nil
	}
	for attempt := 1; attempt <= maintainAttempts; attempt++ {
		tbl, err := m.t.Load(ctx)
		if err != nil {
			return err
		}
		if tbl.CurrentSnapshot() == nil {
			return nil
		}
		want := offsetMaps(tbl)
		tx := m.t.keepingFiles(tbl).NewTransaction()
		if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
			return err
		}
		res, err := tx.RewriteManifests(ctx)
		if err != nil {
			return err
		}
		if res.IsNoOp() {
			return nil
		}
		props := m.props(tbl, "rewrite-manifests")
		if err := tx.AddFiles(ctx, nil, props, true); err != nil {
			return fmt.Errorf("staging the offset-map snapshot: %w", err)
		}
		if err := checkMaps(tx, want); err != nil {
			return err
		}
		r, err := m.commit(ctx, tx, attempt, "rewrite-manifests", hasMark(props[MaintenanceIDKey]))
		if err != nil {
			return err
		}
		if r == committed {
			m.rep.ManifestsRewritten += len(res.RewrittenManifests)
			m.rep.ManifestsWritten += len(res.AddedManifests)
			return nil
		}
	}
	return ErrContended
}

// expireSnapshots expires snapshots older than ExpireOlderThan beyond the
// newest RetainLast, but never one between the head and the newest snapshot
// carrying any group's offset map: WatermarksOf walks parent ids and would
// stop at the gap. Nor one that was the head less than ExpireOlderThan ago:
// a committer that loaded it may still be staging on it, and expiry deletes
// its manifests. iceberg-go keeps a contiguous prefix of the ancestry, so
// raising the retained count to those depths keeps the whole chain.
func (m *maintenance) expireSnapshots(ctx context.Context) error {
	for attempt := 1; attempt <= maintainAttempts; attempt++ {
		tbl, err := m.t.Load(ctx)
		if err != nil {
			return err
		}
		if tbl.CurrentSnapshot() == nil {
			return nil
		}
		want := offsetMaps(tbl)
		retain := max(m.opts.RetainLast, offsetMapDepth(tbl)+1, supersededDepth(tbl, m.opts.ExpireOlderThan)+1)
		tx := tbl.NewTransaction()
		if err := tx.AssertRefSnapshotID(table.MainBranch); err != nil {
			return err
		}
		if err := tx.ExpireSnapshots(table.WithOlderThan(m.opts.ExpireOlderThan), table.WithRetainLast(retain)); err != nil {
			return err
		}
		staged, err := tx.StagedTable()
		if err != nil {
			return err
		}
		var expired []int64
		for _, s := range tbl.Metadata().Snapshots() {
			if staged.Metadata().SnapshotByID(s.SnapshotID) == nil {
				expired = append(expired, s.SnapshotID)
			}
		}
		if len(expired) == 0 {
			return nil
		}
		if err := checkMaps(tx, want); err != nil {
			return err
		}
		if m.opts.DryRun {
			m.rep.SnapshotsExpired = len(expired)
			return nil
		}
		// An expiry adds no snapshot to look for: it applied when none of
		// its snapshots is left (or a concurrent run's expiry took them,
		// which this cannot tell from its own). post is the table found so.
		var post *table.Table
		gone := func(reloaded *table.Table) bool {
			for _, id := range expired {
				if reloaded.Metadata().SnapshotByID(id) != nil {
					return false
				}
			}
			post = reloaded
			return true
		}
		r, err := m.commit(ctx, tx, attempt, "expire-snapshots", gone)
		if err != nil {
			return err
		}
		if r == committed {
			m.rep.SnapshotsExpired += len(expired)
			if post != nil {
				m.cleanExpired(ctx, tbl, post, expired)
			}
			return nil
		}
	}
	return ErrContended
}

// cleanExpired deletes the files only the snapshots ids of base referenced,
// as iceberg-go does after an expiry only when its commit reports success:
// post is the table reloaded after the expiry applied, so whatever its
// snapshots reference (those committed since included) stays. Whatever
// cannot be deleted is an orphan for a later run.
func (m *maintenance) cleanExpired(ctx context.Context, base, post *table.Table, ids []int64) {
	if err := table.NewRemoveSnapshotsUpdate(ids, true).PostCommit(ctx, base, post); err != nil {
		m.t.log.Warn("cannot delete the files of expired snapshots; orphan removal takes them later",
			"table", m.t.Name(), "snapshots", len(ids), "err", err)
	}
}

// removeOrphans deletes files under the table location that no snapshot or
// metadata file references and that are older than OrphanOlderThan on the
// storage's clock. A file's age is its modification time, stamped by the
// storage (an HDFS NameNode, an NFS server), read against this host's
// clock: a storage clock behind makes a flush's files, just written, look
// old enough to delete, while its commit (aging them on the writer's
// monotonic clock, tooOld) still lands, naming deleted files. So the
// storage's clock is measured (storageClockOffset) and the cutoff shifted
// onto it; beyond maxClockSkew the clocks are taken to be unsynchronised
// (writers' clocks too, which stamp files on a local or NFS file system and
// cannot be measured from here), and nothing is removed.
func (m *maintenance) removeOrphans(ctx context.Context) error {
	tbl, err := m.t.Load(ctx)
	if err != nil {
		return err
	}
	olderThan := m.opts.OrphanOlderThan
	// A dry run writes nothing, so it does not measure: it plans on this
	// host's clock.
	if !m.opts.DryRun {
		offset, err := m.storageClockOffset(ctx, tbl)
		if err != nil {
			return fmt.Errorf("measuring the storage's clock: %w", err)
		}
		if offset.Abs() > maxClockSkew {
			return fmt.Errorf("refusing to remove orphan files: the clock of the storage under %s is %s %s this host's, more than the %s margin for files of commits in flight; synchronise the clocks (NTP)",
				tbl.Location(), offset.Abs().Round(time.Second), aheadOrBehind(offset), maxClockSkew)
		}
		if offset.Abs() >= time.Minute {
			m.t.log.Warn("the storage's clock differs from this host's; orphan files are aged on the storage's",
				"table", m.t.Name(), "offset", offset.Round(time.Second))
		}
		olderThan -= offset // at least MinOrphanOlderThan - maxClockSkew > 0
	}
	plan, err := planOrphans(ctx, tbl, olderThan)
	if err != nil {
		return err
	}
	if len(plan.Files()) == 0 {
		return nil
	}
	nested, err := nestedTables(ctx, tbl)
	if err != nil {
		return err
	}
	// kept: candidates under another table's root, never deleted.
	kept := map[string]bool{}
	for _, f := range plan.Files() {
		if underAny(f, nested) {
			kept[f] = true
		}
	}
	if len(kept) > 0 {
		m.t.log.Warn("files of other tables lie under this table's location; they are not orphans and are left",
			"table", m.t.Name(), "tables", nested, "files", len(kept))
	}
	if m.opts.DryRun {
		for _, f := range plan.OrphanFiles() {
			if !kept[f.Path] {
				m.rep.OrphansRemoved++
				m.rep.OrphanBytes += f.SizeBytes
			}
		}
		return nil
	}
	var opts []table.OrphanCleanupOption
	if len(kept) > 0 {
		fs, err := tbl.FS(ctx)
		if err != nil {
			return err
		}
		opts = append(opts, table.WithDeleteFunc(func(path string) error {
			if kept[path] {
				return nil
			}
			return fs.Remove(path)
		}))
	}
	res, err := tbl.ExecuteOrphanCleanup(ctx, plan, opts...)
	if err != nil {
		return err
	}
	deleted := make(map[string]bool, len(res.DeletedFiles))
	for _, f := range res.DeletedFiles {
		deleted[f] = !kept[f]
	}
	for _, f := range res.OrphanFiles {
		if deleted[f.Path] {
			m.rep.OrphansRemoved++
			m.rep.OrphanBytes += f.SizeBytes
		}
	}
	if len(deleted) < len(res.OrphanFiles)-len(kept) {
		m.t.log.Warn("some orphan files were not deleted", "table", m.t.Name(),
			"orphans", len(res.OrphanFiles), "deleted", len(deleted))
	}
	return nil
}

// storageClockOffset returns how far the clock that stamps files under
// tbl's location is ahead of this host's (negative: behind): it writes an
// empty probe file there, reads its modification time and deletes it. The
// time is read against this host's clock after the write, so the offset
// errs behind, toward older cutoffs (as does a storage that truncates
// times to seconds).
func (m *maintenance) storageClockOffset(ctx context.Context, tbl *table.Table) (time.Duration, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return 0, err
	}
	wfs, ok := fs.(iceio.WriteFileIO)
	if !ok {
		return 0, fmt.Errorf("the file IO of %s cannot write", tbl.Location())
	}
	probe := strings.TrimSuffix(tbl.Location(), "/") + "/floe-clock-probe-" + m.id
	if err := wfs.WriteFile(probe, nil); err != nil {
		return 0, err
	}
	written := time.Now()
	defer func() {
		// Left behind, it is an orphan for a later run.
		if err := fs.Remove(probe); err != nil {
			m.t.log.Warn("cannot delete the clock probe", "table", m.t.Name(), "file", probe, "err", err)
		}
	}()
	f, err := fs.Open(probe)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return info.ModTime().Sub(written), nil
}

func aheadOrBehind(offset time.Duration) string {
	if offset > 0 {
		return "ahead of"
	}
	return "behind"
}

// planOrphans is tbl.PlanOrphanFiles, listed again (up to three times in
// all) when a file vanished while it listed the table's location: a commit
// beside it deletes the metadata file it replaces, and iceberg-go's listing
// fails on the file it can no longer stat.
func planOrphans(ctx context.Context, tbl *table.Table, olderThan time.Duration) (table.OrphanCleanupPlan, error) {
	for attempt := 1; ; attempt++ {
		plan, err := tbl.PlanOrphanFiles(ctx, table.WithFilesOlderThan(olderThan))
		if err == nil || !errors.Is(err, stdfs.ErrNotExist) || attempt == 3 || ctx.Err() != nil {
			return plan, err
		}
	}
}

// nestedTables returns the roots of other tables under tbl's location: a
// directory below it whose metadata directory holds a *.metadata.json (a
// REST catalog puts table a.b.c at <warehouse>/a/b/c, under table a.b).
// Their files are unreferenced by tbl, and orphan clean-up would take them
// (iceberg-go's and Java's both do).
func nestedTables(ctx context.Context, tbl *table.Table) ([]string, error) {
	fs, err := tbl.FS(ctx)
	if err != nil {
		return nil, err
	}
	walker, ok := fs.(iceio.ListableIO)
	if !ok {
		return nil, nil // PlanOrphanFiles needs one too
	}
	var root string // as the walk spells it (a local one drops file://)
	var nested []string
	err = walker.WalkDir(tbl.Location(), func(p string, d stdfs.DirEntry, err error) error {
		if errors.Is(err, stdfs.ErrNotExist) && root != "" {
			return nil // removed meanwhile (a replaced metadata file)
		}
		if err != nil {
			return err
		}
		if root == "" { // the walk's first path is its root
			root = strings.TrimSuffix(p, "/")
			return nil
		}
		if d.IsDir() || !strings.HasSuffix(p, ".metadata.json") {
			return nil
		}
		// Cut as spelled: path.Dir would clean "file:///x" to "file:/x".
		dir := p[:strings.LastIndexByte(p, '/')]
		owner, ok := strings.CutSuffix(dir, "/metadata")
		if ok && owner != root && !slices.Contains(nested, owner) {
			nested = append(nested, owner)
		}
		return nil
	})
	return nested, err
}

// underAny reports whether p lies under one of roots.
func underAny(p string, roots []string) bool {
	for _, r := range roots {
		if strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// carriedPrefixes are the summary keys floe reads from the newest snapshot
// in the ancestry that has them: maintenance snapshots copy them from their
// base, and expiry keeps the snapshots that hold them. BusinessCarriedKey and
// AbsentCarriedKey are carried too, but as unions (recordedRuns), not as the
// newest value.
var carriedPrefixes = []string{OffsetsKeyPrefix, FirstKeyPrefix, PartitionsKeyPrefix, RoutingKeyPrefix, RoutingSinceKeyPrefix}

// offsetMaps returns the newest value of every carried key (every group's
// floe.offsets.<group> and floe.first.<group> maps, every topic's
// floe.partitions.<topic> count) in the current branch's ancestry, keyed
// by summary key, every topic's partition counts recorded so far once
// there are two (PartitionCountsKeyPrefix), and under BusinessCarriedKey
// and AbsentCarriedKey the
// unions of the business-key MERGE's skipped offsets and of the offsets
// absent from the log (each unless there are none, or a record is
// unreadable: expiry then keeps the recording snapshots, offsetMapDepth).
// Beyond maxCarriedRuns runs the skipped duplicates are carried truncated,
// what they no longer record under BusinessDroppedKey, and the absent
// offsets coarsened.
func offsetMaps(tbl *table.Table) map[string]string {
	out := newestCarried(tbl)
	union := map[runKeys]skipRuns{}
	for _, k := range recorded {
		runs, _, err := recordedRuns(tbl, k)
		if err != nil {
			// Without the offsets below which it no longer records skipped
			// duplicates, the union of them is not complete either.
			if k == droppedKeys {
				delete(union, businessKeys)
			}
			continue
		}
		union[k] = runs
	}
	if runs, ok := union[businessKeys]; ok && runs.count() > maxCarriedRuns {
		kept, dropped := runs.truncated(maxCarriedRuns)
		dropped.add(union[droppedKeys])
		union[businessKeys], union[droppedKeys] = kept, dropped
	}
	// Each truncation adds a run a partition at most; coarsened, the
	// dropped runs stay bounded, covering a little more.
	for _, k := range []runKeys{absentKeys, droppedKeys} {
		if runs, ok := union[k]; ok && runs.count() > maxCarriedRuns {
			union[k] = runs.coarsened(maxCarriedRuns)
		}
	}
	for k, runs := range union {
		if len(runs) > 0 {
			out[k.carried] = runs.encode()
		}
	}
	for _, topic := range countedTopics(out) {
		if counts, _ := partitionCountHistory(tbl, topic); len(counts) > 1 {
			fields := make([]string, len(counts))
			for i, n := range counts {
				fields[i] = strconv.Itoa(n)
			}
			out[PartitionCountsKeyPrefix+topic] = strings.Join(fields, ",")
		}
	}
	return out
}

// countedTopics returns the topics whose partition count carried (the
// PartitionsKeyPrefix keys of carried) records.
func countedTopics(carried map[string]string) []string {
	var topics []string
	for k := range carried {
		if topic, ok := strings.CutPrefix(k, PartitionsKeyPrefix); ok {
			topics = append(topics, topic)
		}
	}
	return topics
}

// newestCarried returns the newest value of every key with a
// carriedPrefixes prefix in tbl's current ancestry.
func newestCarried(tbl *table.Table) map[string]string {
	out := map[string]string{}
	meta := tbl.Metadata()
	for snap := meta.CurrentSnapshot(); snap != nil; {
		if snap.Summary != nil {
			for k, v := range snap.Summary.Properties {
				if _, seen := out[k]; !seen && slices.ContainsFunc(carriedPrefixes, func(p string) bool { return strings.HasPrefix(k, p) }) {
					out[k] = v
				}
			}
		}
		if snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return out
}

// offsetMapDepth returns how many parent steps below the head the deepest
// of the groups' newest offset maps is (0: the head carries them all), or
// the deepest snapshot whose recorded offsets (skipped business duplicates,
// offsets absent from the log) no newer union carries (recordedRuns),
// whichever is deeper.
func offsetMapDepth(tbl *table.Table) int {
	need := newestCarried(tbl)
	meta := tbl.Metadata()
	// The snapshots recording offsets down to the newest union of them
	// must stay too; all of them when one is unreadable.
	keep := 0
	for _, k := range recorded {
		_, depth, err := recordedRuns(tbl, k)
		if err != nil {
			return len(meta.Snapshots())
		}
		keep = max(keep, depth)
	}
	// So do those recording each partition count, down to the newest
	// carrying them all.
	for _, topic := range countedTopics(need) {
		_, depth := partitionCountHistory(tbl, topic)
		keep = max(keep, depth)
	}
	return max(keep, carriedDepth(meta, need))
}

// carriedDepth returns how many parent steps below the head the newest
// snapshot holding each key of need is, at the deepest.
func carriedDepth(meta table.Metadata, need map[string]string) int {
	depth := 0
	for snap := meta.CurrentSnapshot(); snap != nil && len(need) > 0; depth++ {
		if snap.Summary != nil {
			for k := range need {
				if _, ok := snap.Summary.Properties[k]; ok {
					delete(need, k)
				}
			}
		}
		if len(need) == 0 || snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return depth
}

// supersededDepth returns how many parent steps below the head the oldest
// snapshot of the ancestry is that was still the head less than age ago
// (a snapshot stops being the head when its child is committed).
func supersededDepth(tbl *table.Table, age time.Duration) int {
	cutoff := time.Now().Add(-age).UnixMilli()
	meta := tbl.Metadata()
	depth := 0
	for snap := meta.CurrentSnapshot(); snap != nil && snap.TimestampMs >= cutoff && snap.ParentSnapshotID != nil; depth++ {
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	return depth
}

// statsOf counts the current snapshot's data files, bytes, rows and
// manifests, and the table's snapshots.
func statsOf(ctx context.Context, tbl *table.Table) (TableStats, error) {
	s := TableStats{Snapshots: len(tbl.Metadata().Snapshots())}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return s, nil
	}
	fs, err := tbl.FS(ctx)
	if err != nil {
		return s, err
	}
	mans, err := snap.Manifests(fs)
	if err != nil {
		return s, fmt.Errorf("reading manifest list: %w", err)
	}
	s.Manifests = len(mans)
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return s, fmt.Errorf("planning files: %w", err)
	}
	for _, task := range wholeFiles(tasks) { // a split file counts once
		s.DataFiles++
		s.DataBytes += task.File.FileSizeBytes()
		s.Rows += task.File.Count()
	}
	return s, nil
}
