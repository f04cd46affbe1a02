package schemas_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/floe-dev/floe/schemas"
)

// loadSchema loads a schema file or fails the test.
func loadSchema(tb testing.TB, path string) *schemas.Schema {
	tb.Helper()
	sc, err := schemas.Lookup(path)
	if err != nil {
		tb.Fatalf("Lookup(%s): %v", path, err)
	}
	return sc
}

// newRecordBuilder returns sc's RecordBuilder on a checked allocator; cleanup
// releases it and asserts every byte was freed.
func newRecordBuilder(tb testing.TB, sc *schemas.Schema) schemas.RecordBuilder {
	tb.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b := sc.NewRecordBuilder(mem, 0)
	tb.Cleanup(func() {
		b.Release()
		mem.AssertSize(tb, 0)
	})
	return b
}

var allTypesMessage = `{"s":"héllo","i":-7,"l":9007199254740993,"f":1.5,"d":-2.25,"b":true,
 "dec":"1234567.891","fdec":-42,"day":"2024-11-29","tm":"13:45:00.5","tu":1000001,
 "ts_ms":1732860000123,"ts_us":"2024-11-29T06:00:00.123456+01:00","lts":"2024-11-29T06:00:00.5",
 "id":"0c6b1d2e-3f40-4c1e-9a53-7a4d0c6b1d2e","raw":"AAEC/w==","fx":"YWJj","color":"GREEN",
 "renamed":5,"rec":{"x":1,"inner":{"y":"deep"}},"ints":[1,2,3],"opt_items":["a",null],
 "recs":[{"k":"k1"},{"k":"k2"}],"m":{"pi":3.25},"mm":{"outer":{"n":null,"one":1}},"ignored":[{}]}`

// TestKafkaTimestampOutsideTheYearsIsNull: a record's Kafka timestamp
// (its producer's CreateTime, unchecked by the broker) outside the years
// 0001 to 9999 is stored null, by the clickstream builder and the generic
// one alike. Year 10000 was stored as it came, and year 296,675 wrapped
// UnixMicro to a negative value, about 290,000 BC.
func TestKafkaTimestampOutsideTheYearsIsNull(t *testing.T) {
	click := clickstream(t)
	generic := loadSchema(t, "testdata/alltypes.avsc")
	for _, tc := range []struct {
		ms   int64
		want string
	}{
		{1732860000999, "2024-11-29T06:00:00.999Z"},
		{253402300799999, "9999-12-31T23:59:59.999Z"},
		{253402300800000, "(null)"},  // 10000-01-01
		{9300000000000000, "(null)"}, // 296675-04-08
		{-62135596800001, "(null)"},  // just before 0001-01-01
	} {
		meta := schemas.Meta{Topic: "all", Partition: 2, Offset: 41, Timestamp: time.UnixMilli(tc.ms)}
		for name, sc := range map[string]*schemas.Schema{"clickstream": click, "generic": generic} {
			b := newRecordBuilder(t, sc)
			msg := []byte(allTypesMessage)
			if sc == click {
				msg = message(0, 400)
			}
			if err := b.Append(msg, meta, time.Now(), "off"); err != nil {
				t.Fatalf("%s, CreateTime %d: %v", name, tc.ms, err)
			}
			rec := b.NewRecord()
			idx := rec.Schema().FieldIndices("_kafka_timestamp")
			if got := rec.Column(idx[0]).ValueStr(0); got != tc.want {
				t.Errorf("%s, CreateTime %d ms: _kafka_timestamp %s, want %s", name, tc.ms, got, tc.want)
			}
			rec.Release()
		}
	}
}

