package lakehouse_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// openNamed opens table name of the fixture's catalog for group.
func (f *fixture) openNamed(t *testing.T, name, group string) *lakehouse.Table {
	t.Helper()
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: name, Catalog: f.props, Group: group}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl
}

// TestVerifyRoutes commits one partition routed by field into two tables
// (even offsets to one, odd to the other, 5 dead-lettered), then breaks it:
// an offset in both tables, one in a table and the dead letters, and a
// duplicate within a table; without the dead letters, 5 is a gap.
func TestVerifyRoutes(t *testing.T) {
	f := newFixture(t)
	a := f.openNamed(t, "shop.a", "g.a")
	b := f.openNamed(t, "shop.b", "g.b")
	var even, odd []ev
	for _, e := range clean(0, 0, 12) {
		if e.off%2 == 0 {
			even = append(even, e)
		} else if e.off != 5 {
			odd = append(odd, e)
		}
	}
	f.commitEvents(t, a, 0, 0, 12, lakehouse.NoWatermark, even)
	f.commitEvents(t, b, 0, 0, 10, lakehouse.NoWatermark, odd[:4]) // 1 3 7 9; 11 not committed yet
	dl := dead(0, 5)
	rep, err := lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("clean routing reported problems:\n%s", buf.String())
	}
	p := rep.Partitions[0]
	if p.Watermark != 10 || p.Rows[0] != 6 || p.Rows[1] != 4 || p.DeadLetters != 1 || p.GapOffsets != 0 || p.InSeveral != 0 {
		t.Fatalf("partition 0: %+v\n%s", p, buf.String())
	}
	if rep.Tables[0].Rows != 6 || rep.Tables[1].Rows != 4 || rep.DeadLetters != 1 {
		t.Fatalf("tables %+v, dead letters %d", rep.Tables, rep.DeadLetters)
	}

	// Break it: 4 also in b (a wrong route), 2 also dead-lettered, 3 twice
	// in b; b's next flush moves its watermark to 12.
	f.appendBehindFloe(t, b, 0, []ev{{off: 4, sess: "p0-s4", seq: 4}, {off: 3, sess: "p0-s3", seq: 3}})
	dl = dead(0, 5, 2)
	f.commitEvents(t, b, 0, 10, 12, 10, []ev{{off: 11, sess: "p0-s1", seq: 11}})
	rep, err = lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	t.Log(out)
	// The same with the rows moved to spill files at every row.
	lakehouse.SetVerifySpillRows(t, 1)
	spilled, err := lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := spilled.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if buf.String() != out {
		t.Fatalf("verify with its rows spilled to files:\n%s\nin memory:\n%s", buf.String(), out)
	}
	p = rep.Partitions[0]
	if rep.OK() || p.InSeveral != 2 || rep.Tables[1].DuplicateIDs != 1 || p.Watermark != 12 {
		t.Fatalf("broken routing: in several %d, duplicates in b %d, least watermark %d\n%s",
			p.InSeveral, rep.Tables[1].DuplicateIDs, p.Watermark, out)
	}
	for _, want := range []string{"!! NOT OK", "clicks/0@2 in shop.a, dead letters", "clicks/0@4 in shop.a, shop.b",
		"!! shop.b: 1 duplicate row", "2 offsets in more than one table past them"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}

	// An offset in one table whose only dead letters are for a reason of
	// the moment was stored by the redo of a flush that did not commit:
	// information, not in several places (it was before).
	dl.Add(0, 7, lakehouse.ReasonEnrichFailed)
	dl.Add(0, 8, schemas.ReasonUnknownSchema)
	if rep, err = lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, dl.Read); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if p := rep.Partitions[0]; p.InSeveral != 2 || p.DeadLettersSuperseded != 2 || !strings.Contains(buf.String(), "2 dead letters superseded by a row") {
		t.Fatalf("dead letters of the moment superseded by rows: in several %d, superseded %d\n%s", p.InSeveral, p.DeadLettersSuperseded, buf.String())
	}

	// Without the dead letter of 5 it is a gap.
	rep, err = lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p := rep.Partitions[0]; p.GapOffsets != 1 || p.Gaps[0] != (lakehouse.Gap{From: 5, To: 6}) || rep.DeadLetters != -1 {
		t.Fatalf("without dead letters: gaps %v, dead letters %d", p.Gaps, rep.DeadLetters)
	}
}

