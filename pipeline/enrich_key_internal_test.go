package pipeline

import (
	"errors"
	"testing"
	"time"

	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// keyCases are record values and the key enrichment looks up for field
// user_id.
var keyCases = []struct {
	name, value, want string
}{
	{"string", `{"event_id":"e","user_id":"u-42","ts":1}`, "u-42"},
	{"first member", `{"user_id":"u-1","x":2}`, "u-1"},
	{"integer", `{"user_id": -17 ,"x":2}`, "-17"},
	{"spaces", " \n{ \"a\" : [1, {\"user_id\":\"no\"}] , \"user_id\" : \"u 7\" }\t", "u 7"},
	{"nested only", `{"a":{"user_id":"u-9"}}`, ""},
	{"in a string", `{"a":"\"user_id\":\"u-9\"","b":1}`, ""},
	{"absent", `{"a":1}`, ""},
	{"empty object", `{}`, ""},
	{"null", `{"user_id":null}`, ""},
	{"bool", `{"user_id":true}`, ""},
	{"object", `{"user_id":{"id":"u"}}`, ""},
	{"fraction", `{"user_id":1.5}`, ""},
	{"exponent", `{"user_id":1e3}`, ""},
	{"too large", `{"user_id":99999999999999999999}`, ""},
	{"escaped value", `{"user_id":"u-\u0034\"2"}`, `u-4"2`},
	{"escaped name", `{"user\u005fid":"u-3"}`, "u-3"},
	{"repeated", `{"user_id":"u-1","user_id":"u-2"}`, "u-2"}, // the last, as the decoder reads it
	{"repeated, escaped value", `{"user_id":"u-1","x":1,"user_id":"u-\u0032"}`, "u-2"},
	{"repeated, escaped name", `{"user_id":"a","user\u005fid":"b"}`, "b"},
	{"repeated, escaped name first", `{"user\u005fid":"a","user_id":"b"}`, "b"},
	{"not an object", `["user_id","u-1"]`, ""},
	{"not JSON", `user_id=u-1`, ""},
	// Not JSON objects: the key is a guess the decoder overrules (it
	// dead-letters these), never a crash.
	{"truncated", `{"user_id":"u-1","a":`, "u-1"},
	{"unterminated", `{"user_id":"u-1`, ""},
	{"trailing garbage", `{"user_id":"u-1"} x`, "u-1"},
	{"empty", ``, ""},
}

// TestKeyMatchesFullParse checks the key extractor against a full fastjson
// parse, which it replaces on the hot path: they must agree on every
// well-formed value.
func TestKeyMatchesFullParse(t *testing.T) {
	k := newKeyExtractor("user_id")
	var p fastjson.Parser
	for _, c := range keyCases {
		t.Run(c.name, func(t *testing.T) {
			got := string(k.key([]byte(c.value)))
			if got != c.want {
				t.Errorf("key(%s) = %q, want %q", c.value, got, c.want)
			}
			if _, err := p.Parse(c.value); err == nil {
				if want := k.parse([]byte(c.value)); got != want {
					t.Errorf("key(%s) = %q, full parse %q", c.value, got, want)
				}
			}
		})
	}
	// The generator's records, malformed ones included.
	gen := clickgen.New(clickgen.Config{Sessions: 1000, Seed: 3, MalformedRate: 0.2})
	checked := 0
	for i := range 5000 {
		v := gen.Next().Value
		if _, err := p.ParseBytes(v); err != nil {
			continue
		}
		checked++
		if got, want := string(k.key(v)), k.parse(v); got != want {
			t.Fatalf("record %d %s: key %q, full parse %q", i, v, got, want)
		}
	}
	if checked < 3000 {
		t.Fatalf("only %d of 5000 generated records are JSON", checked)
	}
}

// TestKeyRepeatedField: a repeated member is read as the decoder reads it,
// the last one wins, so the lookup matches the row's user_id column.
func TestKeyRepeatedField(t *testing.T) {
	k := newKeyExtractor("user_id")
	if got := string(k.key([]byte(`{"user_id":"u-1","a":[],"user_id":"u-2"}`))); got != "u-2" {
		t.Fatalf("key = %q, want u-2", got)
	}
}

// FuzzKey checks that the extractor agrees with the full parse on every
// well-formed value, and never panics.
func FuzzKey(f *testing.F) {
	for _, c := range keyCases {
		f.Add([]byte(c.value))
	}
	k := newKeyExtractor("user_id")
	var p fastjson.Parser
	f.Fuzz(func(t *testing.T, v []byte) {
		key := string(k.key(v))
		if _, err := p.ParseBytes(v); err != nil {
			return // a guess the decoder overrules
		}
		if want := k.parse(v); key != want {
			t.Fatalf("key(%q) = %q, full parse %q", v, key, want)
		}
	})
}

// BenchmarkKey compares key (its fast path on these records), the scan and
// the full parse they replace, on the generator's 333-byte records.
func BenchmarkKey(b *testing.B) {
	gen := clickgen.New(clickgen.Config{Sessions: 1000, Seed: 3})
	var vals [][]byte
	for range 1024 {
		vals = append(vals, gen.Next().Value)
	}
	k := newKeyExtractor("user_id")
	b.Run("key", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k.key(vals[i%len(vals)])
		}
	})
	b.Run("scan", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			scanKey(vals[i%len(vals)], "user_id")
		}
	})
	b.Run("parse", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			k.parse(vals[i%len(vals)])
		}
	})
}

