package schemas

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
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
