package lakehouse

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/iceberg-go"
	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"
)

// compact rewrites small data files into files of about TargetFileBytes.
//
// Groups are planned here rather than with iceberg-go's compaction planner:
// its groups span a whole table partition, and a file mixing several Kafka
// partitions has offset statistics so wide that every later MERGE would have
// to read it. A group holds files of one table partition and one Kafka
// partition, packed in offset order, so compacted files keep tight, mostly
// disjoint offset ranges. compactGroup reads and writes each group; the
// rewrite is committed here so that a conflict with an ingestion commit only
// re-stages the files already written.
func (m *maintenance) compact(ctx context.Context) (err error) {
	tbl, err := m.t.Load(ctx)
	if err != nil {
		return err
	}
	if tbl.CurrentSnapshot() == nil {
		return nil
	}
	groups, err := planCompaction(ctx, tbl, m.opts)
	if err != nil {
		return err
	}
	if len(groups) == 0 {
		return nil
	}
	if m.opts.DryRun {
		for _, g := range groups {
			m.rep.CompactedGroups++
			m.rep.FilesRewritten += len(g.Tasks)
			m.rep.BytesRewritten += g.TotalSizeBytes
		}
		return nil
	}

	// The groups written are committed in batches, the next batch started
	// once the oldest output of the current one is compactCommitAge old:
	// an output waiting uncommitted for MinOrphanOlderThan would be an
	// orphan to a concurrent run's clean-up.
	var (
		batch  []table.CompactionGroupResult
		oldest time.Time // when the batch's first group started writing
	)
	base := tbl.CurrentSnapshot().SnapshotID // the groups' files are live here
	for _, g := range groups {
		if len(batch) > 0 && time.Since(oldest) >= compactCommitAge {
			if err := m.commitCompaction(ctx, tbl, base, batch, oldest); err != nil {
				return err
			}
			batch = nil
			if tbl, err = m.t.Load(ctx); err != nil {
				return err
			}
		}
		if len(batch) == 0 {
			oldest = time.Now()
		}
		gr, err := compactGroup(ctx, tbl, g, m.opts.TargetFileBytes)
		if err == nil {
			err = sameRows(gr)
		}
		if err != nil {
			// Never committed: its outputs go. A group that cannot be
			// rewritten (a file the storage does not serve) must not
			// keep the other groups, expiry and orphan removal from
			// running on every run; Maintain reports it at the end.
			m.deleteOutputs(tbl, []table.CompactionGroupResult{gr})
			if ctx.Err() != nil {
				m.deleteOutputs(tbl, batch)
				return err
			}
			m.t.log.Warn("compaction group failed; its files are left as they are",
				"table", m.t.Name(), "group", g.PartitionKey, "files", len(g.Tasks), "err", err)
			m.rep.FailedGroups++
			if m.groupErr == nil {
				m.groupErr = err
			}
			continue
		}
		batch = append(batch, gr)
	}
	if len(batch) == 0 {
		return nil
	}
	return m.commitCompaction(ctx, tbl, base, batch, oldest)
}

// compactCommitAge is how long compact writes groups before it commits
// them, well under MinOrphanOlderThan (and uncommittedMaxAge). A variable
// for tests.
var compactCommitAge = MinOrphanOlderThan / 6

