package enrich

import (
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/schemas"
)

// convert converts one JSON document to a field type, through a decoder,
// and reads it back as a Go value (nil: null).
func convert(t FieldType, raw string) (any, bool) {
	fields := []Field{{Name: "f", Type: t, Attribute: "f"}}
	d := newDecoder(fields, func(string) {})
	v, err := fastjson.Parse(raw)
	if err != nil {
		panic(err)
	}
	a, ok := d.convert(0, v)
	return Values{a}.Get(fields, "f"), ok
}

func TestConvert(t *testing.T) {
	ts := time.Date(2024, 11, 29, 6, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		t    FieldType
		raw  string
		want any
		ok   bool
	}{
		{TypeString, `"gold"`, "gold", true},
		{TypeString, `7`, "7", true},
		{TypeString, `true`, "true", true},
		{TypeString, `{"a":1}`, nil, false},
		{TypeString, `null`, nil, true},
		{TypeLong, `42`, int64(42), true},
		{TypeLong, `42.0`, int64(42), true},
		{TypeLong, `"42"`, int64(42), true},
		{TypeLong, `42.5`, nil, false},
		{TypeLong, `1e30`, nil, false},
		{TypeLong, `"x"`, nil, false},
		{TypeDouble, `0.7`, 0.7, true},
		{TypeDouble, `"0.7"`, 0.7, true},
		{TypeDouble, `3`, 3.0, true},
		{TypeDouble, `[1]`, nil, false},
		{TypeBoolean, `true`, true, true},
		{TypeBoolean, `"false"`, false, true},
		{TypeBoolean, `1`, nil, false},
		{TypeTimestamp, `"2024-11-29T06:00:00Z"`, ts, true},
		{TypeTimestamp, `"2024-11-29T07:00:00+01:00"`, ts, true},
		{TypeTimestamp, `1732860000000`, ts, true},
		{TypeTimestamp, `1732860000000.0`, ts, true},
		{TypeTimestamp, `"yesterday"`, nil, false},
		{TypeDouble, `"NaN"`, nil, false},
		{TypeDouble, `"-Inf"`, nil, false},
		{TypeBoolean, `"1"`, nil, false},
		{TypeBoolean, `"T"`, nil, false},
		// Beyond what microseconds hold: refused, not wrapped round.
		{TypeTimestamp, `9223372036854775807`, nil, false},
		{TypeTimestamp, `-9223372036854775807`, nil, false},
		{TypeTimestamp, `100000000000000000`, nil, false},
		{TypeTimestamp, `true`, nil, false},
	} {
		got, ok := convert(tc.t, tc.raw)
		if ok != tc.ok {
			t.Errorf("%s %s: ok %v, want %v", tc.t, tc.raw, ok, tc.ok)
			continue
		}
		if w, isTime := tc.want.(time.Time); isTime {
			if g, _ := got.(time.Time); !g.Equal(w) || g.Location() != time.UTC {
				t.Errorf("%s %s: got %v, want %v", tc.t, tc.raw, got, w)
			}
			continue
		}
		if got != tc.want {
			t.Errorf("%s %s: got %v (%T), want %v (%T)", tc.t, tc.raw, got, got, tc.want, tc.want)
		}
	}
}

func TestAttrsCountsBadValuesAndInterns(t *testing.T) {
	fields := []Field{{Name: "a", Type: TypeLong, Attribute: "a"}, {Name: "b", Type: TypeString, Attribute: "x"}, {Name: "c", Type: TypeBoolean, Attribute: "c"}}
	var bad []string
	d := newDecoder(fields, func(f string) { bad = append(bad, f) })
	var p fastjson.Parser
	v, _ := p.Parse(`{"a":"nope","x":"y","extra":1}`)
	vals := d.attrs(v)
	if len(vals) != 3 || vals[0].Set || vals[1] != schemas.StringAttr("y") || vals[2].Set {
		t.Fatalf("values %v", vals)
	}
	if len(bad) != 1 || bad[0] != "a" {
		t.Fatalf("bad fields %v", bad)
	}
	// The parser's buffer is reused: values must not alias it.
	v, _ = p.Parse(`{"x":"z"}`)
	again := d.attrs(v)
	if vals[1].Str != "y" || again[1].Str != "z" {
		t.Fatalf("values alias the parser: %v %v", vals, again)
	}
	if allocs := testing.AllocsPerRun(100, func() { d.interns[1].get([]byte("y")) }); allocs != 0 {
		t.Fatalf("interned string lookup allocates %v times", allocs)
	}
	// An answer that is no object is every attribute's fault: nulls.
	bad = nil
	v, _ = p.Parse(`[1,2]`)
	if vals := d.attrs(v); len(vals) != 3 || vals[0].Set || vals[1].Set || vals[2].Set || len(bad) != 3 {
		t.Fatalf("an array for attributes: values %v, bad fields %v; want three nulls, all counted", vals, bad)
	}
}

