package lakehouse

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/schemas"
)

// seqColumn is the event's own per-session sequence number. The order check
// is skipped for a table that has no such long column.
const seqColumn = "seq"

// maxExamples bounds each list of examples in a Report.
const maxExamples = 10

// DeadLetters is the set of source offsets of one topic that went to the
// dead-letter topic, with the reason of each (its floe.reason header):
// partition → offset → reason. Verify counts them as covered, the same as
// rows, because the commit protocol advances a watermark past a record once
// it is either a row or acknowledged by the dead-letter topic.
type DeadLetters map[int32]map[int64]string

// Add records that offset off of partition p was dead-lettered for reason.
// An offset dead-lettered more than once (a redone flush) keeps a reason
// that does not depend on the moment (see momentReason) over one that
// does: only an offset whose every dead letter could have been a row at
// another moment may be a row without contradiction.
func (d DeadLetters) Add(p int32, off int64, reason string) {
	if d[p] == nil {
		d[p] = make(map[int64]string)
	}
	if old, ok := d[p][off]; ok && !momentReason(old) {
		return
	}
	d[p][off] = reason
}

// DeadLetterReader reads a topic's dead letters for Verify and VerifyRoutes,
// or returns nil when the dead-letter topic was not read (dead-lettered
// records are then gaps). They call it after loading the tables: a flush
// acknowledges its dead letters before the commit that covers them
// (ARCHITECTURE invariant 5), so a read that starts after the load sees every
// dead letter below the loaded watermarks, however the job commits
// meanwhile. Read before the load, it missed those of a flush committed in
// between, which were reported as gaps.
type DeadLetterReader func(ctx context.Context) (DeadLetters, error)

// Read returns d: the DeadLetterReader of dead letters read already, for a
// table nothing commits to meanwhile.
func (d DeadLetters) Read(context.Context) (DeadLetters, error) { return d, nil }

// read calls r, or returns nil (not read) when r is nil.
func (r DeadLetterReader) read(ctx context.Context) (DeadLetters, error) {
	if r == nil {
		return nil, nil
	}
	return r(ctx)
}

// ReasonEnrichFailed is the dead-letter reason for records the enrichment
// stage could not enrich under the dlq breaker policy. It is declared here,
// with the schemas' reasons it is classified with, for Verify.
const ReasonEnrichFailed = "enrich_failed"

// momentReason reports whether a dead letter's reason depends on the moment
// the record was read rather than on the record: the enrichment service
// failing (policy dlq), the registry not knowing the schema id yet, or the
// writer's schema not fitting the table before it evolved
// (on_incompatible dlq). A flush writes its dead letters before its table
// commit (ARCHITECTURE invariant 5); when that commit never lands (a crash,
// a fence, a catalog failing past commit.grace), the next owner redoes the
// offsets, and by then the same record may become a row. A missing or
// unknown reason counts as one that does not depend on the moment.
func momentReason(reason string) bool {
	switch reason {
	case ReasonEnrichFailed, schemas.ReasonUnknownSchema, schemas.ReasonIncompatibleSchema:
		return true
	}
	return false
}

// Gap is a run of offsets [From, To) below a partition's watermark that are
// neither rows nor dead letters: records the table claims to have covered but
// holds nowhere.
type Gap struct {
	From int64 `json:"from"`
	To   int64 `json:"to"`
}

func (g Gap) String() string { return fmt.Sprintf("[%d,%d)", g.From, g.To) }

// PartitionReport is the reconciliation of one Kafka partition.
type PartitionReport struct {
	Partition int32 `json:"partition"`
	// Watermark is W(p) from the group's offset map, or -1 when the map has
	// none for the partition.
	Watermark int64 `json:"watermark"`
	// Rows counts rows, duplicates included.
	Rows int64 `json:"rows"`
	// DeadLetters counts distinct dead-lettered offsets, or is -1 when the
	// dead-letter topic was not read.
	DeadLetters int64 `json:"dead_letters"`
	// First is the first offset the group's live commits covered
	// (FirstKeyPrefix), or -1 when the table does not record it (its
	// watermark was set before floe recorded it). Gaps are counted from it,
	// not from 0: the job never read below it (the log trimmed by retention
	// before it first read it, start_offset: latest).
	First int64 `json:"first"`
	// BelowFirst counts the distinct offsets below First seen as rows or
	// dead letters: a replay's backfill, which no watermark claimed.
	// Information, not checked for gaps.
	BelowFirst int64 `json:"below_first"`
	// MinOffset and MaxOffset bound the offsets seen as rows or dead letters
	// (-1 when none). Without First, gaps are counted from MinOffset: offsets
	// below the first one seen are not evidence of loss, and a loss at the
	// very start of a partition's coverage (or of all of it) is not
	// detected.
	MinOffset int64 `json:"min_offset"`
	MaxOffset int64 `json:"max_offset"`
	// Coverage: the offsets in [First, Watermark) (without First, in
	// [MinOffset, Watermark)) that no row or dead letter covers. When the
	// dead-letter topic was not read its gaps include the dead-lettered
	// records.
	Coverage
	// AboveWatermark counts rows at or above the watermark (every row, when
	// there is no watermark): an invariant violation, since a row becomes
	// visible only in the commit that moves the watermark past it.
	AboveWatermark int64 `json:"above_watermark"`
	// BothRowAndDeadLetter counts offsets that are a row and were also
	// dead-lettered for a reason that does not depend on the moment
	// (malformed_json, too_large, missing_field, ...): the same record
	// cannot have been both.
	BothRowAndDeadLetter int64 `json:"both_row_and_dead_letter"`
	// DeadLettersSuperseded counts offsets that are a row and whose dead
	// letters all have a reason that depends on the moment (enrich_failed,
	// unknown_schema, incompatible_schema): a flush dead-lettered them and
	// did not commit, and its redo stored them as rows. Information, not a
	// problem: nothing was lost or duplicated.
	DeadLettersSuperseded int64 `json:"dead_letters_superseded_by_row"`
	// BothRowAndBusinessSkipped counts offsets that are a row although a
	// snapshot recorded them as skipped business duplicates: the record is
	// both kept and dropped, a contradiction.
	BothRowAndBusinessSkipped int64 `json:"both_row_and_business_skipped"`
}