func TestGenericRoundTripEveryType(t *testing.T) {
	sc := loadSchema(t, "testdata/alltypes.avsc")
	b := newRecordBuilder(t, sc)
	meta := schemas.Meta{Topic: "all", Partition: 2, Offset: 41, Timestamp: time.UnixMilli(1732860000999)}
	ingested := time.Date(2024, 11, 29, 7, 0, 0, 0, time.UTC)
	if err := b.Append([]byte(allTypesMessage), meta, ingested, "off"); err != nil {
		t.Fatalf("Append: %v", err)
	}
	// A minimal message: optional fields absent are null.
	minimal := `{"s":"x","i":0,"l":0,"f":0,"d":0,"b":false,"dec":0,"day":0,"tm":0,"tu":0,"ts_ms":0,"ts_us":0,
	 "lts":0,"id":"0c6b1d2e-3f40-4c1e-9a53-7a4d0c6b1d2e","raw":"","fx":"AAAA","color":"RED","rec":{"x":2},
	 "ints":[],"opt_items":[],"m":{},"mm":{}}`
	if err := b.Append([]byte(minimal), meta, ingested, ""); err != nil {
		t.Fatalf("Append(minimal): %v", err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if !rec.Schema().Equal(sc.Arrow) {
		t.Fatalf("batch schema %s, want %s", rec.Schema(), sc.Arrow)
	}
	for c, col := range rec.Columns() {
		if err := array.ValidateFull(col); err != nil {
			t.Fatalf("column %s: %v", rec.ColumnName(c), err)
		}
	}
	got := map[string]string{}
	for c := range int(rec.NumCols()) {
		got[rec.ColumnName(c)] = rec.Column(c).ValueStr(0) + " | " + rec.Column(c).ValueStr(1)
	}
	want := map[string]string{
		"_enrich_status":   "off | (null)",
		"_ingested_at":     "2024-11-29T07:00:00Z | 2024-11-29T07:00:00Z",
		"_kafka_offset":    "41 | 41",
		"_kafka_partition": "2 | 2",
		"_kafka_timestamp": "2024-11-29T06:00:00.999Z | 2024-11-29T06:00:00.999Z",
		"_kafka_topic":     "all | all",
		"b":                "true | false",
		"color":            "GREEN | RED",
		"d":                "-2.25 | 0",
		"day":              "2024-11-29 | 1970-01-01",
		"dec":              "1234567.891 | 0",
		"f":                "1.5 | 0",
		"fdec":             "-42 | (null)",
		"fx":               "YWJj | AAAA",
		"i":                "-7 | 0",
		"id":               "0c6b1d2e-3f40-4c1e-9a53-7a4d0c6b1d2e | 0c6b1d2e-3f40-4c1e-9a53-7a4d0c6b1d2e",
		"ints":             "[1,2,3] | []",
		"l":                "9007199254740993 | 0",
		"lts":              "2024-11-29T06:00:00.5 | 1970-01-01T00:00:00",
		"m":                "[{\"key\":\"pi\",\"value\":3.25}] | []",
		"mm":               "[{\"key\":\"outer\",\"value\":[{\"key\":\"n\",\"value\":null},{\"key\":\"one\",\"value\":1}]}] | []",
		"opt":              "(null) | (null)",
		"opt_items":        "[\"a\",null] | []",
		"raw":              "AAEC/w== | ",
		"rec":              "{\"inner\":{\"y\":\"deep\"},\"x\":1} | {\"inner\":null,\"x\":2}",
		"recs":             "[{\"k\":\"k1\"},{\"k\":\"k2\"}] | (null)",
		"renamed_col":      "5 | (null)",
		"s":                "héllo | x",
		"tm":               "13:45:00.500000 | 00:00:00.000000",
		"ts_ms":            "2024-11-29T06:00:00.123Z | 1970-01-01T00:00:00Z",
		"ts_us":            "2024-11-29T05:00:00.123456Z | 1970-01-01T00:00:00Z",
		"tu":               "00:00:01.000001 | 00:00:00.000000",
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("column %s = %q, want %q", k, got[k], v)
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d columns, want %d", len(got), len(want))
	}
}

// TestGenericDecodeErrors: every rule of the JSON decoder, with the field
// path the dead letter will carry; a rejected message leaves the batch as
// it was.
func TestGenericDecodeErrors(t *testing.T) {
	sc := loadSchema(t, "testdata/alltypes.avsc")
	b := newRecordBuilder(t, sc)
	// with replaces field's value in the all-types message (a JSON repeated
	// key: the last value wins), or removes it when raw is "".
	with := func(field, raw string) string {
		if raw == "" {
			var m map[string]json.RawMessage
			if err := json.Unmarshal([]byte(allTypesMessage), &m); err != nil {
				t.Fatal(err)
			}
			delete(m, field)
			out, _ := json.Marshal(m)
			return string(out)
		}
		return strings.TrimSuffix(strings.TrimSpace(allTypesMessage), "}") + `,"` + field + `":` + raw + `}`
	}
	cases := []struct{ in, reason, field string }{
		{`[1]`, "malformed_json", ""},
		{`{"s":`, "malformed_json", ""},
		{``, "malformed_json", ""},
		{with("s", ""), "missing_field", "s"},
		{with("s", "null"), "missing_field", "s"},
		{with("s", `""`), "invalid_field", "s"},
		{with("s", `5`), "invalid_field", "s"},
		{with("i", `2147483648`), "invalid_field", "i"},
		{with("i", `1.5`), "invalid_field", "i"},
		{with("l", `"1"`), "invalid_field", "l"},
		{with("f", `1e39`), "invalid_field", "f"},
		{with("d", `true`), "invalid_field", "d"},
		{with("b", `"true"`), "invalid_field", "b"},
		{with("dec", `"1.2345"`), "invalid_field", "dec"},
		{with("dec", `12345678.9`), "invalid_field", "dec"},
		{with("dec", `"1e999999999"`), "invalid_field", "dec"},
		{with("dec", `"abc"`), "invalid_field", "dec"},
		// big.Rat reads these; a decimal does not.
		{with("dec", `"0x10"`), "invalid_field", "dec"},
		{with("dec", `"10/4"`), "invalid_field", "dec"},
		{with("dec", `"1p4"`), "invalid_field", "dec"},
		{with("dec", `"0b101"`), "invalid_field", "dec"},
		{with("f", `1e400`), "invalid_field", "f"},
		{with("d", `1e400`), "invalid_field", "d"},
		{with("d", `-1e400`), "invalid_field", "d"},
		{with("d", `NaN`), "malformed_json", ""},          // not JSON
		{with("f", `3.4028236e38`), "invalid_field", "f"}, // rounds beyond the largest float
		{with("day", `"29.11.2024"`), "invalid_field", "day"},
		{with("tm", `86400000`), "invalid_field", "tm"},
		{with("tm", `2305843009213694952`), "invalid_field", "tm"}, // wrapped to 00:00:01 when scaled first
		{with("tm", `-2305843009213693952`), "invalid_field", "tm"},
		{with("tm", `"25:00:00"`), "invalid_field", "tm"},
		{with("ts_ms", `9223372036854775807`), "invalid_field", "ts_ms"},
		{with("ts_us", `"2024-11-29T06:00:00"`), "invalid_field", "ts_us"},
		{with("lts", `"2024-11-29T06:00:00Z"`), "invalid_field", "lts"},
		{with("id", `"not-a-uuid"`), "invalid_field", "id"},
		{with("raw", `"%%%"`), "invalid_field", "raw"},
		{with("fx", `"YWJjZA=="`), "invalid_field", "fx"},
		{with("color", `"BLUE"`), "invalid_field", "color"},
		{with("renamed", `"x"`), "invalid_field", "renamed"},
		{with("rec", `[]`), "invalid_field", "rec"},
		{with("rec", `{}`), "missing_field", "rec.x"},
		{with("rec", `{"x":1,"inner":{"y":1}}`), "invalid_field", "rec.inner.y"},
		{with("ints", `[1,null]`), "missing_field", "ints[1]"},
		{with("ints", `{"a":1}`), "invalid_field", "ints"},
		{with("recs", `[{"k":"a"},{}]`), "missing_field", "recs[1].k"},
		{with("m", `{"a":"x"}`), "invalid_field", `m["a"]`},
		{with("mm", `{"o":{"n":"x"}}`), "invalid_field", `mm["o"]["n"]`},
		{"{\"s\":\"\xff\"}", "invalid_field", "s"},
	}
	for _, c := range cases {
		if err := b.Append([]byte(allTypesMessage), testMeta(1), testIngested, ""); err != nil {
			t.Fatalf("good message: %v", err)
		}
		err := b.Append([]byte(c.in), testMeta(2), testIngested, "")
		var de *schemas.DecodeError
		if !errors.As(err, &de) || de.Reason != c.reason || de.Field != c.field || de.Detail == "" {
			t.Errorf("Append(%.80s…) = %v, want %s %q", c.in, err, c.reason, c.field)
		}
		rec := b.NewRecord()
		if rec.NumRows() != 1 {
			t.Errorf("after %s %q the batch has %d rows, want 1", c.reason, c.field, rec.NumRows())
		}
		for i, col := range rec.Columns() {
			if err := array.ValidateFull(col); err != nil || col.Len() != 1 {
				t.Errorf("after %s %q column %s has %d values (%v)", c.reason, c.field, rec.ColumnName(i), col.Len(), err)
			}
		}
		rec.Release()
	}
}

func TestPaymentsSchema(t *testing.T) {
	sc := loadSchema(t, "examples/payments.avsc")
	want := []struct{ name, typ string }{
		{"payment_id", "string"},
		{"amount", "decimal(18, 2)"},
		{"currency", "string"},
		{"status", "string"},
		{"created_at", "timestamptz"},
		{"account", "struct<7: id: required string, 8: country: optional string, 9: opened_on: optional date>"},
		{"tags", "list<string>"},
		{"metadata", "map<string, string>"},
		{"_kafka_topic", "string"}, {"_kafka_partition", "int"}, {"_kafka_offset", "long"},
		{"_kafka_timestamp", "timestamptz"}, {"_ingested_at", "timestamptz"}, {"_enrich_status", "string"},
	}
	fields := sc.Iceberg.Fields()
	if len(fields) != len(want) {
		t.Fatalf("%d columns, want %d: %s", len(fields), len(want), sc.Iceberg)
	}
	for i, w := range want {
		if fields[i].Name != w.name || fields[i].Type.String() != w.typ {
			t.Errorf("column %d = %s %s, want %s %s", i, fields[i].Name, fields[i].Type, w.name, w.typ)
		}
	}
	if req := fields[0].Required && !fields[7].Required && fields[6].Required; !req {
		t.Errorf("payment_id required=%v tags required=%v metadata required=%v", fields[0].Required, fields[6].Required, fields[7].Required)
	}
	// Field ids are iceberg-go's fresh ids (pre-order), as the catalog
	// assigns them when it creates the table.
	if got := sc.Iceberg.IdentifierFieldIDs; fmt.Sprint(got) != "[15 16 17]" || sc.Iceberg.Fields()[8].ID != 15 {
		t.Errorf("identifier fields = %v, want the Kafka coordinates [15 16 17]", got)
	}
	if sc.KeyField != "payment_id" || sc.DedupeKey != "payment_id" || sc.EventTime != "created_at" {
		t.Errorf("key %q, dedupe key %q, event time %q", sc.KeyField, sc.DedupeKey, sc.EventTime)
	}
	if got := fmt.Sprint(sc.Spec); got != "[\n\t1000: created_at_day: day(5)\n\t1001: payment_id_bucket: bucket[16](1)\n]" {
		t.Errorf("spec = %q", got)
	}
	if got := fmt.Sprint(sc.SortOrder); got != "1: [\n5 asc nulls-first\n1 desc nulls-last\n]" {
		t.Errorf("sort order = %q", got)
	}
}

// TestSchemaFileErrors: each mistake in a schema file is reported naming
// the field (or property) and the problem.
func TestSchemaFileErrors(t *testing.T) {
	record := func(props, fields string) string {
		if props != "" {
			props += ","
		}
		return `{"type":"record","name":"R",` + props + `"fields":[` + fields + `]}`
	}
	const ts = `{"name":"ts","type":{"type":"long","logicalType":"timestamp-micros"}}`
	// twice: L11{a: L10, b: L10}, ..., L0{v: string}, a column of 6,142
	// fields; nested: 65 levels, one more than the decoders read.
	twice := `{"type":"record","name":"L0","fields":[{"name":"v","type":"string"}]}`
	for i := 1; i <= 11; i++ {
		twice = fmt.Sprintf(`{"type":"record","name":"L%d","fields":[{"name":"a","type":%s},{"name":"b","type":"L%d"}]}`, i, twice, i-1)
	}
	nested := `"string"`
	for i := range 64 {
		nested = fmt.Sprintf(`{"type":"record","name":"N%d","fields":[{"name":"x","type":%s}]}`, i, nested)
	}
	cases := []struct{ name, schema, want string }{
		// A JSON syntax error was reported by hamba/avro as "unknown
		// type: " and the whole file, with no position.
		{"not JSON", `{"type":`, "not valid JSON: line 1, column 8: unexpected end of JSON input"},
		{"missing comma", "{\n  \"type\": \"record\"\n  \"name\": \"R\",\n  \"fields\": []\n}\n", `not valid JSON: line 3, column 3: invalid character '"' after object key:value pair`},
		{"not a record", `"string"`, "want a record"},
		{"unknown type", record("", `{"name":"a","type":"strin"}`), "not a valid Avro schema"},
		{"no fields", record("", ``), "no fields"},
		{"two-type union", record("", `{"name":"u","type":["int","string"]}`), `field "u": a union must be ["null", T]`},
		{"three-type union", record("", `{"name":"u","type":["null","int","string"]}`), `field "u": a union must be`},
		{"nested bad union", record("", `{"name":"r","type":{"type":"record","name":"In","fields":[{"name":"v","type":["int","long"]}]}}`), `field "r.v": a union`},
		{"null alone", record("", `{"name":"n","type":"null"}`), `field "n": type null alone`},
		{"decimal too wide", record("", `{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":39,"scale":2}}`), `field "d": decimal(39, 2)`},
		{"array of bad union", record("", `{"name":"a","type":{"type":"array","items":["int","string"]}}`), `field "a[]": a union`},
		{"reserved column", record("", `{"name":"_kafka_offset","type":"long"}`), `field "_kafka_offset": column "_kafka_offset" is reserved`},
		{"duplicate column", record("", `{"name":"a","type":"long"},{"name":"b","type":"long","floe.column":"a"}`), `field "b": column "a" is declared twice`},
		// The column "a.b" made iceberg-go's index by name fail, so no
		// column of the table could be found by name.
		{"column named as a nested path", record("", `{"name":"a","type":{"type":"record","name":"A","fields":[{"name":"b","type":"string"}]}},{"name":"ab","type":"long","floe.column":"a.b"}`),
			`a floe.column name with a dot spells the path of another field: error encountered during schema visitor: invalid schema: multiple fields for name a.b`},
		{"bad floe.column", record("", `{"name":"a","type":"long","floe.column":5}`), `field "a": floe.column must be a non-empty string`},
		// A fixed of no bytes was accepted, and every flush then failed in
		// the Parquet writer.
		{"fixed of no bytes", record("", `{"name":"f","type":{"type":"fixed","name":"F","size":0}}`), `field "f": fixed F has size 0; it must hold at least one byte`},
		{"list of fixed of no bytes", record("", `{"name":"f","type":{"type":"array","items":{"type":"fixed","name":"F","size":0}}}`), `field "f[]": fixed F has size 0`},
		{"recursive record", record("", `{"name":"a","type":{"type":"record","name":"N","fields":[{"name":"next","type":["null","N"]}]}}`), `field "a.next": the recursive reference to N is not supported`},
		// A named type used again was mapped again in full, without a
		// bound: a small file could describe a column of billions of
		// fields.
		{"named type used twice at each level", record("", `{"name":"t","type":`+twice+`}`), `the column has more than 1000 nested fields`},
		{"nested too deep", record("", `{"name":"n","type":`+nested+`}`), `the column nests deeper than 64 levels`},
		{"unknown key", record(`"floe.key":"nope"`, `{"name":"a","type":"long"}`), `floe.key: no top-level column "nope" (columns: a)`},
		{"key not a string", record(`"floe.key":["a"]`, `{"name":"a","type":"long"}`), `floe.key must be a column name`},
		{"key column not a string", record(`"floe.key":"a"`, `{"name":"a","type":"long"}`), `floe.key: column "a" is long; want a string`},
		{"event time not a timestamp", record(`"floe.event-time":"a"`, `{"name":"a","type":"long"}`), `floe.event-time: column "a" is long; want a timestamp`},
		{"dedupe key nested", record(`"floe.dedupe-key":"r"`, `{"name":"r","type":{"type":"record","name":"In","fields":[{"name":"v","type":"int"}]}}`), `floe.dedupe-key: column "r" is a struct`},
		{"partition not a list", record(`"floe.partition":"day(ts)"`, ts), `floe.partition must be a list of strings`},
		{"partition unknown column", record(`"floe.partition":["day(when)"]`, ts), `floe.partition[0] "day(when)": no column "when"`},
		{"partition unknown transform", record(`"floe.partition":["week(ts)"]`, ts), `floe.partition[0] "week(ts)": unknown transform "week"`},
		{"partition bad syntax", record(`"floe.partition":["day ts"]`, ts), `floe.partition[0] "day ts": want identity(col)`},
		{"bucket without width", record(`"floe.partition":["bucket(ts)"]`, ts), `floe.partition[0] "bucket(ts)": bucket needs a positive width`},
		{"bucket zero", record(`"floe.partition":["bucket(0, ts)"]`, ts), `bucket needs a positive width`},
		{"day with width", record(`"floe.partition":["day(3, ts)"]`, ts), `day takes one argument`},
		{"day of a string", record(`"floe.partition":["day(s)"]`, `{"name":"s","type":"string"}`), `day cannot be applied to column "s" of type string`},
		{"partition twice", record(`"floe.partition":["day(ts)","day(ts)"]`, ts), `floe.partition[1] "day(ts)": partition field "ts_day" is declared twice`},
		{"sort bad direction", record(`"floe.sort":["ts sideways"]`, ts), `floe.sort[0] "ts sideways": want identity(col)`},
		{"sort bad nulls", record(`"floe.sort":["ts desc nulls middle"]`, ts), `floe.sort[0] "ts desc nulls middle": after the expression want`},
		{"sort unknown column", record(`"floe.sort":["x desc"]`, ts), `floe.sort[0] "x": no column "x"`},
		{"high cardinality unknown", record(`"floe.high-cardinality":["x"]`, ts), `floe.high-cardinality[0]: no column "x"`},
	}
	dir := t.TempDir()
	for _, c := range cases {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "_")+".avsc")
		if err := os.WriteFile(path, []byte(c.schema), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := schemas.Lookup(path)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), path) {
			t.Errorf("%s: error = %v, want one naming %s and containing %q", c.name, err, path, c.want)
		}
	}
}

func mustRead(tb testing.TB, path string) []byte {
	tb.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}
