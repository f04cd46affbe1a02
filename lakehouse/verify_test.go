package lakehouse_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// ev is one clickstream event at a Kafka offset; noSeq leaves seq null.
type ev struct {
	off   int64
	sess  string
	seq   int64
	noSeq bool
}

// events builds the rows of evs in partition p of topic tp.
func (f *fixture) events(t testing.TB, tp string, p int32, evs []ev) arrow.RecordBatch {
	t.Helper()
	b := f.schema.NewBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for _, e := range evs {
		v := fmt.Sprintf(`{"session_id":%q,"event_type":"click","ts":%d,"seq":%d}`, e.sess, 1732860000000+e.off, e.seq)
		if e.noSeq {
			v = fmt.Sprintf(`{"session_id":%q,"event_type":"click","ts":%d}`, e.sess, 1732860000000+e.off)
		}
		if err := b.Append([]byte(v), schemas.Meta{Topic: tp, Partition: p, Offset: e.off, Timestamp: time.UnixMilli(1732860000000)}, time.Now(), "off"); err != nil {
			t.Fatal(err)
		}
	}
	return b.NewRecord()
}

// clean returns well-ordered events for the offsets [from, to) except those
// in skip: five sessions per partition, named after it, with seq increasing
// with offset.
func clean(p int32, from, to int64, skip ...int64) []ev {
	var out []ev
	for o := from; o < to; o++ {
		if !slices.Contains(skip, o) {
			out = append(out, ev{off: o, sess: fmt.Sprintf("p%d-s%d", p, o%5), seq: o})
		}
	}
	return out
}

func span(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// commitEvents commits evs as the flush of [from, to) of topic/p that
// resumed from resume; offsets of the range without an event are what the
// worker dead-lettered.
func (f *fixture) commitEvents(t *testing.T, tbl *lakehouse.Table, p int32, from, to, resume int64, evs []ev) {
	t.Helper()
	part := lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: p, From: from, To: to}, Resume: resume}
	if len(evs) > 0 {
		part.Rows = f.events(t, topic, p, evs)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{part}); err != nil {
		t.Fatal(err)
	}
}

// appendBehindFloe appends rows with a plain iceberg-go transaction,
// bypassing the dedupe MERGE and the offset map: what a second writer or a
// buggy replay would do.
func (f *fixture) appendBehindFloe(t *testing.T, tbl *lakehouse.Table, p int32, evs []ev) {
	t.Helper()
	f.appendPlain(t, tbl, p, evs, nil)
}

