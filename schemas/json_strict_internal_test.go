package schemas

import (
	stdjson "encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/valyala/fastjson"
)

// naiveScan is scanText a byte at a time.
func naiveScan(p []byte) (ascii, escapes, controls bool) {
	ascii = true
	for _, c := range p {
		ascii = ascii && c < 0x80
		escapes = escapes || c == '\\'
		controls = controls || c < 0x20
	}
	return
}

// TestScanText: every byte value at every position, next to ASCII
// and non-ASCII neighbours, for lengths 1..24.
func TestScanText(t *testing.T) {
	fillers := []byte{'a', ' ', 0x7f, 0x80, 0x9f, 0xa0, 0xc3, 0xff, 0x20, 0x21}
	for n := 1; n <= 24; n++ {
		for _, f := range fillers {
			for pos := 0; pos < n; pos++ {
				for c := 0; c < 256; c++ {
					p := make([]byte, n)
					for i := range p {
						p[i] = f
					}
					p[pos] = byte(c)
					ga, ge, gc := scanText(p)
					wa, we, wc := naiveScan(p)
					if ga != wa || ge != we || gc != wc {
						t.Fatalf("scanText(% x) = %v,%v,%v want %v,%v,%v", p, ga, ge, gc, wa, we, wc)
					}
				}
			}
		}
	}
	// two special bytes
	for n := 2; n <= 17; n++ {
		for i := 0; i < n; i++ {
			for j := 0; j < n; j++ {
				for _, a := range []byte{0, 0x1f, 0x20, 0x80, 0xff, 0x9f, 0xa0, '\\'} {
					for _, b := range []byte{0, 0x1f, 0x20, 0x80, 0xff, 0x9f, 0xa0, '\\'} {
						p := []byte(strings.Repeat("a", n))
						p[i], p[j] = a, b
						ga, ge, gc := scanText(p)
						wa, we, wc := naiveScan(p)
						if ga != wa || ge != we || gc != wc {
							t.Fatalf("scanText(% x) = %v,%v,%v want %v,%v,%v", p, ga, ge, gc, wa, we, wc)
						}
					}
				}
			}
		}
	}
}

// parseNum parses s with fastjson.
func parseNum(t *testing.T, s string) *fastjson.Value {
	t.Helper()
	v, err := fastjson.Parse(s)
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return v
}

