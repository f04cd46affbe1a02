package schemas

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

const ordersFile = `{"type": "record", "name": "Order", "fields": [
  {"name": "id", "type": "string"},
  {"name": "qty", "type": "int"},
  {"name": "price", "type": "float"}]}`

// TestEvolvingWriterSchemas: a builder of an Evolving schema asks for the
// changes a new writer schema needs (new fields as optional columns, int →
// long, float → double, required → optional; a field no column can hold is
// skipped), appends nothing meanwhile, and appends once switched to the
// schema of the evolved table. A builder that is not Evolving behaves as
// before: new fields skipped, a wider type incompatible.
func TestEvolvingWriterSchemas(t *testing.T) {
	reg, cl := testRegistry(t)
	file, err := ParseAvsc("orders", []byte(ordersFile))
	if err != nil {
		t.Fatal(err)
	}
	avroV2 := `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"},
	  {"name": "qty", "type": "long"},
	  {"name": "price", "type": ["null", "float"]},
	  {"name": "coupon", "type": ["null", "string"], "default": null},
	  {"name": "odd", "type": ["null", "int", "string"], "default": null},
	  {"name": "lines", "type": {"type": "array", "items": "string"}, "default": []}]}`
	protoV2 := `syntax = "proto3";
message Order {
  message Line { string sku = 1; uint32 n = 2; }
  string id = 1; int64 qty = 2; double price = 3;
  optional string coupon = 4;
  repeated Line lines = 5;
  map<string, int32> attrs = 6;
  map<int32, string> by_number = 7;
}`
	avroID := register(t, cl, "a", avroV2, sr.TypeAvro)
	protoID := register(t, cl, "p", protoV2, sr.TypeProtobuf)
	avroValue, err := avro.Marshal(avro.MustParse(avroV2), map[string]any{
		"id": "o-1", "qty": int64(1) << 40, "price": nil, "coupon": "c", "odd": nil, "lines": []any{"x"},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{Accessor: protocompile.SourceAccessorFromMap(map[string]string{"o.proto": protoV2})}}
	files, err := c.Compile(t.Context(), "o.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].Messages().ByName("Order")
	pm := dynamicpb.NewMessage(md)
	pm.Set(md.Fields().ByName("id"), protoreflect.ValueOfString("o-2"))
	pm.Set(md.Fields().ByName("qty"), protoreflect.ValueOfInt64(1<<41))
	pm.Set(md.Fields().ByName("coupon"), protoreflect.ValueOfString("d"))
	protoValue, err := proto.Marshal(pm)
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		kind, value string
		msg         []byte
		want        []string
		row         string
	}{
		{FormatAvro, "avro", wire(avroID, nil, avroValue),
			[]string{"widen column qty to long", "make column price optional", "add column coupon string", "add column lines list<string>"},
			`o-1 1099511627776 (null) c ["x"]`},
		{FormatProtobuf, "protobuf", wire(protoID, []int{0}, protoValue),
			[]string{"widen column qty to long", "widen column price to double", "add column coupon string",
				"add column lines list<struct<1: sku: optional string, 2: n: optional long>>", "add column attrs map<string, int>"},
			"o-2 2199023255552 0 d []"},
	} {
		t.Run(tc.value, func(t *testing.T) {
			sc, err := file.WithFormat(Format{Kind: tc.kind, Registry: &RegistryConfig{URL: reg.URL()}})
			if err != nil {
				t.Fatal(err)
			}
			// Not evolving: the wider qty is refused, as before (Avro: the
			// writer's long is incompatible; Protobuf: a value past 32
			// bits is invalid).
			plain := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
			defer plain.Release()
			var ie *IncompatibleSchemaError
			var de *DecodeError
			if err := plain.Append(tc.msg, Meta{Topic: "o"}, time.Time{}, ""); !(errors.As(err, &ie) && ie.Field == "qty" || errors.As(err, &de) && de.Field == "qty") {
				t.Fatalf("not evolving: %v, want qty refused", err)
			}

			ev := sc.Evolving()
			b := ev.NewRecordBuilder(memory.DefaultAllocator, 0)
			defer b.Release()
			err = b.Append(tc.msg, Meta{Topic: "o"}, time.Time{}, "")
			var req *EvolveRequest
			if !errors.As(err, &req) || b.Len() != 0 {
				t.Fatalf("evolving: %v (%d rows), want an EvolveRequest and no row", err, b.Len())
			}
			var got []string
			for _, c := range req.Changes {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("changes:\n %q\nwant\n %q", got, tc.want)
			}
			rec := appendEvolved(t, ev, req.Changes, tc.msg)
			defer rec.Release()
			row := fmt.Sprint(rec.Column(0).ValueStr(0), " ", rec.Column(1).ValueStr(0), " ", rec.Column(2).ValueStr(0), " ",
				rec.Column(3).ValueStr(0), " ", rec.Column(4).ValueStr(0))
			if row != tc.row {
				t.Fatalf("row %q, want %q", row, tc.row)
			}
		})
	}
}

// TestEvolveProtobufFieldWithPresence: a Protobuf writer that declares
// the required qty column's field optional (explicit presence) makes the
// column optional, as Avro's ["null", "int"] does, and a message leaving
// qty unset is a row with qty null. Nothing was asked of the table, and
// every such message, valid for its writer, was a missing_field dead
// letter, even under on_incompatible: stop.
func TestEvolveProtobufFieldWithPresence(t *testing.T) {
	reg, cl := testRegistry(t)
	file, err := ParseAvsc("orders", []byte(ordersFile))
	if err != nil {
		t.Fatal(err)
	}
	text := `syntax = "proto3";
message Order { string id = 1; optional int32 qty = 2; float price = 3; }`
	id := register(t, cl, "p", text, sr.TypeProtobuf)
	fd, err := compileProto(id, text)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Order")
	pm := dynamicpb.NewMessage(md)
	pm.Set(md.Fields().ByName("id"), protoreflect.ValueOfString("o-1"))
	body, err := proto.Marshal(pm)
	if err != nil {
		t.Fatal(err)
	}
	msg := wire(id, []int{0}, body)
	sc, err := file.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "stop"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := sc.Evolving()
	req := evolveRequest(t, ev, msg)
	if len(req.Changes) != 1 || req.Changes[0].String() != "make column qty optional" {
		t.Fatalf("changes %v, want qty made optional", req.Changes)
	}
	rec := appendEvolved(t, ev, req.Changes, msg)
	defer rec.Release()
	if row := fmt.Sprint(rec.Column(0).ValueStr(0), " ", rec.Column(1).ValueStr(0)); row != "o-1 (null)" {
		t.Fatalf("row %q, want qty null", row)
	}
}

// TestEvolveReusedNamedType: a writer field whose type is a record declared
// by an earlier field (a reference, "type": "Addr") becomes a column like
// the first; a recursive record, which no column can hold, is skipped. The
// reference used to be refused as if recursive, so evolution skipped the
// field and its data was dropped from every row without a word; schema
// files refused it.
func TestEvolveReusedNamedType(t *testing.T) {
	reg, cl := testRegistry(t)
	const addrs = `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"},
	  {"name": "billing", "type": {"type": "record", "name": "Addr", "fields": [{"name": "street", "type": "string"}]}},
	  {"name": "shipping", "type": ["null", "Addr"], "default": null}`
	const chain = `,
	  {"name": "chain", "type": ["null", {"type": "record", "name": "Link", "fields": [{"name": "next", "type": ["null", "Link"]}]}], "default": null}`
	writer := addrs + chain + "]}"
	id := register(t, cl, "w", writer, sr.TypeAvro)
	value, err := avro.Marshal(avro.MustParse(writer), map[string]any{
		"id": "o-1", "billing": map[string]any{"street": "Main St"}, "shipping": map[string]any{"Addr": map[string]any{"street": "Dock 4"}}, "chain": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	file, err := ParseAvsc("orders", []byte(`{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := file.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	ev := sc.Evolving()
	req := evolveRequest(t, ev, wire(id, nil, value))
	var got []string
	for _, c := range req.Changes {
		got = append(got, c.String())
	}
	want := []string{"add column billing struct<1: street: required string>", "add column shipping struct<1: street: required string>"}
	if !slices.Equal(got, want) {
		t.Fatalf("changes:\n %q\nwant\n %q", got, want)
	}
	rec := appendEvolved(t, ev, req.Changes, wire(id, nil, value))
	defer rec.Release()
	if row := fmt.Sprint(rec.Column(1).ValueStr(0), " ", rec.Column(2).ValueStr(0)); row != `{"street":"Main St"} {"street":"Dock 4"}` {
		t.Fatalf("row %q", row)
	}

	// The same schema as a schema file: both columns, the recursive one
	// refused by name.
	if _, err := ParseAvsc("w", []byte(writer)); err == nil || !strings.Contains(err.Error(), `field "chain.next": the recursive reference to Link`) {
		t.Fatalf("schema file with a recursive record: %v", err)
	}
	wf, err := ParseAvsc("w", []byte(addrs+"]}"))
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := wf.Iceberg.FindFieldByName("shipping.street"); !ok || !f.Type.Equals(iceberg.PrimitiveTypes.String) {
		t.Fatalf("schema file: shipping.street = %v, %v", f, ok)
	}
}

// TestEvolveSkipsAWriterFieldNoColumnCanHold: a new writer field whose
// column would pass maxColumnNodes or maxAvroDepth is skipped like a
// recursive record, and the writer's other new fields still evolve the
// table. A named type used again was mapped again in full and depth was
// not bounded: a 1.5 KB Avro writer type using a record twice at each
// of 14 levels planned a column of 49,150 fields (18 levels: 786,430; 30
// would hang), a Protobuf message holding itself twice one of 131,069
// fields, and an Avro field nested 65 levels deep became a column whose
// every value the decoder then refused as malformed.
func TestEvolveSkipsAWriterFieldNoColumnCanHold(t *testing.T) {
	reg, cl := testRegistry(t)
	// tree: L14{a: L13, b: L13}, ..., L1{a: L0, b: L0}, L0{v: string}.
	tree := `{"type": "record", "name": "L0", "fields": [{"name": "v", "type": "string"}]}`
	for i := 1; i <= 14; i++ {
		tree = fmt.Sprintf(`{"type": "record", "name": "L%d", "fields": [{"name": "a", "type": %s}, {"name": "b", "type": "L%d"}]}`, i, tree, i-1)
	}
	writer := `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"},
	  {"name": "tree", "type": ["null", ` + tree + `], "default": null},
	  {"name": "deep", "type": ["null", ` + nestedRecord("D", maxAvroDepth-1) + `], "default": null},
	  {"name": "too_deep", "type": ["null", ` + nestedRecord("E", maxAvroDepth) + `], "default": null}]}`
	var deep any = "bottom"
	for i := maxAvroDepth - 1; i >= 1; i-- {
		deep = map[string]any{"x": deep}
	}
	avroID := register(t, cl, "a", writer, sr.TypeAvro)
	avroValue, err := avro.Marshal(avro.MustParse(writer), map[string]any{"id": "o-1", "tree": nil, "deep": map[string]any{"D1": deep}, "too_deep": nil})
	if err != nil {
		t.Fatal(err)
	}
	protoID := register(t, cl, "p", `syntax = "proto3";
message Tree { Tree a = 1; Tree b = 2; string v = 3; }
message Order { string id = 1; Tree tree = 2; string coupon = 3; }`, sr.TypeProtobuf)
	file, err := ParseAvsc("orders", []byte(`{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		kind string
		msg  []byte
		want []string
	}{
		{FormatAvro, wire(avroID, nil, avroValue), []string{"add column deep " + nestedType(maxAvroDepth-1)}},
		{FormatProtobuf, wire(protoID, []int{1}, nil), []string{"add column coupon string"}},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			sc, err := file.WithFormat(Format{Kind: tc.kind, Registry: &RegistryConfig{URL: reg.URL()}})
			if err != nil {
				t.Fatal(err)
			}
			ev := sc.Evolving()
			req := evolveRequest(t, ev, tc.msg)
			var got []string
			for _, c := range req.Changes {
				got = append(got, c.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("changes:\n %.300q\nwant\n %.300q", got, tc.want)
			}
			appendEvolved(t, ev, req.Changes, tc.msg).Release()
		})
	}
}

// nestedRecord is an Avro type of levels records, each holding the next
// in its field x, the innermost a string.
func nestedRecord(prefix string, levels int) string {
	typ := `"string"`
	for i := levels; i >= 1; i-- {
		typ = fmt.Sprintf(`{"type": "record", "name": "%s%d", "fields": [{"name": "x", "type": %s}]}`, prefix, i, typ)
	}
	return typ
}

// nestedType is the column type of nestedRecord(levels) as avroPlan makes
// it: field ids count from the innermost.
func nestedType(levels int) string {
	typ := "string"
	for i := 1; i <= levels; i++ {
		typ = fmt.Sprintf("struct<%d: x: required %s>", i, typ)
	}
	return typ
}

// evolvedTable is the table schema after changes to s's columns, as
// lakehouse.Table.Evolve makes them: new columns get the next ids.
func evolvedTable(t *testing.T, s *Schema, changes []Change) *iceberg.Schema {
	t.Helper()
	fields := slices.Clone(s.Iceberg.Fields())
	next := s.Iceberg.HighestFieldID() + 1
	for _, c := range changes {
		i := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return f.Name == c.Column })
		switch c.Kind {
		case AddColumn:
			one, err := iceberg.AssignFreshSchemaIDs(iceberg.NewSchema(0, iceberg.NestedField{Name: c.Column, Type: c.Type}),
				func() int { next++; return next - 1 })
			if err != nil {
				t.Fatal(err)
			}
			fields = append(fields, one.Field(0))
		case WidenColumn:
			fields[i].Type = c.Type
		case MakeOptional:
			fields[i].Required = false
		}
	}
	return iceberg.NewSchemaWithIdentifiers(1, s.Iceberg.IdentifierFieldIDs, fields...)
}

