package lakehouse_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// orderSchema is a schema file of orders; extra fields go after price.
func orderSchema(t *testing.T, dir, qty, price, extra string) *schemas.Schema {
	t.Helper()
	text := `{"type": "record", "name": "Order", "namespace": "ex", "floe.key": "order_id",
	  "floe.sort": ["order_id", "qty desc nulls first"],
	  "fields": [
	    {"name": "order_id", "type": "string"},
	    {"name": "qty", "type": ` + qty + `},
	    {"name": "price", "type": ` + price + `}` + extra + `]}`
	path := filepath.Join(dir, fmt.Sprintf("orders-%d.avsc", time.Now().UnixNano()))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := schemas.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// commitOrders commits JSON orders [from, to) of partition 0 built with sc.
func commitOrders(t *testing.T, tbl *lakehouse.Table, sc *schemas.Schema, from, to, resume int64, value func(i int64) string) {
	t.Helper()
	b := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for i := from; i < to; i++ {
		if err := b.Append([]byte(value(i)), schemas.Meta{Topic: "orders", Partition: 0, Offset: i}, time.Now(), ""); err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{{
		Range: lakehouse.Range{Topic: "orders", Partition: 0, From: from, To: to}, Resume: resume, Rows: b.NewRecord(),
	}}); err != nil {
		t.Fatal(err)
	}
}

// scanOrders reads every row as column name → value string, by offset.
func scanOrders(t *testing.T, tbl *lakehouse.Table) (map[int64]map[string]string, *iceberg.Schema) {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := it.Scan().ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[int64]map[string]string{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		offs := b.Column(b.Schema().FieldIndices("_kafka_offset")[0]).(*array.Int64)
		for i := range int(b.NumRows()) {
			row := map[string]string{}
			for c, f := range b.Schema().Fields() {
				if b.Column(c).IsNull(i) {
					row[f.Name] = "null"
				} else {
					row[f.Name] = b.Column(c).ValueStr(i)
				}
			}
			if _, dup := out[offs.Value(i)]; dup {
				t.Errorf("offset %d twice", offs.Value(i))
			}
			out[offs.Value(i)] = row
		}
		b.Release()
	}
	return out, it.Schema()
}

// TestEvolveSchemaFileBetweenRuns: a schema file that gained an optional
// field and wider types since the table was created evolves the table
// (new column before the Kafka columns, int → long, float → double), the
// rows written before read the new column as null and keep their values,
// and the rows written after carry it; the table keeps its sort order.
func TestEvolveSchemaFileBetweenRuns(t *testing.T) {
	dir := t.TempDir()
	props := map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}
	cfg := lakehouse.Config{Table: "shop.orders", Catalog: props, Group: "g"}
	v1 := orderSchema(t, dir, `"int"`, `"float"`, "")
	tbl, err := lakehouse.Open(t.Context(), cfg, v1)
	if err != nil {
		t.Fatal(err)
	}
	it, _ := tbl.Load(t.Context())
	so := it.SortOrder()
	if so.Len() != 2 || so.Field(1).Direction != table.SortDESC || so.Field(0).SourceIDs[0] != 1 || so.OrderID() != 1 {
		t.Fatalf("sort order %v, want order_id asc, qty desc", so)
	}
	commitOrders(t, tbl, v1, 0, 10, lakehouse.NoWatermark, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":%d,"price":%d.5}`, i, i, i)
	})
	tbl.Close()

	// The second run's file: coupon is new, qty and price wider.
	v2 := orderSchema(t, dir, `"long"`, `"double"`, `, {"name": "coupon", "type": ["null", "string"], "default": null}`)
	tbl, err = lakehouse.Open(t.Context(), cfg, v2)
	if err != nil {
		t.Fatalf("opening with an evolved schema file: %v", err)
	}
	t.Cleanup(func() { tbl.Close() })
	sc, err := tbl.EvolveTo(t.Context(), v2)
	if err != nil {
		t.Fatal(err)
	}
	commitOrders(t, tbl, sc, 10, 20, 10, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":%d,"price":%d.5,"coupon":"c-%d"}`, i, int64(i)<<33, i, i)
	})
	// Rows built with the file itself, whose field ids are positional
	// (coupon is its 4th field, but the table's 10th column), as replay
	// builds them: they land in the columns of their names.
	commitOrders(t, tbl, v2, 20, 25, 20, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":%d,"price":%d.5,"coupon":"c-%d"}`, i, int64(i)<<33, i, i)
	})
	rows, ts := scanOrders(t, tbl)
	var names []string
	for _, f := range ts.Fields() {
		names = append(names, f.Name+" "+f.Type.String())
	}
	if got := strings.Join(names[:5], ", "); got != "order_id string, qty long, price double, coupon string, _kafka_topic string" {
		t.Fatalf("evolved columns: %s", got)
	}
	if c, _ := ts.FindFieldByName("coupon"); c.Required {
		t.Fatal("coupon is required; an added column must be optional")
	}
	if len(rows) != 25 {
		t.Fatalf("%d rows, want 25", len(rows))
	}
	for i := range int64(25) {
		r := rows[i]
		qty, coupon := fmt.Sprint(i), "null"
		if i >= 10 {
			qty, coupon = fmt.Sprint(i<<33), fmt.Sprintf("c-%d", i)
		}
		if r["order_id"] != fmt.Sprintf("o-%d", i) || r["qty"] != qty || r["price"] != fmt.Sprintf("%d.5", i) || r["coupon"] != coupon ||
			r["_kafka_topic"] != "orders" || r["_kafka_offset"] != fmt.Sprint(i) {
			t.Errorf("row %d = %v, want qty %s coupon %s", i, r, qty, coupon)
		}
	}
	if it, _ := tbl.Load(t.Context()); it.SortOrder().Len() != 2 {
		t.Errorf("sort order lost: %v", it.SortOrder())
	}

	// A third file making price a string is refused before anything runs,
	// naming the column and both types.
	bad := orderSchema(t, dir, `"long"`, `"string"`, "")
	if _, err := lakehouse.Open(t.Context(), cfg, bad); err == nil || !strings.Contains(err.Error(), `column "price" is double in the table but string`) {
		t.Errorf("opening with price a string: %v, want it refused naming both types", err)
	}
	// One declaring qty int again (the file as it was, the table widened
	// since — by a registry's writer schema, say) opens: its values fit
	// the long column, which stays long. It was refused as a narrowing,
	// so a member could not restart after a writer widened the table.
	old := orderSchema(t, dir, `"int"`, `"double"`, "")
	reopened, err := lakehouse.Open(t.Context(), cfg, old)
	if err != nil {
		t.Fatalf("opening with qty int after the table widened it: %v", err)
	}
	defer reopened.Close()
	it, err = reopened.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if f, _ := it.Schema().FindFieldByName("qty"); !f.Type.Equals(iceberg.PrimitiveTypes.Int64) {
		t.Errorf("qty is %s, want long", f.Type)
	}
}

