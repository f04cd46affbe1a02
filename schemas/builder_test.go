package schemas_test

import (
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"

	"github.com/floe-dev/floe/schemas"
)

func TestLookup(t *testing.T) {
	s, err := schemas.Lookup("clickstream")
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name     string
		typ      iceberg.Type
		required bool
	}{
		{"event_id", iceberg.PrimitiveTypes.String, false},
		{"session_id", iceberg.PrimitiveTypes.String, true},
		{"user_id", iceberg.PrimitiveTypes.String, false},
		{"event_type", iceberg.PrimitiveTypes.String, true},
		{"url", iceberg.PrimitiveTypes.String, false},
		{"referrer", iceberg.PrimitiveTypes.String, false},
		{"user_agent", iceberg.PrimitiveTypes.String, false},
		{"event_ts", iceberg.PrimitiveTypes.TimestampTz, true},
		{"seq", iceberg.PrimitiveTypes.Int64, false},
		{"_kafka_topic", iceberg.PrimitiveTypes.String, true},
		{"_kafka_partition", iceberg.PrimitiveTypes.Int32, true},
		{"_kafka_offset", iceberg.PrimitiveTypes.Int64, true},
		{"_kafka_timestamp", iceberg.PrimitiveTypes.TimestampTz, false},
		{"_ingested_at", iceberg.PrimitiveTypes.TimestampTz, false},
		{"_enrich_status", iceberg.PrimitiveTypes.String, false},
	}
	fields := s.Iceberg.Fields()
	if len(fields) != len(want) || s.Arrow.NumFields() != len(want) {
		t.Fatalf("got %d Iceberg and %d Arrow fields, want %d", len(fields), s.Arrow.NumFields(), len(want))
	}
	for i, w := range want {
		f := fields[i]
		if f.ID != i+1 || f.Name != w.name || !f.Type.Equals(w.typ) || f.Required != w.required {
			t.Errorf("Iceberg field %d = %d %s %s required=%v, want %d %s %s required=%v",
				i, f.ID, f.Name, f.Type, f.Required, i+1, w.name, w.typ, w.required)
		}
		af := s.Arrow.Field(i)
		if af.Name != w.name || af.Nullable == w.required {
			t.Errorf("Arrow field %d = %s nullable=%v, want %s nullable=%v", i, af.Name, af.Nullable, w.name, !w.required)
		}
		if id, ok := af.Metadata.GetValue("PARQUET:field_id"); !ok || id != strconv.Itoa(i+1) {
			t.Errorf("Arrow field %s has PARQUET:field_id %q (present %v), want %d", af.Name, id, ok, i+1)
		}
		if w.typ.Equals(iceberg.PrimitiveTypes.TimestampTz) {
			if !arrow.TypeEqual(af.Type, &arrow.TimestampType{Unit: arrow.Microsecond, TimeZone: "UTC"}) {
				t.Errorf("Arrow field %s has type %s, want timestamp[us, tz=UTC]", af.Name, af.Type)
			}
		}
	}
	if got := s.Iceberg.IdentifierFieldIDs; !reflect.DeepEqual(got, []int{10, 11, 12}) {
		t.Errorf("identifier field IDs = %v, want the Kafka coordinates [10 11 12]", got)
	}
	if s.Spec.NumFields() != 1 {
		t.Fatalf("spec has %d fields, want 1", s.Spec.NumFields())
	}
	pf := s.Spec.Field(0)
	if pf.Name != "event_ts_day" || pf.SourceID() != 8 || !pf.Transform.Equals(iceberg.DayTransform{}) {
		t.Errorf("partition field = %v, want event_ts_day: day(8)", pf)
	}
	if s.KeyField != "session_id" || s.Name != "clickstream" {
		t.Errorf("Name, KeyField = %q, %q", s.Name, s.KeyField)
	}

	for _, name := range []string{"x.json", "Clickstream", "/etc/floe/schema.avsc"} {
		_, err := schemas.Lookup(name)
		if err == nil || !strings.Contains(err.Error(), strconv.Quote(name)) || !strings.Contains(err.Error(), "no such file") {
			t.Errorf("Lookup(%q) error = %v, want one naming the missing file", name, err)
		}
	}
	if _, err := schemas.Lookup(""); err == nil || !strings.Contains(err.Error(), "no schema") {
		t.Errorf("Lookup(\"\") error = %v, want one saying no schema is set", err)
	}
}