// evolveRequest appends msg with ev, which must ask for the table to
// evolve first.
func evolveRequest(t *testing.T, ev *Schema, msg []byte) *EvolveRequest {
	t.Helper()
	b := ev.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	var req *EvolveRequest
	if err := b.Append(msg, Meta{Topic: "o"}, time.Time{}, ""); !errors.As(err, &req) {
		t.Fatalf("append: %v, want an EvolveRequest", err)
	}
	return req
}

// appendEvolved builds msg's row with ev adapted to the table changes make
// (evolvedTable): what the member does once the table has evolved.
func appendEvolved(t *testing.T, ev *Schema, changes []Change, msg []byte) arrow.RecordBatch {
	t.Helper()
	evolved, err := ev.WithTable(evolvedTable(t, ev, changes))
	if err != nil {
		t.Fatal(err)
	}
	b := evolved.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	if err := b.Append(msg, Meta{Topic: "o"}, time.Time{}, ""); err != nil {
		t.Fatalf("after evolving: %v", err)
	}
	return b.NewRecord()
}

// TestWithTableRefusesFixedOfNoBytes: a table column of type fixed[0] that
// the schema file does not declare (added by another tool) is refused when
// floe adopts the table's columns, naming it; it was accepted, and every
// flush then failed in the Parquet writer.
func TestWithTableRefusesFixedOfNoBytes(t *testing.T) {
	file, err := ParseAvsc("orders", []byte(ordersFile))
	if err != nil {
		t.Fatal(err)
	}
	fields := append(slices.Clone(file.Iceberg.Fields()),
		iceberg.NestedField{ID: file.Iceberg.HighestFieldID() + 1, Name: "f", Type: iceberg.FixedTypeOf(0)})
	_, err = file.WithTable(iceberg.NewSchema(1, fields...))
	if err == nil || !strings.Contains(err.Error(), `table column "f": type fixed[0] holds no bytes`) {
		t.Fatalf("WithTable: %v, want column f refused", err)
	}
}