// appendPlain appends evs of partition p with a plain iceberg-go
// transaction whose snapshot carries props.
func (f *fixture) appendPlain(t *testing.T, tbl *lakehouse.Table, p int32, evs []ev, props iceberg.Properties) {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rec := f.events(t, topic, p, evs)
	defer rec.Release()
	rdr, err := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	if err != nil {
		t.Fatal(err)
	}
	defer rdr.Release()
	tx := it.NewTransaction()
	if err := tx.Append(t.Context(), rdr, props); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// dead dead-letters offs of partition p as malformed JSON, a reason that
// does not depend on the moment.
func dead(p int32, offs ...int64) lakehouse.DeadLetters {
	d := lakehouse.DeadLetters{}
	for _, o := range offs {
		d.Add(p, o, schemas.ReasonMalformedJSON)
	}
	return d
}

func verify(t *testing.T, tbl *lakehouse.Table, dl lakehouse.DeadLetters) *lakehouse.Report {
	t.Helper()
	r, err := tbl.Verify(t.Context(), topic, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func partitionOf(t *testing.T, r *lakehouse.Report, p int32) lakehouse.PartitionReport {
	t.Helper()
	for _, pr := range r.Partitions {
		if pr.Partition == p {
			return pr
		}
	}
	t.Fatalf("no report for partition %d in %+v", p, r.Partitions)
	return lakehouse.PartitionReport{}
}

func text(t *testing.T, r *lakehouse.Report) string {
	t.Helper()
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

func TestVerifyCleanTable(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	ctx := t.Context()

	f.commitEvents(t, tbl, 0, 0, 50, lakehouse.NoWatermark, clean(0, 0, 50))
	f.commitEvents(t, tbl, 0, 50, 100, 50, clean(0, 50, 100))
	// Partition 1's log was trimmed by retention before floe first read it.
	f.commitEvents(t, tbl, 1, 1000, 1050, lakehouse.NoWatermark, clean(1, 1000, 1050))
	// Rows of another topic in the same table are not this topic's.
	other := lakehouse.Part{Range: lakehouse.Range{Topic: "other", Partition: 0, From: 0, To: 10}, Resume: lakehouse.NoWatermark,
		Rows: f.events(t, "other", 0, clean(0, 0, 10))}
	if _, err := tbl.Commit(ctx, []lakehouse.Part{other}); err != nil {
		t.Fatal(err)
	}

	r := verify(t, tbl, lakehouse.DeadLetters{})
	if !r.OK() {
		t.Fatalf("clean table not OK:\n%s", text(t, r))
	}
	if r.Rows != 150 || r.DistinctIDs != 150 || r.DuplicateIDs != 0 || r.DeadLetters != 0 {
		t.Fatalf("rows %d distinct %d duplicates %d dead letters %d, want 150, 150, 0, 0", r.Rows, r.DistinctIDs, r.DuplicateIDs, r.DeadLetters)
	}
	if r.Sessions != 10 || r.SplitSessions != 0 || r.OrderViolations != 0 {
		t.Fatalf("sessions %d split %d order violations %d, want 10, 0, 0", r.Sessions, r.SplitSessions, r.OrderViolations)
	}
	if len(r.Partitions) != 2 {
		t.Fatalf("%d partitions, want 2: %+v", len(r.Partitions), r.Partitions)
	}
	want := lakehouse.PartitionReport{Partition: 1, Watermark: 1050, Rows: 50, DeadLetters: 0, First: 1000, MinOffset: 1000, MaxOffset: 1049, Coverage: lakehouse.Coverage{Gaps: []lakehouse.Gap{}}}
	if got := partitionOf(t, r, 1); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("partition 1: %+v, want %+v", got, want)
	}
	if s := text(t, r); !strings.Contains(strings.SplitN(s, "\n", 2)[0], ": OK") || strings.Contains(s, "!!") {
		t.Fatalf("text of a clean report:\n%s", s)
	}

	// The JSON form is what `floe verify --json` prints.
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"snapshot_id", "distinct_ids", "duplicate_ids", "dead_letters", "partitions", "split_sessions", "order_violations", "duplicate_examples"} {
		if _, ok := m[k]; !ok {
			t.Fatalf("JSON has no %q: %s", k, b)
		}
	}
	p0 := m["partitions"].([]any)[0].(map[string]any)
	for _, k := range []string{"gap_offsets", "gaps", "above_watermark", "both_row_and_dead_letter", "min_offset"} {
		if _, ok := p0[k]; !ok {
			t.Fatalf("partition JSON has no %q: %s", k, b)
		}
	}
}

func TestVerifyEmptyTable(t *testing.T) {
	f := newFixture(t)
	r := verify(t, f.open(t, "g"), nil)
	if !r.OK() || r.SnapshotID != -1 || r.Rows != 0 || r.DeadLetters != -1 || len(r.Partitions) != 0 {
		t.Fatalf("empty table: %+v", r)
	}
}

// TestVerifyRefusesATopicTheTableNeverHeld: verifying a topic of which the
// table holds no offsets, while it holds another's (a misspelt --topic),
// is an error naming the topics it holds: nothing of it was found, which
// reconciled, and the report said OK.
func TestVerifyRefusesATopicTheTableNeverHeld(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	if _, err := tbl.Verify(t.Context(), "clickz", nil); err != nil {
		t.Fatalf("an empty table: %v, want no error", err)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	_, err := tbl.Verify(t.Context(), "clickz", nil)
	if err == nil || !strings.Contains(err.Error(), `no offsets of topic "clickz", only of `+topic) {
		t.Fatalf("verify of a topic the table never held: %v, want it refused naming %s", err, topic)
	}
	if r := verify(t, tbl, nil); !r.OK() || r.Rows != 10 {
		t.Fatalf("verify of %s: %+v", topic, r)
	}
}

func TestVerifyFindsProblems(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, f *fixture, tbl *lakehouse.Table)
		dl    lakehouse.DeadLetters
		ok    bool
		check func(t *testing.T, r *lakehouse.Report)
	}{
		{
			name: "duplicates appended behind floe",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 20, lakehouse.NoWatermark, clean(0, 0, 20))
				f.appendBehindFloe(t, tbl, 0, clean(0, 5, 8))
			},
			dl: lakehouse.DeadLetters{},
			check: func(t *testing.T, r *lakehouse.Report) {
				if r.Rows != 23 || r.DistinctIDs != 20 || r.DuplicateIDs != 3 {
					t.Fatalf("rows %d distinct %d duplicates %d, want 23, 20, 3", r.Rows, r.DistinctIDs, r.DuplicateIDs)
				}
				if want := []string{"clicks/0@5×2", "clicks/0@6×2", "clicks/0@7×2"}; !slices.Equal(r.DuplicateExamples, want) {
					t.Fatalf("duplicate examples %q, want %q", r.DuplicateExamples, want)
				}
				if r.OrderViolations != 0 {
					t.Fatalf("%d order violations: a duplicate copy was order-checked", r.OrderViolations)
				}
			},
		},
		{
			name: "gap without dead letters",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 100, lakehouse.NoWatermark, clean(0, 0, 100, span(40, 60)...))
			},
			check: func(t *testing.T, r *lakehouse.Report) {
				p := partitionOf(t, r, 0)
				if !slices.Equal(p.Gaps, []lakehouse.Gap{{From: 40, To: 60}}) || p.GapOffsets != 20 {
					t.Fatalf("gaps %v (%d offsets), want [40,60) (20)", p.Gaps, p.GapOffsets)
				}
				if r.DeadLetters != -1 || p.DeadLetters != -1 {
					t.Fatalf("dead letters %d/%d with the topic not read, want -1", r.DeadLetters, p.DeadLetters)
				}
			},
		},
		{
			name: "gaps at both ends of the committed range",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 100, lakehouse.NoWatermark, clean(0, 0, 100, append(span(0, 3), span(90, 100)...)...))
			},
			dl: dead(0, 0),
			check: func(t *testing.T, r *lakehouse.Report) {
				p := partitionOf(t, r, 0)
				want := []lakehouse.Gap{{From: 1, To: 3}, {From: 90, To: 100}}
				if !slices.Equal(p.Gaps, want) || p.GapOffsets != 12 || p.MinOffset != 0 {
					t.Fatalf("gaps %v (%d offsets) from %d, want %v (12) from 0", p.Gaps, p.GapOffsets, p.MinOffset, want)
				}
			},
		},
		{
			name: "dead letters fill the gap",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 100, lakehouse.NoWatermark, clean(0, 0, 100, span(40, 60)...))
			},
			dl: dead(0, span(40, 60)...),
			ok: true,
			check: func(t *testing.T, r *lakehouse.Report) {
				if p := partitionOf(t, r, 0); p.GapOffsets != 0 || p.DeadLetters != 20 || r.DeadLetters != 20 {
					t.Fatalf("partition %+v, report dead letters %d", p, r.DeadLetters)
				}
			},
		},
		{
			name: "dead letters before the first row and after the watermark",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 100, lakehouse.NoWatermark, clean(0, 0, 100, span(0, 10)...))
			},
			// 100 and 101 were dead-lettered by a flush that then did not commit.
			dl: dead(0, append(span(0, 10), 100, 101)...),
			ok: true,
			check: func(t *testing.T, r *lakehouse.Report) {
				if p := partitionOf(t, r, 0); p.MinOffset != 0 || p.MaxOffset != 101 || p.DeadLetters != 12 {
					t.Fatalf("partition %+v", p)
				}
			},
		},
		{
			name: "dead letters partly fill the gap",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 100, lakehouse.NoWatermark, clean(0, 0, 100, span(40, 60)...))
			},
			dl: dead(0, span(40, 50)...),
			check: func(t *testing.T, r *lakehouse.Report) {
				if p := partitionOf(t, r, 0); !slices.Equal(p.Gaps, []lakehouse.Gap{{From: 50, To: 60}}) || p.GapOffsets != 10 {
					t.Fatalf("gaps %v (%d offsets), want [50,60) (10)", p.Gaps, p.GapOffsets)
				}
			},
		},
		{
			name: "row also dead-lettered",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 10, lakehouse.NoWatermark, clean(0, 0, 10))
			},
			dl: dead(0, 5),
			check: func(t *testing.T, r *lakehouse.Report) {
				if p := partitionOf(t, r, 0); p.BothRowAndDeadLetter != 1 || p.GapOffsets != 0 {
					t.Fatalf("partition %+v, want one offset both row and dead letter", p)
				}
			},
		},
		{
			name: "rows above the watermark",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 50, lakehouse.NoWatermark, clean(0, 0, 50))
				// A replay does not move the watermark, so replaying past it
				// leaves rows the watermark does not cover.
				f.commitEvents(t, tbl, 0, 50, 60, lakehouse.Replay, clean(0, 50, 60))
			},
			dl: lakehouse.DeadLetters{},
			check: func(t *testing.T, r *lakehouse.Report) {
				if p := partitionOf(t, r, 0); p.AboveWatermark != 10 || p.Watermark != 50 || p.GapOffsets != 0 {
					t.Fatalf("partition %+v, want 10 rows above watermark 50", p)
				}
			},
		},
		{
			name: "session split across partitions",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 10, lakehouse.NoWatermark, append(clean(0, 0, 9), ev{off: 9, sess: "moved", seq: 1}))
				f.commitEvents(t, tbl, 1, 0, 10, lakehouse.NoWatermark, append(clean(1, 0, 9), ev{off: 9, sess: "moved", seq: 2}))
			},
			dl: lakehouse.DeadLetters{},
			check: func(t *testing.T, r *lakehouse.Report) {
				if r.SplitSessions != 1 || r.Sessions != 11 {
					t.Fatalf("split %d of %d sessions, want 1 of 11", r.SplitSessions, r.Sessions)
				}
				if want := []string{"moved (partitions 0, 1)"}; !slices.Equal(r.SplitSessionExamples, want) {
					t.Fatalf("examples %q, want %q", r.SplitSessionExamples, want)
				}
			},
		},
		{
			name: "seq order violations",
			setup: func(t *testing.T, f *fixture, tbl *lakehouse.Table) {
				f.commitEvents(t, tbl, 0, 0, 9, lakehouse.NoWatermark, []ev{
					{off: 0, sess: "a", seq: 1},
					{off: 1, sess: "b", seq: 1},
					{off: 2, sess: "a", seq: 3},
					{off: 3, sess: "a", seq: 2}, // 3 → 2
					{off: 4, sess: "b", seq: 2},
					{off: 5, sess: "a", noSeq: true}, // skipped
					{off: 6, sess: "a", seq: 4},
					{off: 7, sess: "b", seq: 2}, // 2 → 2
					{off: 8, sess: "c", seq: 0},
				})
				// The same sessions in another partition are split, but their
				// order is checked per partition.
				f.commitEvents(t, tbl, 1, 0, 2, lakehouse.NoWatermark, []ev{{off: 0, sess: "a", seq: 0}, {off: 1, sess: "b", seq: 1}})
			},
			dl: lakehouse.DeadLetters{},
			check: func(t *testing.T, r *lakehouse.Report) {
				if r.OrderViolations != 2 {
					t.Fatalf("%d order violations, want 2", r.OrderViolations)
				}
				if r.SplitSessions != 2 {
					t.Fatalf("%d split sessions, want 2", r.SplitSessions)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			tbl := f.open(t, "g")
			tc.setup(t, f, tbl)
			r := verify(t, tbl, tc.dl)
			tc.check(t, r)
			s := text(t, r)
			// The same with the rows moved to spill files every 2 rows.
			lakehouse.SetVerifySpillRows(t, 2)
			spilled := verify(t, tbl, tc.dl)
			tc.check(t, spilled)
			if s2 := text(t, spilled); s2 != s {
				t.Fatalf("verify with its rows spilled to files:\n%s\nin memory:\n%s", s2, s)
			}
			if r.OK() != tc.ok {
				t.Fatalf("OK() = %v, want %v:\n%s", r.OK(), tc.ok, s)
			}
			if !tc.ok && (!strings.Contains(strings.SplitN(s, "\n", 2)[0], "NOT OK") || !strings.Contains(s, "\n!! ")) {
				t.Fatalf("text does not mark the problem:\n%s", s)
			}
			t.Logf("\n%s", s)
		})
	}
}

