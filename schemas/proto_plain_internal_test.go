package schemas

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// plainPayments writes the payments .proto (importing the well-known
// Timestamp) to a directory and returns its path.
func plainPayments(t testing.TB, text string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "payments.proto")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPlainProtobufMatchesJSON: payments as plain Protobuf values (no
// wire-format framing), with the message type named in the configuration,
// become exactly the rows their JSON form becomes; malformed bytes are
// dead letters (malformed_value).
func TestPlainProtobufMatchesJSON(t *testing.T) {
	sc := loadPayments(t)
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, paymentsProto), Message: "com.example.payments.Payment"}})
	if err != nil {
		t.Fatal(err)
	}
	fd, err := compileProto(1, paymentsProto)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Payment")
	var js, pb [][]byte
	for _, p := range testPayments() {
		pb = append(pb, protoPayment(t, md, p))
		if p.metadata == nil {
			p.metadata = map[string]string{} // a Protobuf map is never null
		}
		js = append(js, p.json())
	}
	if want, got := build(t, sc, js), build(t, psc, pb); !array.RecordEqual(want, got) {
		t.Fatalf("Protobuf rows differ from JSON rows:\n%v\n%v", got, want)
	}

	b := psc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	good := pb[0]
	// (Cutting a marshaled message is no good: its field order is not fixed,
	// so a cut may fall between fields.)
	for _, bad := range [][]byte{{0xff, 0xff, 0xff}, append(good[:len(good):len(good)], 0x7d, 0x00), append([]byte{0x0a, 0x80}, good...)} {
		var de *DecodeError
		if err := b.Append(bad, Meta{Topic: "p"}, plainTime, ""); !errors.As(err, &de) || de.Reason != ReasonMalformedValue {
			t.Errorf("Append(% x) = %v, want a malformed_value DecodeError", bad, err)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("%d rows from malformed values", b.Len())
	}
}

// TestPlainProtobufEmptyValueIsDeadLetter: a tombstone (a nil value) or an
// empty value is a malformed_value dead letter saying so, as JSON and Avro
// values dead-letter it. It was read as a message of only default values,
// which marshals to no bytes too, and (where the defaults fit the columns)
// became a row of them: here "" and 0.
func TestPlainProtobufEmptyValueIsDeadLetter(t *testing.T) {
	sc, err := ParseAvsc("o", []byte(`{"type": "record", "name": "O", "fields": [
	  {"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	path := plainPayments(t, `syntax = "proto3"; package p; message O { string order_id = 1; int64 amount_cents = 2; }`)
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: path, Message: "p.O"}})
	if err != nil {
		t.Fatal(err)
	}
	b := psc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for _, v := range [][]byte{nil, {}} {
		var de *DecodeError
		if err := b.Append(v, Meta{Topic: "p"}, plainTime, ""); !errors.As(err, &de) || de.Reason != ReasonMalformedValue || !strings.Contains(de.Detail, "tombstone") {
			t.Errorf("Append(%#v) = %v, want a malformed_value DecodeError naming a tombstone", v, err)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("%d rows from empty values", b.Len())
	}
}

// TestPlainProtobufConfigErrors: a missing file or message, and a message
// whose field cannot fill its column, are refused when the job starts.
func TestPlainProtobufConfigErrors(t *testing.T) {
	sc := loadPayments(t)
	good := plainPayments(t, paymentsProto)
	wrongType := plainPayments(t, strings.Replace(paymentsProto, "string amount = 2;", "double amount = 2;", 1))
	for _, c := range []struct {
		f    Format
		want string
	}{
		{Format{Kind: FormatProtobuf}, "set proto.file"},
		{Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: good, Message: "com.example.payments.Nope"}}, `proto.message "com.example.payments.Nope": no such message`},
		{Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: good + ".missing", Message: "x.Y"}}, "proto.file"},
		{Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: wrongType, Message: "com.example.payments.Payment"}}, `field "amount": the writer's double cannot be stored in a column of type decimal(18, 2)`},
		{Format{Kind: FormatAvro, Proto: &ProtoConfig{File: good, Message: "com.example.payments.Payment"}}, "goes with format protobuf"},
	} {
		if _, err := sc.WithFormat(c.f); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want an error containing %q", c.f, err, c.want)
		}
	}
}