// TestEvolveWriterFieldNamedLikeAnExtraColumn: a writer schema (Avro or
// Protobuf) whose new field has the name of an extra (enrichment) column
// asks nothing of the table: the writer's value and the enrichment's
// cannot share the column, so the schema is incompatible, refused as
// on_incompatible says, naming the field and the column. It used to ask to
// add the column, which the table had, at every round, until the
// partition stopped for good.
func TestEvolveWriterFieldNamedLikeAnExtraColumn(t *testing.T) {
	reg, cl := testRegistry(t)
	file, err := ParseAvsc("orders", []byte(ordersFile))
	if err != nil {
		t.Fatal(err)
	}
	file, err = file.WithColumns([]Column{{Name: "segment", Type: iceberg.PrimitiveTypes.String}})
	if err != nil {
		t.Fatal(err)
	}
	avroV2 := `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "float"},
	  {"name": "coupon", "type": ["null", "string"], "default": null},
	  {"name": "segment", "type": ["null", "string"], "default": null}]}`
	protoV2 := `syntax = "proto3";
message Order { string id = 1; int32 qty = 2; float price = 3; string segment = 4; }`
	avroID := register(t, cl, "a", avroV2, sr.TypeAvro)
	protoID := register(t, cl, "p", protoV2, sr.TypeProtobuf)
	avroValue, err := avro.Marshal(avro.MustParse(avroV2), map[string]any{"id": "o-1", "qty": 1, "price": float32(1), "segment": "s"})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := compileProto(protoID, protoV2)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Order")
	pm := dynamicpb.NewMessage(md)
	pm.Set(md.Fields().ByName("segment"), protoreflect.ValueOfString("s"))
	protoValue, err := proto.Marshal(pm)
	if err != nil {
		t.Fatal(err)
	}
	const clash = `collides with enrichment column "segment"`
	for _, tc := range []struct {
		kind, onIncompatible string
		msg                  []byte
	}{
		{FormatAvro, "dlq", wire(avroID, nil, avroValue)},
		{FormatAvro, "stop", wire(avroID, nil, avroValue)},
		{FormatProtobuf, "dlq", wire(protoID, []int{0}, protoValue)},
		{FormatProtobuf, "stop", wire(protoID, []int{0}, protoValue)},
	} {
		t.Run(tc.kind+"/"+tc.onIncompatible, func(t *testing.T) {
			sc, err := file.WithFormat(Format{Kind: tc.kind, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: tc.onIncompatible}})
			if err != nil {
				t.Fatal(err)
			}
			b := sc.Evolving().NewRecordBuilder(memory.DefaultAllocator, 0)
			defer b.Release()
			err = b.Append(tc.msg, Meta{Topic: "o"}, time.Time{}, "")
			var ie *IncompatibleSchemaError
			var de *DecodeError
			var field, detail string
			switch {
			case tc.onIncompatible == "stop" && errors.As(err, &ie):
				field, detail = ie.Field, ie.Detail
			case tc.onIncompatible == "dlq" && errors.As(err, &de) && de.Reason == ReasonIncompatibleSchema:
				field, detail = de.Field, de.Detail
			}
			if field != "segment" || !strings.Contains(detail, clash) || b.Len() != 0 {
				t.Fatalf("append: %v (%d rows), want the writer schema refused (%s) with %q", err, b.Len(), tc.onIncompatible, clash)
			}
		})
	}
}