// TestFindKeyDefers: the fast path answers only for flat objects without
// escapes and with the name once; everything else is left to the scan.
func TestFindKeyDefers(t *testing.T) {
	q := []byte(`user_id"`)
	for _, v := range []string{
		`{"xuser_id":"u-0","user_id":"u-1","user_id":"u-2"}`,
		`{"a":{"b":1},"user_id":"u-1"}`,
		`{"a":[1],"user_id":"u-1"}`,
		`{"a":"\\","user_id":"u-1"}`,
		`{"user_id":"u-1","a":{"user_id":"u-2"}}`,
		`{"user_id":"u-\"1"}`,
		`{"user_id":"u-1","user_id":"u-2"}`,
		`{"user_id":"u-1","user\u005fid":"u-2"}`, // the name again, escaped
		`{"user_id":"u-1","c":"\\"}`,             // any escape after the key could be that
		`{"a":1}`,
		` {"user_id":"u-1"}`,
	} {
		if key, ok := findKey([]byte(v), q); ok {
			t.Errorf("findKey(%s) = %q, want it to defer", v, key)
		}
	}
	for v, want := range map[string]string{
		`{"a":"x","user_id" : 12 }`:                        "12",
		`{"user_id":"u-1","a":{"b":[1]},"c":"x"}`:          "u-1", // nesting after the key does not matter
		`{"xuser_id":"u-0","a_user_id":1,"user_id":"u-1"}`: "u-1", // names ending like it are not it
	} {
		if key, ok := findKey([]byte(v), q); !ok || string(key) != want {
			t.Errorf("findKey(%s) = %q, %v; want %q, true", v, key, ok, want)
		}
	}
}

// keyRecorder is a schemas.Resolver that records the keys it is asked for
// and resolves them when resolve is set.
type keyRecorder struct {
	resolve bool
	keys    []string
	calls   int
}

func (r *keyRecorder) Resolve(key []byte) (string, schemas.Extra, bool) {
	r.calls++
	r.keys = append(r.keys, string(key))
	if !r.resolve {
		return "", schemas.Extra{}, false
	}
	return string(enrich.StatusMiss), schemas.Extra{}, true
}

// TestResolvedKeyIsTheExtractorsKey: the key the clickstream builder reads
// as it decodes a record (the fast path, appendCached) is the one the key
// extractor finds in it (the lane's path), for every record it decodes; a
// record it cannot decode is refused before any key is asked for, and a
// key left unresolved appends nothing.
func TestResolvedKeyIsTheExtractorsKey(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	bld := sc.NewBuilder(nil, 0)
	t.Cleanup(bld.Release)
	k := newKeyExtractor("user_id")
	const rest = `"session_id":"s","event_type":"click","ts":1700000000000`
	values := []string{
		`{"user_id":"u-1",` + rest + `}`,
		`{` + rest + `}`,                                 // absent: a miss
		`{"user_id":null,` + rest + `}`,                  // null: a miss
		`{"user_id":"",` + rest + `}`,                    // empty: a miss
		`{"user_id":"u-\u0034\"2",` + rest + `}`,         // escaped
		`{"user\u005fid":"u-3",` + rest + `}`,            // escaped name
		`{"user_id":"u-1",` + rest + `,"user_id":"u-2"}`, // repeated: the last
		`{"user_id":"u-1",` + rest + `,"user_id":"u-\u0032"}`,
		`{"user_id":"a",` + rest + `,"user\u005fid":"b"}`,
		`{"user_id":17,` + rest + `}`, // not a string: not decoded
		`{"user_id":"u-1"`,            // truncated: not decoded
	}
	gen := clickgen.New(clickgen.Config{Sessions: 1000, Seed: 5, MalformedRate: 0.2})
	for range 3000 {
		values = append(values, string(gen.Next().Value))
	}
	decoded := 0
	for i, v := range values {
		rec := &keyRecorder{resolve: i%2 == 0}
		before := bld.Len()
		err := bld.AppendResolved([]byte(v), schemas.Meta{Topic: "t", Offset: int64(i)}, time.Now(), "user_id", rec)
		var de *schemas.DecodeError
		switch {
		case errors.As(err, &de):
			if rec.calls != 0 {
				t.Fatalf("%s: a record that cannot be decoded asked for its key", v)
			}
		case rec.calls != 1:
			t.Fatalf("%s: %v, and the key asked for %d times", v, err, rec.calls)
		case rec.keys[0] != string(k.key([]byte(v))):
			t.Fatalf("%s: key %q read while decoding, %q by the extractor", v, rec.keys[0], k.key([]byte(v)))
		case rec.resolve && (err != nil || bld.Len() != before+1):
			t.Fatalf("%s: resolved, but %v and %d rows added", v, err, bld.Len()-before)
		case !rec.resolve && (!errors.Is(err, schemas.ErrUnresolved) || bld.Len() != before):
			t.Fatalf("%s: unresolved, but %v and %d rows added", v, err, bld.Len()-before)
		default:
			decoded++
		}
	}
	if decoded < 2000 {
		t.Fatalf("only %d of %d records decoded", decoded, len(values))
	}
	// A key field that is not one of the message's strings is declined
	// before decoding.
	rec := &keyRecorder{resolve: true}
	if err := bld.AppendResolved([]byte(values[0]), schemas.Meta{Topic: "t"}, time.Now(), "seq", rec); !errors.Is(err, schemas.ErrUnresolved) || rec.calls != 0 {
		t.Fatalf("key field seq: %v after %d calls, want ErrUnresolved before any", err, rec.calls)
	}
}
