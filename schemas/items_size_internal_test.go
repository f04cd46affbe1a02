package schemas

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/sr"
)

// wideItems returns a table of a list of records of n optional longs
// (a line item with many optional attributes), a map of them and a list of
// longs, and the same as a .proto: an empty record ("{}" in JSON, an
// empty sub-message in Protobuf) is 2 or 3 bytes of the message and n
// values of 9 bytes in Arrow.
func wideItems(n int) (avsc, protoText string) {
	var fs, pfs []string
	for i := range n {
		fs = append(fs, `{"name":"f`+strconv.Itoa(i)+`","type":["null","long"],"default":null}`)
		pfs = append(pfs, "  optional int64 f"+strconv.Itoa(i)+" = "+strconv.Itoa(i+1)+";")
	}
	avsc = `{"type":"record","name":"R","fields":[
	  {"name":"items","type":{"type":"array","items":{"type":"record","name":"Item","fields":[` + strings.Join(fs, ",") + `]}}},
	  {"name":"by_key","type":{"type":"map","values":"Item"}},
	  {"name":"counts","type":{"type":"array","items":"long"}}]}`
	protoText = "syntax = \"proto3\";\npackage p;\nmessage Item {\n" + strings.Join(pfs, "\n") + "\n}\n" +
		"message R { repeated Item items = 1; map<string, Item> by_key = 2; repeated int64 counts = 3; }\n"
	return avsc, protoText
}

// wideSchemas returns the wideItems table reading JSON, plain Protobuf and
// the Protobuf of the Confluent wire format (message R registered), and
// that format's framing for a value.
func wideSchemas(t *testing.T, n int) (jsonSc, plain, registry *Schema, framed func([]byte) []byte) {
	t.Helper()
	avsc, protoText := wideItems(n)
	jsonSc, err := ParseAvsc("wide", []byte(avsc))
	if err != nil {
		t.Fatal(err)
	}
	plain, err = jsonSc.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, protoText), Message: "p.R"}})
	if err != nil {
		t.Fatal(err)
	}
	reg, cl := testRegistry(t)
	id := register(t, cl, "r-value", protoText, sr.TypeProtobuf)
	registry, err = jsonSc.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	// R is the second message of the file.
	return jsonSc, plain, registry, func(v []byte) []byte { return wire(id, []int{1}, v) }
}

// TestJSONAndProtobufItemsCountedInSizeBytes: SizeBytes, which
// commit.max_bytes bounds a member's memory with, counts the list and map
// elements a JSON or Protobuf message's items become, as it does for Avro
// (TestAvroItemsCountedInSizeBytes). It counted only the message's bytes:
// a list of 2,000 "{}" (6 KB) held 360 KB of Arrow, a list of 4,096 zeros
// 9 bytes of Arrow for each 2 (JSON) or 1 (packed Protobuf) of the message.
func TestJSONAndProtobufItemsCountedInSizeBytes(t *testing.T) {
	const items, fields = 2000, 20
	jsonSc, plain, registry, framed := wideSchemas(t, fields)
	repeat := func(s string, n int) string { return strings.TrimSuffix(strings.Repeat(s+",", n), ",") }
	var keys []string
	var pbEntries, pbEmpty, pbZeros []byte
	for i := range items {
		keys = append(keys, fmt.Sprintf(`"k%d":{}`, i))
		pbEntries = append(pbEntries, pbBytes(2, slices.Concat(pbBytes(1, []byte("k"+strconv.Itoa(i))), pbBytes(2, nil)))...)
		pbEmpty = append(pbEmpty, pbBytes(1, nil)...)
	}
	pbZeros = pbBytes(3, make([]byte, 2*items)) // packed
	for _, tc := range []struct {
		name  string
		json  string
		proto []byte
	}{
		{"empty records in a list", `{"items":[` + repeat("{}", items) + `]}`, pbEmpty},
		{"empty records as map values", `{"by_key":{` + strings.Join(keys, ",") + `}}`, pbEntries},
		{"zeros in a list of longs", `{"counts":[` + repeat("0", 2*items) + `]}`, pbZeros},
	} {
		for _, f := range []struct {
			how   string
			sc    *Schema
			value []byte
		}{
			// Lists and maps are required: the others are empty (a
			// repeated key's last value wins).
			{"json", jsonSc, []byte(`{"items":[],"by_key":{},"counts":[],` + tc.json[1:])},
			{"protobuf", plain, tc.proto},
			{"protobuf registry", registry, framed(tc.proto)},
		} {
			t.Run(tc.name+"/"+f.how, func(t *testing.T) {
				mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer mem.AssertSize(t, 0)
				b := f.sc.NewRecordBuilder(mem, 0)
				defer b.Release()
				for i := range 20 {
					if err := b.Append(f.value, Meta{Topic: "t", Offset: int64(i)}, time.Time{}, ""); err != nil {
						t.Fatal(err)
					}
				}
				// Arrow builders double their buffers as they grow.
				if held, size := mem.CurrentAlloc(), b.SizeBytes(); held > 3*size {
					t.Fatalf("20 messages of %d bytes hold %d bytes; SizeBytes counts %d", len(f.value), held, size)
				}
			})
		}
	}
}

// TestJSONAndProtobufItemsTooLarge: a message under the size limit whose
// items would take more than a batch holds in Arrow — 300,000 "{}" or empty
// sub-messages, each a record of 990 longs, 2.7 GB — is a too_large dead
// letter, found before anything is appended, as for Avro. It was a row:
// its list took gigabytes, and SizeBytes counted 900 KB.
func TestJSONAndProtobufItemsTooLarge(t *testing.T) {
	const items = 300_000
	jsonSc, plain, registry, framed := wideSchemas(t, 990) // under maxColumnNodes
	var pb []byte
	for range items {
		pb = append(pb, pbBytes(1, nil)...)
	}
	js := []byte(`{"items":[` + strings.TrimSuffix(strings.Repeat("{},", items), ",") + `],"by_key":{},"counts":[]}`)
	for _, f := range []struct {
		how   string
		sc    *Schema
		value []byte
	}{
		{"json", jsonSc, js},
		{"protobuf", plain, pb},
		{"protobuf registry", registry, framed(pb)},
	} {
		t.Run(f.how, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := f.sc.NewRecordBuilder(mem, 0)
			defer b.Release()
			// Check first: appending it without the check would take
			// gigabytes.
			var de *DecodeError
			if err := b.Check(f.value); !errors.As(err, &de) || de.Reason != ReasonTooLarge {
				t.Fatalf("checking a %d-byte message of %d empty records: %v, want too_large", len(f.value), items, err)
			}
			if err := b.Append(f.value, Meta{Topic: "t"}, time.Time{}, ""); !errors.As(err, &de) || de.Reason != ReasonTooLarge {
				t.Fatalf("appending it: %v, want too_large", err)
			}
			if b.Len() != 0 || mem.CurrentAlloc() > 1<<20 {
				t.Fatalf("refusing it left %d rows, %d bytes allocated", b.Len(), mem.CurrentAlloc())
			}
		})
	}
}