// TestEvolveRefusesWriterThatDoesNotFit: a writer schema that turns the
// qty column's int into a string and adds a field coupon is refused as a
// whole (on_incompatible decides: dlq or stop, naming qty), with no
// EvolveRequest: the decoder refuses every one of its records, so the
// table must not gain coupon for it. Before, the builder asked for coupon
// first, the table gained the column, and then every record was refused.
// A writer whose fields fit once its changes are made (qty long, price a
// double for the float column, a union with null) still evolves.
func TestEvolveRefusesWriterThatDoesNotFit(t *testing.T) {
	reg, cl := testRegistry(t)
	file, err := ParseAvsc("orders", []byte(ordersFile))
	if err != nil {
		t.Fatal(err)
	}
	avroBad := `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"}, {"name": "qty", "type": "string"}, {"name": "price", "type": "float"},
	  {"name": "coupon", "type": ["null", "string"], "default": null}]}`
	avroNested := `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"}, {"name": "qty", "type": ["null", "int", "string"]}, {"name": "price", "type": ["null", "double"]},
	  {"name": "coupon", "type": ["null", "string"], "default": null}]}`
	avroLacks := `{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"}, {"name": "price", "type": "float"},
	  {"name": "coupon", "type": ["null", "string"], "default": null}]}`
	protoBad := `syntax = "proto3";
message Order { string id = 1; string qty = 2; float price = 3; string coupon = 4; }`
	avroValue := func(text string, v map[string]any) []byte {
		b, err := avro.Marshal(avro.MustParse(text), v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	protoID := register(t, cl, "p", protoBad, sr.TypeProtobuf)
	fd, err := compileProto(protoID, protoBad)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Order")
	pm := dynamicpb.NewMessage(md)
	pm.Set(md.Fields().ByName("id"), protoreflect.ValueOfString("o-1"))
	pm.Set(md.Fields().ByName("qty"), protoreflect.ValueOfString("x"))
	protoValue, err := proto.Marshal(pm)
	if err != nil {
		t.Fatal(err)
	}
	badMsg := wire(register(t, cl, "a", avroBad, sr.TypeAvro), nil, avroValue(avroBad, map[string]any{"id": "o-1", "qty": "x", "price": float32(1), "coupon": "c"}))
	// qty's int branch fits: its records with an int land once the table
	// has coupon (and price is a double); the string branch is refused per record.
	okMsg := wire(register(t, cl, "n", avroNested, sr.TypeAvro), nil, avroValue(avroNested, map[string]any{"id": "o-1", "qty": map[string]any{"int": 2}, "price": nil}))
	lacksMsg := wire(register(t, cl, "l", avroLacks, sr.TypeAvro), nil, avroValue(avroLacks, map[string]any{"id": "o-1", "price": float32(1)}))
	for _, tc := range []struct {
		name, kind, onIncompatible string
		msg                        []byte
		field                      string // refused field; "" when the writer evolves the table
	}{
		{"avro/dlq", FormatAvro, "dlq", badMsg, "qty"},
		{"avro/stop", FormatAvro, "stop", badMsg, "qty"},
		{"avro/required column missing", FormatAvro, "dlq", lacksMsg, "qty"},
		{"protobuf/dlq", FormatProtobuf, "dlq", wire(protoID, []int{0}, protoValue), "qty"},
		{"protobuf/stop", FormatProtobuf, "stop", wire(protoID, []int{0}, protoValue), "qty"},
		{"avro/a union branch fits", FormatAvro, "dlq", okMsg, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := file.WithFormat(Format{Kind: tc.kind, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: tc.onIncompatible}})
			if err != nil {
				t.Fatal(err)
			}
			b := sc.Evolving().NewRecordBuilder(memory.DefaultAllocator, 0)
			defer b.Release()
			err = b.Append(tc.msg, Meta{Topic: "o"}, time.Time{}, "")
			if tc.field == "" {
				var req *EvolveRequest
				if !errors.As(err, &req) {
					t.Fatalf("append: %v, want an EvolveRequest", err)
				}
				return
			}
			var ie *IncompatibleSchemaError
			var de *DecodeError
			var field, detail string
			switch {
			case tc.onIncompatible == "stop" && errors.As(err, &ie):
				field, detail = ie.Field, ie.Detail
			case tc.onIncompatible == "dlq" && errors.As(err, &de) && de.Reason == ReasonIncompatibleSchema:
				field, detail = de.Field, de.Detail
			}
			if field != tc.field || b.Len() != 0 {
				t.Fatalf("append: %v (%d rows), want the writer schema refused (%s) on %s, not a table change", err, b.Len(), tc.onIncompatible, tc.field)
			}
			t.Logf("%s: %s", field, detail)
		})
	}
}