// TestAttrStringsThatAreNotUTF8AreCountedNulls: a string attribute whose
// bytes are not UTF-8 is a null counted as an attribute error, as a
// record's string with such bytes is a dead letter. It was stored as it
// came, with status ok and nothing counted, in a column Parquet and Iceberg
// hold as UTF-8.
func TestAttrStringsThatAreNotUTF8AreCountedNulls(t *testing.T) {
	fields := []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}}
	var bad []string
	d := newDecoder(fields, func(f string) { bad = append(bad, f) })
	long := strings.Repeat("x", internMaxLen) // past the interned lengths
	for _, s := range []string{"go\xff\xfeld", long + "\xff", "\xed\xa0\x80" /* a surrogate */} {
		bad = nil
		v := fastjson.MustParse(`{"segment":"` + s + `"}`)
		if vals := d.attrs(v); vals[0].Set || len(bad) != 1 {
			t.Errorf("%q: value %q, bad fields %v; want a null, counted", s, vals[0].Str, bad)
		}
	}
	if vals := d.attrs(fastjson.MustParse(`{"segment":"gölд"}`)); vals[0].Str != "gölд" {
		t.Errorf("UTF-8 string: %q", vals[0].Str)
	}
}

// TestRepeatedMembersCountByTheirLastValue: in the service's answer, as in
// records, a repeated member counts by its last value: an attribute, a key
// in "results" (a later null makes it a miss), and "results" itself. The
// first attribute and the first "results" were kept, and a key answered
// was not unanswered by a later null.
func TestRepeatedMembersCountByTheirLastValue(t *testing.T) {
	fields := []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}, {Name: "visits", Type: TypeLong, Attribute: "visits"}}
	var bad []string
	c := &client{mode: ModeBatch, dec: newDecoder(fields, func(f string) { bad = append(bad, f) }), decodeSlots: make(chan struct{}, 1)}
	for _, tc := range []struct {
		body string
		want map[string][2]any // key: segment, visits
	}{
		{`{"results":{"u-1":{"segment":"gold","visits":"x","segment":"silver","visits":3}}}`, map[string][2]any{"u-1": {"silver", int64(3)}}},
		{`{"results":{"u-1":{"segment":"gold"},"u-1":null,"u-2":null,"u-2":{"visits":2}}}`, map[string][2]any{"u-2": {nil, int64(2)}}},
		{`{"results":{"u-1":{"segment":"gold"}},"results":{"u-2":{"segment":"silver"}}}`, map[string][2]any{"u-2": {"silver", nil}}},
	} {
		bad = nil
		out, err := c.decode([]string{"u-1", "u-2"}, []byte(tc.body))
		if err != nil {
			t.Fatalf("%s: %v", tc.body, err)
		}
		got := map[string][2]any{}
		for k, vals := range out {
			got[k] = [2]any{vals.Get(fields, "segment"), vals.Get(fields, "visits")}
		}
		if !maps.Equal(got, tc.want) || len(bad) != 0 {
			t.Errorf("%s: %v, bad fields %v; want %v, none bad", tc.body, got, bad, tc.want)
		}
	}
}

// TestAttrTimestampsTakeLowerCaseTAndZ: an RFC 3339 timestamp attribute may
// spell its "T" and "Z" in lower case, as RFC 3339 and records' timestamps
// allow. It was refused: a null, counted as an attribute error.
func TestAttrTimestampsTakeLowerCaseTAndZ(t *testing.T) {
	want := time.Date(2024, 11, 29, 6, 0, 0, 500_000_000, time.UTC)
	for _, raw := range []string{`"2024-11-29t06:00:00.5z"`, `"2024-11-29T06:00:00.5z"`, `"2024-11-29t07:00:00.5+01:00"`} {
		if got, ok := convert(TypeTimestamp, raw); !ok || !want.Equal(got.(time.Time)) {
			t.Errorf("%s: %v ok=%v, want %v", raw, got, ok, want)
		}
	}
	if got, ok := convert(TypeTimestamp, `"2024-11-29x06:00:00z"`); ok {
		t.Errorf("a date and time joined by x: %v, want refused", got)
	}
}