// commitCompaction commits, on tbl, the rewrite of compacted groups whose
// input files were live in snapshot base and whose outputs started to be
// written at written, dropping the groups a concurrent run rewrote
// meanwhile, and reloading and redoing it after conflicts. Unless its
// outcome is unknown, the outputs of groups not committed are deleted. It
// refuses to commit outputs as old as uncommittedMaxAge (a catalog that
// hung, a group that took that long): see tooOld.
func (m *maintenance) commitCompaction(ctx context.Context, tbl *table.Table, base int64, results []table.CompactionGroupResult, written time.Time) (err error) {
	keep := false // the files written must not be deleted
	defer func() {
		if err != nil && !keep {
			m.deleteOutputs(tbl, results)
		}
	}()
	for attempt := 1; attempt <= maintainAttempts; attempt++ {
		if attempt > 1 {
			// Not into tbl at once: the deferred cleanup deletes the
			// files written through it, which a failed load would clear.
			fresh, lerr := m.t.Load(ctx)
			if lerr != nil {
				err = lerr
				return err
			}
			tbl = fresh
		}
		// A concurrent maintenance run may have rewritten some of the
		// same files: those groups are dropped (their outputs deleted).
		// Files that ingestion appended meanwhile change nothing.
		live, lerr := liveDataFiles(ctx, tbl, base)
		if lerr != nil {
			err = lerr
			return err
		}
		base = tbl.CurrentSnapshot().SnapshotID
		var stale []table.CompactionGroupResult
		results = slices.DeleteFunc(results, func(gr table.CompactionGroupResult) bool {
			for _, f := range gr.OldDataFiles {
				if !live(f.FilePath()) {
					stale = append(stale, gr)
					return true
				}
			}
			return false
		})
		m.deleteOutputs(tbl, stale)
		if len(results) == 0 {
			return nil
		}

		want := offsetMaps(tbl)
		tx := tbl.NewTransaction()
		if err = tx.AssertRefSnapshotID(table.MainBranch); err != nil {
			return err
		}
		props := m.props(tbl, "compact")
		rw := tx.NewRewrite(props)
		for _, gr := range results {
			rw.ApplyResult(gr)
		}
		if err = rw.Commit(ctx); err != nil {
			err = fmt.Errorf("staging rewrite: %w", err)
			return err
		}
		if err = checkMaps(tx, want); err != nil {
			return err
		}
		// Last, after the reload and the listing of live files, which
		// may take long after other commits.
		if err = tooOld("compaction outputs", written); err != nil {
			return err
		}
		var r commitResult
		r, err = m.commit(ctx, tx, attempt, "compact", hasMark(props[MaintenanceIDKey]))
		switch {
		case r == unknown:
			keep = true
			return err
		case err != nil:
			return err
		case r == committed:
			for _, gr := range results {
				m.rep.CompactedGroups++
				m.rep.FilesRewritten += len(gr.OldDataFiles)
				m.rep.FilesWritten += len(gr.NewDataFiles)
				m.rep.BytesRewritten += gr.BytesBefore
				m.rep.BytesWritten += gr.BytesAfter
			}
			return nil
		}
	}
	err = ErrContended
	return err
}

// compactGroup reads a group's files and writes their rows into new files of
// about targetBytes: the work of iceberg-go's ExecuteCompactionGroup, which
// cannot rewrite a table with a map column (payments' metadata). iceberg-go
// v0.7.0 reads a map as map<k, v> with nullable values whatever the Iceberg
// schema says (its projection builds the type with arrow.MapOfWithMetadata),
// while its writer wants the schema's required values, so the Parquet writer
// rejects every batch ("record schema does not match writer's", reported
// first as "writer is closed"). Here each batch read is relabelled with the
// exact Arrow types the writer expects (relabel) before it is written.
// floe's tables are format v2; on a v3 table the rewritten rows get new row
// ids, as iceberg-go does for a group whose files mix lineage.
func compactGroup(ctx context.Context, tbl *table.Table, g table.CompactionTaskGroup, targetBytes int64) (table.CompactionGroupResult, error) {
	res := table.CompactionGroupResult{PartitionKey: g.PartitionKey, BytesBefore: g.TotalSizeBytes}
	want, err := writeArrowSchema(tbl)
	if err != nil {
		return res, fmt.Errorf("compaction group %s: %w", g.PartitionKey, err)
	}
	// A background task: one file read at a time, in order.
	_, batches, err := tbl.Scan(table.WithMaxConcurrency(1)).ReadTasks(ctx, g.Tasks)
	if err != nil {
		return res, fmt.Errorf("reading compaction group %s: %w", g.PartitionKey, err)
	}
	records := func(yield func(arrow.RecordBatch, error) bool) {
		for b, err := range batches {
			if err != nil {
				yield(nil, err)
				return
			}
			out := relabel(b, want)
			b.Release()
			if !yield(out, nil) { // WriteRecords releases out
				return
			}
		}
	}
	// A group holds one partition of its spec: under the current spec its
	// rows arrive clustered. Files of an older spec (a partition field
	// added since) hold rows of several current partitions each, which
	// the clustered writer refuses; the fanout writer takes them.
	opts := []table.WriteRecordOption{table.WithTargetFileSize(targetBytes)}
	if int(g.Tasks[0].File.SpecID()) == tbl.Metadata().DefaultPartitionSpec() {
		opts = append(opts, table.WithClusteredWrite())
	} else {
		opts = append(opts, table.WithMaxWriteWorkers(1))
	}
	for df, err := range table.WriteRecords(ctx, tbl, want, records, opts...) {
		if err != nil {
			return res, fmt.Errorf("writing compaction group %s: %w", g.PartitionKey, err)
		}
		res.NewDataFiles = append(res.NewDataFiles, df)
		res.BytesAfter += df.FileSizeBytes()
	}
	for _, t := range g.Tasks {
		res.OldDataFiles = append(res.OldDataFiles, t.File)
	}
	res.SafePosDeletes = table.CollectSafePositionDeletes(g.Tasks)
	res.SafeDeletionVectors = table.CollectSafeDeletionVectors(g.Tasks)
	return res, nil
}