// Report is the outcome of Verify: the table's rows of one topic reconciled
// with the group's watermarks and the dead-letter topic. It is meant to be
// printed (WriteText) or encoded as JSON for tooling.
type Report struct {
	Table string `json:"table"`
	Group string `json:"group"`
	Topic string `json:"topic"`
	// SnapshotID is the snapshot that was read, or -1 for a table that has
	// none yet.
	SnapshotID int64 `json:"snapshot_id"`
	// Rows counts the topic's rows; DistinctIDs the distinct (topic,
	// partition, offset) among them; DuplicateIDs is Rows - DistinctIDs.
	Rows         int64 `json:"rows"`
	DistinctIDs  int64 `json:"distinct_ids"`
	DuplicateIDs int64 `json:"duplicate_ids"`
	// DeadLetters counts distinct dead-lettered source offsets, or is -1 when
	// the dead-letter topic was not read.
	DeadLetters int64 `json:"dead_letters"`
	// MissingDeadLetterTopics are the dead-letter topics read that do not
	// exist, set by the caller that read them: no dead letter was written
	// to them, so offsets dead-lettered into another topic (a changed or
	// misspelt dlq_topic) count as gaps. Information, not a problem.
	MissingDeadLetterTopics []string `json:"missing_dead_letter_topics,omitempty"`
	// TrimmedDeadLetters names, as "topic/partition below offset", the
	// partitions of the dead-letter topics read whose log no longer
	// starts at 0, set by the caller that read them: retention (or a
	// deletion of records) removed dead letters, so verify cannot tell
	// the gaps from them, and counts gaps as not checked. Information,
	// not a problem.
	TrimmedDeadLetters []string `json:"trimmed_dead_letters,omitempty"`
	// Partitions holds every partition that has rows, dead letters or a
	// watermark, in partition order.
	Partitions []PartitionReport `json:"partitions"`
	// Sessions counts distinct values of the schema's key column.
	Sessions int64 `json:"sessions"`
	// SplitSessions counts sessions seen in more than one Kafka partition:
	// their records cannot be ordered relative to one another.
	SplitSessions        int64    `json:"split_sessions"`
	SplitSessionExamples []string `json:"split_session_examples"`
	// OrderViolations counts, within each (partition, session) in offset
	// order, adjacent rows whose seq does not strictly increase. Rows with a
	// null seq and repeated copies of a duplicated offset are skipped.
	OrderViolations int64 `json:"order_violations"`
	// DuplicateExamples are "topic/partition@offset×copies".
	DuplicateExamples []string `json:"duplicate_examples"`
	// PartitionCounts are the topic's partition counts recorded by the
	// table's commits, oldest first, each change once. More than one means
	// partitions were added while ingesting: keys moved to other partitions,
	// so sessions may be split (see SplitSessions).
	PartitionCounts []int `json:"partition_counts"`
	// DedupeKey is the business-key column checked ("" when no dedupe key
	// is set). DistinctKeys counts its distinct non-empty values among the
	// rows; DuplicateKeys the rows whose key another row already has and
	// that lie within the dedupe window (in event time) of another copy:
	// copies the business-key MERGE should have skipped. Rows with a null
	// or empty key identify nothing and are not counted.
	DedupeKey     string `json:"dedupe_key,omitempty"`
	DistinctKeys  int64  `json:"distinct_keys"`
	DuplicateKeys int64  `json:"duplicate_keys"`
	// KeysBeyondWindow counts keys repeated only farther apart in event
	// time than the dedupe window, which the bounded MERGE deliberately
	// does not search: information, not a problem.
	KeysBeyondWindow int64 `json:"keys_repeated_beyond_window"`
	// DuplicateKeyExamples are "key (topic/partition@offset, ...)" for a
	// few duplicated keys, with the coordinates of all their copies.
	DuplicateKeyExamples []string `json:"duplicate_key_examples"`
	// BusinessSkipped counts the offsets the business-key MERGE skipped as
	// duplicates of a row the table holds, as recorded by the snapshots
	// still in the table's history (BusinessOffsetsKey): they are covered,
	// not gaps.
	BusinessSkipped int64 `json:"business_duplicates_skipped"`
	// AbsentFromLog sums the partitions' AbsentFromLog.
	AbsentFromLog int64 `json:"absent_from_log"`
	// Unchecked sums the partitions' Unchecked.
	Unchecked int64 `json:"unchecked"`

	// skipped holds those offsets per partition, sorted.
	skipped map[int32][]int64
	// absent holds the runs of offsets absent from the log per partition.
	absent map[int32][][2]int64
	// dropped holds per partition the runs of offsets where skipped
	// business duplicates are no longer all recorded (droppedRuns).
	dropped map[int32][][2]int64
}