// TestEvolveSchemaFileDropsARequiredField: a schema file that no longer
// declares the required qty makes the table's qty optional at start; the
// rows written before keep their quantities, the file's records without
// qty are rows with qty null, and a record that still carries qty fills
// it. The file was accepted with nothing planned, the column stayed
// required and filled from messages, and every record was a dead letter
// (missing_field).
func TestEvolveSchemaFileDropsARequiredField(t *testing.T) {
	dir := t.TempDir()
	cfg := lakehouse.Config{Table: "shop.orders", Group: "g", Catalog: map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}}
	v1 := orderSchema(t, dir, `"int"`, `"float"`, "")
	tbl, err := lakehouse.Open(t.Context(), cfg, v1)
	if err != nil {
		t.Fatal(err)
	}
	commitOrders(t, tbl, v1, 0, 2, lakehouse.NoWatermark, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":%d,"price":1.5}`, i, i+1)
	})
	tbl.Close()

	path := filepath.Join(dir, "orders-v2.avsc")
	if err := os.WriteFile(path, []byte(`{"type": "record", "name": "Order", "namespace": "ex", "floe.key": "order_id",
	  "fields": [{"name": "order_id", "type": "string"}, {"name": "price", "type": "float"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	v2, err := schemas.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err = lakehouse.Open(t.Context(), cfg, v2)
	if err != nil {
		t.Fatalf("opening with qty dropped: %v", err)
	}
	t.Cleanup(func() { tbl.Close() })
	sc, err := tbl.EvolveTo(t.Context(), v2)
	if err != nil {
		t.Fatal(err)
	}
	commitOrders(t, tbl, sc, 2, 4, 2, func(i int64) string {
		if i == 3 {
			return fmt.Sprintf(`{"order_id":"o-%d","qty":7,"price":1.5}`, i)
		}
		return fmt.Sprintf(`{"order_id":"o-%d","price":1.5}`, i)
	})
	rows, ts := scanOrders(t, tbl)
	if f, _ := ts.FindFieldByName("qty"); f.Required {
		t.Fatal("qty is still required")
	}
	for i, want := range []string{"1", "2", "null", "7"} {
		if got := rows[int64(i)]["qty"]; got != want {
			t.Errorf("row %d: qty %s, want %s", i, got, want)
		}
	}
}

// TestEvolveSchemaFileRequiresAField: a schema file that, since the table
// was created, added a required field (coupon) and made an optional one
// required (note) still enforces both on plain values, as a table created
// from it does: a record without either is a missing_field dead letter,
// though the columns are optional (Iceberg adds columns to a table with
// rows only optional, and does not make an optional column required). A
// record with both is a row. Before, the decoder took the table's
// optionality and wrote such records as rows with nulls. A registry's
// writer schemas follow the table instead: a writer without coupon gives
// it null.
func TestEvolveSchemaFileRequiresAField(t *testing.T) {
	dir := t.TempDir()
	cfg := lakehouse.Config{Table: "shop.orders", Group: "g", Catalog: map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}}
	v1 := orderSchema(t, dir, `"int"`, `"float"`, `, {"name": "note", "type": ["null", "string"], "default": null}`)
	tbl, err := lakehouse.Open(t.Context(), cfg, v1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	commitOrders(t, tbl, v1, 0, 1, lakehouse.NoWatermark, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":1,"price":1.5}`, i)
	})
	v2 := orderSchema(t, dir, `"int"`, `"float"`, `, {"name": "note", "type": "string"}, {"name": "coupon", "type": "string"}`)
	sc, err := tbl.EvolveTo(t.Context(), v2)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{"note", "coupon"} {
		if f, ok := sc.Iceberg.FindFieldByName(c); !ok || f.Required {
			t.Fatalf("column %s: %v, want it in the table, optional", c, f)
		}
		if f, ok := sc.Arrow.FieldsByName(c); !ok || !f[0].Nullable {
			t.Fatalf("Arrow field %s: %v, want nullable, as the table's", c, f)
		}
	}
	b := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for _, tc := range []struct{ value, field string }{
		{`{"order_id":"o-1","qty":1,"price":1.5,"note":"n"}`, "coupon"},
		{`{"order_id":"o-1","qty":1,"price":1.5,"note":null,"coupon":"c"}`, "note"},
		{`{"order_id":"o-1","qty":1,"price":1.5,"coupon":"c"}`, "note"},
	} {
		var de *schemas.DecodeError
		err := b.Append([]byte(tc.value), schemas.Meta{Topic: "orders", Offset: 1}, time.Now(), "")
		if !errors.As(err, &de) || de.Reason != schemas.ReasonMissingField || de.Field != tc.field {
			t.Errorf("%s: %v, want a missing_field dead letter of %s", tc.value, err, tc.field)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("%d rows built from records the file refuses", b.Len())
	}
	commitOrders(t, tbl, sc, 1, 2, 1, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":1,"price":1.5,"note":"n","coupon":"c"}`, i)
	})
	rows, _ := scanOrders(t, tbl)
	if r := rows[0]; r["note"] != "null" || r["coupon"] != "null" {
		t.Errorf("row 0 = %v, want note and coupon null", r)
	}
	if r := rows[1]; r["note"] != "n" || r["coupon"] != "c" {
		t.Errorf("row 1 = %v, want note n, coupon c", r)
	}

	// With a registry, the writer's schema is the contract: a writer
	// without coupon (and with note a union with null) gives nulls.
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	writer := `{"type": "record", "name": "Order", "fields": [{"name": "order_id", "type": "string"}, {"name": "qty", "type": "int"},
	  {"name": "price", "type": "float"}, {"name": "note", "type": ["null", "string"], "default": null}]}`
	ss, err := cl.CreateSchema(t.Context(), "orders-value", sr.Schema{Schema: writer})
	if err != nil {
		t.Fatal(err)
	}
	body, err := avro.Marshal(avro.MustParse(writer), map[string]any{"order_id": "o-2", "qty": 1, "price": float32(1.5)})
	if err != nil {
		t.Fatal(err)
	}
	wsc, err := sc.WithFormat(schemas.Format{Kind: schemas.FormatAvro, Registry: &schemas.RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	wb := wsc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer wb.Release()
	value := append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), body...)
	if err := wb.Append(value, schemas.Meta{Topic: "orders", Offset: 2}, time.Now(), ""); err != nil || wb.Len() != 1 {
		t.Fatalf("registry writer without coupon: %v (%d rows), want a row with nulls", err, wb.Len())
	}
}