// TestNumberReaderInt: integers at and around the int64 limits and the
// 18-digit fast path read exactly; other numbers and non-numbers refused.
func TestNumberReaderInt(t *testing.T) {
	var r NumberReader
	for _, s := range []string{"0", "-0", "1", "-1", "999999999999999999", "-999999999999999999",
		"1000000000000000000", "-1000000000000000000", "9223372036854775807", "-9223372036854775808",
		"123456789012345678", "1234567890123456789"} {
		want, _ := strconv.ParseInt(s, 10, 64)
		got, err := r.Int(parseNum(t, s))
		if err != nil || got != want {
			t.Errorf("Int(%s) = %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"9223372036854775808", "-9223372036854775809", "1e3", "1.0", "-0.0", "1E0", "12345678901234567890"} {
		if got, err := r.Int(parseNum(t, s)); !errors.Is(err, errNotInt) {
			t.Errorf("Int(%s) = %d, %v; want errNotInt", s, got, err)
		}
	}
	for _, s := range []string{"007", "-01", "NaN", "Inf", "-Inf", "+1", "1.", ".5", "1e", "1.2.3", "--1", "-"} {
		v, err := fastjson.Parse(s)
		if err != nil {
			continue
		}
		if got, err := r.Int(v); err != errNotNumber {
			t.Errorf("Int(%s) = %d, %v; want errNotNumber", s, got, err)
		}
		if got, err := r.Float(v, 64); err != errNotNumber {
			t.Errorf("Float(%s) = %v, %v; want errNotNumber", s, got, err)
		}
	}
}

// TestGenericValid: valid JSON the strict checks must not refuse.
func TestGenericValid(t *testing.T) {
	for _, v := range []string{
		`{"id":"a","n":-9223372036854775808}`,
		`{"id":"a","n":9223372036854775807}`,
		`{"id":"a","n":-0}`,
		`{"id":"a","d":-0}`,
		`{"id":"a","d":-0.0e-0}`,
		`{"id":"a","d":1E+2}`,
		`{"id":"a","d":1e-400}`,
		"{\n\t\"id\" :\r\n \"a\" ,\n \"n\"\t:\n-1\n}\n",
		`{"id":"\u00e9\ud83d\ude00\"\\\/\b\f\n\r\t","n":1}`,
		`{"id":"a","x":{"y":[1,-2,3.5e-7,{"z":-0,"w":[[[-9223372036854775808]]]}],"q":0.0}}`,
		`{"id":"a","x":[[],[{}],[-1E-1,0e0]]}`,
		`{"id":"a","tags":["",""],"m":{"":"","b":""}}`,
		`{"id":"a","x":1,"x":2,"id":"b"}`,
		`{"id":"é","m":{"é":"ü"}}`,
	} {
		if _, err := valuesAppend(t, v); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
}

// TestGenericInvalidNumbers: number tokens the JSON grammar refuses, also
// in members not read and in the values a repeated member overwrites.
func TestGenericInvalidNumbers(t *testing.T) {
	for _, v := range []string{
		`{"id":"a","n":007}`,
		`{"id":"a","x":[1,[2,{"y":01}]]}`,
		`{"id":"a","x":NaN}`,
		`{"id":"a","x":-Inf}`,
		`{"id":"a","d":1.}`,
		`{"id":"a","n":007,"n":1}`,         // duplicate read field: first value overwritten
		`{"id":"a","m":{"k":007,"k":"v"}}`, // duplicate map key: first value dropped
		`{"id":"a","tags":["x"],"tags":[01]}`,
	} {
		if _, err := valuesAppend(t, v); err == nil {
			t.Errorf("%q: accepted", v)
		}
	}
}

const decSchema = `{"type":"record","name":"R","fields":[
 {"name":"id","type":"string"},
 {"name":"amt","type":["null",{"type":"bytes","logicalType":"decimal","precision":10,"scale":2}],"default":null}
]}`

// TestDecimalNumberGrammar: a decimal written as a number follows the JSON
// grammar like any number.
func TestDecimalNumberGrammar(t *testing.T) {
	sc, err := ParseAvsc("dec", []byte(decSchema))
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{`{"id":"a","amt":007}`, `{"id":"a","amt":+5}`, `{"id":"a","amt":1.}`, `{"id":"a","amt":-.5}`} {
		b := sc.NewRecordBuilder(memory.NewGoAllocator(), 0)
		if err := b.Append([]byte(v), Meta{Topic: "t"}, time.Unix(0, 0), ""); err == nil {
			rec := b.NewRecord()
			t.Errorf("%s: accepted, stored %v", v, array.RecordToStructArray(rec).Field(1))
			rec.Release()
		}
		b.Release()
	}
}

// TestBuiltinNumbers: the built-in clickstream schema's numbers, read and
// not read.
func TestBuiltinNumbers(t *testing.T) {
	base := `"event_id":"e","session_id":"s","event_type":"click","url":"u"`
	b := checkedBuilder(t, nil)
	ok := []string{
		`{` + base + `,"ts":1700000000000,"seq":-9223372036854775808}`,
		`{` + base + `,"ts":1700000000000,"seq":-0}`,
		"{" + base + ",\n\"ts\":\t1700000000000,\r\n\"seq\":9223372036854775807}",
		`{` + base + `,"ts":"2024-11-29t06:00:00z","x":[-1,{"y":2e-3}]}`,
	}
	for _, v := range ok {
		if err := b.Append([]byte(v), Meta{Topic: "t"}, time.Unix(0, 0), ""); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	bad := []string{
		`{` + base + `,"ts":1700000000000,"seq":007}`,
		`{` + base + `,"ts":1700000000000,"x":[1,{"y":01}]}`,
		`{` + base + `,"ts":1700000000000,"seq":01,"seq":1}`,
		`{` + base + `,"ts":01700000000000,"ts":1700000000000}`,
	}
	for _, v := range bad {
		if err := b.Append([]byte(v), Meta{Topic: "t"}, time.Unix(0, 0), ""); err == nil {
			t.Errorf("%q: accepted", v)
		}
	}
}

// TestControlCharBeforeEscape: a raw control character before a backslash
// escape in the same string is refused (fastjson's validator misses it).
func TestControlCharBeforeEscape(t *testing.T) {
	for _, v := range []string{
		"{\"id\":\"a\x01b\\n\"}",
		"{\"id\":\"a\tb\\\"c\"}",
		"{\"id\":\"ok\",\"m\":{\"k\x02\\t\":\"v\"}}",
		"{\"id\":\"ok\",\"tags\":[\"\x1f\\u0041\"]}",
	} {
		if _, err := valuesAppend(t, v); err == nil {
			t.Errorf("generic: %q accepted", v)
		}
	}
	base := `"event_id":"e","session_id":"s","event_type":"click","ts":1700000000000`
	b := checkedBuilder(t, nil)
	for _, v := range []string{
		"{" + base + ",\"url\":\"http://x/\x01\\/y\"}",
		"{" + base + ",\"url\":\"u\",\"other\":\"\x00\\\\\"}",
	} {
		if err := b.Append([]byte(v), Meta{Topic: "t"}, time.Unix(0, 0), ""); err == nil {
			t.Errorf("builtin: %q accepted", v)
		}
	}
	// after the last escape: refused
	if _, err := valuesAppend(t, "{\"id\":\"a\\nb\x01\"}"); err == nil {
		t.Errorf("control char after escape accepted")
	}
}

// TestDifferentialUnread: an unread member built from random JSON-ish
// tokens is accepted exactly when encoding/json finds the message valid.
func TestDifferentialUnread(t *testing.T) {
	toks := []string{"0", "-0", "1", "007", "-", "1.5", "1.", ".5", "1e5", "1E+5", "1e", "NaN", "Inf", "-Inf", "+1",
		`"a"`, `"\n"`, `"\q"`, `"\u0041"`, `"\u00zz"`, "\"\t\"", "\"\\n\x01\"", `""`, "true", "null", "false",
		"[", "]", "{", "}", ",", ":", `"k":`, " ", "\n", "\t", "\r", "1.2.3", "-9223372036854775808", "9223372036854775808", "1e400"}
	seed := uint64(1)
	rnd := func(n int) int {
		seed ^= seed << 13
		seed ^= seed >> 7
		seed ^= seed << 17
		return int(seed % uint64(n))
	}
	mismatches := map[string]bool{}
	sc := valuesTestSchema(t)
	b := sc.NewRecordBuilder(memory.NewGoAllocator(), 0)
	defer b.Release()
	for iter := 0; iter < 100000 && len(mismatches) < 15; iter++ {
		var sb strings.Builder
		k := 1 + rnd(6)
		for i := 0; i < k; i++ {
			sb.WriteString(toks[rnd(len(toks))])
		}
		v := sb.String()
		msg := `{"id":"a","x":` + v + `}`
		valid := jsonValid(msg)
		err := b.Append([]byte(msg), Meta{Topic: "t"}, time.Unix(0, 0), "")
		if iter%1000 == 0 {
			b.NewRecord().Release()
		}
		if valid != (err == nil) {
			key := strconv.Quote(v)
			if !mismatches[key] {
				mismatches[key] = true
				t.Errorf("unread %s: json.Valid=%v, Append err=%v", key, valid, err)
			}
		}
	}
}

func jsonValid(s string) bool { return stdjson.Valid([]byte(s)) }

// TestLoneSurrogates: a \u escape of half a UTF-16 surrogate pair is no
// character; fastjson stored its six characters (a following escaped
// character was lost). Such a record is malformed_json; a whole pair and an
// escaped backslash before "ud800" are stored.
func TestLoneSurrogates(t *testing.T) {
	base := `"event_id":"e","session_id":"s","event_type":"click","ts":1700000000000`
	b := checkedBuilder(t, nil)
	for _, tc := range []struct {
		url  string
		lone bool
	}{
		{`a\ud800b`, true},
		{`x\ud83d\u0041`, true},
		{`x\udc00`, true},
		{`end\ud800`, true},
		{`\ud83d\ude00 ok`, false},
		{`\\ud800 is text`, false},
		{`\u00e9\u0041`, false},
	} {
		msg := "{" + base + `,"url":"` + tc.url + `"}`
		err := b.Append([]byte(msg), Meta{Topic: "t"}, time.Unix(0, 0), "")
		var de *DecodeError
		if refused := errors.As(err, &de) && de.Reason == ReasonMalformedJSON; refused != tc.lone {
			t.Errorf("url %s: %v, want refused %v", tc.url, err, tc.lone)
		}
		_, gerr := valuesAppend(t, `{"id":"`+tc.url+`"}`)
		if refused := errors.As(gerr, &de) && de.Reason == ReasonMalformedJSON; refused != tc.lone {
			t.Errorf("generic id %s: %v, want refused %v", tc.url, gerr, tc.lone)
		}
	}
}
