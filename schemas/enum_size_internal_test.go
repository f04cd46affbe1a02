package schemas

import (
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// longSymbol is an enum symbol of 200 bytes, stored for each one-byte
// number in the message.
var longSymbol = "S" + strings.Repeat("x", 199)

// enumListSchema keeps a list of enum symbols as strings.
const enumListSchema = `{"type":"record","name":"E","fields":[
 {"name":"id","type":"string"},
 {"name":"levels","type":{"type":"array","items":{"type":"enum","name":"L","symbols":["A","%s"]}}}]}`

// TestEnumSymbolsCountInTheSize: a row's size counts the enum symbols it
// stores, not the one-byte numbers the message holds (a builder's size
// bounds the buffered memory, and its string bytes the Arrow offsets);
// Avro and Protobuf alike.
func TestEnumSymbolsCountInTheSize(t *testing.T) {
	const n = 1000
	sc, err := ParseAvsc("e", []byte(strings.Replace(enumListSchema, "%s", longSymbol, 1)))
	if err != nil {
		t.Fatal(err)
	}
	levels := make([]string, n)
	for i := range levels {
		levels[i] = longSymbol
	}
	avroValue, err := avro.Marshal(sc.user.avro, map[string]any{"id": "a", "levels": levels})
	if err != nil {
		t.Fatal(err)
	}

	fd, err := compileProto(1, `syntax = "proto3"; package t;
enum L { A = 0; `+longSymbol+` = 1; }
message E { string id = 1; repeated L levels = 2; }`)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("E")
	m := dynamicpb.NewMessage(md)
	m.Set(md.Fields().ByName("id"), protoreflect.ValueOfString("a"))
	list := m.Mutable(md.Fields().ByName("levels")).List()
	for range n {
		list.Append(protoreflect.ValueOfEnum(1))
	}
	protoValue, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		name  string
		f     Format
		value []byte
	}{
		{"avro", Format{Kind: FormatAvro}, avroValue},
		{"protobuf", Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, `syntax = "proto3"; package t;
enum L { A = 0; `+longSymbol+` = 1; }
message E { string id = 1; repeated L levels = 2; }`), Message: "t.E"}}, protoValue},
	} {
		fsc, err := sc.WithFormat(c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		b := fsc.NewRecordBuilder(nil, 0)
		if err := b.Append(c.value, Meta{Topic: "t"}, time.Time{}, ""); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got, want := b.SizeBytes(), n*len(longSymbol); got < want {
			t.Errorf("%s: a message of %d bytes storing %d symbols of %d bytes: size %d, want at least %d",
				c.name, len(c.value), n, len(longSymbol), got, want)
		}
		b.Release()
	}
}