// TestVerifyRoutesRefusesMisspeltTopicAndGroup: verifying routes for a
// topic of which their tables hold no offsets while they hold another's
// (a misspelt --topic), or with a group of which a table holds none while
// another group's are there (a misspelt --group), is refused naming what
// the table holds, as Verify does. Before, the first reconciled (nothing
// found, OK) and the second reported every row above the watermark.
func TestVerifyRoutesRefusesMisspeltTopicAndGroup(t *testing.T) {
	f := newFixture(t)
	a := f.openNamed(t, "shop.a", "g.a")
	b := f.openNamed(t, "shop.b", "g.b")
	f.commitEvents(t, a, 0, 0, 4, lakehouse.NoWatermark, clean(0, 0, 4))
	f.commitEvents(t, b, 1, 0, 4, lakehouse.NoWatermark, clean(1, 0, 4))
	_, err := lakehouse.VerifyRoutes(t.Context(), "clickz", []*lakehouse.Table{a, b}, nil)
	if err == nil || !strings.Contains(err.Error(), `table shop.a holds no offsets of topic "clickz", only of `+topic) {
		t.Errorf("misspelt topic: %v, want it refused naming %s", err, topic)
	}
	misspelt := f.openNamed(t, "shop.b", "g.bx")
	_, err = lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, misspelt}, nil)
	if err == nil || !strings.Contains(err.Error(), `table shop.b holds no offsets of topic `+topic+` under group "g.bx", only under g.b`) {
		t.Errorf("misspelt group: %v, want it refused naming g.b", err)
	}
	rep, err := lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, nil)
	if err != nil || rep.Tables[0].Rows != 4 || rep.Tables[1].Rows != 4 {
		t.Fatalf("the routes as written: %+v, %v", rep, err)
	}
}

// TestVerifyRoutesBesideAFlushWithDeadLetters is
// TestVerifyBesideAFlushWithDeadLetters for field routes: the route of odd
// offsets dead-letters 7 and commits its watermark over it while the
// dead-letter topic is read. VerifyRoutes read the dead letters before
// loading the tables and reported 7 as a gap; it now reads them once every
// table is loaded.
func TestVerifyRoutesBesideAFlushWithDeadLetters(t *testing.T) {
	f := newFixture(t)
	a := f.openNamed(t, "shop.a", "g.a")
	b := f.openNamed(t, "shop.b", "g.b")
	split := func(from, to, deadOdd int64) (even, odd []ev) {
		for _, e := range clean(0, from, to, deadOdd) {
			if e.off%2 == 0 {
				even = append(even, e)
			} else {
				odd = append(odd, e)
			}
		}
		return even, odd
	}
	even, odd := split(0, 6, 5)
	f.commitEvents(t, a, 0, 0, 6, lakehouse.NoWatermark, even)
	f.commitEvents(t, b, 0, 0, 6, lakehouse.NoWatermark, odd)
	read := func(context.Context) (lakehouse.DeadLetters, error) {
		letters := dead(0, 5) // the dead-letter topic up to its end offsets
		even, odd := split(6, 10, 7)
		f.commitEvents(t, a, 0, 6, 10, 6, even)
		f.commitEvents(t, b, 0, 6, 10, 6, odd)
		return letters, nil
	}
	rep, err := lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, read)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := rep.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if p := rep.Partitions[0]; !rep.OK() || p.Watermark != 6 || p.GapOffsets != 0 {
		t.Fatalf("verify beside a flush with dead letters: least watermark %d, gaps %v\n%s", p.Watermark, p.Gaps, buf.String())
	}
	// The tables themselves are whole.
	if rep, err = lakehouse.VerifyRoutes(t.Context(), topic, []*lakehouse.Table{a, b}, dead(0, 5, 7).Read); err != nil {
		t.Fatal(err)
	}
	if p := rep.Partitions[0]; !rep.OK() || p.Watermark != 10 || p.DeadLetters != 2 {
		t.Fatalf("after the flush: least watermark %d, dead letters %d", p.Watermark, p.DeadLetters)
	}
}

