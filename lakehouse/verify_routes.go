package lakehouse

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// RoutesReport reconciles the tables that the field routes of one topic
// write (routes with where: each record goes to exactly one of them): per
// Kafka partition, every offset below the least of the tables' watermarks
// must be a row of exactly one table or a dead letter, and no offset may be
// in two places that have passed it (a lagging table does not hide the
// others' duplicates). Per table it checks what Verify checks of one table
// except gaps (the other tables' offsets are this one's gaps).
type RoutesReport struct {
	Topic  string             `json:"topic"`
	Tables []RouteTableReport `json:"tables"`
	// DeadLetters counts distinct dead-lettered source offsets of the topic,
	// or is -1 when the dead-letter topics were not read.
	DeadLetters int64 `json:"dead_letters"`
	// MissingDeadLetterTopics is as for Report.
	MissingDeadLetterTopics []string `json:"missing_dead_letter_topics,omitempty"`
	// TrimmedDeadLetters is as for Report.
	TrimmedDeadLetters []string `json:"trimmed_dead_letters,omitempty"`
	// Partitions holds every partition with rows, dead letters or a
	// watermark, in partition order.
	Partitions []RoutesPartition `json:"partitions"`
}

// RouteTableReport is one table of a RoutesReport.
type RouteTableReport struct {
	Table string `json:"table"`
	Group string `json:"group"`
	// SnapshotID is the snapshot read, -1 for a table without one.
	SnapshotID   int64 `json:"snapshot_id"`
	Rows         int64 `json:"rows"`
	DistinctIDs  int64 `json:"distinct_ids"`
	DuplicateIDs int64 `json:"duplicate_ids"`
	// AboveWatermark counts rows at or above the table's own watermark of
	// their partition (every row of a partition it has none for).
	AboveWatermark int64 `json:"above_watermark"`
	// OrderViolations counts seq order violations within (partition,
	// session) among this table's rows; SplitSessions the sessions it holds
	// in more than one partition.
	OrderViolations   int64    `json:"order_violations"`
	SplitSessions     int64    `json:"split_sessions"`
	DuplicateExamples []string `json:"duplicate_examples"`
	// Keys is the business-key check (nil without a dedupe key).
	Keys *KeyCheck `json:"business_keys,omitempty"`
}

// RoutesPartition is the reconciliation of one Kafka partition across the
// tables of a RoutesReport.
type RoutesPartition struct {
	Partition int32 `json:"partition"`
	// Watermark is the least of the tables' watermarks, below which every
	// table has decided every offset; -1 when a table has none.
	Watermark int64 `json:"watermark"`
	// Rows counts each table's rows of the partition, in the order of
	// RoutesReport.Tables.
	Rows []int64 `json:"rows"`
	// BusinessSkipped counts the offsets the tables' business-key MERGE
	// skipped as duplicates (recorded in their snapshots): covered, like
	// rows of the table that skipped them.
	BusinessSkipped int64 `json:"business_duplicates_skipped"`
	DeadLetters     int64 `json:"dead_letters"`
	// First is the least of the tables' first live offsets of the
	// partition (see PartitionReport.First), or -1 when a table does not
	// record its own; BelowFirst counts the distinct offsets seen below it
	// (a replay's backfill): information, not checked for gaps.
	First      int64 `json:"first"`
	BelowFirst int64 `json:"below_first"`
	// MinOffset and MaxOffset bound the offsets seen in any table or the
	// dead-letter topics (-1 when none); gaps are counted from First, or
	// from MinOffset without it.
	MinOffset int64 `json:"min_offset"`
	MaxOffset int64 `json:"max_offset"`
	// Coverage: the offsets below Watermark in no table nor dead-letter
	// topic; an offset a route's job found absent from the log is absent,
	// and one where any table no longer records every skipped business
	// duplicate is unchecked.
	Coverage
	// InSeveral counts offsets in more than one place that has passed them
	// (a row of a table whose own watermark is above it, a dead letter not
	// superseded), below Watermark or not, and also when it is -1: a
	// lagging table does not hide the others'. InSeveralExamples shows some.
	InSeveral         int64    `json:"in_several"`
	InSeveralExamples []string `json:"in_several_examples"`
	// DeadLettersSuperseded counts offsets in one table past them whose
	// dead letters all have a reason of the moment (see
	// PartitionReport.DeadLettersSuperseded): information, not in
	// InSeveral.
	DeadLettersSuperseded int64 `json:"dead_letters_superseded_by_row"`
}