// TestAvroFitsAgreesWithTheDecoder: for every pair of a writer type and a
// column type, avroFits refuses the writer type exactly when the decoder
// refuses a value of it as incompatible_schema: the plan must not refuse
// a writer schema whose records the decoder would store, nor let one
// through whose records it refuses all.
func TestAvroFitsAgreesWithTheDecoder(t *testing.T) {
	epoch := time.Unix(0, 0).UTC()
	types := []struct {
		avsc  string
		value any
	}{
		{`"int"`, 1}, {`"long"`, int64(1)}, {`"float"`, float32(1)}, {`"double"`, float64(1)},
		{`"string"`, "x"}, {`"boolean"`, true}, {`"bytes"`, []byte{1}},
		{`{"type": "fixed", "name": "F16", "size": 16}`, [16]byte{}},
		{`{"type": "fixed", "name": "F4", "size": 4}`, [4]byte{}},
		{`{"type": "enum", "name": "E", "symbols": ["x"]}`, "x"},
		{`{"type": "string", "logicalType": "uuid"}`, "6ba7b810-9dad-11d1-80b4-00c04fd430c8"},
		{`{"type": "int", "logicalType": "date"}`, epoch},
		{`{"type": "int", "logicalType": "time-millis"}`, time.Second},
		{`{"type": "long", "logicalType": "timestamp-micros"}`, epoch},
		{`{"type": "long", "logicalType": "local-timestamp-micros"}`, epoch},
		{`{"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 2}`, big.NewRat(1, 4)},
		{`{"type": "bytes", "logicalType": "decimal", "precision": 9, "scale": 3}`, big.NewRat(1, 4)},
		{`{"type": "array", "items": "int"}`, []int{1}},
		{`{"type": "array", "items": "string"}`, []string{"x"}},
		{`{"type": "map", "values": "string"}`, map[string]string{"k": "x"}},
		{`{"type": "record", "name": "R", "fields": [{"name": "a", "type": "int"}]}`, map[string]any{"a": 1}},
		{`{"type": "record", "name": "S", "fields": [{"name": "a", "type": "string"}]}`, map[string]any{"a": "x"}},
		{`["null", "string"]`, "x"},
	}
	for _, col := range types {
		file, err := ParseAvsc("c", []byte(`{"type": "record", "name": "C", "fields": [{"name": "f", "type": `+col.avsc+`}]}`))
		if err != nil {
			t.Fatalf("column %s: %v", col.avsc, err)
		}
		for _, w := range types {
			ws := avro.MustParse(`{"type": "record", "name": "W", "fields": [{"name": "f", "type": ` + w.avsc + `}]}`)
			body, err := avro.Marshal(ws, map[string]any{"f": w.value})
			if err != nil {
				t.Fatalf("writer %s: %v", w.avsc, err)
			}
			r := avroReader{buf: body}
			derr := r.record(ws, file.user.record, nil, nil, 0)
			decoderRefuses := derr != nil && derr.Reason == ReasonIncompatibleSchema
			fits := avroRecordFits(ws.(*avro.RecordSchema), file.user.record)
			if decoderRefuses != (fits != nil) {
				t.Errorf("writer %s, column %s: the decoder says %v, avroRecordFits %v", w.avsc, col.avsc, derr, fits)
			}
		}
	}
}

