package schemas

import (
	"context"
	"errors"
	"math/big"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// fuzzBuilder feeds data, as a network peer could, to a RecordBuilder that
// is reused across inputs, after a known-good message. Whatever the input,
// Append must not panic, must fail only with a *DecodeError, must leave the
// columns equal in length and valid Arrow, and a required column never
// holds a null.
func fuzzBuilder(f *testing.F, sc *Schema, good []byte, seeds [][]byte) {
	f.Helper()
	f.Add(good)
	for _, s := range seeds {
		f.Add(s)
	}
	b := sc.NewRecordBuilder(nil, 1<<16)
	f.Cleanup(b.Release)
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := b.Append(good, Meta{Topic: "t", Offset: 1}, time.Time{}, ""); err != nil {
			t.Fatalf("good message rejected: %v", err)
		}
		err := b.Append(data, Meta{Topic: "t", Offset: 2}, time.Time{}, "")
		var de *DecodeError
		if err != nil && !errors.As(err, &de) {
			t.Fatalf("Append(%q) = %v (%T), want nil or *DecodeError", data, err, err)
		}
		if de != nil && (de.Reason == "" || de.Detail == "" || len(de.Detail) > maxDetailBytes || !utf8.ValidString(de.Detail)) {
			t.Fatalf("Append(%q) = %#v: reason or detail empty, too long or not UTF-8", data, de)
		}
		want := int64(2)
		if err != nil {
			want = 1
		}
		rec := b.NewRecord()
		defer rec.Release()
		if rec.NumRows() != want {
			t.Fatalf("record has %d rows, want %d (err %v)", rec.NumRows(), want, err)
		}
		for c, col := range rec.Columns() {
			if err := array.ValidateFull(col); err != nil || int64(col.Len()) != want {
				t.Fatalf("column %s: %d values, %v", rec.ColumnName(c), col.Len(), err)
			}
			if !rec.Schema().Field(c).Nullable && col.NullN() != 0 {
				t.Fatalf("required column %s has nulls", rec.ColumnName(c))
			}
		}
	})
}

func fuzzSchema(f *testing.F) *Schema {
	f.Helper()
	sc, err := Lookup("testdata/alltypes.avsc")
	if err != nil {
		f.Fatal(err)
	}
	return sc
}

// allTypesAvro is one all-types value as plain Avro.
func allTypesAvro(f *testing.F, sc *Schema) []byte {
	f.Helper()
	v := map[string]any{
		"s": "héllo", "i": -7, "l": int64(1) << 53, "f": float32(1.5), "d": -2.25, "b": true,
		"dec": ratOf(1234567891, 1000), "fdec": map[string]any{"t.F8": ratOf(-42, 1)},
		"day": time.Date(2024, 11, 29, 0, 0, 0, 0, time.UTC), "tm": 13*time.Hour + 500*time.Millisecond,
		"tu": time.Second + time.Microsecond, "ts_ms": time.UnixMilli(1732860000123).UTC(),
		"ts_us": time.UnixMicro(1732860000123456).UTC(), "lts": time.UnixMicro(1732860000500000).UTC(),
		"id": "0c6b1d2e-3f40-4c1e-9a53-7a4d0c6b1d2e", "raw": []byte{0, 1, 2, 255}, "fx": [3]byte{'a', 'b', 'c'},
		"color": "GREEN", "opt": nil, "renamed": map[string]any{"long": int64(5)},
		"rec":  map[string]any{"x": 1, "inner": map[string]any{"t.Inner": map[string]any{"y": "deep"}}},
		"ints": []int64{1, 2, 3}, "opt_items": []any{map[string]any{"string": "a"}, nil},
		"recs": map[string]any{"array": []any{map[string]any{"k": "k1"}}},
		"m":    map[string]any{"pi": 3.25}, "mm": map[string]any{"outer": map[string]any{"n": nil, "one": map[string]any{"int": 1}}},
	}
	b, err := avro.Marshal(sc.user.avro, v)
	if err != nil {
		f.Fatalf("encoding the all-types value: %v", err)
	}
	return b
}

func ratOf(a, b int64) *big.Rat { return big.NewRat(a, b) }

// FuzzAvroPlain: plain Avro values of the all-types schema.
func FuzzAvroPlain(f *testing.F) {
	sc := fuzzSchema(f)
	good := allTypesAvro(f, sc)
	asc, err := sc.WithFormat(Format{Kind: FormatAvro})
	if err != nil {
		f.Fatal(err)
	}
	seeds := [][]byte{nil, good[:len(good)/2], append(append([]byte(nil), good...), 1), {0x01}, {0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01}}
	fuzzBuilder(f, asc, good, seeds)
}