// TestNumericStringAttrsAreSpeltAsJSONNumbers: a long or double attribute
// in a string is read as JSON spells numbers. strconv's Go syntax was taken
// too: "1_000" was 1000, "0x1p-2" 0.25, "+42" 42.
func TestNumericStringAttrsAreSpeltAsJSONNumbers(t *testing.T) {
	for _, tc := range []struct {
		t    FieldType
		raw  string
		want any
	}{
		{TypeLong, `"-42"`, int64(-42)},
		{TypeLong, `"4.2e1"`, int64(42)},
		{TypeDouble, `"-2.5E-1"`, -0.25},
		{TypeLong, `"+42"`, nil},
		{TypeLong, `"1_000"`, nil},
		{TypeLong, `"0x10"`, nil},
		{TypeLong, `"042"`, nil},
		{TypeLong, `" 42"`, nil},
		{TypeLong, `"42."`, nil},
		{TypeDouble, `"0x1p-2"`, nil},
		{TypeDouble, `"1_000.5"`, nil},
		{TypeDouble, `"+1"`, nil},
		{TypeDouble, `".5"`, nil},
		{TypeDouble, `"Inf"`, nil},
		{TypeDouble, `"1e400"`, nil}, // beyond a double
	} {
		if got, ok := convert(tc.t, tc.raw); got != tc.want || ok != (tc.want != nil) {
			t.Errorf("%s %s: %v ok=%v, want %v", tc.t, tc.raw, got, ok, tc.want)
		}
	}
}

// TestLongAttrsAreExact: a long attribute written with a fraction or an
// exponent is its exact value when that is whole, and refused otherwise.
// It was read through a float64, which rounds beyond 2^53:
// 9007199254740993.0 was stored as 9007199254740992, and
// 42.000000000000001 as 42.
func TestLongAttrsAreExact(t *testing.T) {
	for _, tc := range []struct {
		raw  string
		want any
	}{
		{`9007199254740993.0`, int64(9007199254740993)},
		{`"9007199254740993.0"`, int64(9007199254740993)},
		{`9.007199254740993e15`, int64(9007199254740993)},
		{`90071992547409930e-1`, int64(9007199254740993)},
		{`9223372036854775807.000`, int64(math.MaxInt64)},
		{`-9223372036854775808.0`, int64(math.MinInt64)},
		{`-922337203685477580.8e1`, int64(math.MinInt64)},
		{`0.0005e4`, int64(5)},
		{`-0.0`, int64(0)},
		{`0e999`, int64(0)},
		{`0E-10`, int64(0)}, // Java's BigDecimal of scale 10
		{`"-0.000E-3"`, int64(0)},
		{`0e9999999999`, int64(0)},
		{`1000e-3`, int64(1)},
		{`42.000000000000001`, nil},
		{`9007199254740992.5`, nil},
		{`9223372036854775808.0`, nil},
		{`-9223372036854775809`, nil},
		{`1e19`, nil},
		{`1e-999`, nil},
		{`1e9999999999`, nil},
	} {
		if got, ok := convert(TypeLong, tc.raw); got != tc.want || ok != (tc.want != nil) {
			t.Errorf("%s: %v ok=%v, want %v", tc.raw, got, ok, tc.want)
		}
	}
}

func TestEscapeKey(t *testing.T) {
	if got := escapeKey("u 1/ä?&x=%~._-"); got != "u%201%2F%C3%A4%3F%26x%3D%25~._-" {
		t.Fatalf("escapeKey = %s", got)
	}
}