// TestPlainProtobufFieldsCheckedAtStart: every field of the message type
// that a column holds is checked against its column when the job starts,
// naming it: fields with presence (messages, proto3 optional, oneofs,
// proto2 optional), the elements of repeated fields, map values and the
// fields of nested messages. The check used to decode an empty message,
// which sets none of those (and, with a proto2 required field, fails as
// malformed and checks nothing), so such a field was accepted and every
// message setting it became an incompatible_schema dead letter.
func TestPlainProtobufFieldsCheckedAtStart(t *testing.T) {
	sc := loadPayments(t)
	for _, c := range []struct{ from, to, want string }{
		{"repeated string tags = 7;", "repeated int32 tags = 7;", `field "tags[]": the writer's int32 cannot be stored in a column of type string`},
		{"map<string, string> metadata = 8;", "map<string, double> metadata = 8;", `field "metadata[]": the writer's double cannot be stored`},
		{"google.protobuf.Timestamp created_at = 5;", "Other created_at = 5;", `field "created_at": the writer's message cannot be stored`},
		{"string currency = 3;", "optional double currency = 3;", `field "currency": the writer's double cannot be stored`},
		{"string currency = 3;", "oneof c { double currency = 3; }", `field "currency": the writer's double cannot be stored`},
		{"optional string country = 2;", "optional bool country = 2;", `field "account.country": the writer's bool cannot be stored`},
	} {
		path := plainPayments(t, strings.Replace(paymentsProto, c.from, c.to, 1))
		_, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: path, Message: "com.example.payments.Payment"}})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error containing %q", c.to, err, c.want)
		}
	}

	sc, err := ParseAvsc("r", []byte(`{"type": "record", "name": "R", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ n, want string }{
		{"required int32 n = 2;", ""},
		{"required double n = 2;", `field "n": the writer's double cannot be stored in a column of type int`},
		{"optional double n = 2;", `field "n": the writer's double cannot be stored in a column of type int`},
	} {
		path := plainPayments(t, `syntax = "proto2"; package p; message R { required string id = 1; `+c.n+` }`)
		_, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: path, Message: "p.R"}})
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("proto2 %s: %v, want an error containing %q", c.n, err, c.want)
		}
	}
}