// TestVerifyRoutesLaggingRouteDoesNotHideDuplicates: three field routes of
// one partition (offset mod 3 picks the table). shop.b and shop.c have
// committed [0,20); shop.a lags at 10 (slow enrichment, a stopped route) or
// has not committed the partition at all (a new route). Alone that is
// healthy. But an offset that is a row of shop.b and of shop.c, both past
// it (the at_risk ranges of --accept-routing-change, or a mis-routing), is
// a duplicate whatever shop.a's watermark is, and so is one that is a row
// of shop.b and a dead letter for a reason not of the moment. VerifyRoutes
// skipped every offset at or above the least watermark, and the whole
// partition without one, so it said OK.
func TestVerifyRoutesLaggingRouteDoesNotHideDuplicates(t *testing.T) {
	for _, c := range []struct {
		name           string
		aTo            int64 // shop.a committed [0,aTo); 0: nothing
		dup            bool  // clicks/0@15 (shop.a's) is also a row of shop.b and shop.c
		dl             lakehouse.DeadLetters
		inSeveral      int64
		superseded     int64
		example        string
		leastWatermark int64
	}{
		{name: "lagging route alone", aTo: 10, leastWatermark: 10},
		{name: "route without a watermark alone", leastWatermark: lakehouse.NoWatermark},
		{name: "two tables past a lagging route", aTo: 10, dup: true, inSeveral: 1,
			example: "clicks/0@15 in shop.b, shop.c", leastWatermark: 10},
		{name: "two tables beside a route without a watermark", dup: true, inSeveral: 1,
			example: "clicks/0@15 in shop.b, shop.c", leastWatermark: lakehouse.NoWatermark},
		{name: "a row and a dead letter past a lagging route", aTo: 10, dl: dead(0, 16), inSeveral: 1,
			example: "clicks/0@16 in shop.b, dead letters", leastWatermark: 10},
		{name: "a row and a dead letter of the moment past a lagging route", aTo: 10,
			dl: func() lakehouse.DeadLetters {
				d := lakehouse.DeadLetters{}
				d.Add(0, 16, lakehouse.ReasonEnrichFailed)
				return d
			}(), superseded: 1, leastWatermark: 10},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t)
			tables := []*lakehouse.Table{f.openNamed(t, "shop.a", "g.a"), f.openNamed(t, "shop.b", "g.b"), f.openNamed(t, "shop.c", "g.c")}
			evs := make([][]ev, len(tables))
			for _, e := range clean(0, 0, 20) {
				evs[e.off%3] = append(evs[e.off%3], e)
			}
			if c.dup {
				evs[1] = append(evs[1], ev{off: 15, sess: "p0-s0", seq: 15})
				evs[2] = append(evs[2], ev{off: 15, sess: "p0-s0", seq: 15})
			}
			if c.aTo > 0 {
				f.commitEvents(t, tables[0], 0, 0, c.aTo, lakehouse.NoWatermark,
					slices.DeleteFunc(evs[0], func(e ev) bool { return e.off >= c.aTo }))
			}
			f.commitEvents(t, tables[1], 0, 0, 20, lakehouse.NoWatermark, evs[1])
			f.commitEvents(t, tables[2], 0, 0, 20, lakehouse.NoWatermark, evs[2])
			rep, err := lakehouse.VerifyRoutes(t.Context(), topic, tables, c.dl.Read)
			if err != nil {
				t.Fatal(err)
			}
			var buf strings.Builder
			if err := rep.WriteText(&buf); err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			t.Logf("\n%s", out)
			p := rep.Partitions[0]
			if rep.OK() != (c.inSeveral == 0) || p.InSeveral != c.inSeveral || p.DeadLettersSuperseded != c.superseded ||
				p.Watermark != c.leastWatermark || p.GapOffsets != 0 {
				t.Fatalf("OK %v, in several %d (want %d), superseded %d (want %d), least watermark %d (want %d), gap offsets %d",
					rep.OK(), p.InSeveral, c.inSeveral, p.DeadLettersSuperseded, c.superseded, p.Watermark, c.leastWatermark, p.GapOffsets)
			}
			if c.example != "" && !strings.Contains(out, c.example) {
				t.Errorf("report lacks %q", c.example)
			}
		})
	}
}
