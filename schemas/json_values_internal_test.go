package schemas

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/hamba/avro/v2"
)

const valuesSchema = `{"type":"record","name":"R","fields":[
 {"name":"id","type":"string"},
 {"name":"d","type":["null","double"],"default":null},
 {"name":"tags","type":["null",{"type":"array","items":"string"}],"default":null},
 {"name":"m","type":["null",{"type":"map","values":"string"}],"default":null},
 {"name":"ts","type":["null",{"type":"long","logicalType":"timestamp-micros"}],"default":null},
 {"name":"n","type":["null","long"],"default":null}
]}`

func valuesTestSchema(t *testing.T) *Schema {
	t.Helper()
	sc, err := ParseAvsc("r4", []byte(valuesSchema))
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// valuesAppend appends one JSON value, returning the batch (or the error).
func valuesAppend(t *testing.T, value string) (*array.Struct, error) {
	t.Helper()
	sc := valuesTestSchema(t)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b := sc.NewRecordBuilder(mem, 0)
	defer b.Release()
	err := b.Append([]byte(value), Meta{Topic: "t"}, time.Unix(0, 0), "")
	if err != nil {
		return nil, err
	}
	rec := b.NewRecord()
	t.Cleanup(rec.Release)
	return array.RecordToStructArray(rec), nil
}

// TestDoubleExponentExact: a double written as 3e-05 (Python's
// json.dumps(0.00003)) is stored as the double nearest to 3e-05, as
// strconv.ParseFloat and JSON libraries read it (fastjson's Float64 was one
// unit in the last place off).
func TestDoubleExponentExact(t *testing.T) {
	for _, s := range []string{"3e-05", "5e-06", "1.1e-05", "8.41e21", "1e-30"} {
		st, err := valuesAppend(t, `{"id":"a","d":`+s+`}`)
		if err != nil {
			t.Fatalf("%s: %v", s, err)
		}
		got := st.Field(1).(*array.Float64).Value(0)
		want, _ := strconv.ParseFloat(s, 64)
		if got != want {
			t.Errorf("double %s stored as %v (bits %x), want %v (bits %x)", s, got, math.Float64bits(got), want, math.Float64bits(want))
		}
	}
}

// TestEmptyStringElements: an empty string is a list element or a map
// value like any other (the rule that a required string is not empty is
// for fields); Avro stores it too.
func TestEmptyStringElements(t *testing.T) {
	for _, v := range []string{`{"id":"a","tags":["x",""]}`, `{"id":"a","m":{"utm_source":""}}`} {
		if _, err := valuesAppend(t, v); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
}

// TestMapDuplicateKeys: a map whose JSON object repeats a key keeps it
// once, with its last value, as a field does: a map with a key twice is not
// a map to Iceberg or Spark.
func TestMapDuplicateKeys(t *testing.T) {
	st, err := valuesAppend(t, `{"id":"a","m":{"k":"1","k":"2"}}`)
	if err != nil {
		t.Fatal(err)
	}
	m := st.Field(3).(*array.Map)
	keys, items := m.Keys().(*array.String), m.Items().(*array.String)
	if keys.Len() != 1 || keys.Value(0) != "k" || items.Value(0) != "2" {
		t.Errorf("map stored keys %v, values %v; want k: 2", keys, items)
	}
}

// TestInvalidJSONRefused: JSON fastjson's parser takes but the grammar
// refuses is malformed_json (README "Dead letters").
func TestInvalidJSONRefused(t *testing.T) {
	for _, v := range []string{
		`{"id":"a","n":007}`,
		`{"id":"a","x":NaN}`,
		`{"id":"a","x":1.2.3}`,
		`{"id":"a","x":-}`,
		`{"id":"a\q"}`,
		`{"id":"a\u00zz"}`,
	} {
		_, err := valuesAppend(t, v)
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != ReasonMalformedJSON {
			t.Errorf("%s: err = %v, want malformed_json", v, err)
		}
	}
}

// TestDeeplyNestedJSONRefusedAtOnce: a message nested deeper than the
// parser's 300 levels is malformed_json at once, through the generic and
// the built-in clickstream decoder, with or without an escape. With a
// backslash it went to fastjson's validator first, which has no depth
// bound and wraps its error once per level: 20 KB of '[' took 11 s (a
// 1 MiB message hours), the partition's buffer held all along.
func TestDeeplyNestedJSONRefusedAtOnce(t *testing.T) {
	click, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	deep := strings.Repeat("[", 20000)
	for _, v := range []string{
		`{"id":"a\\b","x":` + deep + `}`,
		`{"id":"a","x":` + deep + `}`,
		`{"id":"a\\b","x":` + strings.Repeat("[", 400) + strings.Repeat("]", 400) + `}`, // valid, too deep
	} {
		start := time.Now()
		_, err := valuesAppend(t, v)
		cb := click.NewBuilder(nil, 0)
		cerr := cb.Append([]byte(v), Meta{Topic: "t"}, time.Time{}, "")
		cb.Release()
		took := time.Since(start)
		for _, err := range []error{err, cerr} {
			var de *DecodeError
			if !errors.As(err, &de) || de.Reason != ReasonMalformedJSON {
				t.Errorf("%.30s…: err = %v, want malformed_json", v, err)
			}
		}
		if took > 2*time.Second { // microseconds; the quadratic validator took 11 s
			t.Errorf("%.30s… (%d bytes) took %v to refuse", v, len(v), took)
		}
	}
}

// TestLowercaseRFC3339: RFC 3339 (section 5.6) allows "t" and "z".
func TestLowercaseRFC3339(t *testing.T) {
	st, err := valuesAppend(t, `{"id":"a","ts":"2024-11-29t06:00:00.5z"}`)
	if err != nil {
		t.Fatalf("lower-case RFC 3339 refused: %v", err)
	}
	want := time.Date(2024, 11, 29, 6, 0, 0, 500_000_000, time.UTC).UnixMicro()
	if got := int64(st.Field(4).(*array.Timestamp).Value(0)); got != want {
		t.Fatalf("stored %d µs, want %d", got, want)
	}
}

// TestEmptyStringAvroVsJSON: a list with an empty string is stored from
// Avro and from JSON alike.
func TestEmptyStringAvroVsJSON(t *testing.T) {
	sc := valuesTestSchema(t)
	asc, err := sc.WithFormat(Format{Kind: FormatAvro})
	if err != nil {
		t.Fatal(err)
	}
	b, err := avro.Marshal(sc.user.avro, map[string]any{"id": "a", "d": nil, "tags": map[string]any{"array": []any{"x", ""}}, "m": nil, "ts": nil, "n": nil})
	if err != nil {
		t.Fatal(err)
	}
	ab := asc.NewRecordBuilder(nil, 0)
	defer ab.Release()
	aerr := ab.Append(b, Meta{Topic: "t"}, time.Time{}, "")
	_, jerr := valuesAppend(t, `{"id":"a","tags":["x",""]}`)
	if (aerr == nil) != (jerr == nil) {
		t.Errorf("tags [\"x\", \"\"]: Avro err %v, JSON err %v", aerr, jerr)
	}
}

// TestFloatMax: Float.MAX_VALUE as Java (and Go's FormatFloat(x, 'g', -1,
// 32)) writes it, 3.4028235e38, rounds to the largest float32 and is
// stored (it was refused: its float64 parse is above MaxFloat32).
func TestFloatMax(t *testing.T) {
	sc, err := ParseAvsc("f", []byte(`{"type":"record","name":"F","fields":[{"name":"f","type":"float"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	text := strconv.FormatFloat(math.MaxFloat32, 'g', -1, 32)
	b := sc.NewRecordBuilder(nil, 0)
	defer b.Release()
	if err := b.Append([]byte(`{"f":`+text+`}`), Meta{Topic: "t"}, time.Time{}, ""); err != nil {
		t.Fatalf("float %s (float32 max, shortest form) refused: %v", text, err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if got := rec.Column(0).(*array.Float32).Value(0); got != math.MaxFloat32 {
		t.Fatalf("stored %v, want %v", got, float32(math.MaxFloat32))
	}
}

// TestAvroMapDuplicateKeys: an Avro map that repeats a key keeps it once,
// with its last value, as JSON does (TestMapDuplicateKeys) — both used to
// be stored, a map with a key twice; the values it drops are still checked.
func TestAvroMapDuplicateKeys(t *testing.T) {
	sc := valuesTestSchema(t)
	asc, err := sc.WithFormat(Format{Kind: FormatAvro})
	if err != nil {
		t.Fatal(err)
	}
	// id "a", d null, tags null, m {k: first, j: x, k: second, k: last}
	// (in two blocks), ts null, n null.
	str := func(s string) []byte { return append([]byte{byte(2 * len(s))}, s...) }
	record := func(first string) []byte {
		b := append(str("a"), 0, 0, 2, 2*3)
		b = append(append(append(append(b, str("k")...), str(first)...), str("j")...), str("x")...)
		b = append(append(b, str("k")...), str("second")...)
		b = append(b, 2*1)
		b = append(append(b, str("k")...), str("last")...)
		return append(b, 0, 0, 0)
	}
	ab := asc.NewRecordBuilder(nil, 0)
	defer ab.Release()
	if err := ab.Append(record("first"), Meta{Topic: "t"}, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	rec := ab.NewRecord()
	defer rec.Release()
	m := array.RecordToStructArray(rec).Field(3).(*array.Map)
	keys, items := m.Keys().(*array.String), m.Items().(*array.String)
	var got []string
	for i := range keys.Len() {
		got = append(got, keys.Value(i)+": "+items.Value(i))
	}
	if want := []string{"j: x", "k: last"}; !slices.Equal(got, want) {
		t.Errorf("map stored %q, want %q", got, want)
	}
	var de *DecodeError
	if err := ab.Append(record("\xff"), Meta{Topic: "t"}, time.Time{}, ""); !errors.As(err, &de) || de.Field != `m["k"]` {
		t.Errorf("a dropped value that is not UTF-8: err = %v, want an error for m[\"k\"]", err)
	}
}

// TestAvroWideFixedDecimal: a decimal written as a fixed wider than its
// precision needs (sign-extended to 20 bytes) is stored; every such value
// was refused as not fitting 38 digits.
func TestAvroWideFixedDecimal(t *testing.T) {
	sc, err := ParseAvsc("w", []byte(`{"type":"record","name":"W","fields":[
 {"name":"amount","type":{"type":"fixed","name":"d20","size":20,"logicalType":"decimal","precision":38,"scale":2}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	asc, err := sc.WithFormat(Format{Kind: FormatAvro})
	if err != nil {
		t.Fatal(err)
	}
	wide := func(fill byte, low ...byte) []byte {
		b := bytes.Repeat([]byte{fill}, 20-len(low))
		return append(b, low...)
	}
	b := asc.NewRecordBuilder(nil, 0)
	defer b.Release()
	for _, v := range [][]byte{wide(0, 0x30, 0x39), wide(0xff, 0xcf, 0xc7)} { // 123.45, -123.45
		if err := b.Append(v, Meta{Topic: "t"}, time.Time{}, ""); err != nil {
			t.Fatalf("% x: %v", v, err)
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	col := rec.Column(0).(*array.Decimal128)
	if got := []string{col.ValueStr(0), col.ValueStr(1)}; !slices.Equal(got, []string{"123.45", "-123.45"}) {
		t.Errorf("stored %v, want [123.45 -123.45]", got)
	}
	// 10^38 does not fit 38 digits, however it is written.
	if err := b.Append(wide(0, 0x4b, 0x3b, 0x4c, 0xa8, 0x5a, 0x86, 0xc4, 0x7a, 0x09, 0x8a, 0x22, 0x40, 0x00, 0x00, 0x00, 0x00), Meta{Topic: "t"}, time.Time{}, ""); err == nil {
		t.Error("10^38 stored in a decimal(38, 2)")
	}
}