// TestVerifyRowSupersedingDeadLetterOfTheMoment: a flush dead-letters
// records for a reason of the moment (the enrichment service down under
// policy dlq, a schema id the registry does not know yet, a writer schema
// the table has not evolved for), its commit never lands, and the redo
// stores them as rows. Each offset is then a row and a dead letter, which
// verify reported as a problem (NOT OK, exit 1) although nothing was lost
// or duplicated. Such an offset is now information; one that also has a
// dead letter for a reason of the record stays a problem, whichever letter
// was read first.
func TestVerifyRowSupersedingDeadLetterOfTheMoment(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	f.commitEvents(t, tbl, 0, 0, 10, lakehouse.NoWatermark, clean(0, 0, 10))
	dl := lakehouse.DeadLetters{}
	dl.Add(0, 2, lakehouse.ReasonEnrichFailed)
	dl.Add(0, 3, schemas.ReasonUnknownSchema)
	dl.Add(0, 4, schemas.ReasonIncompatibleSchema)
	dl.Add(0, 4, lakehouse.ReasonEnrichFailed) // dead-lettered by two flushes, neither committed
	r := verify(t, tbl, dl)
	s := text(t, r)
	p := partitionOf(t, r, 0)
	if !r.OK() || p.DeadLettersSuperseded != 3 || p.BothRowAndDeadLetter != 0 || p.DeadLetters != 3 || p.GapOffsets != 0 {
		t.Fatalf("rows superseding dead letters of the moment: OK %v, partition %+v\n%s", r.OK(), p, s)
	}
	if !strings.Contains(s, "3 dead letters superseded by a row") || strings.Contains(s, "!!") {
		t.Fatalf("text of rows superseding dead letters of the moment:\n%s", s)
	}

	// A record that is malformed was never a row, at any moment.
	dl.Add(0, 6, schemas.ReasonMalformedJSON)
	dl.Add(0, 7, schemas.ReasonMissingField)
	dl.Add(0, 7, lakehouse.ReasonEnrichFailed)
	dl.Add(0, 8, lakehouse.ReasonEnrichFailed)
	dl.Add(0, 8, schemas.ReasonTooLarge)
	r = verify(t, tbl, dl)
	s = text(t, r)
	p = partitionOf(t, r, 0)
	if r.OK() || p.BothRowAndDeadLetter != 3 || p.DeadLettersSuperseded != 3 {
		t.Fatalf("rows also dead-lettered for a reason of the record: OK %v, partition %+v\n%s", r.OK(), p, s)
	}
	if !strings.Contains(s, "!! 3 offsets both a row and a dead letter") {
		t.Fatalf("text does not mark the rows also dead-lettered for a reason of the record:\n%s", s)
	}
}

