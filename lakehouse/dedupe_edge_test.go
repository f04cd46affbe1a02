package lakehouse_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// TestDedupeEmptyKeyIsNoKey: records whose payment_id is "" (an unset
// proto3 string, an optional JSON string sent empty) identify nothing: none
// is dropped as a business duplicate, in the flush or against the table.
func TestDedupeEmptyKeyIsNoKey(t *testing.T) {
	f := newPayFixture(t)
	// payment_id optional: JSON then accepts "" (a required one must not
	// be empty).
	sc, err := schemas.ParseAvsc("optional-id.avsc", []byte(`{"type":"record","name":"Payment",
		"floe.event-time":"created_at","floe.dedupe-key":"payment_id","fields":[
		{"name":"payment_id","type":["null","string"],"default":null},{"name":"currency","type":"string"},
		{"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	f.schema = sc
	tbl := f.open(t)
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, 0, 4, lakehouse.NoWatermark, pay{0, "", 5}, pay{1, "A", 5}, pay{2, "", 5}, pay{3, "A", 5}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 3 || res.BusinessDuplicates != 1 {
		t.Fatalf("rows %d, business duplicates %d; want 3, 1 (only the second A)", res.Rows, res.BusinessDuplicates)
	}
	res, err = tbl.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 1, 0, 2, lakehouse.NoWatermark, pay{0, "", 5}, pay{1, "B", 5}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 2 || res.BusinessDuplicates != 0 {
		t.Fatalf("second flush: rows %d, business duplicates %d; want 2, 0", res.Rows, res.BusinessDuplicates)
	}
	got := payments(t, tbl)
	if e := got[""]; len(e) != 3 {
		t.Fatalf("rows without a payment_id at %v, want 3 (0@0, 0@2, 1@0)", e)
	}
	rep := verifyPay(t, tbl)
	if !rep.OK() || rep.DistinctKeys != 2 || rep.DuplicateKeys != 0 || rep.BusinessSkipped != 1 {
		t.Fatalf("verify: OK %v, distinct keys %d, duplicate keys %d, skipped %d; want true, 2, 0, 1",
			rep.OK(), rep.DistinctKeys, rep.DuplicateKeys, rep.BusinessSkipped)
	}
}

func verifyPay(t *testing.T, tbl *lakehouse.Table) *lakehouse.Report {
	t.Helper()
	rep, err := tbl.Verify(t.Context(), payTopic, lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestSetDedupeRejectsKeysWithoutPresence: a numeric key whose unset value
// would decode as 0 is refused with an error naming the key: an optional
// column, and a plain-Protobuf field without presence. A proto3 optional
// field is accepted, and so is a string key without presence ("" is no key).
func TestSetDedupeRejectsKeysWithoutPresence(t *testing.T) {
	f := newPayFixture(t)
	avsc := []byte(`{"type":"record","name":"R","fields":[
		{"name":"id","type":"string"},{"name":"n","type":"long"},{"name":"o","type":["null","long"],"default":null}]}`)
	base, err := schemas.ParseAvsc("r.avsc", avsc)
	if err != nil {
		t.Fatal(err)
	}
	open := func(name string, sc *schemas.Schema) *lakehouse.Table {
		tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "fin." + name, Catalog: f.props, Group: "g"}, sc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tbl.Close() })
		return tbl
	}
	withProto := func(decl string) *schemas.Schema {
		dir := t.TempDir()
		file := filepath.Join(dir, "r.proto")
		text := "syntax = \"proto3\";\nmessage R {\n  string id = 1;\n  " + decl + " n = 2;\n  optional int64 o = 3;\n}\n"
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		sc, err := base.WithFormat(schemas.Format{Kind: schemas.FormatProtobuf, Proto: &schemas.ProtoConfig{File: file, Message: "R"}})
		if err != nil {
			t.Fatal(err)
		}
		return sc
	}
	plain := open("plain", base)
	implicit := open("implicit", withProto("int64"))
	explicit := open("explicit", withProto("optional int64"))
	for _, c := range []struct {
		tbl  *lakehouse.Table
		key  string
		want string // "" accepts
	}{
		{plain, "n", ""},
		{plain, "id", ""},
		{plain, "o", `dedupe key "o": column is an optional long; a numeric key must be a required column`},
		{implicit, "n", `dedupe key "n": column "n": field n of message R has no presence`},
		{implicit, "id", ""},
		{explicit, "n", ""},
	} {
		err := c.tbl.SetDedupe(lakehouse.Dedupe{Key: c.key})
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: SetDedupe(%s) = %v, want accepted", c.tbl.Name(), c.key, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: SetDedupe(%s) = %v, want %q", c.tbl.Name(), c.key, err, c.want)
		}
	}
	if err := withProto("int64").CheckKeyPresence("n"); err == nil {
		t.Error("CheckKeyPresence(n) of a proto3 int64 without optional = nil")
	}
}

// TestDedupeSkippedOffsetsSurviveExpiry: offsets skipped as business
// duplicates stay covered after Maintain expires every snapshot it may,
// whether or not it wrote a snapshot carrying their union (compaction on
// or off): verify finds no gaps.
func TestDedupeSkippedOffsetsSurviveExpiry(t *testing.T) {
	for _, c := range []struct {
		name    string
		minIn   int
		carrier bool
	}{{"compacted", 2, true}, {"not compacted", 100, false}} {
		t.Run(c.name, func(t *testing.T) {
			f := newPayFixture(t)
			tbl := f.open(t)
			// Five flushes, each repeating the key of the one before it.
			for i := range int64(5) {
				resume := 2 * i
				if i == 0 {
					resume = lakehouse.NoWatermark
				}
				res, err := tbl.Commit(t.Context(), []lakehouse.Part{
					f.part(t, 0, 2*i, 2*i+2, resume, pay{2 * i, string(rune('A' + i)), 5}, pay{2*i + 1, string(rune('A' + max(i-1, 0))), 5}),
				})
				if err != nil {
					t.Fatal(err)
				}
				if res.BusinessDuplicates != 1 {
					t.Fatalf("flush %d: business duplicates %d, want 1", i, res.BusinessDuplicates)
				}
			}
			before := verifyPay(t, tbl)
			if !before.OK() || before.BusinessSkipped != 5 {
				t.Fatalf("before maintenance: OK %v, skipped %d", before.OK(), before.BusinessSkipped)
			}
			time.Sleep(20 * time.Millisecond)
			rep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: c.minIn, ExpireOlderThan: time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			it, err := tbl.Load(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			carried := it.CurrentSnapshot().Summary.Properties[lakehouse.BusinessCarriedKey]
			if c.carrier {
				if rep.SnapshotsExpired < 5 || len(it.Metadata().Snapshots()) > 2 {
					t.Fatalf("expired %d, %d snapshots left; want the five flushes expired", rep.SnapshotsExpired, len(it.Metadata().Snapshots()))
				}
				if want := `{"payments":{"0":[[1,2],[3,4],[5,6],[7,8],[9,10]]}}`; carried != want {
					t.Fatalf("head's %s = %q, want %s", lakehouse.BusinessCarriedKey, carried, want)
				}
			}
			after := verifyPay(t, tbl)
			if !after.OK() || after.BusinessSkipped != 5 || after.Rows != 5 {
				t.Fatalf("after maintenance (expired %d, carried %q): OK %v, rows %d, skipped %d, partitions %+v",
					rep.SnapshotsExpired, carried, after.OK(), after.Rows, after.BusinessSkipped, after.Partitions)
			}
		})
	}
}

// TestVerifyKeyRepeatedBeyondWindow: with a 72h window the MERGE does not
// search a copy 9 days older, so both are kept; verify reports the key as
// repeated beyond the window (information) and stays OK. A copy within the
// window written behind the MERGE's back is still a duplicate.
func TestVerifyKeyRepeatedBeyondWindow(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	window := lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}
	if err := tbl.SetDedupe(window); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 2, lakehouse.NoWatermark, pay{0, "A", 1}, pay{1, "B", 1})}); err != nil {
		t.Fatal(err)
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 2, 3, 2, pay{2, "A", 10})})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || res.BusinessDuplicates != 0 {
		t.Fatalf("copy beyond the window: rows %d, business duplicates %d; want 1, 0", res.Rows, res.BusinessDuplicates)
	}
	rep := verifyPay(t, tbl)
	if !rep.OK() || rep.DuplicateKeys != 0 || rep.KeysBeyondWindow != 1 {
		t.Fatalf("verify: OK %v, duplicate keys %d, beyond window %d; want true, 0, 1", rep.OK(), rep.DuplicateKeys, rep.KeysBeyondWindow)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := "1 key repeated beyond the dedupe window"; !strings.Contains(out.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, out.String())
	}

	// B again two days later, with the MERGE off: within the window.
	if err := tbl.SetDedupe(lakehouse.Dedupe{}); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 3, 4, 3, pay{3, "B", 3})}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.SetDedupe(window); err != nil {
		t.Fatal(err)
	}
	rep = verifyPay(t, tbl)
	if rep.OK() || rep.DuplicateKeys != 1 || rep.KeysBeyondWindow != 1 {
		t.Fatalf("verify: OK %v, duplicate keys %d, beyond window %d; want false, 1, 1", rep.OK(), rep.DuplicateKeys, rep.KeysBeyondWindow)
	}
	if want := "B (payments/0@1, payments/0@3)"; len(rep.DuplicateKeyExamples) != 1 || rep.DuplicateKeyExamples[0] != want {
		t.Fatalf("examples %v, want [%s]", rep.DuplicateKeyExamples, want)
	}
}

// TestDedupeWindowWithRowsWithoutEventTime: a row without an event time
// matches any copy of its key, and makes the flush's search read every file
// of its keys; the other rows are still matched within the window of their
// own event time. p-1 of day 1 reused on day 20 was skipped when its flush
// also held a record without created_at: the search was unbounded, and any
// copy found skipped the row.
func TestDedupeWindowWithRowsWithoutEventTime(t *testing.T) {
	tbl, sc := payTable(t, `{"type": "record", "name": "Pay", "floe.key": "id", "floe.dedupe-key": "id",
	  "floe.event-time": "created_at",
	  "fields": [{"name": "id", "type": "string"}, {"name": "created_at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}]}`)
	if err := tbl.SetDedupe(lakehouse.Dedupe{Key: "id", Window: 72 * time.Hour}); err != nil {
		t.Fatal(err)
	}
	day := func(d int) string {
		return fmt.Sprint(time.Date(2024, 11, d, 10, 0, 0, 0, time.UTC).UnixMicro())
	}
	commit := func(from, resume int64, values ...string) lakehouse.Result {
		b := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
		defer b.Release()
		for i, v := range values {
			if err := b.Append([]byte(v), schemas.Meta{Topic: "pay", Partition: 0, Offset: from + int64(i)}, time.Now(), ""); err != nil {
				t.Fatal(err)
			}
		}
		res, err := tbl.Commit(t.Context(), []lakehouse.Part{{
			Range: lakehouse.Range{Topic: "pay", Partition: 0, From: from, To: from + int64(len(values))}, Resume: resume, Rows: b.NewRecord()}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	commit(0, lakehouse.NoWatermark, `{"id":"p-1","created_at":`+day(1)+`}`, `{"id":"p-2","created_at":`+day(1)+`}`)
	res := commit(2, 2,
		`{"id":"p-1","created_at":`+day(20)+`}`, // beyond the window of day 1: kept
		`{"id":"p-2","created_at":null}`,        // no event time: a copy of day 1's
		`{"id":"q","created_at":null}`,          // no copy: kept
		`{"id":"q","created_at":`+day(20)+`}`)   // matches q without an event time
	if res.Rows != 2 || res.BusinessDuplicates != 2 {
		t.Fatalf("rows %d, business duplicates %d; want 2 (p-1 of day 20, q), 2 (p-2 and q without and with an event time)", res.Rows, res.BusinessDuplicates)
	}
	rep, err := tbl.Verify(t.Context(), "pay", lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.DistinctKeys != 3 || rep.KeysBeyondWindow != 1 || rep.DuplicateKeys != 0 || rep.BusinessSkipped != 2 {
		t.Fatalf("verify OK %v, distinct keys %d, beyond window %d, duplicate keys %d, skipped %d; want true, 3, 1, 0, 2",
			rep.OK(), rep.DistinctKeys, rep.KeysBeyondWindow, rep.DuplicateKeys, rep.BusinessSkipped)
	}
}

// TestDedupeEventTimesNearTheLongLimits: created_at is any long in the
// table (floe's decoders refuse times outside the years 0001 to 9999, but
// another engine may write them), and the window's arithmetic stops at the
// int64 limits. Before, a flush holding an event time near the upper limit
// wrapped its search bound around: the search matched no file and a
// retried payment of the same flush was committed twice; and verify,
// subtracting copies near both limits, took them for copies within the
// window (a duplicate) instead of copies beyond.
func TestDedupeEventTimesNearTheLongLimits(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{withCreatedAt(t, f.partAt(t, 0, 0, 2, lakehouse.NoWatermark,
		payAt{0, "A", `"2024-11-05T10:00:00Z"`}, payAt{1, "Z", "0"}), 1, -9223372036854775000)}); err != nil {
		t.Fatal(err)
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{withCreatedAt(t, f.partAt(t, 0, 2, 4, 2,
		payAt{2, "A", `"2024-11-05T10:00:01Z"`}, payAt{3, "Z", "0"}), 1, 9223372036854775000)})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 || res.BusinessDuplicates != 1 {
		t.Fatalf("rows %d, business duplicates %d; want 1, 1 (the retried A skipped, Z kept)", res.Rows, res.BusinessDuplicates)
	}
	if got := payments(t, tbl); len(got["A"]) != 1 || len(got["Z"]) != 2 {
		t.Fatalf("table holds %v, want A once and Z twice", got)
	}
	rep := verifyPay(t, tbl)
	if !rep.OK() || rep.DuplicateKeys != 0 || rep.KeysBeyondWindow != 1 {
		t.Fatalf("verify: OK %v, duplicate keys %d (%v), beyond window %d; want true, 0, 1 (Z)",
			rep.OK(), rep.DuplicateKeys, rep.DuplicateKeyExamples, rep.KeysBeyondWindow)
	}
}

// withCreatedAt returns part with the created_at of its row i set to us
// (microseconds), beyond what the decoders take.
func withCreatedAt(t *testing.T, part lakehouse.Part, i int, us int64) lakehouse.Part {
	t.Helper()
	rec := part.Rows
	idx := rec.Schema().FieldIndices("created_at")
	if len(idx) != 1 {
		t.Fatal("no created_at column")
	}
	col := rec.Column(idx[0]).(*array.Timestamp)
	b := array.NewTimestampBuilder(memory.DefaultAllocator, col.DataType().(*arrow.TimestampType))
	defer b.Release()
	for j := range col.Len() {
		switch {
		case j == i:
			b.Append(arrow.Timestamp(us))
		case col.IsNull(j):
			b.AppendNull()
		default:
			b.Append(col.Value(j))
		}
	}
	set := b.NewArray()
	defer set.Release()
	cols := make([]arrow.Array, rec.NumCols())
	for j := range cols {
		cols[j] = rec.Column(j)
	}
	cols[idx[0]] = set
	part.Rows = array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	rec.Release()
	return part
}

// TestVerifyRowAtBusinessSkippedOffset: a row at an offset a snapshot
// recorded as a skipped business duplicate (here a replay made with the
// MERGE off) is a contradiction verify counts as a problem.
func TestVerifyRowAtBusinessSkippedOffset(t *testing.T) {
	f := newPayFixture(t)
	tbl := f.open(t)
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 2, lakehouse.NoWatermark, pay{0, "A", 5}, pay{1, "A", 5})}); err != nil {
		t.Fatal(err)
	}
	if err := tbl.SetDedupe(lakehouse.Dedupe{}); err != nil {
		t.Fatal(err)
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 2, lakehouse.Replay, pay{0, "A", 5}, pay{1, "Z", 5})})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows != 1 {
		t.Fatalf("replay wrote %d rows, want 1 (offset 1)", res.Rows)
	}
	rep := verifyPay(t, tbl)
	if rep.OK() || partitionOf(t, rep, 0).BothRowAndBusinessSkipped != 1 {
		t.Fatalf("verify: OK %v, partition 0 %+v; want a row at a skipped offset", rep.OK(), partitionOf(t, rep, 0))
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := "!! 1 offset both a row and recorded as a skipped business duplicate"; !strings.Contains(out.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, out.String())
	}
}

// TestDedupeRecheckSeesOverwrite: another writer's overwrite snapshot (as a
// Spark MERGE INTO makes) adds payment K between a member's MERGE and its
// commit. An incremental append scan would not see it; the re-check falls
// back to searching the table and drops the member's copy of K.
func TestDedupeRecheckSeesOverwrite(t *testing.T) {
	f := newPayFixture(t)
	cat, err := lakehouse.OpenCatalog(t.Context(), f.props)
	if err != nil {
		t.Fatal(err)
	}
	// Q is in the table before the member's MERGE; the overwrite replaces
	// it with K.
	b := f.open(t)
	if _, err := b.Commit(t.Context(), []lakehouse.Part{f.part(t, 2, 0, 1, lakehouse.NoWatermark, pay{0, "Q", 10})}); err != nil {
		t.Fatal(err)
	}
	var werr error
	hc := &hookCatalog{Catalog: cat, before: func() {
		werr = func() error {
			ctx := context.Background()
			it, err := cat.LoadTable(ctx, table.Identifier{"fin", "payments"})
			if err != nil {
				return err
			}
			part := f.part(t, 1, 0, 1, lakehouse.NoWatermark, pay{0, "K", 10})
			defer part.Rows.Release()
			rdr, err := array.NewRecordReader(part.Rows.Schema(), []arrow.RecordBatch{part.Rows})
			if err != nil {
				return err
			}
			defer rdr.Release()
			tx := it.NewTransaction()
			if err := tx.Overwrite(ctx, rdr, nil, table.WithOverwriteFilter(iceberg.EqualTo(iceberg.Reference("payment_id"), "Q"))); err != nil {
				return err
			}
			_, err = tx.Commit(ctx)
			return err
		}()
	}}
	a, err := lakehouse.OpenIn(t.Context(), hc, lakehouse.Config{Table: "fin.payments", Group: "g"}, f.schema)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	ares, err := a.Commit(t.Context(), []lakehouse.Part{
		f.part(t, 0, 0, 2, lakehouse.NoWatermark, pay{0, "J", 10}, pay{1, "K", 10}),
	})
	if err != nil || werr != nil {
		t.Fatalf("member: %v, overwrite: %v", err, werr)
	}
	it, err := a.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	ops := []table.Operation{}
	for _, s := range it.Metadata().Snapshots() {
		ops = append(ops, s.Summary.Operation)
	}
	if len(ops) != 3 || ops[1] != table.OpOverwrite {
		t.Fatalf("snapshot operations %v, want [append overwrite append]", ops)
	}
	if ares.Attempts != 2 || ares.Rows != 1 || ares.BusinessDuplicates != 1 {
		t.Fatalf("attempts %d, rows %d, business duplicates %d; want 2, 1, 1", ares.Attempts, ares.Rows, ares.BusinessDuplicates)
	}
	wantPayments(t, payments(t, a), map[string]string{"J": "0@0", "K": "1@0"})
}

// TestVerifyRoutesChecksBusinessKeys: the tables of field routes get the
// duplicate-key check too: a copy written behind one table's MERGE is a
// problem of that table.
func TestVerifyRoutesChecksBusinessKeys(t *testing.T) {
	f := newPayFixture(t)
	open := func(name, group string) *lakehouse.Table {
		tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: name, Catalog: f.props, Group: group}, f.schema)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tbl.Close() })
		return tbl
	}
	eur, usd := open("fin.eur", "g-eur"), open("fin.usd", "g-usd")
	// Offsets 0 and 2 route to eur, 1 to usd; eur's MERGE is off, so its
	// two copies of A are both written.
	if err := eur.SetDedupe(lakehouse.Dedupe{}); err != nil {
		t.Fatal(err)
	}
	if _, err := eur.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 3, lakehouse.NoWatermark, pay{0, "A", 5}, pay{2, "A", 5})}); err != nil {
		t.Fatal(err)
	}
	if _, err := usd.Commit(t.Context(), []lakehouse.Part{f.part(t, 0, 0, 3, lakehouse.NoWatermark, pay{1, "B", 5})}); err != nil {
		t.Fatal(err)
	}
	if err := eur.SetDedupe(lakehouse.SchemaDedupe(f.schema)); err != nil {
		t.Fatal(err)
	}
	rep, err := lakehouse.VerifyRoutes(t.Context(), payTopic, []*lakehouse.Table{eur, usd}, lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	k := rep.Tables[0].Keys
	if rep.OK() || k == nil || k.DuplicateKeys != 1 || rep.Tables[1].Keys == nil || rep.Tables[1].Keys.DuplicateKeys != 0 {
		t.Fatalf("routes: OK %v, eur keys %+v, usd keys %+v; want not OK, 1 duplicate in eur", rep.OK(), k, rep.Tables[1].Keys)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if want := "!! fin.eur: 1 duplicate business key (same payment_id, other offset): A (payments/0@0, payments/0@2)"; !strings.Contains(out.String(), want) {
		t.Fatalf("report lacks %q:\n%s", want, out.String())
	}
}