// VerifyRoutes reconciles the tables of one topic's field routes (each
// opened with its route's group) with one another and the dead-letter
// topics: readDL reads the topic's dead-lettered offsets from every route's
// dead-letter topic (only those these tables' routes wrote, when routes of
// other tables share it: pipeline.ReadDeadLetters with their names) once
// every table is loaded, or is nil or returns nil when they are not read
// (dead letters are then gaps). It reads the same columns as Verify and
// keeps its rows as Verify does (rowStore).
func VerifyRoutes(ctx context.Context, topic string, tables []*Table, readDL DeadLetterReader) (*RoutesReport, error) {
	r := &RoutesReport{Topic: topic, DeadLetters: -1, Tables: make([]RouteTableReport, len(tables)), Partitions: []RoutesPartition{}}
	rows := make([]*rowStore, len(tables))
	ords := make([]*orderChecker, len(tables)) // each table's, walked partition by partition
	defer func() {
		for _, rs := range rows {
			if rs != nil {
				rs.close()
			}
		}
	}()
	wms := make([]Offsets, len(tables))
	firsts := make([]Offsets, len(tables))
	skipped := make([]map[int32][]int64, len(tables))
	// Every route's job reads the whole log, so an offset any of them found
	// absent is absent.
	absent := skipRuns{}
	// An offset where any table no longer records every skipped business
	// duplicate may be one of that table's.
	dropped := skipRuns{}
	parts := map[int32]struct{}{}
	for i, t := range tables {
		tbl, err := t.Load(ctx)
		if err != nil {
			return nil, err
		}
		if wms[i], err = WatermarksOf(tbl, t.group); err != nil {
			return nil, err
		}
		// As Verify: a misspelt topic reconciled (nothing of it found),
		// a misspelt group put every row above its watermark.
		if err := t.checkOffsets(tbl, topic, wms[i]); err != nil {
			return nil, err
		}
		if firsts[i], err = FirstOffsetsOf(tbl, t.group); err != nil {
			return nil, err
		}
		if skipped[i], err = businessSkipped(tbl, topic); err != nil {
			return nil, err
		}
		for p := range skipped[i] {
			parts[p] = struct{}{}
		}
		runs, _, err := recordedRuns(tbl, absentKeys)
		if err != nil {
			return nil, err
		}
		absent.add(skipRuns{topic: runs[topic]})
		runs, _, err = recordedRuns(tbl, droppedKeys)
		if err != nil {
			return nil, err
		}
		dropped.add(skipRuns{topic: runs[topic]})
		tr := RouteTableReport{Table: t.Name(), Group: t.group, SnapshotID: -1, DuplicateExamples: []string{}}
		sessions := &sessionIndex{ids: make(map[string]uint32)}
		keys := t.newKeyIndex()
		// The tables share the budget of rows in memory.
		rows[i] = newRowStore(verifySpillRows / len(tables))
		if snap := tbl.CurrentSnapshot(); snap != nil {
			tr.SnapshotID = snap.SnapshotID
			if err = t.scanIDsKeys(ctx, tbl, topic, sessions, keys, rows[i]); err != nil {
				return nil, fmt.Errorf("verifying %s: %w", t.Name(), err)
			}
		}
		if err := rows[i].finish(); err != nil {
			return nil, err
		}
		for p := range rows[i].partitions() {
			parts[p] = struct{}{}
		}
		tr.Keys = keys.check()
		ords[i] = newOrderChecker(len(sessions.names))
		for _, other := range sessions.other {
			if other >= 0 {
				tr.SplitSessions++
			}
		}
		for p := range wms[i][topic] {
			parts[p] = struct{}{}
		}
		r.Tables[i] = tr
	}
	dl, err := readDL.read(ctx)
	if err != nil {
		return nil, err
	}
	for p := range dl {
		parts[p] = struct{}{}
	}
	if dl != nil {
		r.DeadLetters = 0
	}
	prows := make([][]verifyRow, len(tables)) // each table's rows of the partition
	for _, p := range slices.Sorted(maps.Keys(parts)) {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		clear(prows) // the previous partition's go before this one's come
		pr := RoutesPartition{Partition: p, Watermark: -1, First: -1, Rows: make([]int64, len(tables)), MinOffset: -1, MaxOffset: -1,
			Coverage: Coverage{Gaps: []Gap{}}, InSeveralExamples: []string{}}
		// Below the least first offset no route's job read; a route that
		// joined later is covered below its own by the others' tables.
		for i := range tables {
			f, ok := firsts[i].Get(topic, p)
			if !ok {
				pr.First = -1
				break
			}
			if i == 0 || f < pr.First {
				pr.First = f
			}
		}
		// Every distinct offset of the partition once per place it is in,
		// and whether that place has passed it: a row or skipped business
		// duplicate of a table whose own watermark is above it, or a dead
		// letter (written before any commit covers it).
		var offs []placed
		for i := range tables {
			w, ok := wms[i].Get(topic, p)
			switch {
			case !ok:
				pr.Watermark = NoWatermark
			case i == 0 || (pr.Watermark != NoWatermark && w < pr.Watermark):
				pr.Watermark = w
			}
			prow, err := rows[i].take(p)
			if err != nil {
				return nil, err
			}
			prows[i] = prow
			pr.Rows[i] = int64(len(prow))
			r.Tables[i].addRows(topic, p, prow, w, ok, ords[i])
			for k := 0; k < len(prow); k = skipOffset(prow, k) {
				offs = append(offs, placed{off: prow[k].off, passed: ok && prow[k].off < w})
			}
			// A table's skipped business duplicates are covered by it (a
			// place of their own: one that is also a row is in several).
			for _, off := range slices.Compact(slices.Sorted(slices.Values(skipped[i][p]))) {
				offs = append(offs, placed{off: off, passed: ok && off < w})
				pr.BusinessSkipped++
			}
		}
		if dl != nil {
			pr.DeadLetters = int64(len(dl[p]))
			r.DeadLetters += pr.DeadLetters
			for off := range dl[p] {
				offs = append(offs, placed{off: off, passed: true})
			}
		} else {
			pr.DeadLetters = -1
		}
		slices.SortFunc(offs, func(a, b placed) int { return cmp.Compare(a.off, b.off) })
		next := pr.First // the next offset expected below the watermark
		for k := 0; k < len(offs); {
			off, n, passed := offs[k].off, k, 0
			for ; n < len(offs) && offs[n].off == off; n++ {
				if offs[n].passed {
					passed++
				}
			}
			k = n
			if pr.MinOffset < 0 {
				pr.MinOffset = off
				if pr.First < 0 {
					next = off
				}
			}
			pr.MaxOffset = off
			// In several places is checked wherever the places have passed
			// the offset, not only below the least watermark: two tables
			// past it hold it twice whatever a lagging sibling's watermark
			// is, or whether it has one. A row above its table's watermark
			// is that table's problem (AboveWatermark), not counted here.
			if reason, dead := dl[p][off]; dead && passed == 2 && momentReason(reason) {
				pr.DeadLettersSuperseded++
			} else if passed > 1 {
				pr.InSeveral++
				if len(pr.InSeveralExamples) < maxExamples {
					pr.InSeveralExamples = append(pr.InSeveralExamples, r.places(topic, p, off, tables, prows, skipped, dl))
				}
			}
			// Coverage only below the least watermark, where every table has
			// decided every offset, and from the least first offset.
			if pr.Watermark == NoWatermark || off >= pr.Watermark {
				continue
			}
			if off < pr.First {
				pr.BelowFirst++
				continue
			}
			if off > next {
				pr.addGap(next, off, absent[topic][strconv.Itoa(int(p))], dropped[topic][strconv.Itoa(int(p))])
			}
			next = off + 1
		}
		if next >= 0 && pr.Watermark != NoWatermark && next < pr.Watermark {
			pr.addGap(next, pr.Watermark, absent[topic][strconv.Itoa(int(p))], dropped[topic][strconv.Itoa(int(p))])
		}
		r.Partitions = append(r.Partitions, pr)
	}
	return r, nil
}

