package clickgen_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// verdict is the test's own, independent reading of a message against the
// clickstream schema in DESIGN.md. It deliberately shares no code with the
// generator.
type verdict struct {
	kind    string // "" when valid, else the MalformedKind name it matches
	session string
	seq     int64
	event   map[string]any
}

func judge(t *testing.T, m clickgen.Message) verdict {
	t.Helper()
	if !json.Valid(m.Value) {
		return verdict{kind: clickgen.InvalidJSON.String()}
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(m.Value))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("valid JSON does not decode: %v: %s", err, m.Value)
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return verdict{kind: clickgen.NotAnObject.String()}
	}
	sess, ok := obj["session_id"].(string)
	if !ok {
		return verdict{kind: clickgen.MissingSession.String()}
	}
	switch ts := obj["ts"].(type) {
	case nil:
		return verdict{kind: clickgen.MissingTS.String()}
	case json.Number:
		if _, err := ts.Int64(); err != nil {
			t.Fatalf("ts %q is not an integer: %s", ts, m.Value)
		}
	case string:
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Fatalf("ts %q is not RFC 3339: %s", ts, m.Value)
		}
	default:
		return verdict{kind: clickgen.WrongTSType.String()}
	}
	num, ok := obj["seq"].(json.Number)
	if !ok {
		return verdict{kind: clickgen.SeqString.String()}
	}
	seq, err := num.Int64()
	if err != nil {
		t.Fatalf("seq %q is not an integer: %s", num, m.Value)
	}
	return verdict{session: sess, seq: seq, event: obj}
}