// OK reports whether the table honours the commit protocol's invariant and
// per-session order: no duplicate ids, no duplicate business keys (when a
// dedupe key is set), no gaps below the watermarks, no rows at or above
// them, no offset both a row and a dead letter (unless its dead letters were
// only for a reason of the moment, see momentReason), no session split
// across partitions and no seq order violation. A dead-letter topic that was
// not read makes every dead-lettered record a gap, so OK is then only
// meaningful for topics without dead letters.
func (r *Report) OK() bool { return len(r.problems()) == 0 }

// problems describes each way the report is not OK, one line each.
func (r *Report) problems() []string {
	var out []string
	if r.DuplicateIDs > 0 {
		out = append(out, plural(r.DuplicateIDs, "duplicate row")+" (same topic, partition, offset)")
	}
	if r.DuplicateKeys > 0 {
		out = append(out, fmt.Sprintf("%s (same %s, other offset)", plural(r.DuplicateKeys, "duplicate business key"), r.DedupeKey))
	}
	var gaps, gapRuns, above, both, rowSkipped int64
	for _, p := range r.Partitions {
		gaps += p.GapOffsets
		gapRuns += int64(len(p.Gaps))
		above += p.AboveWatermark
		both += p.BothRowAndDeadLetter
		rowSkipped += p.BothRowAndBusinessSkipped
	}
	if gaps > 0 && len(r.TrimmedDeadLetters) == 0 {
		what := "neither rows nor dead letters"
		if r.DeadLetters < 0 {
			what = "not rows (dead-letter topic not read)"
		}
		out = append(out, fmt.Sprintf("%s in %s below the watermarks: %s", plural(gaps, "offset"), plural(gapRuns, "gap"), what))
	}
	if above > 0 {
		out = append(out, plural(above, "row")+" at or above their partition's watermark")
	}
	if both > 0 {
		out = append(out, plural(both, "offset")+" both a row and a dead letter")
	}
	if rowSkipped > 0 {
		out = append(out, plural(rowSkipped, "offset")+" both a row and recorded as a skipped business duplicate")
	}
	if r.SplitSessions > 0 {
		out = append(out, plural(r.SplitSessions, "session")+" seen in more than one partition")
	}
	if r.OrderViolations > 0 {
		out = append(out, plural(r.OrderViolations, "seq order violation")+" within (partition, session)")
	}
	return out
}

// verifyRow is what Verify keeps of one row: 24 bytes, so 5 M rows fit in
// 120 MB. sess is noSession for rows left out of the order check (null key or
// null seq).
type verifyRow struct {
	part int32
	sess uint32
	off  int64
	seq  int64
}

const noSession = ^uint32(0)

// sessionIndex interns session keys to dense ids and notes, per session, the
// first partition it was seen in and another one if there is one.
type sessionIndex struct {
	ids   map[string]uint32
	names []string
	first []int32
	other []int32 // -1 until seen in a second partition
	// The last key looked up: rows are sorted by session within a file, so
	// most lookups repeat it and skip the map.
	lastName string
	lastID   uint32
	haveLast bool
}

func (s *sessionIndex) id(name string, part int32) uint32 {
	var id uint32
	if s.haveLast && name == s.lastName {
		id = s.lastID
	} else if v, ok := s.ids[name]; ok {
		id = v
	} else {
		name = strings.Clone(name) // name points into an Arrow buffer
		id = uint32(len(s.names))
		s.ids[name] = id
		s.names = append(s.names, name)
		s.first = append(s.first, part)
		s.other = append(s.other, -1)
	}
	s.lastName, s.lastID, s.haveLast = s.names[id], id, true
	if s.first[id] != part && s.other[id] < 0 {
		s.other[id] = part
	}
	return id
}