// addRows accounts for rows, a partition's of the table sorted by offset:
// rows, duplicates, rows at or above the watermark w (all of them when the
// partition has none: !hasW) and seq order, by ord.
func (tr *RouteTableReport) addRows(topic string, p int32, rows []verifyRow, w int64, hasW bool, ord *orderChecker) {
	for k := 0; k < len(rows); {
		n := skipOffset(rows, k)
		tr.DistinctIDs++
		if copies := n - k; copies > 1 && len(tr.DuplicateExamples) < maxExamples {
			tr.DuplicateExamples = append(tr.DuplicateExamples, fmt.Sprintf("%s/%d@%d×%d", topic, p, rows[k].off, copies))
		}
		if !hasW || rows[k].off >= w {
			tr.AboveWatermark += int64(n - k)
		}
		if ord.next(rows[k]) {
			tr.OrderViolations++
		}
		k = n
	}
	tr.Rows += int64(len(rows))
	tr.DuplicateIDs = tr.Rows - tr.DistinctIDs
}

// placed is one place an offset of a partition is in (a table's row or
// skipped business duplicate, or a dead letter); passed is whether that
// place has decided it: a dead letter, or a table whose watermark is above it.
type placed struct {
	off    int64
	passed bool
}

// places describes where offset off of partition p is: "events/0@17 in
// shop.orders, dead letters" (a row of shop.orders and dead-lettered).
// rows holds each table's rows of p, sorted by offset.
func (r *RoutesReport) places(topic string, p int32, off int64, tables []*Table, rows [][]verifyRow, skipped []map[int32][]int64, dl DeadLetters) string {
	var in []string
	for i, rs := range rows {
		if _, found := slices.BinarySearchFunc(rs, verifyRow{off: off}, byOffset); found {
			in = append(in, tables[i].Name())
		}
		if slices.Contains(skipped[i][p], off) {
			in = append(in, tables[i].Name()+" (skipped business duplicate)")
		}
	}
	if _, dead := dl[p][off]; dead {
		in = append(in, "dead letters")
	}
	return fmt.Sprintf("%s/%d@%d in %s", topic, p, off, strings.Join(in, ", "))
}