func generate(cfg clickgen.Config, n int) []clickgen.Message {
	g := clickgen.New(cfg)
	out := make([]clickgen.Message, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

func TestDeterministic(t *testing.T) {
	cfg := clickgen.Config{Sessions: 500, MalformedRate: 0.1, Seed: 42}
	a, b := generate(cfg, 20000), generate(cfg, 20000)
	for i := range a {
		if !bytes.Equal(a[i].Key, b[i].Key) || !bytes.Equal(a[i].Value, b[i].Value) {
			t.Fatalf("message %d differs for the same seed:\n%s\n%s", i, a[i].Value, b[i].Value)
		}
	}
	cfg.Seed = 43
	c := generate(cfg, 100)
	same := 0
	for i := range c {
		if bytes.Equal(a[i].Value, c[i].Value) {
			same++
		}
	}
	if same > 0 {
		t.Errorf("%d of 100 messages equal across seeds 42 and 43", same)
	}
}

func TestValidMessages(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	msgs := generate(clickgen.Config{Seed: 1}, 20000)
	types := map[string]int{}
	var size, rfc int
	for _, m := range msgs {
		v := judge(t, m)
		if v.kind != "" {
			t.Fatalf("MalformedRate 0 produced a %s message: %s", v.kind, m.Value)
		}
		if v.session != string(m.Key) {
			t.Fatalf("key %q != session_id %q", m.Key, v.session)
		}
		for _, f := range []string{"event_id", "user_id", "event_type", "url", "referrer", "user_agent"} {
			if _, ok := v.event[f].(string); !ok {
				t.Fatalf("field %s missing or not a string: %s", f, m.Value)
			}
		}
		if id := v.event["event_id"].(string); !uuid.MatchString(id) {
			t.Fatalf("event_id %q is not a v4 UUID", id)
		}
		if u := v.event["url"].(string); !strings.HasPrefix(u, "https://") {
			t.Fatalf("url %q", u)
		}
		if _, ok := v.event["ts"].(string); ok {
			rfc++
		}
		types[v.event["event_type"].(string)]++
		size += len(m.Value)
	}
	if avg := float64(size) / float64(len(msgs)); avg < 320 || avg > 346 {
		t.Errorf("average value size %.1f bytes, want about 333", avg)
	}
	if share := float64(rfc) / float64(len(msgs)); share < 0.02 || share > 0.10 {
		t.Errorf("RFC 3339 ts share %.3f, want a few percent", share)
	}
	for _, et := range []string{"page_view", "click", "search", "add_to_cart", "checkout", "purchase"} {
		if types[et] == 0 {
			t.Errorf("no %s events in %d messages", et, len(msgs))
		}
	}
	if types["page_view"] < types["click"] || types["click"] < types["checkout"] {
		t.Errorf("implausible event mix: %v", types)
	}
}

func TestSeqPerSession(t *testing.T) {
	// Malformed messages are mixed in to prove they do not consume a seq.
	msgs := generate(clickgen.Config{Sessions: 300, MalformedRate: 0.2, Seed: 7}, 30000)
	last := map[string]int64{}
	for i, m := range msgs {
		v := judge(t, m)
		if v.kind != "" {
			continue
		}
		if want := last[v.session] + 1; v.seq != want {
			t.Fatalf("message %d: session %s seq %d, want %d", i, v.session, v.seq, want)
		}
		last[v.session] = v.seq
	}
	if len(last) != 300 {
		t.Errorf("%d sessions seen, want 300", len(last))
	}
}

func TestMalformedShare(t *testing.T) {
	for _, rate := range []float64{0, 0.01, 0.1, 0.5, 1} {
		const n = 20000
		g := clickgen.New(clickgen.Config{MalformedRate: rate, Seed: 3})
		seen := map[string]int64{}
		var bad int64
		for range n {
			m := g.Next()
			if len(m.Key) == 0 {
				t.Fatalf("rate %v: message without key: %s", rate, m.Value)
			}
			if v := judge(t, m); v.kind != "" {
				seen[v.kind]++
				bad++
			}
		}
		total, malformed := g.Counts()
		if total != n || malformed != bad {
			t.Errorf("rate %v: Counts() = %d, %d; the messages show %d, %d", rate, total, malformed, n, bad)
		}
		// Five standard deviations of a binomial share: never flaky,
		// still catches a wrong rate.
		tol := 5*math.Sqrt(rate*(1-rate)/n) + 1e-9
		if share := float64(bad) / n; math.Abs(share-rate) > tol {
			t.Errorf("rate %v: malformed share %.4f", rate, share)
		}
		byKind := g.MalformedCounts()
		for k := range clickgen.NumMalformedKinds {
			kind := clickgen.MalformedKind(k)
			if seen[kind.String()] != byKind[k] {
				t.Errorf("rate %v: %s: generator says %d, messages show %d", rate, kind, byKind[k], seen[kind.String()])
			}
			if rate >= 0.1 && byKind[k] == 0 {
				t.Errorf("rate %v: no %s messages", rate, kind)
			}
		}
	}
}

func TestNextOwnership(t *testing.T) {
	g := clickgen.New(clickgen.Config{Seed: 9})
	a := g.Next()
	keep := bytes.Clone(a.Value)
	b := g.Next()
	for i := range b.Value {
		b.Value[i] = 'x'
	}
	b.Key = append(b.Key, "-longer"...)
	_ = g.Next()
	if !bytes.Equal(a.Value, keep) {
		t.Fatal("a later Next or a caller's write changed an earlier message")
	}
	if bytes.Contains(b.Value, []byte("-longer")) {
		t.Fatal("appending to Key overwrote Value")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  clickgen.Config
		want string
	}{
		{clickgen.Config{}, ""},
		{clickgen.Config{Sessions: 1, MalformedRate: 1}, ""},
		{clickgen.Config{Sessions: -1}, "Sessions"},
		{clickgen.Config{MalformedRate: -0.1}, "MalformedRate"},
		{clickgen.Config{MalformedRate: 1.5}, "MalformedRate"},
		{clickgen.Config{MalformedRate: math.NaN()}, "MalformedRate"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one naming %s", tc.cfg, err, tc.want)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("New accepted an invalid config")
		}
	}()
	clickgen.New(clickgen.Config{MalformedRate: 2})
}

func BenchmarkNext(b *testing.B) {
	for _, rate := range []float64{0, 0.01} {
		b.Run(fmt.Sprintf("malformed=%g", rate), func(b *testing.B) {
			g := clickgen.New(clickgen.Config{MalformedRate: rate})
			var bytes, n int64
			b.ReportAllocs()
			for b.Loop() {
				bytes += int64(len(g.Next().Value))
				n++
			}
			b.SetBytes(bytes / n)
		})
	}
}