func TestAppendGood(t *testing.T) {
	const (
		ms   = int64(1732860000000)
		full = `{"event_id":"e-1","session_id":"s-1","user_id":"u-9","event_type":"page_view","url":"https://x/a",` +
			`"referrer":"https://r/","user_agent":"UA/1.0","ts":1732860000000,"seq":17}`
	)
	kts, ing := micros(testKafkaTS), micros(testIngested)
	cases := []struct {
		name     string
		in       string
		meta     schemas.Meta
		ingested time.Time
		status   string
		want     []any
	}{
		{
			name: "all fields, ts in epoch ms", in: full, meta: testMeta(42), ingested: testIngested, status: "ok",
			want: []any{"e-1", "s-1", "u-9", "page_view", "https://x/a", "https://r/", "UA/1.0", ms * 1000, int64(17),
				"clicks", int32(7), int64(42), kts, ing, "ok"},
		},
		{
			name: "RFC 3339 ts in UTC", in: `{"session_id":"s","event_type":"click","ts":"2024-11-29T06:00:00Z"}`,
			meta: testMeta(1), ingested: testIngested, status: "ok",
			want: []any{nil, "s", nil, "click", nil, nil, nil, ms * 1000, nil, "clicks", int32(7), int64(1), kts, ing, "ok"},
		},
		{
			name: "RFC 3339 ts with offset and fraction",
			in:   `{"session_id":"s","event_type":"click","ts":"2024-11-29T07:00:00.123456+01:00"}`,
			meta: testMeta(1), ingested: testIngested, status: "ok",
			want: []any{nil, "s", nil, "click", nil, nil, nil, ms*1000 + 123456, nil, "clicks", int32(7), int64(1), kts, ing, "ok"},
		},
		{
			name: "JSON null for every optional field",
			in: `{"event_id":null,"session_id":"s","user_id":null,"event_type":"e","url":null,"referrer":null,` +
				`"user_agent":null,"ts":0,"seq":null}`,
			meta: testMeta(2), ingested: testIngested, status: "ok",
			want: []any{nil, "s", nil, "e", nil, nil, nil, int64(0), nil, "clicks", int32(7), int64(2), kts, ing, "ok"},
		},
		{
			name: "unknown fields of every JSON type are ignored",
			in: `{"extra":{"a":[1,2,{"b":null}]},"session_id":"s","n":1.5e3,"event_type":"e","t":true,"ts":-1000,` +
				`"arr":[],"f":false,"z":null,"str":"x"}`,
			meta: testMeta(3), ingested: testIngested, status: "ok",
			want: []any{nil, "s", nil, "e", nil, nil, nil, int64(-1000000), nil, "clicks", int32(7), int64(3), kts, ing, "ok"},
		},
		{
			name: "escapes are decoded, empty optional string is kept",
			in:   `{"session_id":"s\"1\\","event_type":"caf\u00e9 \ud83d\ude00","url":"","ts":1,"seq":-5}`,
			meta: testMeta(4), ingested: testIngested, status: "ok",
			want: []any{nil, `s"1\`, nil, "café 😀", "", nil, nil, int64(1000), int64(-5), "clicks", int32(7), int64(4), kts, ing, "ok"},
		},
		{
			name: "a repeated key keeps its last value",
			in:   `{"session_id":"first","session_id":"last","event_type":"e","ts":1,"seq":1,"seq":2}`,
			meta: testMeta(5), ingested: testIngested, status: "ok",
			want: []any{nil, "last", nil, "e", nil, nil, nil, int64(1000), int64(2), "clicks", int32(7), int64(5), kts, ing, "ok"},
		},
		{
			name: "whitespace around and inside",
			in:   " \n\t{ \"session_id\" : \"s\" ,\n \"event_type\":\"e\", \"ts\" : 1 }\r\n ",
			meta: testMeta(6), ingested: testIngested, status: "ok",
			want: []any{nil, "s", nil, "e", nil, nil, nil, int64(1000), nil, "clicks", int32(7), int64(6), kts, ing, "ok"},
		},
		{
			name: "zero Kafka timestamp, zero ingestion time and no enrichment status are null",
			in:   `{"session_id":"s","event_type":"e","ts":1}`,
			meta: schemas.Meta{Topic: "t", Partition: 0, Offset: 0},
			want: []any{nil, "s", nil, "e", nil, nil, nil, int64(1000), nil, "t", int32(0), int64(0), nil, nil, nil},
		},
		{
			// The largest ts: 9999-12-31T23:59:59.999Z.
			name: "largest numbers",
			in:   `{"session_id":"s","event_type":"e","ts":253402300799999,"seq":9223372036854775807}`,
			meta: schemas.Meta{Topic: "t", Partition: 2147483647, Offset: 9223372036854775807}, status: "failed",
			want: []any{nil, "s", nil, "e", nil, nil, nil, int64(253402300799999000), int64(9223372036854775807),
				"t", int32(2147483647), int64(9223372036854775807), nil, nil, "failed"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s, b, _ := newBuilder(t, 0)
			if err := b.Append([]byte(tc.in), tc.meta, tc.ingested, tc.status); err != nil {
				t.Fatalf("Append: %v", err)
			}
			if b.Len() != 1 || b.SizeBytes() <= 0 {
				t.Fatalf("Len, SizeBytes = %d, %d after one row", b.Len(), b.SizeBytes())
			}
			rec := b.NewRecord()
			defer rec.Release()
			if rec.Schema() != s.Arrow {
				t.Fatalf("record schema is not s.Arrow")
			}
			checkColumns(t, rec)
			if got := rowValues(t, rec, 0); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("row =\n %#v\nwant\n %#v", got, tc.want)
			}
		})
	}
}

func TestAppendErrors(t *testing.T) {
	good := `{"session_id":"s","event_type":"e","ts":1}`
	// with returns good with field set to the raw JSON value.
	with := func(field, raw string) string {
		return `{"session_id":"s","event_type":"e","ts":1,"` + field + `":` + raw + `}`
	}
	without := func(field string) string {
		m := map[string]string{"session_id": `"s"`, "event_type": `"e"`, "ts": "1"}
		delete(m, field)
		parts := []string{}
		for _, k := range []string{"session_id", "event_type", "ts"} {
			if v, ok := m[k]; ok {
				parts = append(parts, `"`+k+`":`+v)
			}
		}
		return "{" + strings.Join(parts, ",") + "}"
	}
	cases := []struct {
		name, in, reason, field string
	}{
		{"empty message", "", "malformed_json", ""},
		{"whitespace only", "  \n", "malformed_json", ""},
		{"not JSON", "hello", "malformed_json", ""},
		{"truncated object", `{"session_id":"s"`, "malformed_json", ""},
		{"trailing garbage", good + " x", "malformed_json", ""},
		{"two objects", good + good, "malformed_json", ""},
		{"unterminated string", `{"session_id":"s`, "malformed_json", ""},
		{"top-level array", `[` + good + `]`, "malformed_json", ""},
		{"top-level string", `"s"`, "malformed_json", ""},
		{"top-level number", `17`, "malformed_json", ""},
		{"top-level null", `null`, "malformed_json", ""},
		{"top-level true", `true`, "malformed_json", ""},
		{"too large", good + strings.Repeat(" ", 200-len(good)+1), "too_large", ""},
		{"too large and not JSON", strings.Repeat("x", 1000), "too_large", ""},
		{"long garbage quoted in the parser error", `{"a":t` + strings.Repeat("\xff", 190), "malformed_json", ""},

		{"session_id absent", without("session_id"), "missing_field", "session_id"},
		{"session_id null", with("session_id", "null"), "missing_field", "session_id"},
		{"event_type absent", without("event_type"), "missing_field", "event_type"},
		{"event_type null", with("event_type", "null"), "missing_field", "event_type"},
		{"ts absent", without("ts"), "missing_field", "ts"},
		{"ts null", with("ts", "null"), "missing_field", "ts"},
		{"empty object", `{}`, "missing_field", "session_id"},

		{"session_id number", with("session_id", "17"), "invalid_field", "session_id"},
		{"session_id empty", with("session_id", `""`), "invalid_field", "session_id"},
		{"session_id object", with("session_id", `{"a":1}`), "invalid_field", "session_id"},
		{"event_type empty", with("event_type", `""`), "invalid_field", "event_type"},
		{"event_type array", with("event_type", `["e"]`), "invalid_field", "event_type"},
		{"event_id number", with("event_id", "1"), "invalid_field", "event_id"},
		{"user_id bool", with("user_id", "true"), "invalid_field", "user_id"},
		{"url number", with("url", "3.5"), "invalid_field", "url"},
		{"referrer array", with("referrer", "[]"), "invalid_field", "referrer"},
		{"user_agent object", with("user_agent", "{}"), "invalid_field", "user_agent"},
		{"url invalid UTF-8", with("url", "\"a\xff\xfeb\""), "invalid_field", "url"},
		{"session_id invalid UTF-8", with("session_id", "\"\xc3\""), "invalid_field", "session_id"},
		{"seq string", with("seq", `"17"`), "invalid_field", "seq"},
		{"seq fraction", with("seq", "1.5"), "invalid_field", "seq"},
		{"seq exponent", with("seq", "1e3"), "invalid_field", "seq"},
		{"seq overflow", with("seq", "9223372036854775808"), "invalid_field", "seq"},
		// Not JSON, though fastjson's parser takes them.
		{"seq NaN", with("seq", "NaN"), "malformed_json", ""},
		{"seq leading zeros", with("seq", "007"), "malformed_json", ""},
		{"ts leading zero", with("ts", "01732860000000"), "malformed_json", ""},
		{"unread field's number", with("extra", "1.2.3e+-"), "malformed_json", ""},
		{"unread nested Inf", with("extra", `{"a":[1,-Inf]}`), "malformed_json", ""},
		{"bad escape", with("url", `"a\q"`), "malformed_json", ""},
		{"bad unicode escape", with("url", `"\u00zz"`), "malformed_json", ""},
		{"raw tab in a string", with("url", "\"a\tb\""), "malformed_json", ""},
		{"seq bool", with("seq", "false"), "invalid_field", "seq"},
		{"ts fraction", with("ts", "1732860000000.5"), "invalid_field", "ts"},
		{"ts bool", with("ts", "true"), "invalid_field", "ts"},
		{"ts object", with("ts", "{}"), "invalid_field", "ts"},
		{"ts not RFC 3339", with("ts", `"yesterday"`), "invalid_field", "ts"},
		{"ts date only", with("ts", `"2024-11-29"`), "invalid_field", "ts"},
		{"ts without zone", with("ts", `"2024-11-29T06:00:00"`), "invalid_field", "ts"},
		{"ts digits as string", with("ts", `"1732860000000"`), "invalid_field", "ts"},
		{"ts empty string", with("ts", `""`), "invalid_field", "ts"},
		{"ts ms overflow microseconds", with("ts", "9223372036854776"), "invalid_field", "ts"},
		{"ts negative overflow", with("ts", "-9223372036854776"), "invalid_field", "ts"},
		{"ts after year 9999", with("ts", "253402300800000"), "invalid_field", "ts"},
		{"ts before year 1", with("ts", `"0000-12-31T23:59:59Z"`), "invalid_field", "ts"},
		{"ts overflow int64", with("ts", "99999999999999999999"), "invalid_field", "ts"},
		{"first bad field in column order wins", `{"seq":"x","event_type":"e","ts":"bad"}`, "missing_field", "session_id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, b, _ := newBuilder(t, 200)
			if err := b.Append([]byte(good), testMeta(1), testIngested, "ok"); err != nil {
				t.Fatalf("good Append: %v", err)
			}
			size := b.SizeBytes()

			err := b.Append([]byte(tc.in), testMeta(2), testIngested, "ok")
			var de *schemas.DecodeError
			if !errors.As(err, &de) {
				t.Fatalf("Append(%q) = %v (%T), want *DecodeError", tc.in, err, err)
			}
			if de.Reason != tc.reason || de.Field != tc.field {
				t.Errorf("Append(%q) = {Reason:%q Field:%q}, want {%q %q} (%v)", tc.in, de.Reason, de.Field, tc.reason, tc.field, err)
			}
			if de.Detail == "" || len(de.Detail) > 256 || !strings.Contains(err.Error(), tc.reason) {
				t.Errorf("error %q has no detail, a detail over 256 bytes, or does not name its reason", err)
			}
			if b.Len() != 1 || b.SizeBytes() != size {
				t.Errorf("after a failed Append Len, SizeBytes = %d, %d; want 1, %d", b.Len(), b.SizeBytes(), size)
			}

			// The builder keeps working, and no column was touched.
			if err := b.Append([]byte(good), testMeta(3), testIngested, "ok"); err != nil {
				t.Fatalf("good Append after the error: %v", err)
			}
			rec := b.NewRecord()
			defer rec.Release()
			checkColumns(t, rec)
			if rec.NumRows() != 2 {
				t.Fatalf("record has %d rows, want 2", rec.NumRows())
			}
			for i, off := range []int64{1, 3} {
				if got := rowValues(t, rec, i)[11]; got != off {
					t.Errorf("row %d has _kafka_offset %v, want %d", i, got, off)
				}
			}
		})
	}
}

func TestMaxMessageBytes(t *testing.T) {
	msg := func(n int) []byte {
		m := []byte(`{"session_id":"s","event_type":"e","ts":1,"url":"`)
		m = append(m, strings.Repeat("u", n-len(m)-2)...)
		return append(m, `"}`...)
	}
	cases := []struct {
		limit, size int
		tooLarge    bool
	}{
		{0, 1 << 20, false},
		{0, 1<<20 + 1, true},
		{-1, 1<<20 + 1, true},
		{100, 100, false},
		{100, 101, true},
		{4 << 20, 2 << 20, false},
	}
	for _, tc := range cases {
		_, b, _ := newBuilder(t, tc.limit)
		err := b.Append(msg(tc.size), testMeta(0), testIngested, "")
		var de *schemas.DecodeError
		switch {
		case tc.tooLarge && (!errors.As(err, &de) || de.Reason != "too_large"):
			t.Errorf("limit %d, size %d: err = %v, want too_large", tc.limit, tc.size, err)
		case !tc.tooLarge && err != nil:
			t.Errorf("limit %d, size %d: err = %v, want nil", tc.limit, tc.size, err)
		}
	}
}

func TestRecordRoundTrip(t *testing.T) {
	s, b, _ := newBuilder(t, 0)
	const n = 1000
	for i := range n {
		status := []string{"ok", "", "timeout"}[i%3]
		ingested := testIngested.Add(time.Duration(i) * time.Microsecond)
		if err := b.Append(message(i, 333), testMeta(int64(i)), ingested, status); err != nil {
			t.Fatalf("Append %d: %v", i, err)
		}
	}
	if b.Len() != n {
		t.Fatalf("Len = %d, want %d", b.Len(), n)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if rec.Schema() != s.Arrow || rec.NumRows() != n {
		t.Fatalf("record has schema %p (want %p) and %d rows", rec.Schema(), s.Arrow, rec.NumRows())
	}
	checkColumns(t, rec)
	for c := range s.Arrow.Fields() {
		if !arrow.TypeEqual(rec.Column(c).DataType(), s.Arrow.Field(c).Type) {
			t.Errorf("column %d has type %s, schema says %s", c, rec.Column(c).DataType(), s.Arrow.Field(c).Type)
		}
		if !s.Arrow.Field(c).Nullable && rec.Column(c).NullN() != 0 {
			t.Errorf("required column %s has %d nulls", s.Arrow.Field(c).Name, rec.Column(c).NullN())
		}
	}
	for _, i := range []int{0, 1, 2, 517, n - 1} {
		got := rowValues(t, rec, i)
		if got[1] != "s-"+pad7(i/8) || got[7] != (1732860000000+int64(i)*37)*1000 || got[8] != int64(i%8) ||
			got[11] != int64(i) || got[13] != micros(testIngested)+int64(i) {
			t.Errorf("row %d = %v", i, got)
		}
		if wantNull := i%3 == 1; (got[14] == nil) != wantNull {
			t.Errorf("row %d _enrich_status = %v, want null %v", i, got[14], wantNull)
		}
		if u := got[4].(string); len(u) < 30 || !strings.HasPrefix(u, "https://shop.example.com/p/") {
			t.Errorf("row %d url = %q", i, u)
		}
	}
}

func pad7(n int) string {
	s := strconv.Itoa(n)
	return strings.Repeat("0", 7-len(s)) + s
}

func TestBuilderReuse(t *testing.T) {
	_, b, _ := newBuilder(t, 0)
	appendN := func(from, n int) {
		t.Helper()
		for i := from; i < from+n; i++ {
			if err := b.Append(message(i, 333), testMeta(int64(i)), testIngested, "ok"); err != nil {
				t.Fatalf("Append %d: %v", i, err)
			}
		}
	}

	appendN(0, 3)
	first := b.NewRecord()
	defer first.Release()
	if b.Len() != 0 || b.SizeBytes() != 0 {
		t.Fatalf("after NewRecord Len, SizeBytes = %d, %d; want 0, 0", b.Len(), b.SizeBytes())
	}

	appendN(3, 5)
	if err := b.Append([]byte("{"), testMeta(99), testIngested, "ok"); err == nil {
		t.Fatal("bad message accepted")
	}
	second := b.NewRecord()
	defer second.Release()

	empty := b.NewRecord()
	defer empty.Release()

	// The first batch is untouched by the builder's later use.
	for _, tc := range []struct {
		rec   arrow.RecordBatch
		first int
		n     int
	}{{first, 0, 3}, {second, 3, 5}, {empty, 0, 0}} {
		checkColumns(t, tc.rec)
		if tc.rec.NumRows() != int64(tc.n) {
			t.Fatalf("record has %d rows, want %d", tc.rec.NumRows(), tc.n)
		}
		for i := range tc.n {
			if got := rowValues(t, tc.rec, i)[11]; got != int64(tc.first+i) {
				t.Errorf("row %d has _kafka_offset %v, want %d", i, got, tc.first+i)
			}
		}
	}

	// A released builder's batches stay valid: they own their buffers.
	appendN(8, 2)
	b.Release()
	b.Release() // idempotent
	if got := rowValues(t, second, 4)[11]; got != int64(7) {
		t.Errorf("after Release, row has _kafka_offset %v, want 7", got)
	}
}

func TestSizeBytes(t *testing.T) {
	_, b, _ := newBuilder(t, 0)
	prev := b.SizeBytes()
	if prev != 0 {
		t.Fatalf("new builder SizeBytes = %d", prev)
	}
	const n = 100
	for i := range n {
		if err := b.Append(message(i, 333), testMeta(int64(i)), testIngested, "ok"); err != nil {
			t.Fatal(err)
		}
		if got := b.SizeBytes(); got <= prev {
			t.Fatalf("SizeBytes went from %d to %d", prev, got)
		}
		prev = b.SizeBytes()
	}
	// The strings of a 333-byte message are ~250 bytes; fixed columns add ~80.
	if per := prev / n; per < 250 || per > 450 {
		t.Errorf("SizeBytes per 333-byte message = %d, want roughly 250-450", per)
	}
	b.NewRecord().Release()
	if b.SizeBytes() != 0 {
		t.Errorf("SizeBytes after NewRecord = %d", b.SizeBytes())
	}
}

func TestDecodeErrorMessage(t *testing.T) {
	cases := []struct {
		err  schemas.DecodeError
		want string
	}{
		{schemas.DecodeError{Reason: "missing_field", Field: "ts", Detail: "is required"}, `decoding record: missing_field "ts": is required`},
		{schemas.DecodeError{Reason: "malformed_json", Detail: "empty message"}, `decoding record: malformed_json: empty message`},
	}
	for _, tc := range cases {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q, want %q", got, tc.want)
		}
	}
}

func TestNewBuilderRejectsForeignSchema(t *testing.T) {
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `"handmade"`) {
			t.Errorf("NewBuilder on a foreign schema: recovered %v, want a panic naming the schema", r)
		}
	}()
	s := &schemas.Schema{Name: "handmade", Arrow: arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.BinaryTypes.String}}, nil)}
	s.NewBuilder(nil, 0)
}