// Verify reconciles the table's current snapshot with the group's offset map
// and the dead-letter topic, for one topic, whose dead letters readDL reads
// once the table is loaded. When readDL is nil or returns nil the
// dead-letter topic was not read: gaps are then still reported (they include
// the dead-lettered records) and the report's DeadLetters are -1.
//
// It reads only the columns it needs (the Kafka coordinates, the schema's key
// column and seq) and streams record batches, keeping 24 bytes per row plus
// about 100 bytes per distinct session (BenchmarkVerify: 1.2 M rows peak at
// about 140 MiB of heap, so 5 M rows stay within a few hundred MB).
// The watermarks come from the same table metadata as the snapshot that is
// scanned, and the dead letters are read after it is loaded, so a concurrent
// commit cannot make them disagree.
func (t *Table) Verify(ctx context.Context, topic string, readDL DeadLetterReader) (*Report, error) {
	tbl, err := t.Load(ctx)
	if err != nil {
		return nil, err
	}
	wm, err := WatermarksOf(tbl, t.group)
	if err != nil {
		return nil, err
	}
	first, err := FirstOffsetsOf(tbl, t.group)
	if err != nil {
		return nil, err
	}
	if err := t.checkOffsets(tbl, topic, wm); err != nil {
		return nil, err
	}
	dl, err := readDL.read(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{
		Table: t.Name(), Group: t.group, Topic: topic, SnapshotID: -1, DeadLetters: -1,
		Partitions: []PartitionReport{}, SplitSessionExamples: []string{}, DuplicateExamples: []string{},
		PartitionCounts: PartitionCountsOf(tbl, topic), DuplicateKeyExamples: []string{},
	}
	sessions := &sessionIndex{ids: make(map[string]uint32)}
	keys := t.newKeyIndex()
	if keys != nil {
		r.DedupeKey = keys.column
	}
	// Offsets skipped as business duplicates are covered whether or not a
	// dedupe key is set now.
	if r.skipped, err = businessSkipped(tbl, topic); err != nil {
		return nil, err
	}
	if r.absent, err = absentRuns(tbl, topic); err != nil {
		return nil, err
	}
	if r.dropped, err = droppedRuns(tbl, topic); err != nil {
		return nil, err
	}

	rows := newRowStore(verifySpillRows)
	defer rows.close()
	if snap := tbl.CurrentSnapshot(); snap != nil {
		r.SnapshotID = snap.SnapshotID
		if err = t.scanIDsKeys(ctx, tbl, topic, sessions, keys, rows); err != nil {
			return nil, fmt.Errorf("verifying %s: %w", t.Name(), err)
		}
	}
	if err := rows.finish(); err != nil {
		return nil, err
	}
	if keys != nil {
		keys.finish()
		r.DistinctKeys, r.DuplicateKeys, r.KeysBeyondWindow = int64(len(keys.first)), keys.dups, keys.beyond
		r.DuplicateKeyExamples = keys.examples()
	}

	// Every partition with rows, dead letters or a watermark gets a line.
	parts := rows.partitions()
	for p := range wm[topic] {
		parts[p] = struct{}{}
	}
	for p := range dl {
		parts[p] = struct{}{}
	}
	for p := range r.skipped {
		parts[p] = struct{}{}
	}

	ord := newOrderChecker(len(sessions.names))
	if dl != nil {
		r.DeadLetters = 0
	}
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		prows, err := rows.take(p)
		if err != nil {
			return nil, err
		}
		w, ok := wm.Get(topic, p)
		if !ok {
			w = NoWatermark
		}
		f, ok := first.Get(topic, p)
		if !ok {
			f = -1
		}
		pr := r.reconcile(p, w, f, prows, dl, ord)
		r.Rows += pr.Rows
		r.AbsentFromLog += pr.AbsentFromLog
		r.Unchecked += pr.Unchecked
		if dl != nil {
			r.DeadLetters += pr.DeadLetters
		}
		r.Partitions = append(r.Partitions, pr)
	}
	r.DuplicateIDs = r.Rows - r.DistinctIDs

	r.Sessions = int64(len(sessions.names))
	for id, other := range sessions.other {
		if other < 0 {
			continue
		}
		r.SplitSessions++
		if len(r.SplitSessionExamples) < maxExamples {
			a, b := min(sessions.first[id], other), max(sessions.first[id], other)
			r.SplitSessionExamples = append(r.SplitSessionExamples,
				fmt.Sprintf("%s (partitions %d, %d)", sessions.names[id], a, b))
		}
	}
	// Which sessions are found first depends on the order files are read.
	slices.Sort(r.SplitSessionExamples)
	return r, nil
}

// CheckOffsets fails, naming what the table holds, when its offsets cannot
// be topic's under the table's group: it holds offsets of other topics but
// none of topic (a misspelt --topic), or offsets of topic under other
// groups but none under its own (a misspelt --group). Verify refuses both
// (nothing of a misspelt topic would be found, which reconciles; every row
// would be above a misspelt group's watermarks); floe doctor too, which
// took either for a job that has committed nothing yet. A table without
// offsets, or whose topic no group has committed yet (a new job, or a
// table that replays alone wrote), passes.
func (t *Table) CheckOffsets(ctx context.Context, topic string) error {
	tbl, err := t.Load(ctx)
	if err != nil {
		return err
	}
	wm, err := WatermarksOf(tbl, t.group)
	if err != nil {
		return err
	}
	return t.checkOffsets(tbl, topic, wm)
}

// checkOffsets is CheckOffsets of the loaded tbl, whose watermarks for
// t's group are wm.
func (t *Table) checkOffsets(tbl *table.Table, topic string, wm Offsets) error {
	if known := topicsOf(tbl); len(known) > 0 && !slices.Contains(known, topic) {
		return fmt.Errorf("table %s holds no offsets of topic %q, only of %s", t.Name(), topic, strings.Join(known, ", "))
	}
	if len(wm[topic]) > 0 {
		return nil
	}
	others, err := groupsOf(tbl, topic)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		return fmt.Errorf("table %s holds no offsets of topic %s under group %q, only under %s", t.Name(), topic, t.group, strings.Join(others, ", "))
	}
	return nil
}