// TestVerifyBesideAFlushWithDeadLetters verifies while a live job's flush
// lands during the dead-letter read: after the read took the dead-letter
// topic's end offsets, the flush writes its dead letter (7, which the read
// does not return) and commits a watermark over it. Verify read the dead
// letters before loading the table, so it saw that commit and reported 7 as
// a gap of a table without any (floe verify beside floe run, exit 1); it now
// loads first and sees the watermark the dead letters it read cover.
func TestVerifyBesideAFlushWithDeadLetters(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	f.commitEvents(t, tbl, 0, 0, 5, lakehouse.NoWatermark, clean(0, 0, 5, 2))
	read := func(context.Context) (lakehouse.DeadLetters, error) {
		letters := dead(0, 2) // the dead-letter topic up to its end offsets
		f.commitEvents(t, tbl, 0, 5, 10, 5, clean(0, 5, 10, 7))
		return letters, nil
	}
	r, err := tbl.Verify(t.Context(), topic, read)
	if err != nil {
		t.Fatal(err)
	}
	if p := partitionOf(t, r, 0); !r.OK() || p.Watermark != 5 || p.GapOffsets != 0 {
		t.Fatalf("verify beside a flush with dead letters: watermark %d, gaps %v\n%s", p.Watermark, p.Gaps, text(t, r))
	}
	// The table itself is whole.
	if r := verify(t, tbl, dead(0, 2, 7)); !r.OK() || r.Rows != 8 || r.DeadLetters != 2 {
		t.Fatalf("after the flush: rows %d, dead letters %d\n%s", r.Rows, r.DeadLetters, text(t, r))
	}
}