// OK reports whether every offset below the least watermark is in exactly
// one place, none is in several places that have passed it, and no table
// has duplicates, rows above its watermark or seq order violations.
func (r *RoutesReport) OK() bool { return len(r.problems()) == 0 }

func (r *RoutesReport) problems() []string {
	var out []string
	for _, t := range r.Tables {
		if p := t.Keys.problem(); p != "" {
			out = append(out, t.Table+": "+p)
		}
		if t.DuplicateIDs > 0 {
			out = append(out, fmt.Sprintf("%s: %s (same topic, partition, offset)", t.Table, plural(t.DuplicateIDs, "duplicate row")))
		}
		if t.AboveWatermark > 0 {
			out = append(out, fmt.Sprintf("%s: %s at or above their partition's watermark", t.Table, plural(t.AboveWatermark, "row")))
		}
		if t.OrderViolations > 0 {
			out = append(out, fmt.Sprintf("%s: %s within (partition, session)", t.Table, plural(t.OrderViolations, "seq order violation")))
		}
		if t.SplitSessions > 0 {
			out = append(out, fmt.Sprintf("%s: %s seen in more than one partition", t.Table, plural(t.SplitSessions, "session")))
		}
	}
	var gaps, several int64
	for _, p := range r.Partitions {
		gaps += p.GapOffsets
		several += p.InSeveral
	}
	if gaps > 0 && len(r.TrimmedDeadLetters) == 0 {
		what := "in no table and not dead letters"
		if r.DeadLetters < 0 {
			what = "in no table (dead-letter topics not read)"
		}
		out = append(out, fmt.Sprintf("%s below the least watermark %s", plural(gaps, "offset"), what))
	}
	if several > 0 {
		out = append(out, fmt.Sprintf("%s in more than one table past them, or a row and a dead letter", plural(several, "offset")))
	}
	return out
}