// FuzzJSONGeneric: the generic JSON decoder on the all-types schema.
func FuzzJSONGeneric(f *testing.F) {
	sc := fuzzSchema(f)
	good := []byte(`{"s":"x","i":0,"l":0,"f":0,"d":0,"b":false,"dec":"1.5","day":"2024-01-01","tm":0,"tu":0,"ts_ms":0,"ts_us":0,
	 "lts":0,"id":"0c6b1d2e-3f40-4c1e-9a53-7a4d0c6b1d2e","raw":"","fx":"AAAA","color":"RED","rec":{"x":2,"inner":{"y":"z"}},
	 "ints":[1],"opt_items":[null],"recs":[{"k":"v"}],"m":{"a":1},"mm":{"o":{"p":null}}}`)
	seeds := [][]byte{[]byte(`{}`), []byte(`{"s":"x","dec":"1e99999"}`), []byte(`{"mm":{"o":{"p":"x"}}}`), []byte("{\"s\":\"\xff\"}")}
	fuzzBuilder(f, sc, good, seeds)
}

// FuzzWireFormat: Confluent wire-format values, Avro and Protobuf, with
// their schemas from a registry speaking the Confluent API.
func FuzzWireFormat(f *testing.F) {
	reg := srfake.New()
	f.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		f.Fatal(err)
	}
	ctx := context.Background()
	avroSS, err := cl.CreateSchema(ctx, "a-value", sr.Schema{Schema: paymentsWriterV1})
	if err != nil {
		f.Fatal(err)
	}
	protoSS, err := cl.CreateSchema(ctx, "p-value", sr.Schema{Schema: paymentsProto, Type: sr.TypeProtobuf})
	if err != nil {
		f.Fatal(err)
	}
	sc, err := Lookup("examples/payments.avsc")
	if err != nil {
		f.Fatal(err)
	}
	p := testPayment{n: 3, country: "DE", metadata: map[string]string{"k": "v"}}
	v := p.avroValue()
	v["note"] = []any{}
	delete(v, "metadata")
	ab, err := avro.Marshal(avro.MustParse(paymentsWriterV1), v)
	if err != nil {
		f.Fatal(err)
	}
	fd, err := compileProto(protoSS.ID, paymentsProto)
	if err != nil {
		f.Fatal(err)
	}
	pbody := protoPayment(f, fd.Messages().ByName("Payment"), p)
	// One builder per format; the fuzzer's input goes to both, framed as
	// given, so it explores headers, ids and bodies.
	asc, err := sc.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		f.Fatal(err)
	}
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		f.Fatal(err)
	}
	agood, pgood := wire(avroSS.ID, nil, ab), wire(protoSS.ID, []int{1}, pbody)
	f.Add(agood)
	f.Add(pgood)
	f.Add(wire(protoSS.ID, []int{0}, pbody))
	f.Add(wire(99, nil, ab))
	f.Add([]byte{0, 0, 0, 0})
	ab2 := asc.NewRecordBuilder(nil, 1<<16)
	pb2 := psc.NewRecordBuilder(nil, 1<<16)
	f.Cleanup(ab2.Release)
	f.Cleanup(pb2.Release)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, c := range []struct {
			b    RecordBuilder
			good []byte
		}{{ab2, agood}, {pb2, pgood}} {
			if err := c.b.Append(c.good, Meta{Topic: "t"}, time.Time{}, ""); err != nil {
				t.Fatalf("good message rejected: %v", err)
			}
			err := c.b.Append(data, Meta{Topic: "t"}, time.Time{}, "")
			var de *DecodeError
			var ie *IncompatibleSchemaError // a message index naming another type
			if err != nil && !errors.As(err, &de) && !errors.As(err, &ie) {
				t.Fatalf("Append(%q) = %v, want nil, *DecodeError or *IncompatibleSchemaError", data, err)
			}
			want := int64(2)
			if err != nil {
				want = 1
			}
			rec := c.b.NewRecord()
			if rec.NumRows() != want {
				t.Fatalf("record has %d rows, want %d", rec.NumRows(), want)
			}
			for i, col := range rec.Columns() {
				if err := array.ValidateFull(col); err != nil || int64(col.Len()) != want {
					t.Fatalf("column %s: %d values, %v", rec.ColumnName(i), col.Len(), err)
				}
			}
			rec.Release()
		}
	})
}
