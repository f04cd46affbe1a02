package pipeline

import (
	"slices"
	"testing"

	"gopkg.in/yaml.v3"
)

func TestRouteFilter(t *testing.T) {
	orders := newRouteFilter(WhereConfig{Field: "kind", In: []string{"order", "refund", "7"}}, "", nil)
	other := newRouteFilter(WhereConfig{Default: true}, "kind", []string{"order", "refund", "7"})
	nested := newRouteFilter(WhereConfig{Field: "meta.kind", In: []string{"order"}}, "", nil)
	for _, tc := range []struct {
		value                 string
		orders, other, nested bool
	}{
		{`{"kind":"order","id":1}`, true, false, false},
		{`{"kind":"refund"}`, true, false, false},
		{`{"kind":"view"}`, false, true, false},
		{`{"kind":7}`, true, false, false},
		{`{"kind":7.0}`, true, false, false},
		{`{"kind":"7"}`, true, false, false},
		{`{"kind":8}`, false, true, false},
		{`{"kind":true}`, false, true, false},            // not a string or number: default
		{`{"kind":null}`, false, true, false},            // likewise
		{`{"kind":["order"]}`, false, true, false},       // likewise
		{`{"id":1}`, false, true, false},                 // missing: default
		{`not json`, false, true, false},                 // the default route's decoder dead-letters it
		{`{"meta":{"kind":"order"}}`, false, true, true}, // a dotted field reads nested objects
		// A repeated member counts by its last value, as the decoder
		// stores it.
		{`{"kind":"view","kind":"order"}`, true, false, false},
		{`{"kind":"order","kind":"view"}`, false, true, false},
		{`{"meta":{"kind":"view","kind":"order"},"meta":{"kind":"view"}}`, false, true, false},
		{`{"meta":{"kind":"view"},"meta":{"kind":"order"}}`, false, true, true},
	} {
		if got := orders.takes([]byte(tc.value)); got != tc.orders {
			t.Errorf("field route takes %s: %v, want %v", tc.value, got, tc.orders)
		}
		if got := other.takes([]byte(tc.value)); got != tc.other {
			t.Errorf("default route takes %s: %v, want %v", tc.value, got, tc.other)
		}
		if got := nested.takes([]byte(tc.value)); got != tc.nested {
			t.Errorf("nested field route takes %s: %v, want %v", tc.value, got, tc.nested)
		}
	}
}

// BenchmarkRouteFilter measures what routing by field adds per record and
// route (a 333-byte clickstream-like value).
func BenchmarkRouteFilter(b *testing.B) {
	f := newRouteFilter(WhereConfig{Field: "event_type", In: []string{"purchase", "add_to_cart"}}, "", nil)
	v := []byte(`{"event_id":"3f1c9a52-6a7e-4c1e-9a53-0d3c8f2b7e11","session_id":"s-1842","user_id":"u-99120","event_type":"page_view","url":"https://shop.example.com/products/8812?ref=home","referrer":"https://www.google.com/","user_agent":"Mozilla/5.0 (X11; Linux x86_64)","ts":1732860000000,"seq":17}`)
	b.SetBytes(int64(len(v)))
	for b.Loop() {
		f.takes(v)
	}
}

// TestRouteValuesNormalized: values compared as numbers are the same value
// for the overlap check as for the filter: -0 is 0, 1.0 is 1.
func TestRouteValuesNormalized(t *testing.T) {
	for _, pair := range [][2]string{{"0", "-0"}, {"1", "1.0"}, {"1e3", "1000"}} {
		if a, b := normalizeValue(pair[0]), normalizeValue(pair[1]); a != b {
			t.Errorf("%s normalizes to %s, %s to %s: routes taking both would overlap unchecked", pair[0], a, pair[1], b)
		}
	}
	f := newRouteFilter(WhereConfig{Field: "k", In: []string{"-0"}}, "", nil)
	if !f.takes([]byte(`{"k":0}`)) {
		t.Error("a route taking -0 does not take 0")
	}
}

// TestWhereYAMLNumbersAsJSON: an in value YAML reads as a number in a form
// JSON does not write (0x1F, 0o17, 0b101, 1_000) takes the JSON number it
// denotes. It kept its YAML text, which matched no JSON number: the default
// route took those records.
func TestWhereYAMLNumbersAsJSON(t *testing.T) {
	var w WhereConfig
	// A leading zero is decimal, as YAML 1.2 (and floe before) reads it,
	// not the YAML 1.1 octal yaml.v3 reads (010 was 8).
	if err := yaml.Unmarshal([]byte(`{field: k, in: [0x1F, 0o17, 0b101, 1_000, -0x10, 1_000.5, "0x1F", 010, -007, 08]}`), &w); err != nil {
		t.Fatal(err)
	}
	if want := []string{"31", "15", "5", "1000", "-16", "1000.5", "0x1F", "10", "-7", "8"}; !slices.Equal(w.In, want) {
		t.Fatalf("in %q, want %q", w.In, want)
	}
	f := newRouteFilter(w, "", nil)
	for _, v := range []string{`{"k":31}`, `{"k":15}`, `{"k":5}`, `{"k":1000}`, `{"k":-16}`, `{"k":1000.5}`, `{"k":"0x1F"}`, `{"k":10}`, `{"k":-7}`} {
		if !f.takes([]byte(v)) {
			t.Errorf("%s not taken by where %q", v, w.In)
		}
	}
}