// WriteText prints the report for a person: a verdict, a line per table and
// per partition, then the problems, each marked "!!".
func (r *RoutesReport) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	problems := r.problems()
	trimmed := len(r.TrimmedDeadLetters) > 0 // gaps not checked
	verdict := "OK"
	if len(problems) > 0 {
		verdict = "!! NOT OK: " + plural(len(problems), "problem")
	}
	names := make([]string, len(r.Tables))
	for i, t := range r.Tables {
		names[i] = t.Table
	}
	ew.printf("verify routes of topic %s (by field: %s): %s\n", r.Topic, strings.Join(names, ", "), verdict)
	for _, t := range r.Tables {
		snap := strconv.FormatInt(t.SnapshotID, 10)
		if t.SnapshotID < 0 {
			snap = "none"
		}
		ew.printf("  %s (group %s, snapshot %s): rows %d, distinct ids %d, duplicates %d, above watermark %d, seq order violations %d, split sessions %d\n",
			t.Table, t.Group, snap, t.Rows, t.DistinctIDs, t.DuplicateIDs, t.AboveWatermark, t.OrderViolations, t.SplitSessions)
	}
	dead := "not read"
	if r.DeadLetters >= 0 {
		dead = strconv.FormatInt(r.DeadLetters, 10)
	}
	var skipped, absent, unchecked, superseded, gaps int64
	for _, p := range r.Partitions {
		skipped += p.BusinessSkipped
		absent += p.AbsentFromLog
		unchecked += p.Unchecked
		superseded += p.DeadLettersSuperseded
		gaps += p.GapOffsets
	}
	ew.printf("  dead letters %s, business duplicates skipped %d\n", dead, skipped)
	ew.missingDLQ(r.MissingDeadLetterTopics)
	ew.trimmedDLQ(r.TrimmedDeadLetters, gaps)
	ew.absent(absent)
	ew.unchecked(unchecked)
	if superseded > 0 {
		ew.printf("  %s superseded by a row (dead-lettered for a reason of the moment, such as enrich_failed, by a flush that did not commit; its redo stored the row; not a problem)\n",
			plural(superseded, "dead letter"))
	}
	if len(r.Partitions) > 0 {
		ew.printf("\n")
		tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "\tpartition\tleast watermark\t%s\tdead letters\tfirst seen\tlast seen\tgap offsets\tin several\t\n", strings.Join(names, "\t"))
		for _, p := range r.Partitions {
			mark := ""
			if (p.GapOffsets > 0 && !trimmed) || p.InSeveral > 0 {
				mark = "!!"
			}
			counts := make([]string, len(p.Rows))
			for i, n := range p.Rows {
				counts[i] = strconv.FormatInt(n, 10)
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t\n", mark, p.Partition, orDash(p.Watermark),
				strings.Join(counts, "\t"), orDash(p.DeadLetters), orDash(p.MinOffset), orDash(p.MaxOffset), p.GapOffsets, p.InSeveral)
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
		if len(p.InSeveralExamples) > 0 {
			ew.printf("!! partition %d offsets in several places: %s\n", p.Partition, strings.Join(p.InSeveralExamples, "; "))
		}
		if p.Watermark == NoWatermark && p.MaxOffset >= 0 {
			ew.printf("   partition %d: a table has no watermark for it, so coverage is not checked\n", p.Partition)
		}
		if p.BelowFirst > 0 {
			ew.belowFirst(p.Partition, p.BelowFirst, p.First)
		}
	}
	for _, t := range r.Tables {
		if len(t.DuplicateExamples) > 0 {
			ew.printf("!! %s duplicate ids: %s\n", t.Table, strings.Join(t.DuplicateExamples, ", "))
		}
	}
	return ew.err
}