// TestVerifyWithoutWatermark: rows a replay wrote into a table no live
// job has committed to are above the group's watermarks, which it has none
// of.
func TestVerifyWithoutWatermark(t *testing.T) {
	f := newFixture(t)
	f.commitEvents(t, f.open(t, "g"), 0, 0, 10, lakehouse.Replay, clean(0, 0, 10))
	r := verify(t, f.open(t, "g"), lakehouse.DeadLetters{})
	if p := partitionOf(t, r, 0); r.OK() || p.Watermark != -1 || p.AboveWatermark != 10 {
		t.Fatalf("OK %v, partition %+v", r.OK(), p)
	}
}

// TestVerifyRefusesAGroupTheTableNeverHeld: verifying with a group of
// which the table holds no offsets of the topic, while another group's
// are there (a misspelt --group, a group renamed in the config), is an
// error naming the groups it holds: every row was reported above the
// watermark, a table that does not reconcile.
func TestVerifyRefusesAGroupTheTableNeverHeld(t *testing.T) {
	f := newFixture(t)
	f.commitEvents(t, f.open(t, "g"), 0, 0, 10, lakehouse.NoWatermark, clean(0, 0, 10))
	// A replay under another group leaves that group an empty map.
	f.commitEvents(t, f.open(t, "h"), 1, 0, 5, lakehouse.Replay, clean(1, 0, 5))
	for _, group := range []string{"gx", "h"} {
		_, err := f.open(t, group).Verify(t.Context(), topic, nil)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf(`no offsets of topic %s under group %q, only under g`, topic, group)) {
			t.Errorf("verify with group %s: %v, want it refused naming %s and g", group, err, group)
		}
	}
	r := verify(t, f.open(t, "g"), nil)
	if p := partitionOf(t, r, 0); r.Rows != 15 || p.Watermark != 10 || p.AboveWatermark != 0 {
		t.Fatalf("verify with group g: %s", text(t, r))
	}
}