// TestEvolveIsIdempotentAndRefusesConflicts: members racing to add the
// same column all succeed with one column; adding it again with a wider
// type widens it, with a narrower one is a no-op, and with an unrelated
// type is a ColumnConflictError naming both types.
func TestEvolveIsIdempotentAndRefusesConflicts(t *testing.T) {
	dir := t.TempDir()
	props := map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "catalog.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "warehouse"),
	}
	v1 := orderSchema(t, dir, `"int"`, `"float"`, "")
	var tables []*lakehouse.Table
	for range 3 { // three members, each with its own catalog connection
		tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "shop.orders", Catalog: props, Group: "g"}, v1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tbl.Close() })
		tables = append(tables, tbl)
	}
	add := []schemas.Change{
		{Kind: schemas.AddColumn, Column: "coupon", Type: iceberg.PrimitiveTypes.String},
		{Kind: schemas.AddColumn, Column: "units", Type: iceberg.PrimitiveTypes.Int32},
		{Kind: schemas.WidenColumn, Column: "qty", Type: iceberg.PrimitiveTypes.Int64},
	}
	var wg sync.WaitGroup
	errs := make([]error, len(tables))
	for i, tbl := range tables {
		wg.Go(func() { _, errs[i] = tbl.Evolve(t.Context(), add) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	it, _ := tables[0].Load(t.Context())
	ts := it.Schema()
	if n := len(ts.Fields()); n != len(v1.Iceberg.Fields())+2 {
		t.Fatalf("%d columns after three identical evolutions, want %d: %v", n, len(v1.Iceberg.Fields())+2, ts)
	}
	if q, _ := ts.FindFieldByName("qty"); !q.Type.Equals(iceberg.PrimitiveTypes.Int64) {
		t.Fatalf("qty is %s, want long", q.Type)
	}
	// units again as long widens it; qty as int is already held by long.
	ts, err := tables[1].Evolve(t.Context(), []schemas.Change{
		{Kind: schemas.AddColumn, Column: "units", Type: iceberg.PrimitiveTypes.Int64},
		{Kind: schemas.WidenColumn, Column: "qty", Type: iceberg.PrimitiveTypes.Int32},
	})
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := ts.FindFieldByName("units"); !u.Type.Equals(iceberg.PrimitiveTypes.Int64) {
		t.Fatalf("units is %s, want long", u.Type)
	}
	// coupon as an int cannot be.
	_, err = tables[2].Evolve(t.Context(), []schemas.Change{{Kind: schemas.AddColumn, Column: "coupon", Type: iceberg.PrimitiveTypes.Int32}})
	var ce *lakehouse.ColumnConflictError
	if !errors.As(err, &ce) || ce.Column != "coupon" || !strings.Contains(ce.Error(), "string cannot hold the writer's int") {
		t.Fatalf("adding coupon as int: %v, want a ColumnConflictError naming string and int", err)
	}
	// _kafka_offset is an identifier column: it stays required.
	_, err = tables[2].Evolve(t.Context(), []schemas.Change{{Kind: schemas.MakeOptional, Column: "_kafka_offset"}})
	if !errors.As(err, &ce) {
		t.Fatalf("making _kafka_offset optional: %v, want a ColumnConflictError", err)
	}
	// The schema a member derives from the evolved table builds rows the
	// table takes: the new columns are filled by name.
	sc, err := v1.WithTable(ts)
	if err != nil {
		t.Fatal(err)
	}
	commitOrders(t, tables[0], sc, 0, 3, lakehouse.NoWatermark, func(i int64) string {
		return fmt.Sprintf(`{"order_id":"o-%d","qty":%d,"price":1.5,"units":%d,"coupon":"c"}`, i, i, i<<40)
	})
	rows, _ := scanOrders(t, tables[0])
	if len(rows) != 3 || rows[2]["units"] != fmt.Sprint(int64(2)<<40) || rows[2]["coupon"] != "c" {
		t.Fatalf("rows after evolution: %v", rows)
	}
}

// TestConformCarriesRowsAcrossEvolution: a batch built before an
// evolution, conformed to the evolved schema, has the new column null and
// the widened one cast, values intact, with no memory leaked.
func TestConformCarriesRowsAcrossEvolution(t *testing.T) {
	dir := t.TempDir()
	v1 := orderSchema(t, dir, `"int"`, `"float"`, "")
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	b := v1.NewRecordBuilder(mem, 0)
	defer b.Release()
	for i := range 4 {
		if err := b.Append(fmt.Appendf(nil, `{"order_id":"o-%d","qty":%d,"price":0.25}`, i, -i), schemas.Meta{Topic: "orders", Offset: int64(i)}, time.Time{}, ""); err != nil {
			t.Fatal(err)
		}
	}
	old := b.NewRecord()
	defer old.Release()
	fields := append([]iceberg.NestedField(nil), v1.Iceberg.Fields()...)
	fields[1].Type, fields[2].Type = iceberg.PrimitiveTypes.Int64, iceberg.PrimitiveTypes.Float64
	fields = append(fields, iceberg.NestedField{ID: 100, Name: "coupon", Type: iceberg.PrimitiveTypes.String})
	evolved, err := v1.WithTable(iceberg.NewSchemaWithIdentifiers(1, v1.Iceberg.IdentifierFieldIDs, fields...))
	if err != nil {
		t.Fatal(err)
	}
	got, err := evolved.Conform(t.Context(), old)
	if err != nil {
		t.Fatal(err)
	}
	defer got.Release()
	if !got.Schema().Equal(evolved.Arrow) {
		t.Fatalf("conformed schema %v, want %v", got.Schema(), evolved.Arrow)
	}
	qty := got.Column(1).(*array.Int64)
	coupon := got.Column(3)
	if coupon.DataType().ID() != arrow.STRING || coupon.NullN() != 4 || qty.Value(3) != -3 || got.Column(2).(*array.Float64).Value(0) != 0.25 {
		t.Fatalf("conformed rows: %v", got)
	}
}