// writeArrowSchema is the Arrow schema iceberg-go's writer expects for tbl's
// current schema: a batch with exactly this schema is written unconverted.
func writeArrowSchema(tbl *table.Table) (*arrow.Schema, error) {
	sch, err := iceberg.SanitizeColumnNames(tbl.Schema())
	if err != nil {
		return nil, err
	}
	return table.SchemaToArrowSchemaWithOptions(sch, table.ArrowSchemaOptions{
		IncludeFieldIDs: true, TableProperties: tbl.Metadata().Properties()})
}

// relabel returns b with the schema want when b's columns have the same
// names and physical layout and differ at most in nested fields'
// nullability and metadata; the buffers are shared, not copied. Otherwise it
// returns b itself (retained): the writer then converts it, as it does any
// batch whose types differ in more than labels.
func relabel(b arrow.RecordBatch, want *arrow.Schema) arrow.RecordBatch {
	if int(b.NumCols()) != want.NumFields() {
		b.Retain()
		return b
	}
	data := make([]arrow.ArrayData, 0, b.NumCols())
	defer func() {
		for _, d := range data {
			d.Release()
		}
	}()
	for i, col := range b.Columns() {
		d, ok := relabelData(col.Data(), want.Field(i).Type)
		if !ok || b.Schema().Field(i).Name != want.Field(i).Name {
			if ok {
				d.Release()
			}
			b.Retain()
			return b
		}
		data = append(data, d)
	}
	cols := make([]arrow.Array, len(data))
	for i, d := range data {
		cols[i] = array.MakeFromData(d)
		defer cols[i].Release()
	}
	return array.NewRecordBatch(want, cols, b.NumRows())
}

// relabelData returns d typed as want when the two types have the same
// layout all the way down (same type ids, equal leaf types), and false
// otherwise.
func relabelData(d arrow.ArrayData, want arrow.DataType) (arrow.ArrayData, bool) {
	have := d.DataType()
	if have.ID() != want.ID() {
		return nil, false
	}
	var fields []arrow.Field
	switch w := want.(type) {
	case *arrow.StructType, *arrow.ListType, *arrow.MapType:
		fields = w.(arrow.NestedType).Fields()
	default:
		if !arrow.TypeEqual(have, want) {
			return nil, false
		}
		d.Retain()
		return d, true
	}
	if len(d.Children()) != len(fields) {
		return nil, false
	}
	children := make([]arrow.ArrayData, 0, len(fields))
	defer func() {
		for _, c := range children {
			c.Release()
		}
	}()
	for i, c := range d.Children() {
		rc, ok := relabelData(c, fields[i].Type)
		if !ok {
			return nil, false
		}
		children = append(children, rc)
	}
	return array.NewData(want, d.Len(), d.Buffers(), children, d.NullN(), d.Offset()), true
}

// sameRows checks that a group's new files hold as many rows as the files
// they replace: compaction must not change the table's content.
func sameRows(gr table.CompactionGroupResult) error {
	if before, after := rowCount(gr.OldDataFiles), rowCount(gr.NewDataFiles); before != after {
		return fmt.Errorf("compaction group %s: %d rows in %d files became %d rows in %d files",
			gr.PartitionKey, before, len(gr.OldDataFiles), after, len(gr.NewDataFiles))
	}
	return nil
}

