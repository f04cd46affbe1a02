package lakehouse_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// TestDedupeFollowsAWidenedKey: an int dedupe key the table widened to
// long (a registry writer schema with a long id, applied by Evolve) is
// searched as a long: it was searched with int32 literals, keys beyond 2^31
// cut in the row filter, the table's copy never found and the duplicate
// committed.
func TestDedupeFollowsAWidenedKey(t *testing.T) {
	tbl, sc := payTable(t, `{"type": "record", "name": "Pay", "floe.key": "note", "floe.dedupe-key": "id",
	  "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string"}]}`)
	if d := tbl.Dedupe(); d.Key != "id" {
		t.Fatalf("dedupe %+v", d)
	}
	ts, err := tbl.Evolve(t.Context(), []schemas.Change{{Kind: schemas.WidenColumn, Column: "id", Type: iceberg.PrimitiveTypes.Int64}})
	if err != nil {
		t.Fatal(err)
	}
	wide, err := sc.WithTable(ts)
	if err != nil {
		t.Fatal(err)
	}
	r1 := commitPays(t, tbl, wide, 0, 3, lakehouse.NoWatermark, int64(1)<<32)
	r2 := commitPays(t, tbl, wide, 3, 6, 3, int64(1)<<32) // the same three ids again
	if r1.Rows != 3 || r1.BusinessDuplicates != 0 {
		t.Fatalf("first flush: %d rows, %d business duplicates; want 3 and 0", r1.Rows, r1.BusinessDuplicates)
	}
	if r2.BusinessDuplicates != 3 || r2.Rows != 0 {
		t.Errorf("second flush of the same ids %d..%d: %d rows committed, %d skipped; want 0 and 3", int64(1)<<32, int64(1)<<32+2, r2.Rows, r2.BusinessDuplicates)
	}
}

// TestDedupeFollowsAnOptionalEventTime: the event-time column made
// optional by an evolution (a writer schema with ["null", timestamp]) is
// searched as optional: table rows without an event time match any copy,
// as the MERGE and verify count them, and the bounded search left them out,
// the duplicate committed.
func TestDedupeFollowsAnOptionalEventTime(t *testing.T) {
	tbl, _ := payTable(t, `{"type": "record", "name": "Pay", "floe.key": "id", "floe.dedupe-key": "id",
	  "floe.event-time": "created_at",
	  "fields": [{"name": "id", "type": "string"}, {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}`)
	ts, err := tbl.Evolve(t.Context(), []schemas.Change{{Kind: schemas.MakeOptional, Column: "created_at"}})
	if err != nil {
		t.Fatal(err)
	}
	// The rows as a writer schema with ["null", timestamp] has them: a
	// schema file with the field required still requires it of plain
	// values, so the test's records come through one that does not.
	path := filepath.Join(t.TempDir(), "pay-opt.avsc")
	if err := os.WriteFile(path, []byte(`{"type": "record", "name": "Pay", "floe.key": "id", "floe.dedupe-key": "id",
	  "floe.event-time": "created_at",
	  "fields": [{"name": "id", "type": "string"}, {"name": "created_at", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}]}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	writer, err := schemas.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	opt, err := writer.WithTable(ts)
	if err != nil {
		t.Fatal(err)
	}
	commit := func(off int64, value string) lakehouse.Result {
		b := opt.NewRecordBuilder(memory.DefaultAllocator, 0)
		defer b.Release()
		if err := b.Append([]byte(value), schemas.Meta{Topic: "pay", Partition: 0, Offset: off}, time.Now(), ""); err != nil {
			t.Fatal(err)
		}
		resume := off
		if off == 0 {
			resume = lakehouse.NoWatermark
		}
		res, err := tbl.Commit(t.Context(), []lakehouse.Part{{
			Range: lakehouse.Range{Topic: "pay", Partition: 0, From: off, To: off + 1}, Resume: resume, Rows: b.NewRecord()}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	commit(0, `{"id":"p-1"}`) // no event time
	r := commit(1, fmt.Sprintf(`{"id":"p-1","created_at":%d}`, time.Now().UnixMicro()))
	if r.BusinessDuplicates != 1 {
		t.Errorf("p-1 again (the table's copy has no event time): %d rows committed, %d skipped; want 0 and 1", r.Rows, r.BusinessDuplicates)
	}
}

// payTable opens table fin.pay, in a SQLite catalog of its own, with the
// schema file avsc.
func payTable(t *testing.T, avsc string) (*lakehouse.Table, *schemas.Schema) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "pay.avsc")
	if err := os.WriteFile(path, []byte(avsc), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := schemas.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	props := map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "fin.pay", Catalog: props, Group: "g"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl, sc
}

// TestDedupeKeyWidenedAfterRows: rows committed with an int business key,
// the key then widened to long (a registry writer schema, an edited schema
// file): the next flush finds the same keys in the files written before,
// and skips them. Every search failed on those files' 4-byte key bounds
// ("expected 8 bytes for int64 value, got 4"), and so did every flush,
// retried for ever.
func TestDedupeKeyWidenedAfterRows(t *testing.T) {
	tbl, sc := payTable(t, `{"type": "record", "name": "Pay", "floe.key": "note", "floe.dedupe-key": "id",
	  "fields": [{"name": "id", "type": "int"}, {"name": "note", "type": "string"}]}`)
	r1 := commitPays(t, tbl, sc, 0, 3, lakehouse.NoWatermark, 100)
	ts, err := tbl.Evolve(t.Context(), []schemas.Change{{Kind: schemas.WidenColumn, Column: "id", Type: iceberg.PrimitiveTypes.Int64}})
	if err != nil {
		t.Fatal(err)
	}
	wide, err := sc.WithTable(ts)
	if err != nil {
		t.Fatal(err)
	}
	r2 := commitPays(t, tbl, wide, 3, 6, 3, 100)
	r3 := commitPays(t, tbl, wide, 6, 7, 6, 100) // key 100 again, from a file written after the widening
	if r1.Rows != 3 || r2.Rows != 0 || r2.BusinessDuplicates != 3 || r3.BusinessDuplicates != 1 {
		t.Fatalf("rows %d, %d, %d; business duplicates %d, %d; want 3, 0, 0 and 3, 1", r1.Rows, r2.Rows, r3.Rows, r2.BusinessDuplicates, r3.BusinessDuplicates)
	}
}

// commitPays commits offsets [from, to) of partition 0 of "pay" built with
// s, the record at offset i with id base+i%3, resuming from resume.
func commitPays(t *testing.T, tbl *lakehouse.Table, s *schemas.Schema, from, to, resume, base int64) lakehouse.Result {
	t.Helper()
	b := s.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for i := from; i < to; i++ {
		v := fmt.Sprintf(`{"id":%d,"note":"n-%d"}`, base+i%3, i)
		if err := b.Append([]byte(v), schemas.Meta{Topic: "pay", Partition: 0, Offset: i}, time.Now(), ""); err != nil {
			t.Fatal(err)
		}
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{{
		Range: lakehouse.Range{Topic: "pay", Partition: 0, From: from, To: to}, Resume: resume, Rows: b.NewRecord()}})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