// topicsOf returns, sorted, the topics whose offsets or partition counts
// any floe commit in tbl's current ancestry recorded, for any group.
func topicsOf(tbl *table.Table) []string {
	set := map[string]bool{}
	for k, v := range newestCarried(tbl) {
		switch {
		case strings.HasPrefix(k, PartitionsKeyPrefix):
			set[strings.TrimPrefix(k, PartitionsKeyPrefix)] = true
		case strings.HasPrefix(k, OffsetsKeyPrefix):
			var o Offsets
			if json.Unmarshal([]byte(v), &o) == nil {
				for topic := range o {
					set[topic] = true
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// groupsOf returns, sorted, the groups whose offset maps in tbl hold
// offsets of topic.
func groupsOf(tbl *table.Table, topic string) ([]string, error) {
	groups, err := OffsetMapsOf(tbl)
	if err != nil {
		return nil, err
	}
	var out []string
	for g, o := range groups {
		if len(o[topic]) > 0 {
			out = append(out, g)
		}
	}
	slices.Sort(out)
	return out, nil
}

// scanIDsKeys streams the topic's rows of the current snapshot, keeping a
// verifyRow for each in rows, interning sessions and, unless keys is nil,
// indexing the business keys.
func (t *Table) scanIDsKeys(ctx context.Context, tbl *table.Table, topic string, sessions *sessionIndex, keys *keyIndex, rows *rowStore) error {
	cols := []string{TopicColumn, PartitionColumn, OffsetColumn}
	if keys != nil {
		for _, c := range []string{keys.column, keys.timeColumn} {
			if c == "" {
				continue
			}
			if _, ok := tbl.Schema().FindFieldByName(c); !ok {
				return fmt.Errorf("business-key check: column %q is not a column of the table", c)
			}
			cols = append(cols, c)
		}
	}
	sch := tbl.Schema()
	key := t.schema.KeyField
	if _, ok := sch.FindFieldByName(key); key == "" || !ok {
		key = ""
	} else {
		cols = append(cols, key)
	}
	seq := ""
	if f, ok := sch.FindFieldByName(seqColumn); ok && f.Type.Equals(iceberg.PrimitiveTypes.Int64) && key != "" {
		seq = seqColumn
		cols = append(cols, seq)
	}
	scan := tbl.Scan(
		table.WithRowFilter(iceberg.EqualTo(iceberg.Reference(TopicColumn), topic)),
		table.WithSelectedFields(withNested(sch, cols)...))
	defer scan.Close()
	_, batches, err := scan.ToArrowRecords(ctx)
	if err != nil {
		return fmt.Errorf("scanning %s: %w", topic, err)
	}
	for b, err := range batches {
		if err != nil {
			return fmt.Errorf("reading %s: %w", topic, err)
		}
		err = addVerifyRows(rows, b, topic, key, seq, sessions)
		if err == nil && keys != nil {
			err = keys.add(b, topic)
		}
		b.Release()
		if err != nil {
			return err
		}
	}
	return nil
}

// stringColumn is what Verify needs of a string-like Arrow array (String,
// LargeString and StringView all have it).
type stringColumn interface {
	arrow.Array
	Value(int) string
}

func addVerifyRows(rows *rowStore, b arrow.RecordBatch, topic, key, seq string, sessions *sessionIndex) error {
	col := func(name string) (arrow.Array, error) {
		idx := b.Schema().FieldIndices(name)
		if len(idx) != 1 {
			return nil, fmt.Errorf("scan returned no %s column", name)
		}
		return b.Column(idx[0]), nil
	}
	wrongType := func(name string, a arrow.Array) error {
		return fmt.Errorf("column %s is %s, not the type floe writes", name, a.DataType())
	}
	var (
		topics, keys stringColumn
		parts        *array.Int32
		offs, seqs   *array.Int64
		ok           bool
	)
	a, err := col(TopicColumn)
	if err != nil {
		return err
	}
	if topics, ok = a.(stringColumn); !ok {
		return wrongType(TopicColumn, a)
	}
	if a, err = col(PartitionColumn); err != nil {
		return err
	}
	if parts, ok = a.(*array.Int32); !ok {
		return wrongType(PartitionColumn, a)
	}
	if a, err = col(OffsetColumn); err != nil {
		return err
	}
	if offs, ok = a.(*array.Int64); !ok {
		return wrongType(OffsetColumn, a)
	}
	if key != "" {
		if a, err = col(key); err != nil {
			return err
		}
		if keys, ok = a.(stringColumn); !ok {
			return wrongType(key, a)
		}
	}
	if seq != "" {
		if a, err = col(seq); err != nil {
			return err
		}
		if seqs, ok = a.(*array.Int64); !ok {
			return wrongType(seq, a)
		}
	}
	for i := range int(b.NumRows()) {
		// The row filter already selected the topic; this guards against a
		// filter that only prunes files.
		if topics.IsNull(i) || topics.Value(i) != topic || parts.IsNull(i) || offs.IsNull(i) {
			continue
		}
		vr := verifyRow{part: parts.Value(i), off: offs.Value(i), sess: noSession}
		if keys != nil && !keys.IsNull(i) {
			id := sessions.id(keys.Value(i), vr.part)
			if seqs != nil && !seqs.IsNull(i) {
				vr.sess, vr.seq = id, seqs.Value(i)
			}
		}
		if err := rows.add(vr); err != nil {
			return err
		}
	}
	return nil
}

// orderChecker holds, per session, the seq of its last row in the partition
// being walked. Rows are walked partition by partition in offset order, so a
// session's state from another partition is recognised by its partition tag.
type orderChecker struct {
	lastPart []int32
	lastSeq  []int64
}

func newOrderChecker(sessions int) *orderChecker {
	o := &orderChecker{lastPart: make([]int32, sessions), lastSeq: make([]int64, sessions)}
	for i := range o.lastPart {
		o.lastPart[i] = -1
	}
	return o
}

// next reports whether row v breaks its session's order.
func (o *orderChecker) next(v verifyRow) bool {
	if v.sess == noSession {
		return false
	}
	bad := o.lastPart[v.sess] == v.part && v.seq <= o.lastSeq[v.sess]
	o.lastPart[v.sess], o.lastSeq[v.sess] = v.part, v.seq
	return bad
}

// reconcile checks one partition: rows holds its rows sorted by offset, w
// is its watermark and first its first live offset (-1 when unrecorded).
// It adds to r's distinct ids, duplicate examples and order violations.
func (r *Report) reconcile(p int32, w, first int64, rows []verifyRow, dl DeadLetters, ord *orderChecker) PartitionReport {
	pr := PartitionReport{Partition: p, Watermark: w, First: first, Rows: int64(len(rows)), DeadLetters: -1,
		MinOffset: -1, MaxOffset: -1, Coverage: Coverage{Gaps: []Gap{}}}
	var dead []int64
	if dl != nil {
		dead = slices.Sorted(maps.Keys(dl[p]))
		pr.DeadLetters = int64(len(dead))
	}
	// Business-key duplicates cover their offsets like dead letters do.
	cover := dead
	skipped := r.skipped[p]
	if len(skipped) > 0 {
		r.BusinessSkipped += int64(len(skipped))
		cover = slices.Compact(slices.Sorted(slices.Values(slices.Concat(dead, skipped))))
	}

	// Rows: duplicates, order, and rows above the watermark.
	for i := 0; i < len(rows); {
		j := i + 1
		for j < len(rows) && rows[j].off == rows[i].off {
			j++
		}
		r.DistinctIDs++
		if copies := j - i; copies > 1 && len(r.DuplicateExamples) < maxExamples {
			r.DuplicateExamples = append(r.DuplicateExamples, fmt.Sprintf("%s/%d@%d×%d", r.Topic, p, rows[i].off, copies))
		}
		if w == NoWatermark || rows[i].off >= w {
			pr.AboveWatermark += int64(j - i)
		}
		// Only the first copy of a duplicated offset is order-checked, so a
		// duplicate is not counted twice.
		if ord.next(rows[i]) {
			r.OrderViolations++
		}
		i = j
	}

	// Coverage: walk the union of row and dead-letter offsets in order,
	// from first, or the first offset seen when first is unrecorded.
	next := first // the next offset expected below the watermark
	mergeOffsets(rows, cover, func(off int64, isRow, isDead bool) {
		if pr.MinOffset < 0 {
			pr.MinOffset = off
			if first < 0 {
				next = off
			}
		}
		pr.MaxOffset = off
		if isRow && isDead {
			if reason, dead := dl[p][off]; dead && momentReason(reason) {
				pr.DeadLettersSuperseded++
			} else if dead {
				pr.BothRowAndDeadLetter++
			}
			if _, skip := slices.BinarySearch(skipped, off); skip {
				pr.BothRowAndBusinessSkipped++
			}
		}
		if off >= w {
			return
		}
		if off < first {
			pr.BelowFirst++
			return
		}
		if off > next {
			pr.addGap(next, off, r.absent[p], r.dropped[p])
		}
		next = off + 1
	})
	if next >= 0 && next < w {
		pr.addGap(next, w, r.absent[p], r.dropped[p])
	}
	return pr
}

// Coverage accounts for the offsets below a partition's watermark that
// nothing covers (no row, dead letter or recorded skipped duplicate),
// counted from the first offset its live commits covered, or from the
// first offset seen where the table does not record that one.
type Coverage struct {
	// Gaps lists the runs of those offsets that are neither absent from
	// the log nor unchecked.
	Gaps []Gap `json:"gaps"`
	// GapOffsets is the number of offsets in Gaps.
	GapOffsets int64 `json:"gap_offsets"`
	// AbsentFromLog counts those the log did not hold when the job read
	// them, as its commits recorded (AbsentOffsetsKey): compacted away,
	// deleted by retention before they were read, or holding no record
	// (transactions' markers, aborted transactions' records). Information, not a
	// problem of the table.
	AbsentFromLog int64 `json:"absent_from_log"`
	// Unchecked counts those that lie where the table no longer records
	// every skipped business duplicate (more than 10,000 runs of them, the
	// oldest dropped: BusinessDroppedKey): skipped duplicates or losses,
	// verify cannot tell. Information, not in Gaps.
	Unchecked int64 `json:"unchecked"`
}

// addGap accounts for the offsets [from, to), which nothing covers: gaps,
// but for those absent from the log (absent runs) or unchecked (dropped
// runs).
func (c *Coverage) addGap(from, to int64, absent, dropped [][2]int64) {
	gaps, n := splitGap(from, to, absent)
	gaps, unchecked := clipGaps(gaps, dropped)
	c.Gaps = append(c.Gaps, gaps...)
	c.GapOffsets += to - from - n - unchecked
	c.AbsentFromLog += n
	c.Unchecked += unchecked
}

// clipGaps returns gaps without their offsets inside runs (sorted, merged),
// and how many those were.
func clipGaps(gaps []Gap, runs [][2]int64) (kept []Gap, inside int64) {
	for _, g := range gaps {
		out, n := splitGap(g.From, g.To, runs)
		kept = append(kept, out...)
		inside += n
	}
	return kept, inside
}

// splitGap returns the runs of [from, to) outside absent (sorted, merged
// runs of offsets the log did not hold) and how many offsets of it lie
// inside.
func splitGap(from, to int64, absent [][2]int64) (gaps []Gap, inAbsent int64) {
	for _, a := range absent {
		if a[1] <= from {
			continue
		}
		if a[0] >= to {
			break
		}
		if a[0] > from {
			gaps = append(gaps, Gap{From: from, To: a[0]})
		}
		from = max(from, a[0])
		end := min(a[1], to)
		inAbsent += end - from
		from = end
	}
	if from < to {
		gaps = append(gaps, Gap{From: from, To: to})
	}
	return gaps, inAbsent
}

// mergeOffsets calls fn once per distinct offset of rows ∪ dead, in
// ascending order. rows and dead must be sorted.
func mergeOffsets(rows []verifyRow, dead []int64, fn func(off int64, isRow, isDead bool)) {
	i, j := 0, 0
	for i < len(rows) || j < len(dead) {
		switch {
		case j == len(dead) || (i < len(rows) && rows[i].off < dead[j]):
			fn(rows[i].off, true, false)
			i = skipOffset(rows, i)
		case i == len(rows) || dead[j] < rows[i].off:
			fn(dead[j], false, true)
			j++
		default:
			fn(dead[j], true, true)
			i = skipOffset(rows, i)
			j++
		}
	}
}

// skipOffset returns the index of the first row after i with another offset.
func skipOffset(rows []verifyRow, i int) int {
	off := rows[i].off
	for i < len(rows) && rows[i].off == off {
		i++
	}
	return i
}

// maxTextGaps bounds the gaps WriteText lists per partition; the JSON form
// has all of them.
const maxTextGaps = 5

// WriteText prints the report for a person: a verdict and summary, one line
// per partition, then the problems and examples, each problem marked "!!".
func (r *Report) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	problems := r.problems()
	trimmed := len(r.TrimmedDeadLetters) > 0 // gaps not checked
	verdict := "OK"
	if len(problems) > 0 {
		verdict = "!! NOT OK: " + plural(len(problems), "problem")
	}
	snap := strconv.FormatInt(r.SnapshotID, 10)
	if r.SnapshotID < 0 {
		snap = "none"
	}
	ew.printf("verify %s (topic %s, group %s, snapshot %s): %s\n", r.Table, r.Topic, r.Group, snap, verdict)
	dead := "not read"
	if r.DeadLetters >= 0 {
		dead = strconv.FormatInt(r.DeadLetters, 10)
	}
	ew.printf("  rows %d, distinct ids %d, duplicates %d, dead letters %s\n", r.Rows, r.DistinctIDs, r.DuplicateIDs, dead)
	ew.missingDLQ(r.MissingDeadLetterTopics)
	ew.trimmedDLQ(r.TrimmedDeadLetters, r.gapOffsets())
	ew.printf("  sessions %d, split across partitions %d, seq order violations %d\n", r.Sessions, r.SplitSessions, r.OrderViolations)
	if r.DedupeKey != "" || r.BusinessSkipped > 0 {
		ew.printf("  dedupe key %s: distinct keys %d, duplicate keys %d, offsets skipped as business duplicates %d\n",
			cmp.Or(r.DedupeKey, "(none)"), r.DistinctKeys, r.DuplicateKeys, r.BusinessSkipped)
	}
	if r.KeysBeyondWindow > 0 {
		ew.printf("  %s repeated beyond the dedupe window (farther apart in event time than the bounded MERGE searches; not a problem)\n",
			plural(r.KeysBeyondWindow, "key"))
	}
	var superseded int64
	for _, p := range r.Partitions {
		superseded += p.DeadLettersSuperseded
	}
	if superseded > 0 {
		ew.printf("  %s superseded by a row (dead-lettered for a reason of the moment, such as enrich_failed, by a flush that did not commit; its redo stored the row; not a problem)\n",
			plural(superseded, "dead letter"))
	}
	ew.absent(r.AbsentFromLog)
	ew.unchecked(r.Unchecked)
	if len(r.PartitionCounts) > 1 {
		counts := make([]string, len(r.PartitionCounts))
		for i, n := range r.PartitionCounts {
			counts[i] = strconv.Itoa(n)
		}
		ew.printf("  partition count changed while ingesting: %s — keys hash to other partitions since, so a session that straddles the change is split and its order across partitions is not preserved\n",
			strings.Join(counts, " → "))
	}

	if len(r.Partitions) > 0 {
		ew.printf("\n")
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\tpartition\twatermark\trows\tdead letters\tfirst seen\tlast seen\tgap offsets\tabove wm\trow+dl\t\n")
		for _, p := range r.Partitions {
			mark := ""
			if (p.GapOffsets > 0 && !trimmed) || p.AboveWatermark > 0 || p.BothRowAndDeadLetter > 0 || p.BothRowAndBusinessSkipped > 0 {
				mark = "!!"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%s\t%s\t%s\t%d\t%d\t%d\t\n", mark, p.Partition,
				orDash(p.Watermark), p.Rows, orDash(p.DeadLetters), orDash(p.MinOffset), orDash(p.MaxOffset),
				p.GapOffsets, p.AboveWatermark, p.BothRowAndDeadLetter)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}

	ew.problems(problems)
	for _, p := range r.Partitions {
		if len(p.Gaps) > 0 {
			ew.printf("%s partition %d gaps: %s\n", gapMark(trimmed), p.Partition, gapsText(p.Gaps))
		}
		if p.Rows > 0 && p.Watermark == NoWatermark {
			ew.printf("!! partition %d has rows but group %s has no watermark for it\n", p.Partition, r.Group)
		}
		if p.First < 0 && p.Watermark > 0 && (p.MinOffset < 0 || p.MinOffset >= p.Watermark) {
			ew.printf("   partition %d: nothing seen below watermark %d, gaps not checked\n", p.Partition, p.Watermark)
		}
		if p.BelowFirst > 0 {
			ew.belowFirst(p.Partition, p.BelowFirst, p.First)
		}
	}
	if len(r.DuplicateExamples) > 0 {
		ew.printf("!! duplicate ids: %s\n", strings.Join(r.DuplicateExamples, ", "))
	}
	if len(r.SplitSessionExamples) > 0 {
		ew.printf("!! split sessions: %s\n", strings.Join(r.SplitSessionExamples, ", "))
	}
	if len(r.DuplicateKeyExamples) > 0 {
		ew.printf("!! duplicate %s: %s\n", r.DedupeKey, strings.Join(r.DuplicateKeyExamples, ", "))
	}
	return ew.err
}

func plural[N int | int64](n N, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

func orDash(v int64) string {
	if v < 0 {
		return "-"
	}
	return strconv.FormatInt(v, 10)
}

// errWriter keeps the first write error so WriteText can print without
// checking each line.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(b []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(b)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, args ...any) { fmt.Fprintf(e, format, args...) }

// absent writes the information line on n offsets absent from the log.
func (e *errWriter) absent(n int64) {
	if n > 0 {
		e.printf("  %s absent from the log when the job read it (removed by compaction, or deleted by retention before they were read; counted by floe_offset_gaps_total; not a problem of the table)\n",
			plural(n, "offset"))
	}
}

// belowFirst writes the information line on n offsets of partition p seen
// below first, where the job's live commits of it started.
func (e *errWriter) belowFirst(p int32, n, first int64) {
	e.printf("   partition %d: %s below %d, where the job's first commit of it started: a replay's backfill, no watermark claimed them, not checked for gaps\n",
		p, plural(n, "offset"), first)
}

// unchecked writes the information line on n offsets below the recorded
// skipped business duplicates (PartitionReport.Unchecked).
func (e *errWriter) unchecked(n int64) {
	if n > 0 {
		e.printf("  %s not checked: no row or dead letter covers them, and they lie where the table no longer records every skipped business duplicate (past 10,000 runs of them, maintenance keeps the newest): skipped duplicates or losses, which verify cannot tell apart\n",
			plural(n, "offset"))
	}
}

// gapMark marks a line of gaps: a problem ("!!"), unless the dead-letter
// topic lost letters to retention (trimmed), when they are not checked.
func gapMark(trimmed bool) string {
	if trimmed {
		return "  "
	}
	return "!!"
}

// gapOffsets is how many offsets the report's partitions have in gaps.
func (r *Report) gapOffsets() int64 {
	var n int64
	for _, p := range r.Partitions {
		n += p.GapOffsets
	}
	return n
}

// trimmedDLQ writes, when dead-letter topics lost letters (trimmed: see
// Report.TrimmedDeadLetters), why the gaps (gaps offsets) are not checked.
func (e *errWriter) trimmedDLQ(trimmed []string, gaps int64) {
	if len(trimmed) == 0 {
		return
	}
	e.printf("  dead-letter topic log no longer starts at 0 (%s): retention deleted dead letters, so %s in gaps (listed per partition) are not checked: dead letters it no longer holds, or losses, which verify cannot tell apart (give the dead-letter topic retention.ms=-1)\n",
		strings.Join(trimmed, ", "), plural(gaps, "offset"))
}

// missingDLQ writes a line per dead-letter topic that does not exist.
func (e *errWriter) missingDLQ(topics []string) {
	for _, t := range topics {
		e.printf("  dead-letter topic %s does not exist: no dead letters were written to it (offsets dead-lettered into another topic, as after a change of dlq_topic, count as gaps)\n", t)
	}
}

// problems writes each problem on a "!!" line, after a blank one.
func (e *errWriter) problems(problems []string) {
	if len(problems) == 0 {
		return
	}
	e.printf("\n")
	for _, s := range problems {
		e.printf("!! %s\n", s)
	}
}

// gapsText lists the first maxTextGaps gaps and says how many more there are.
func gapsText(gaps []Gap) string {
	gs := make([]string, 0, maxTextGaps)
	for _, g := range gaps[:min(len(gaps), maxTextGaps)] {
		gs = append(gs, g.String())
	}
	if len(gaps) > maxTextGaps {
		return fmt.Sprintf("%s and %d more", strings.Join(gs, " "), len(gaps)-maxTextGaps)
	}
	return strings.Join(gs, " ")
}