// TestPlainProto2InvalidUTF8: proto2 strings reach floe unchecked (the
// runtime validates UTF-8 only in proto3), so floe refuses an invalid one as
// invalid_field, in a value or a map key. Map keys were stored as they came:
// a row held a string that is not UTF-8.
func TestPlainProto2InvalidUTF8(t *testing.T) {
	sc, err := ParseAvsc("r", []byte(`{"type": "record", "name": "R", "fields": [
	  {"name": "id", "type": "string"}, {"name": "m", "type": {"type": "map", "values": "string"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	path := plainPayments(t, `syntax = "proto2"; package p; message R { optional string id = 1; map<string, string> m = 2; }`)
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: path, Message: "p.R"}})
	if err != nil {
		t.Fatal(err)
	}
	md := psc.proto
	b := psc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	for _, c := range []struct{ id, key, val, field string }{
		{"\xff", "k", "v", "id"},
		{"x", "k", "\xff", `m["k"]`},
		{"x", "\xff", "v", "m"},
	} {
		m := dynamicpb.NewMessage(md)
		m.Set(md.Fields().ByName("id"), protoreflect.ValueOfString(c.id))
		m.Mutable(md.Fields().ByName("m")).Map().Set(protoreflect.ValueOfString(c.key).MapKey(), protoreflect.ValueOfString(c.val))
		v, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var de *DecodeError
		if err := b.Append(v, Meta{Topic: "p"}, plainTime, ""); !errors.As(err, &de) || de.Reason != ReasonInvalidField || de.Field != c.field {
			t.Errorf("id %q, m {%q: %q}: %v, want invalid_field %s", c.id, c.key, c.val, err, c.field)
		}
	}
	if b.Len() != 0 {
		t.Fatalf("%d rows with invalid UTF-8", b.Len())
	}
}

// wireTypesProto declares a message with a scalar, a nested message, a
// repeated number, a list of messages and a map of messages, for the wire
// type tests; wireTypesAvsc is its table.
const (
	wireTypesProto = `syntax = "proto3"; package p;
message O {
  message Item { string sku = 1; int64 qty = 2; }
  string order_id = 1; int64 amount_cents = 2; Item item = 3;
  repeated int64 counts = 4; repeated Item items = 5; map<string, Item> by_sku = 6;
}`
	wireTypesAvsc = `{"type": "record", "name": "O", "fields": [
  {"name": "order_id", "type": "string"}, {"name": "amount_cents", "type": "long"},
  {"name": "item", "type": ["null", {"type": "record", "name": "Item", "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "long"}]}]},
  {"name": "counts", "type": {"type": "array", "items": "long"}},
  {"name": "items", "type": {"type": "array", "items": "Item"}},
  {"name": "by_sku", "type": {"type": "map", "values": "Item"}}]}`
)

// wireTypesSchemas returns the wire type tests' table reading plain
// Protobuf and reading the Confluent wire format (message O registered),
// and the wire format's framing for a value.
func wireTypesSchemas(t *testing.T) (plain, registry *Schema, framed func([]byte) []byte) {
	t.Helper()
	sc, err := ParseAvsc("o", []byte(wireTypesAvsc))
	if err != nil {
		t.Fatal(err)
	}
	plain, err = sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, wireTypesProto), Message: "p.O"}})
	if err != nil {
		t.Fatal(err)
	}
	reg, cl := testRegistry(t)
	id := register(t, cl, "o-value", wireTypesProto, sr.TypeProtobuf)
	registry, err = sc.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	return plain, registry, func(v []byte) []byte { return wire(id, []int{0}, v) }
}

// Field encoders for the wire type tests.
func pbVarint(num protowire.Number, v uint64) []byte {
	return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
}

func pbBytes(num protowire.Number, v []byte) []byte {
	return protowire.AppendBytes(protowire.AppendTag(nil, num, protowire.BytesType), v)
}

func pbItem(sku string, qty uint64) []byte {
	return slices.Concat(pbBytes(1, []byte(sku)), pbVarint(2, qty))
}

// TestProtobufWrongWireTypeIsMalformed: a declared field sent with a wire
// type its type does not have — a scalar, a nested message, a field of a
// nested message, a repeated number, a message in a list or a map — is a
// malformed_value dead letter naming the field, in plain Protobuf and in
// the Confluent wire format. The runtime keeps such a field with the
// unknown fields, which floe ignored: the field read as unset, so the row
// got 0, "" or null in place of the value sent.
func TestProtobufWrongWireTypeIsMalformed(t *testing.T) {
	plain, registry, framed := wireTypesSchemas(t)
	head := pbBytes(1, []byte("o-1"))
	for _, c := range []struct {
		name, field string
		body        []byte
	}{
		{"int64 as LEN", "amount_cents", pbBytes(2, []byte("12345"))},
		{"message as VARINT", "item", pbVarint(3, 7)},
		{"nested int64 as I64", "item.qty", pbBytes(3, slices.Concat(pbBytes(1, []byte("s")), protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 5)))},
		{"repeated int64 as I32", "counts", protowire.AppendFixed32(protowire.AppendTag(nil, 4, protowire.Fixed32Type), 5)},
		{"int64 of a list's message as LEN", "items[1].qty", slices.Concat(pbBytes(5, pbItem("a", 1)), pbBytes(5, slices.Concat(pbBytes(1, []byte("b")), pbBytes(2, []byte("2")))))},
		{"int64 of a map's message as LEN", `by_sku["a"].qty`, pbBytes(6, slices.Concat(pbBytes(1, []byte("a")), pbBytes(2, pbBytes(2, []byte("2")))))},
	} {
		v := slices.Concat(head, c.body)
		for _, f := range []struct {
			how   string
			sc    *Schema
			value []byte
		}{{"plain", plain, v}, {"registry", registry, framed(v)}} {
			b := f.sc.NewRecordBuilder(memory.DefaultAllocator, 0)
			var de *DecodeError
			if err := b.Append(f.value, Meta{Topic: "p"}, plainTime, ""); !errors.As(err, &de) || de.Reason != ReasonMalformedValue || de.Field != c.field || !strings.Contains(de.Detail, "wire type") {
				t.Errorf("%s (%s): %v, want malformed_value %s naming the wire type", c.name, f.how, err, c.field)
			}
			if b.Len() != 0 {
				t.Errorf("%s (%s): %d rows", c.name, f.how, b.Len())
			}
			b.Release()
		}
	}
}

// nestedMapsProto declares maps at depth: in a list's messages and in a
// map's values; nestedMapsAvsc is its table.
const (
	nestedMapsProto = `syntax = "proto3"; package p;
message N { map<string, int64> attrs = 1; }
message O { string id = 1; repeated N ns = 2; map<string, N> by = 3; }`
	nestedMapsAvsc = `{"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"},
  {"name": "ns", "type": {"type": "array", "items": {"type": "record", "name": "N", "fields": [{"name": "attrs", "type": {"type": "map", "values": "long"}}]}}},
  {"name": "by", "type": {"type": "map", "values": "N"}}]}`
)

// TestProtobufMapEntryWrongWireTypeIsMalformed: a map entry whose key or
// value arrives with a wire type its type does not have is, like any other
// declared field (TestProtobufWrongWireTypeIsMalformed), a malformed_value
// dead letter naming the map, at any depth, in plain Protobuf and in the
// Confluent wire format. The runtime drops such a key or value without a
// trace: the row held the key "" or an empty value in place of what was
// sent. Entries sent right (a key or value left out is its default, as
// in any message) are rows.
func TestProtobufMapEntryWrongWireTypeIsMalformed(t *testing.T) {
	plain, registry, framed := wireTypesSchemas(t)
	nestedTbl, err := ParseAvsc("o", []byte(nestedMapsAvsc))
	if err != nil {
		t.Fatal(err)
	}
	nestedPlain, err := nestedTbl.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, nestedMapsProto), Message: "p.O"}})
	if err != nil {
		t.Fatal(err)
	}
	reg, cl := testRegistry(t)
	id := register(t, cl, "o-value", nestedMapsProto, sr.TypeProtobuf)
	nestedRegistry, err := nestedTbl.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	nestedFramed := func(v []byte) []byte { return wire(id, []int{1}, v) }

	head := pbBytes(1, []byte("o-1"))
	attr := func(k string, v uint64) []byte {
		return pbBytes(1, slices.Concat(pbBytes(1, []byte(k)), pbVarint(2, v)))
	}
	i64 := protowire.AppendFixed64(protowire.AppendTag(nil, 2, protowire.Fixed64Type), 7)
	i32key := protowire.AppendFixed32(protowire.AppendTag(nil, 1, protowire.Fixed32Type), 1)
	for _, c := range []struct {
		name, field, detail string
		nested              bool
		body                []byte
	}{
		{"key as VARINT", "by_sku", "key (field 1) has wire type VARINT, its string is sent as LEN", false,
			pbBytes(6, slices.Concat(pbVarint(1, 7), pbBytes(2, pbItem("a", 1))))},
		{"message value as VARINT", "by_sku", "value (field 2) has wire type VARINT, its message is sent as LEN", false,
			pbBytes(6, slices.Concat(pbBytes(1, []byte("k")), pbVarint(2, 7)))},
		{"int64 value as I64 in a list's message", "ns[1].attrs", "value (field 2) has wire type I64, its int64 is sent as VARINT", true,
			slices.Concat(pbBytes(2, attr("a", 1)), pbBytes(2, pbBytes(1, slices.Concat(pbBytes(1, []byte("b")), i64))))},
		{"key as I32 in a map's message", `by["x"].attrs`, "key (field 1) has wire type I32, its string is sent as LEN", true,
			pbBytes(3, slices.Concat(pbBytes(1, []byte("x")), pbBytes(2, pbBytes(1, slices.Concat(i32key, pbVarint(2, 3))))))},
	} {
		v := slices.Concat(head, c.body)
		sc, reg, fr := plain, registry, framed
		if c.nested {
			sc, reg, fr = nestedPlain, nestedRegistry, nestedFramed
		}
		for _, f := range []struct {
			how   string
			sc    *Schema
			value []byte
		}{{"plain", sc, v}, {"registry", reg, fr(v)}} {
			b := f.sc.NewRecordBuilder(memory.DefaultAllocator, 0)
			var de *DecodeError
			if err := b.Append(f.value, Meta{Topic: "p"}, plainTime, ""); !errors.As(err, &de) || de.Reason != ReasonMalformedValue || de.Field != c.field || !strings.Contains(de.Detail, c.detail) {
				row := "-"
				if err == nil {
					rec := b.NewRecord()
					row = fmt.Sprint(rec.Columns())
					rec.Release()
				}
				t.Errorf("%s (%s): %v (row %s), want malformed_value %s: %q", c.name, f.how, err, row, c.field, c.detail)
			}
			b.Release()
		}
	}

	// Right, with a key or a value left out (its default); one entry a
	// map, whose order the runtime does not keep.
	good := [][]byte{
		slices.Concat(head, pbBytes(2, attr("a", 1)), pbBytes(2, pbBytes(1, pbVarint(2, 5))), // no key: ""
			pbBytes(3, pbBytes(1, []byte("x")))), // no value: an empty N
		slices.Concat(head, pbBytes(3, slices.Concat(pbBytes(1, []byte("y")), pbBytes(2, attr("c", 3))))),
	}
	want := [][]string{
		{`[{"attrs":[{"key":"a","value":1}]},{"attrs":[{"key":"","value":5}]}]`, `[{"key":"x","value":{"attrs":[]}}]`},
		{`[]`, `[{"key":"y","value":{"attrs":[{"key":"c","value":3}]}}]`},
	}
	for _, f := range []struct {
		how    string
		sc     *Schema
		values [][]byte
	}{{"plain", nestedPlain, good}, {"registry", nestedRegistry, [][]byte{nestedFramed(good[0]), nestedFramed(good[1])}}} {
		rec := build(t, f.sc, f.values)
		for row := range f.values {
			var got []string
			for _, name := range []string{"ns", "by"} {
				got = append(got, rec.Column(rec.Schema().FieldIndices(name)[0]).ValueStr(row))
			}
			if !slices.Equal(got, want[row]) {
				t.Errorf("%s value %d: row %q, want %q", f.how, row, got, want[row])
			}
		}
		rec.Release()
	}
}

// TestProtobufPackedAndUndeclaredFieldsAccepted: a repeated number is read
// packed (one LEN) and unpacked (a VARINT each) alike, and fields of
// numbers the message does not declare (a newer writer's) are ignored,
// whatever their wire type: the wire type check refuses neither.
func TestProtobufPackedAndUndeclaredFieldsAccepted(t *testing.T) {
	plain, registry, framed := wireTypesSchemas(t)
	head := slices.Concat(pbBytes(1, []byte("o-1")), pbVarint(2, 12345), pbBytes(3, pbItem("s", 4)))
	packed := slices.Concat(head, pbBytes(4, []byte{1, 2, 3}))
	unpacked := slices.Concat(head, pbVarint(4, 1), pbVarint(4, 2), pbVarint(4, 3))
	undeclared := slices.Concat(packed, pbBytes(98, []byte("x")), pbVarint(99, 1), protowire.AppendFixed32(protowire.AppendTag(nil, 97, protowire.Fixed32Type), 1))
	for _, f := range []struct {
		how    string
		sc     *Schema
		values [][]byte
	}{
		{"plain", plain, [][]byte{packed, unpacked, undeclared}},
		{"registry", registry, [][]byte{framed(packed), framed(unpacked), framed(undeclared)}},
	} {
		rec := build(t, f.sc, f.values)
		for row := range f.values {
			var got []string
			for _, name := range []string{"order_id", "amount_cents", "item", "counts"} {
				got = append(got, rec.Column(rec.Schema().FieldIndices(name)[0]).ValueStr(row))
			}
			if want := []string{"o-1", "12345", `{"qty":4,"sku":"s"}`, "[1,2,3]"}; !slices.Equal(got, want) {
				t.Errorf("%s value %d: row %q, want %q", f.how, row, got, want)
			}
		}
	}
}

// FuzzProtobufPlain: any bytes given to the plain Protobuf decoder are a
// row or a *DecodeError, never a panic, and a failed one appends nothing.
func FuzzProtobufPlain(f *testing.F) {
	sc := loadPaymentsTB(f)
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(f, paymentsProto), Message: "com.example.payments.Payment"}})
	if err != nil {
		f.Fatal(err)
	}
	fd, err := compileProto(1, paymentsProto)
	if err != nil {
		f.Fatal(err)
	}
	md := fd.Messages().ByName("Payment")
	for _, p := range testPayments()[:4] {
		v := protoPayment(f, md, p)
		f.Add(v)
		f.Add(v[:len(v)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f})
	b := psc.NewRecordBuilder(memory.DefaultAllocator, 0)
	f.Cleanup(b.Release)
	f.Fuzz(func(t *testing.T, data []byte) {
		before := b.Len()
		err := b.Append(data, Meta{Topic: "p"}, plainTime, "")
		var de *DecodeError
		switch {
		case err == nil:
			if b.Len() != before+1 {
				t.Fatalf("Append(% x) succeeded with %d rows, want %d", data, b.Len(), before+1)
			}
		case errors.As(err, &de):
			if b.Len() != before {
				t.Fatalf("Append(% x) failed (%v) but appended", data, err)
			}
		default:
			t.Fatalf("Append(% x) = %v, want nil or *DecodeError", data, err)
		}
		if b.Len() > 1000 {
			b.NewRecord().Release()
		}
	})
}

// plainTime is the ingestion time of the rows these tests build.
var plainTime = time.Date(2024, 12, 1, 0, 0, 0, 0, time.UTC)

func loadPaymentsTB(tb testing.TB) *Schema {
	tb.Helper()
	sc, err := Lookup("examples/payments.avsc")
	if err != nil {
		tb.Fatal(err)
	}
	return sc
}