func TestCacheTTLAndRefresh(t *testing.T) {
	c := newCache(100, DefaultCacheMaxBytes, time.Second)
	now := int64(1000 * time.Second)
	c.put("k", Values{schemas.StringAttr("v")}, false, 10*time.Second, now)
	c.put("m", nil, true, 2*time.Second, now)
	if v, fr := c.get([]byte("k"), now+int64(time.Second)); fr != fresh || v.vals[0].Str != "v" {
		t.Fatalf("fresh read: %v %v", v, fr)
	}
	// After 80% of the TTL: one stale read asks for a refresh, the next
	// ones (within the retry period) do not.
	if _, fr := c.get([]byte("k"), now+int64(8500*time.Millisecond)); fr != stale {
		t.Fatalf("read at 85%% of the TTL: %v, want stale", fr)
	}
	if _, fr := c.get([]byte("k"), now+int64(8600*time.Millisecond)); fr != fresh {
		t.Fatalf("second read at 86%%: %v, want fresh", fr)
	}
	if _, fr := c.get([]byte("k"), now+int64(10*time.Second)); fr != absent {
		t.Fatalf("read at the TTL: %v, want absent", fr)
	}
	if v, fr := c.get([]byte("m"), now+int64(time.Second)); fr != fresh || !v.miss {
		t.Fatalf("negative entry: %v %v", v, fr)
	}
	if _, fr := c.get([]byte("m"), now+int64(3*time.Second)); fr != absent {
		t.Fatal("negative entry outlived its TTL")
	}
	// Size bound: 16 shards of ceil(100/16) entries.
	for i := range 1000 {
		c.put(string(rune('a'+i%26))+string(rune(i)), nil, true, time.Hour, now)
	}
	if n := c.len(); n > 16*7 {
		t.Fatalf("%d entries in a cache of 100", n)
	}
	var disabled *cache
	if _, fr := disabled.get([]byte("k"), now); fr != absent {
		t.Fatal("a disabled cache answered")
	}
}

// FuzzDecodeResponse feeds arbitrary bodies to the response decoder: it must
// return one value per field or an error, and never panic.
func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"results":{"u-1":{"segment":"gold","score":0.7,"signup_ts":1732860000000,"vip":true,"visits":"12"}}}`), false)
	f.Add([]byte(`{"results":{"u-1":null,"u-2":[1]}}`), false)
	f.Add([]byte(`{"segment":"gold"}`), true)
	f.Add([]byte(`null`), true)
	f.Add([]byte(`{"results":{"u-\u0031":{"segment":"\ud83d\ude00"}}}`), false)
	fields := []Field{
		{Name: "segment", Type: TypeString, Attribute: "segment"},
		{Name: "score", Type: TypeDouble, Attribute: "score"},
		{Name: "signup_ts", Type: TypeTimestamp, Attribute: "signup_ts"},
		{Name: "vip", Type: TypeBoolean, Attribute: "vip"},
		{Name: "visits", Type: TypeLong, Attribute: "visits"},
	}
	f.Fuzz(func(t *testing.T, body []byte, single bool) {
		c := &client{mode: ModeBatch, dec: newDecoder(fields, func(string) {}), decodeSlots: make(chan struct{}, 1)}
		if single {
			c.mode = ModeSingle
		}
		out, err := c.decode([]string{"u-1"}, body)
		if err != nil {
			return
		}
		for _, vals := range out {
			if len(vals) != len(fields) {
				t.Fatalf("%d values for %d fields", len(vals), len(fields))
			}
		}
	})
}

// TestJSONValuesOutsideStrings: the values bound counts commas, brackets
// and braces outside strings only. It counted those in strings too: a
// one-key answer with a 140 KB text attribute of 70,000 commas, 4 values,
// was refused as 70,005.
func TestJSONValuesOutsideStrings(t *testing.T) {
	long := `{"results":{"u-1":{"note":"` + strings.Repeat("a,", 70_000) + `"}}}`
	for raw, want := range map[string]int{
		`{"a":"x,y,[{","b":[1,2]}`: 5,
		`{"a":"q\",[","b":1}`:      3,
		`[0,0,0]`:                  4,
		`"open,[`:                  1,
		long:                       4,
	} {
		if got := jsonValues([]byte(raw)); got != want {
			t.Errorf("jsonValues(%.40s…) = %d, want %d", raw, got, want)
		}
	}
	c := &client{mode: ModeBatch, dec: newDecoder([]Field{{Name: "note", Type: TypeString, Attribute: "note"}}, func(string) {}), decodeSlots: make(chan struct{}, 1)}
	if _, err := c.decode([]string{"u-1"}, []byte(long)); err != nil {
		t.Errorf("an answer of 4 values with a long text attribute: %v", err)
	}
}