// deleteOutputs deletes the files written for groups that were not
// committed. Failures leave orphans for a later run, so they are logged.
func (m *maintenance) deleteOutputs(tbl *table.Table, results []table.CompactionGroupResult) {
	var files []iceberg.DataFile
	for _, gr := range results {
		files = append(files, gr.NewDataFiles...)
	}
	if len(files) > 0 {
		m.t.deleteFiles(tbl, files)
	}
}

// liveDataFiles returns a predicate telling whether a data file that was
// live in snapshot base is live in tbl's current snapshot. When every
// snapshot since base only appended (ingestion commits), all are: that check
// is free, which keeps a redo after a conflict short. Otherwise it reads the
// current snapshot's manifests; a file with delete files counts as not live
// (see hasDeletes).
func liveDataFiles(ctx context.Context, tbl *table.Table, base int64) (func(string) bool, error) {
	meta := tbl.Metadata()
	for snap := meta.CurrentSnapshot(); snap != nil; {
		if snap.SnapshotID == base {
			return func(string) bool { return true }, nil
		}
		if snap.Summary == nil || snap.Summary.Operation != table.OpAppend || snap.ParentSnapshotID == nil {
			break
		}
		snap = meta.SnapshotByID(*snap.ParentSnapshotID)
	}
	tasks, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("planning files: %w", err)
	}
	live := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		live[t.File.FilePath()] = !hasDeletes(t)
	}
	return func(path string) bool { return live[path] }, nil
}

// hasDeletes reports whether rows of t's file were deleted by delete files
// (another engine's merge-on-read DELETE or UPDATE). Compaction leaves such
// files alone: its row-count check would refuse the rewrite, and a file
// that got deletes after it was planned must not be rewritten with the
// deleted rows.
func hasDeletes(t table.FileScanTask) bool {
	return len(t.DeleteFiles)+len(t.EqualityDeleteFiles)+len(t.DeletionVectorFiles) > 0
}