// BenchmarkVerify verifies a table of 1.2 M rows in 12 partitions (in
// commits of 50 k rows per partition, like a pipeline's flushes) and reports
// rows verified per second and the peak Go heap of one verify.
func BenchmarkVerify(b *testing.B) {
	const partitions, perPartition, perFlush = 12, 100_000, 50_000
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	f := &fixture{dir: dir, schema: sc, props: map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"),
		"sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}}
	tbl, err := lakehouse.Open(b.Context(), lakehouse.Config{Table: "analytics.clicks", Catalog: f.props, Group: "g"}, sc)
	if err != nil {
		b.Fatal(err)
	}
	defer tbl.Close()
	for from := int64(0); from < perPartition; from += perFlush {
		parts := make([]lakehouse.Part, partitions)
		for p := range int32(partitions) {
			evs := make([]ev, 0, perFlush)
			for o := from; o < from+perFlush; o++ {
				evs = append(evs, ev{off: o, sess: fmt.Sprintf("p%d-s%d", p, o%5000), seq: o})
			}
			resume := from
			if from == 0 {
				resume = lakehouse.NoWatermark
			}
			parts[p] = lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: p, From: from, To: from + perFlush},
				Resume: resume, Rows: f.events(b, topic, p, evs)}
		}
		if _, err := tbl.Commit(b.Context(), parts); err != nil {
			b.Fatal(err)
		}
	}

	// In memory (the default budget holds the 1.2 M rows), and with the
	// rows moved to spill files every 100,000 (a partition's worth).
	for _, spill := range []int{0, 100_000} {
		name := "memory"
		if spill > 0 {
			name = fmt.Sprintf("spill-%d", spill)
		}
		b.Run(name, func(b *testing.B) {
			if spill > 0 {
				lakehouse.SetVerifySpillRows(b, spill)
			}
			benchVerify(b, tbl, partitions*perPartition)
		})
	}
}