// TestRouteFilterTakesItsOwnNumber: a route in [3e-05] takes a record whose
// field is 3e-05: the record's number is read as strconv reads the route's
// (fastjson's Float64 was one unit in the last place off, and the default
// route took it).
func TestRouteFilterTakesItsOwnNumber(t *testing.T) {
	for _, lit := range []string{"3e-05", "5e-06", "1.1e-05", "8.41e21"} {
		f := newRouteFilter(WhereConfig{Field: "k", In: []string{lit}}, "", nil)
		def := newRouteFilter(WhereConfig{Default: true}, "k", []string{lit})
		v := []byte(`{"k":` + lit + `}`)
		if !f.takes(v) || def.takes(v) {
			t.Errorf("%s: the route in [%s] takes it: %v, the default route: %v", v, lit, f.takes(v), def.takes(v))
		}
	}
}

// TestRoutingFingerprintKeepsValuesAsWritten: in ["1.0"] and in ["1"]
// take different records (a string field matches by its text), so their
// routings differ; they were recorded alike ("1"), and the change went
// unseen. A table that recorded the old, normalized form of the
// configuration's routing is taken to be on it.
func TestRoutingFingerprintKeepsValuesAsWritten(t *testing.T) {
	config := func(v string) Config {
		return Config{Routes: []RouteConfig{
			{Topic: "events", Where: &WhereConfig{Field: "kind", In: []string{v}}, Table: TableConfig{Name: "s.a"}},
			{Topic: "events", Where: &WhereConfig{Default: true}, Table: TableConfig{Name: "s.b"}},
		}}
	}
	written, plain := config("1.0"), config("1")
	if written.routingOf(0) == plain.routingOf(0) {
		t.Fatalf("in [\"1.0\"] and in [\"1\"] both record %s", plain.routingOf(0))
	}
	f := newRouteFilter(*written.Routes[0].Where, "", nil)
	if f.takes([]byte(`{"kind":"1"}`)) {
		t.Fatal(`in ["1.0"] takes {"kind":"1"}: the routings would be the same`)
	}
	job := Config{routing: written.routingOf(0), legacyRouting: written.legacyRoutingOf(0)}
	if got := job.sameRouting(plain.legacyRoutingOf(0)); got != job.routing {
		t.Fatalf("a table recording the old form %s: taken as %s, want the configuration's %s", plain.legacyRoutingOf(0), got, job.routing)
	}
	if got := job.sameRouting(plain.routingOf(0)); got == job.routing {
		t.Fatal("a table on another routing taken as this one's")
	}
}

// TestRoutingRewrittenNumbersAreARoutingChange: floe used to match a string
// field by an unquoted number's YAML text (in: [01, 1.50] took "01" and
// "1.50") and now by its decimal ("1", "1.5"), while the fingerprint it
// recorded was the same normalized one: a table recorded by the older floe
// was taken to be on the configuration's routing, and records went to
// another table unseen. Such a configuration now sees a routing change; one
// whose numbers are written in decimal still matches the older record.
func TestRoutingRewrittenNumbersAreARoutingChange(t *testing.T) {
	config := func(in string) Config {
		var routes []RouteConfig
		src := "- {topic: events, where: {field: code, in: " + in + "}, table: {name: s.a}}\n" +
			"- {topic: events, where: {default: true}, table: {name: s.b}}\n"
		if err := yaml.Unmarshal([]byte(src), &routes); err != nil {
			t.Fatal(err)
		}
		c := Config{Routes: routes}
		return Config{routing: c.routingOf(0), legacyRouting: c.legacyRoutingOf(0)}
	}
	// What the older floe recorded for either: the values normalized.
	recorded := Config{Routes: []RouteConfig{
		{Topic: "events", Where: &WhereConfig{Field: "code", In: []string{"1", "1.5"}}, Table: TableConfig{Name: "s.a"}},
		{Topic: "events", Where: &WhereConfig{Default: true}, Table: TableConfig{Name: "s.b"}},
	}}.legacyRoutingOf(0)
	if job := config("[01, 1.50]"); job.sameRouting(recorded) == job.routing {
		t.Error("in: [01, 1.50], which took the strings \"01\" and \"1.50\" before, is taken to be on the table's recorded routing")
	}
	if job := config("[1, 1.5]"); job.sameRouting(recorded) != job.routing {
		t.Error("in: [1, 1.5] is not taken to be on the routing the table recorded for it")
	}
}