// planCompaction groups the small data files (below 3/4 of the target, the
// threshold iceberg-go's planner uses too) by table partition and Kafka
// topic/partition (read from the files' column bounds), sorts each bucket by
// lowest offset and packs consecutive files up to the target size. Groups
// of fewer than MinInputFiles files are left alone.
//
// A file is grouped only under the one topic it holds (fileTopic): a topic's
// bounds may be truncated (iceberg-go's default for strings keeps 16
// characters), and files of prod.clickstream.web and prod.clickstream.app
// then have the same bounds; grouped by them, one compacted file would mix
// both topics. A file whose topic cannot be told is left out of compaction.
func planCompaction(ctx context.Context, tbl *table.Table, opts MaintainOptions) ([]table.CompactionTaskGroup, error) {
	sch := tbl.Schema()
	var ids [3]int
	for i, name := range []string{TopicColumn, PartitionColumn, OffsetColumn} {
		f, ok := sch.FindFieldByName(name)
		if !ok {
			return nil, fmt.Errorf("table %s has no column %s: not a floe table", tbl.Identifier(), name)
		}
		ids[i] = f.ID
	}
	planned, err := tbl.Scan().PlanFiles(ctx)
	if err != nil {
		return nil, fmt.Errorf("planning files: %w", err)
	}
	small := opts.TargetFileBytes * 3 / 4
	buckets := map[string][]table.FileScanTask{}
	footers := footerReader{ctx: ctx, tbl: tbl}
	// Whole files: a file split into several tasks would be an input
	// several times over, and its rows counted once a split.
	for _, t := range wholeFiles(planned) {
		f := t.File
		if f.ContentType() != iceberg.EntryContentData || f.FileSizeBytes() >= small || hasDeletes(t) {
			continue
		}
		topic, ok := fileTopic(f, ids[0], &footers)
		if !ok {
			continue
		}
		lo, hi := f.LowerBoundValues(), f.UpperBoundValues()
		key := fmt.Sprintf("spec %d %v kafka %s/%s", f.SpecID(), f.Partition(), topic,
			boundRange(lo[ids[1]], hi[ids[1]], iceberg.PrimitiveTypes.Int32))
		buckets[key] = append(buckets[key], t)
	}
	keys := make([]string, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	var groups []table.CompactionTaskGroup
	for _, key := range keys {
		b := buckets[key]
		sort.SliceStable(b, func(i, j int) bool {
			return lowOffset(b[i].File, ids[2]) < lowOffset(b[j].File, ids[2])
		})
		var cur table.CompactionTaskGroup
		flush := func() {
			if len(cur.Tasks) >= opts.MinInputFiles {
				groups = append(groups, cur)
			}
			cur = table.CompactionTaskGroup{PartitionKey: key}
		}
		cur.PartitionKey = key
		for _, t := range b {
			size := t.File.FileSizeBytes()
			if len(cur.Tasks) > 0 && cur.TotalSizeBytes+size > opts.TargetFileBytes {
				flush()
			}
			cur.Tasks = append(cur.Tasks, t)
			cur.TotalSizeBytes += size
		}
		flush()
	}
	return groups, nil
}

// fileTopic returns the one topic whose rows data file f holds (id is the
// topic column's field id), and false when it cannot tell. Equal lower and
// upper bounds are that topic: a truncated string bound never has them
// equal (its upper bound is the prefix with its last character
// incremented). Otherwise, for a file written before its table recorded
// whole topic bounds (topicMetricsKey) or by another engine, the topic is
// read from the minimum and maximum in the file's Parquet footer, which
// are not truncated: equal in every row group, they are its topic.
func fileTopic(f iceberg.DataFile, id int, footers *footerReader) (string, bool) {
	lo, hi := f.LowerBoundValues()[id], f.UpperBoundValues()[id]
	if lo != nil && bytes.Equal(lo, hi) {
		return string(lo), true
	}
	return footers.topic(f.FilePath(), id)
}

// footerReader reads the topic of a data file from its Parquet footer.
type footerReader struct {
	ctx  context.Context
	tbl  *table.Table
	fsys iceio.IO
	// failed: the table's file IO could not be had; no footer is read.
	failed bool
}

// topic returns the value of column id in the data file at path when all of
// the file's row groups record it as their minimum and maximum. A file that
// cannot be read, or whose footer lacks the statistics, is false: left out of
// compaction, it stays as it is.
func (r *footerReader) topic(path string, id int) (string, bool) {
	if r.fsys == nil && !r.failed {
		fsys, err := r.tbl.FS(r.ctx)
		if err != nil {
			r.failed = true
			return "", false
		}
		r.fsys = fsys
	}
	if r.fsys == nil {
		return "", false
	}
	f, err := r.fsys.Open(path)
	if err != nil {
		return "", false
	}
	defer f.Close()
	pf, err := file.NewParquetReader(f) // reads the footer only; f.Close frees it
	if err != nil {
		return "", false
	}
	md := pf.MetaData()
	col := -1
	for i := range md.Schema.NumColumns() {
		if md.Schema.Column(i).SchemaNode().FieldID() == int32(id) {
			col = i
			break
		}
	}
	if col < 0 || md.NumRowGroups() == 0 {
		return "", false
	}
	var topic []byte
	for g := range md.NumRowGroups() {
		cc, err := md.RowGroup(g).ColumnChunk(col)
		if err != nil {
			return "", false
		}
		st, err := cc.Statistics()
		if err != nil || st == nil || !st.HasMinMax() {
			return "", false
		}
		bs, ok := st.(*metadata.ByteArrayStatistics)
		if !ok || !bytes.Equal(bs.Min(), bs.Max()) || (g > 0 && !bytes.Equal(bs.Min(), topic)) {
			return "", false
		}
		topic = bs.Min()
	}
	return string(topic), true
}

// boundRange renders a column's lower and upper bound, or "?" when the file
// has no statistics for it (such files are grouped together).
func boundRange(lo, hi []byte, typ iceberg.Type) string {
	render := func(b []byte) string {
		if b == nil {
			return "?"
		}
		lit, err := iceberg.LiteralFromBytes(typ, b)
		if err != nil {
			return fmt.Sprintf("%x", b)
		}
		return lit.String()
	}
	if string(lo) == string(hi) {
		return render(lo)
	}
	return render(lo) + ".." + render(hi)
}

// lowOffset returns a file's lowest Kafka offset, or 0 without statistics.
func lowOffset(f iceberg.DataFile, id int) int64 {
	lit, err := iceberg.LiteralFromBytes(iceberg.PrimitiveTypes.Int64, f.LowerBoundValues()[id])
	if err != nil {
		return 0
	}
	if v, ok := lit.(iceberg.TypedLiteral[int64]); ok {
		return v.Value()
	}
	return 0
}