// benchVerify verifies tbl, of rows rows, reporting its rate and the most
// heap it held above what was live before.
func benchVerify(b *testing.B, tbl *lakehouse.Table, rows int) {
	var peak uint64
	for b.Loop() {
		b.StopTimer()
		runtime.GC()
		before := heapObjects()
		b.StartTimer()
		done := make(chan struct{})
		sampled := make(chan uint64, 1)
		go func() {
			high := heapObjects()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-done:
					sampled <- high
					return
				case <-tick.C:
					high = max(high, heapObjects())
				}
			}
		}()
		r, err := tbl.Verify(b.Context(), topic, nil)
		close(done)
		if high := <-sampled; high > before {
			peak = max(peak, high-before)
		}
		if err != nil {
			b.Fatal(err)
		}
		if !r.OK() || r.Rows != int64(rows) {
			b.Fatalf("OK %v rows %d", r.OK(), r.Rows)
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

// heapObjects is the heap held by objects, garbage not yet swept included;
// unlike runtime.ReadMemStats it does not stop the world.
func heapObjects() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestVerifyReportsPartitionCountChange: the partition counts the commits
// recorded show a topic that grew while ingesting.
func TestVerifyReportsPartitionCountChange(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	ctx := t.Context()
	tbl.SetPartitionCount(topic, 4)
	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 0, 10, lakehouse.NoWatermark)}); err != nil {
		t.Fatal(err)
	}
	r, err := tbl.Verify(ctx, topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.PartitionCounts, []int{4}) {
		t.Fatalf("partition counts %v, want [4]", r.PartitionCounts)
	}
	tbl.SetPartitionCount(topic, 6)
	if _, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, 10, 20, 10)}); err != nil {
		t.Fatal(err)
	}
	if r, err = tbl.Verify(ctx, topic, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.PartitionCounts, []int{4, 6}) {
		t.Fatalf("partition counts %v, want [4 6]", r.PartitionCounts)
	}
	var out strings.Builder
	if err := r.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "partition count changed while ingesting: 4 → 6") {
		t.Fatalf("report text lacks the change:\n%s", out.String())
	}
}

