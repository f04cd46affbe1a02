package schemas_test

import (
	"context"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	_ "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	_ "modernc.org/sqlite"
)

// TestIcebergAcceptsSchema creates a real table from the schema in an SQL
// catalog on SQLite, writes a Builder's batch with iceberg-go's own writer,
// commits it, and reads it back: the proof that Schema.Arrow, the Builder's
// arrays and Schema.Spec are what iceberg-go expects.
func TestIcebergAcceptsSchema(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	cat, err := catalog.Load(ctx, "test", iceberg.Properties{
		"type":        "sql",
		"uri":         "file:" + dir + "/cat.db",
		"sql.dialect": "sqlite",
		"sql.driver":  "sqlite",
		"warehouse":   "file://" + dir + "/wh",
	})
	if err != nil {
		t.Fatalf("loading the catalog: %v", err)
	}
	if c, ok := cat.(io.Closer); ok {
		t.Cleanup(func() { c.Close() })
	}

	s, b, _ := newBuilder(t, 0)
	if err := cat.CreateNamespace(ctx, table.Identifier{"analytics"}, nil); err != nil {
		t.Fatalf("creating the namespace: %v", err)
	}
	tbl, err := cat.CreateTable(ctx, table.Identifier{"analytics", "clicks"}, s.Iceberg, catalog.WithPartitionSpec(&s.Spec))
	if err != nil {
		t.Fatalf("creating the table: %v", err)
	}

	// The catalog assigns fresh IDs; they must be the ones the Arrow schema
	// carries, or Parquet files would map columns wrongly.
	for i, f := range tbl.Schema().Fields() {
		if want := s.Iceberg.Fields()[i]; f.ID != want.ID || f.Name != want.Name || f.Required != want.Required {
			t.Errorf("table field %d = %d %s required=%v, schema has %d %s required=%v",
				i, f.ID, f.Name, f.Required, want.ID, want.Name, want.Required)
		}
	}
	if got := tbl.Spec(); !got.Equals(s.Spec) {
		t.Errorf("table spec = %v, want %v", got, s.Spec)
	}

	// Rows on two days, so the write splits by partition, with nulls in
	// every optional column and both ts forms.
	day2 := time.Date(2024, 11, 30, 23, 59, 59, 0, time.UTC)
	msgs := [][]byte{
		message(0, 333),
		message(1, 333),
		[]byte(`{"session_id":"s-x","event_type":"click","ts":"2024-11-30T23:59:59Z","user_id":null}`),
		message(2, 333),
	}
	for i, m := range msgs {
		status := "ok"
		if i == 2 {
			status = ""
		}
		if err := b.Append(m, testMeta(int64(100+i)), testIngested, status); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
	}
	rec := b.NewRecord()
	records := func(yield func(arrow.RecordBatch, error) bool) { yield(rec, nil) } // WriteRecords releases rec

	var files []iceberg.DataFile
	for df, err := range table.WriteRecords(ctx, tbl, s.Arrow, records) {
		if err != nil {
			t.Fatalf("writing records: %v", err)
		}
		files = append(files, df)
	}
	if len(files) != 2 {
		t.Errorf("wrote %d data files, want one per day partition (2)", len(files))
	}
	tx := tbl.NewTransaction()
	if err := tx.AddDataFiles(ctx, files, nil); err != nil {
		t.Fatalf("adding data files: %v", err)
	}
	tbl, err = tx.Commit(ctx)
	if err != nil {
		t.Fatalf("committing: %v", err)
	}

	got, err := tbl.Scan().ToArrowTable(ctx)
	if err != nil {
		t.Fatalf("scanning: %v", err)
	}
	defer got.Release()
	if got.NumRows() != int64(len(msgs)) {
		t.Fatalf("scanned %d rows, want %d", got.NumRows(), len(msgs))
	}
	if ts := got.Schema().Field(7).Type; !arrow.TypeEqual(ts, s.Arrow.Field(7).Type) {
		t.Errorf("scanned event_ts type %s, want %s", ts, s.Arrow.Field(7).Type)
	}

	byOffset := map[int64][]any{}
	tr := array.NewTableReader(got, 0)
	defer tr.Release()
	for tr.Next() {
		r := tr.RecordBatch()
		checkColumns(t, r)
		for i := range int(r.NumRows()) {
			v := rowValues(t, r, i)
			byOffset[v[11].(int64)] = v
		}
	}
	if len(byOffset) != len(msgs) {
		t.Fatalf("scanned offsets %v, want 100..103", byOffset)
	}
	wantX := []any{nil, "s-x", nil, "click", nil, nil, nil, micros(day2), nil,
		"clicks", int32(7), int64(102), micros(testKafkaTS), micros(testIngested), nil}
	if v := byOffset[102]; !reflect.DeepEqual(v, wantX) {
		t.Errorf("row at offset 102 =\n %#v\nwant\n %#v", v, wantX)
	}
	if v := byOffset[103]; v[1] != "s-0000000" || v[3] != "add_to_cart" || v[7] != int64(1732860000000+2*37)*1000 || v[8] != int64(2) {
		t.Errorf("row at offset 103 = %v", v)
	}
}