// TestEvolveRequestRefuse: a change the table refuses stops the partition
// (on_incompatible: stop) or dead-letters the record (dlq).
func TestEvolveRequestRefuse(t *testing.T) {
	stop := (&EvolveRequest{SchemaID: 7, stop: true}).Refuse("coupon", "the table's string cannot hold the writer's int")
	var ie *IncompatibleSchemaError
	if !errors.As(stop, &ie) || ie.Field != "coupon" || ie.SchemaID != 7 {
		t.Fatalf("stop: %v", stop)
	}
	dlq := (&EvolveRequest{SchemaID: 7}).Refuse("coupon", "the table's string cannot hold the writer's int")
	var de *DecodeError
	if !errors.As(dlq, &de) || de.Reason != ReasonIncompatibleSchema || de.Field != "coupon" {
		t.Fatalf("dlq: %v", dlq)
	}
}

// TestPlanTable: what a schema file edited since the table's creation
// needs, and what it may not do.
func TestPlanTable(t *testing.T) {
	table, err := ParseAvsc("v1", []byte(ordersFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ fields, want, err string }{
		{`{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "float"}`, "", ""},
		{`{"name": "id", "type": ["null", "string"]}, {"name": "qty", "type": "long"}, {"name": "price", "type": "double"}, {"name": "note", "type": ["null", "string"]}`,
			"make column id optional; widen column qty to long; widen column price to double; add column note string", ""},
		// A required field dropped: its column stays, and takes nulls.
		// Nothing was planned, and every record of the file was then a
		// dead letter: missing_field for the column filled from messages.
		{`{"name": "id", "type": "string"}, {"name": "price", "type": "float"}`, "make column qty optional", ""},
		{`{"name": "id", "type": "string"}, {"name": "qty", "type": "string"}, {"name": "price", "type": "float"}`,
			"", `column "qty" is int in the table but string in schema v2: int cannot be promoted to string`},
		{`{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}, {"name": "price", "type": "double"}, {"name": "_kafka_offset", "type": "long"}`,
			"", `reserved`},
	} {
		file, err := ParseAvsc("v2", []byte(`{"type": "record", "name": "Order", "fields": [`+c.fields+`]}`))
		if err != nil {
			if c.err != "" && strings.Contains(err.Error(), c.err) {
				continue
			}
			t.Fatal(err)
		}
		changes, err := PlanTable(table.Iceberg, file)
		var got []string
		for _, ch := range changes {
			got = append(got, ch.String())
		}
		switch {
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%s: %v, want an error containing %q", c.fields, err, c.err)
		case c.err == "" && (err != nil || strings.Join(got, "; ") != c.want):
			t.Errorf("%s: %q, %v; want %q", c.fields, got, err, c.want)
		}
	}
}

func register(t *testing.T, cl *sr.Client, subject, text string, typ sr.SchemaType) int {
	t.Helper()
	ss, err := cl.CreateSchema(t.Context(), subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return ss.ID
}

// TestEvolveRefusesCaseOnlyTwins: a writer schema field whose name differs
// from a column's only in case (the record's "amount", the metadata column
// "_kafka_offset", the enrichment column "segment", or another field the
// schema adds) is refused as WithColumns refuses such a column, naming
// both. Before, evolution added
// it: a table Spark and Trino cannot read, its values in the new column
// and nulls in the old.
func TestEvolveRefusesCaseOnlyTwins(t *testing.T) {
	reg, cl := testRegistry(t)
	file, err := ParseAvsc("orders", []byte(`{"type":"record","name":"Order","fields":[
	  {"name":"id","type":"string"},
	  {"name":"amount","type":["null","long"],"default":null}]}`))
	if err != nil {
		t.Fatal(err)
	}
	file, err = file.WithColumns([]Column{{Name: "segment", Type: iceberg.PrimitiveTypes.String}})
	if err != nil {
		t.Fatal(err)
	}
	// "Extra" after "extra": the twin of a field the same schema adds.
	for field, col := range map[string]string{"Amount": "amount", "_Kafka_Offset": "_kafka_offset", "SEGMENT": "segment", "extra": "", "Extra": "extra"} {
		more := ""
		if field == "Extra" {
			more = `{"name":"extra","type":["null","long"],"default":null},`
		}
		w := `{"type":"record","name":"Order","fields":[
		  {"name":"id","type":"string"},
		  {"name":"amount","type":["null","long"],"default":null},` + more + `
		  {"name":"` + field + `","type":["null","long"],"default":null}]}`
		id := register(t, cl, "s-"+field, w, sr.TypeAvro)
		val, err := avro.Marshal(avro.MustParse(w), map[string]any{"id": "o-1", "amount": map[string]any{"long": int64(5)}, field: map[string]any{"long": int64(7)}})
		if err != nil {
			t.Fatal(err)
		}
		sc, err := file.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL()}})
		if err != nil {
			t.Fatal(err)
		}
		b := sc.Evolving().NewRecordBuilder(memory.DefaultAllocator, 0)
		err = b.Append(wire(id, nil, val), Meta{Topic: "o"}, time.Time{}, "")
		b.Release()
		var req *EvolveRequest
		isReq := errors.As(err, &req)
		if col == "" { // a new name: added
			if !isReq || len(req.Changes) != 1 || req.Changes[0].Kind != AddColumn || req.Changes[0].Column != field {
				t.Errorf("field %s: %v, want a request to add it", field, err)
			}
			continue
		}
		if isReq || err == nil || !strings.Contains(err.Error(), `differs from column "`+col+`" only in case`) || !strings.Contains(err.Error(), field) {
			t.Errorf("field %s: %v, want it refused naming column %s", field, err, col)
		}
	}
}