// TestPartitionCountChangeOutlivesExpiry: the partition counts the
// commits recorded outlive the expiry of those commits' snapshots: verify
// still says the count changed while ingesting (and doctor, from
// PartitionCountsOf). Maintenance carried only the newest count, so once
// the snapshots of the old one were expired verify reported the split
// sessions without their cause. Expiry keeps the snapshots recording the
// counts until a maintenance snapshot carries them all, then drops them.
func TestPartitionCountChangeOutlivesExpiry(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	ctx := t.Context()
	for i, n := range []int{4, 4, 6, 6, 8} {
		tbl.SetPartitionCount(topic, n)
		from := int64(10 * i)
		resume := from
		if i == 0 {
			resume = lakehouse.NoWatermark
		}
		if _, err := tbl.Commit(ctx, []lakehouse.Part{f.part(t, 0, from, from+10, resume)}); err != nil {
			t.Fatal(err)
		}
	}
	check := func(when string) {
		t.Helper()
		r, err := tbl.Verify(ctx, topic, nil)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		if err := r.WriteText(&out); err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(r.PartitionCounts, []int{4, 6, 8}) || !strings.Contains(out.String(), "partition count changed while ingesting: 4 → 6 → 8") {
			t.Fatalf("%s: partition counts %v\n%s", when, r.PartitionCounts, out.String())
		}
	}
	check("before maintenance")
	for round := range 2 {
		time.Sleep(20 * time.Millisecond)
		rep, err := tbl.Maintain(ctx, lakehouse.MaintainOptions{ExpireOlderThan: time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		check(fmt.Sprintf("after maintenance %d (%d snapshots expired)", round, rep.SnapshotsExpired))
		it, err := tbl.Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := lakehouse.PartitionCountsOf(it, topic); !slices.Equal(got, []int{4, 6, 8}) {
			t.Fatalf("after maintenance %d: PartitionCountsOf = %v", round, got)
		}
		if round == 1 && len(it.Metadata().Snapshots()) > 2 {
			t.Errorf("%d snapshots after two maintenance runs: the counts' snapshots were never expired", len(it.Metadata().Snapshots()))
		}
	}
}

// TestVerifyOffsetsAbsentFromLog: offsets a flush recorded as absent from
// the log (Part.Absent: compacted, or deleted by retention before they were
// read) are covered, whether they lie inside its range or between the
// previous watermark and its range; an uncovered offset next to them is
// still a gap. Verify reported every one of them as a gap.
func TestVerifyOffsetsAbsentFromLog(t *testing.T) {
	f := newFixture(t)
	tbl := f.open(t, "g")
	commit := func(from, to, resume int64, evs []ev, absent ...[2]int64) {
		t.Helper()
		part := lakehouse.Part{Range: lakehouse.Range{Topic: topic, Partition: 0, From: from, To: to}, Resume: resume,
			Rows: f.events(t, topic, 0, evs), Absent: absent}
		if _, err := tbl.Commit(t.Context(), []lakehouse.Part{part}); err != nil {
			t.Fatal(err)
		}
	}
	// [3, 6) absent inside the range, 6 neither a row nor absent.
	commit(0, 10, lakehouse.NoWatermark, clean(0, 0, 10, 3, 4, 5, 6), [2]int64{3, 6})
	// The next record read after watermark 10 was 20.
	commit(20, 30, 10, clean(0, 20, 30), [2]int64{10, 20})

	r := verify(t, tbl, lakehouse.DeadLetters{})
	p := partitionOf(t, r, 0)
	if r.AbsentFromLog != 13 || p.AbsentFromLog != 13 || p.GapOffsets != 1 || fmt.Sprint(p.Gaps) != "[[6,7)]" {
		t.Fatalf("absent %d (partition %d), gaps %v (%d offsets); want 13 absent and the gap [6,7)", r.AbsentFromLog, p.AbsentFromLog, p.Gaps, p.GapOffsets)
	}
	if s := text(t, r); !strings.Contains(s, "13 offsets absent from the log") || !strings.Contains(s, "!! partition 0 gaps: [6,7)") {
		t.Fatalf("text:\n%s", s)
	}

	// Once the gap is dead-lettered, the table reconciles.
	if r = verify(t, tbl, lakehouse.DeadLetters{0: {6: "malformed_json"}}); !r.OK() {
		t.Fatalf("not OK with offset 6 dead-lettered:\n%s", text(t, r))
	}
}