func TestNilAllocator(t *testing.T) {
	b := clickstream(t).NewBuilder(nil, 0)
	defer b.Release()
	if err := b.Append(message(1, 333), testMeta(1), testIngested, "ok"); err != nil {
		t.Fatal(err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if rec.NumRows() != 1 {
		t.Fatalf("record has %d rows", rec.NumRows())
	}
}

// TestAppendLowercaseRFC3339: a ts spelled with the lower-case "t" and "z"
// RFC 3339 allows (section 5.6) is stored as its upper-case spelling is.
func TestAppendLowercaseRFC3339(t *testing.T) {
	_, b, _ := newBuilder(t, 0)
	for _, ts := range []string{"2024-11-29T06:00:00.25Z", "2024-11-29t06:00:00.25z"} {
		if err := b.Append([]byte(`{"session_id":"s","event_type":"e","ts":"`+ts+`"}`), testMeta(1), testIngested, "ok"); err != nil {
			t.Fatalf("ts %s: %v", ts, err)
		}
	}
	rec := b.NewRecord()
	defer rec.Release()
	if upper, lower := rowValues(t, rec, 0), rowValues(t, rec, 1); !reflect.DeepEqual(upper, lower) {
		t.Fatalf("rows %v and %v differ", upper, lower)
	}
}

// TestCheckIsAppendWithoutTheRow: Check refuses a message for the reason
// Append gives, accepts one Append takes, and appends nothing, for the
// clickstream Builder and the generic builder of a schema file. The
// pipeline checks a record whose enrichment failed, to dead-letter it for
// its own fault where it has one.
func TestCheckIsAppendWithoutTheRow(t *testing.T) {
	click, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	pay, err := schemas.Lookup("examples/payments.avsc")
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("x", 300)
	for _, c := range []struct {
		sc     *schemas.Schema
		values map[string]string // value → reason ("" for a row)
	}{
		{click, map[string]string{
			`{"session_id":"s","event_type":"e","ts":1}`:                      "",
			`{"session_id":"s","event_type":"e","ts":01}`:                     schemas.ReasonMalformedJSON,
			`{"session_id":"s","event_type":"e"}`:                             schemas.ReasonMissingField,
			`{"session_id":"s","event_type":"e","ts":1,"url":"` + long + `"}`: schemas.ReasonTooLarge,
		}},
		{pay, map[string]string{
			`{"payment_id":"p","amount":"1.00","currency":"EUR","status":"SETTLED","created_at":1,"account":{"id":"a"},"tags":[]}`: "",
			`{"payment_id":"p","amount":"1.00","currency":"EUR","status":"SETTLED","created_at":1,"account":{"id":"a"}`:            schemas.ReasonMalformedJSON,
			`{"payment_id":"p","amount":"1.00","currency":"EUR","status":"LOST","created_at":1,"account":{"id":"a"}}`:              schemas.ReasonInvalidField,
			`{"payment_id":"` + long + `"}`: schemas.ReasonTooLarge,
		}},
	} {
		b := c.sc.NewRecordBuilder(nil, 256)
		for v, reason := range c.values {
			before := b.Len()
			checked := b.Check([]byte(v))
			var de *schemas.DecodeError
			if reason == "" && checked != nil || reason != "" && (!errors.As(checked, &de) || de.Reason != reason) {
				t.Errorf("%s: Check(%.40s…) = %v, want reason %q", c.sc.Name, v, checked, reason)
			}
			if b.Len() != before {
				t.Fatalf("%s: Check(%.40s…) appended a row", c.sc.Name, v)
			}
			if appended := b.Append([]byte(v), testMeta(0), testIngested, ""); fmt.Sprint(appended) != fmt.Sprint(checked) {
				t.Errorf("%s: Append(%.40s…) = %v, Check %v", c.sc.Name, v, appended, checked)
			}
		}
		if b.Len() != 1 {
			t.Errorf("%s: %d rows appended, want 1", c.sc.Name, b.Len())
		}
		b.Release()
	}
}