// TestFieldIndexFirstOfTwins: when two fields read one message field (a
// column renamed by floe.column beside the table's column of its old
// name), the first is found whether the struct looks fields up by scanning
// (fewer than manyFields) or by its index. The index took the last: past
// 11 fields the renamed, required column never saw its value, and every
// record was dead-lettered as missing it.
func TestFieldIndexFirstOfTwins(t *testing.T) {
	for _, count := range []int{manyFields - 2, manyFields + 2} {
		n := &node{}
		for i := range count {
			n.fields = append(n.fields, &node{name: fmt.Sprintf("c%d", i), source: fmt.Sprintf("f%d", i)})
		}
		n.fields = append(n.fields, &node{name: "old_f3", source: "f3"})
		n.indexFields()
		if got := n.fieldIndexName("f3"); got != 3 {
			t.Errorf("%d fields: f3 found at %d, want 3 (the first that reads it)", len(n.fields), got)
		}
	}
}

// TestUndeclaredTimeColumnTakesStringsOnly: a timestamp (or time) column
// the schema file no longer declares keeps filling from records that carry
// the field, but only from RFC 3339 strings: whether an integer counts
// milliseconds or microseconds nothing records. An integer is refused
// naming the field; it was read as microseconds, so a timestamp-millis
// field dropped from the file stored 2024 as January 1970.
func TestUndeclaredTimeColumnTakesStringsOnly(t *testing.T) {
	v1, err := ParseAvsc("orders", []byte(`{"type": "record", "name": "Order", "fields": [
	  {"name": "id", "type": "string"},
	  {"name": "paid_at", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
	  {"name": "at", "type": ["null", {"type": "int", "logicalType": "time-millis"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	v2, err := ParseAvsc("orders", []byte(`{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := v2.WithTable(v1.Iceberg)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b := sc.NewRecordBuilder(mem, 0)
	defer func() {
		b.Release()
		mem.AssertSize(t, 0)
	}()
	meta := Meta{Topic: "orders", Partition: 0, Timestamp: time.UnixMilli(1732860000123)}
	for _, tc := range []struct{ msg, field string }{
		{`{"id":"a","paid_at":1732860000123}`, "paid_at"},
		{`{"id":"b","at":3600000}`, "at"},
	} {
		err := b.Append([]byte(tc.msg), meta, time.Now(), "")
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != ReasonInvalidField || de.Field != tc.field || !strings.Contains(de.Detail, "unit") {
			t.Fatalf("%s: %v, want %s refused for its unknown unit", tc.msg, err, tc.field)
		}
	}
	if err := b.Append([]byte(`{"id":"c","paid_at":"2024-11-29T06:00:00.123Z","at":"01:00:00"}`), meta, time.Now(), ""); err != nil {
		t.Fatal(err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if rec.NumRows() != 1 {
		t.Fatalf("%d rows, want the one with strings", rec.NumRows())
	}
	for col, want := range map[string]string{"paid_at": "2024-11-29T06:00:00.123Z", "at": "01:00:00.000000"} {
		if got := rec.Column(rec.Schema().FieldIndices(col)[0]).ValueStr(0); got != want {
			t.Errorf("%s = %s, want %s", col, got, want)
		}
	}
}
