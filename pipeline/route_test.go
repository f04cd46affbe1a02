package pipeline_test

import (
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floe-dev/floe/pipeline"
)

const routesHead = `
kafka:
  brokers: [127.0.0.1:9092]
  group: floe
table:
  catalog:
    type: sql
    uri: file:/tmp/catalog.db
    warehouse: file:///tmp/warehouse
`

const validRoutes = routesHead + `routes:
  - topic: clicks
    table: {name: analytics.clicks}
  - topic: payments
    table: {name: finance.payments, target_file_bytes: 64MiB}
    schema: ../schemas/examples/payments.avsc
    group: payments-ingest
  - topic: events
    where: {field: kind, in: [order, refund]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    dlq_topic: events.bad
    table: {name: shop.other_events, catalog: {type: rest, uri: "http://catalog:8181"}}
`

func loadRoutes(t *testing.T, body string) (pipeline.Config, error) {
	t.Helper()
	cfg, err := pipeline.LoadConfig(writeConfig(t, body))
	if err != nil {
		return cfg, err
	}
	return cfg, cfg.Finish()
}

func TestRouteJobs(t *testing.T) {
	cfg, err := loadRoutes(t, validRoutes)
	if err != nil {
		t.Fatal(err)
	}
	jobs := cfg.Jobs()
	if len(jobs) != 4 {
		t.Fatalf("%d jobs, want 4", len(jobs))
	}
	type want struct {
		topic, group, dlq, table, catalog, schema string
		target                                    pipeline.ByteSize
		fieldRouted                               bool
	}
	wants := []want{
		{"clicks", "floe.analytics.clicks", "clicks.dlq", "analytics.clicks", "sql", "clickstream", 256 << 20, false},
		{"payments", "payments-ingest", "payments.dlq", "finance.payments", "sql", "../schemas/examples/payments.avsc", 64 << 20, false},
		{"events", "floe.shop.orders", "events.dlq", "shop.orders", "sql", "clickstream", 256 << 20, true},
		{"events", "floe.shop.other_events", "events.bad", "shop.other_events", "rest", "clickstream", 256 << 20, true},
	}
	for i, w := range wants {
		j := jobs[i]
		got := want{j.Kafka.Topic, j.Kafka.Group, j.Kafka.DLQTopic, j.Table.Name, j.Table.Catalog["type"], j.Schema,
			j.Table.TargetFileBytes, j.FieldRouted()}
		if got != w {
			t.Errorf("job %d: %+v, want %+v", i, got, w)
		}
		if j.Routed() || len(j.Kafka.Brokers) != 1 || j.Commit.MaxRecords != 500000 {
			t.Errorf("job %d is not a complete single-table config: %+v", i, j)
		}
	}
	single, err := loadRoutes(t, validConfig)
	if err != nil {
		t.Fatal(err)
	}
	if js := single.Jobs(); len(js) != 1 || js[0].Table.Name != "analytics.clicks" || js[0].FieldRouted() {
		t.Fatalf("a config without routes is its own single job: %+v", js)
	}
}

func TestRouteConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       []string
	}{
		{"mixed with kafka.topic and table.name",
			strings.Replace(validRoutes, "  group: floe\n", "  group: floe\n  topic: clicks\n", 1) +
				"", []string{"kafka.topic: not allowed with routes"}},
		{"mixed with table.name", strings.Replace(validRoutes, "table:\n  catalog:", "table:\n  name: a.b\n  catalog:", 1),
			[]string{"table.name: not allowed with routes"}},
		{"no default route", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [order]}
    table: {name: shop.orders}
  - topic: events
    where: {field: kind, in: [refund]}
    table: {name: shop.refunds}
`, []string{"routes of topic events: no route has where: {default: true}; records matching none of the field routes would be dropped"}},
		{"two default routes", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [order]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.a}
  - topic: events
    where: {default: true}
    table: {name: shop.b}
`, []string{"routes of topic events: 2 default routes (routes[1] (table shop.a), routes[2] (table shop.b))"}},
		{"overlapping in", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [order, "7"]}
    table: {name: shop.orders}
  - topic: events
    where: {field: kind, in: [refund, order, "7.0"]}
    table: {name: shop.refunds}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`routes[1] (table shop.refunds): where.in: "order" is also taken by routes[0] (table shop.orders)`,
			`routes[1] (table shop.refunds): where.in: "7.0" is also taken by routes[0] (table shop.orders)`}},
		{"-0 and 0", routesHead + `routes:
  - topic: events
    where: {field: kind, in: ["0"]}
    table: {name: shop.orders}
  - topic: events
    where: {field: kind, in: ["-0"]}
    table: {name: shop.refunds}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`routes[1] (table shop.refunds): where.in: "-0" is also taken by routes[0] (table shop.orders)`}},
		// A YAML integer in another base kept its text, so [0x1F] and
		// [31] did not overlap (and 0x1F matched no JSON number).
		{"overlapping in written in another base", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [31, 1_000]}
    table: {name: shop.orders}
  - topic: events
    where: {field: kind, in: [0x1F, 0b101, 1000.0]}
    table: {name: shop.refunds}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`routes[1] (table shop.refunds): where.in: "31" is also taken by routes[0] (table shop.orders)`,
			`routes[1] (table shop.refunds): where.in: "1000" is also taken by routes[0] (table shop.orders)`}},
		{"in value infinite", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [.inf]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`where.in: .inf: no JSON number is infinite or NaN`}},
		{"in value not a string or number", routesHead + `routes:
  - topic: events
    where: {field: vip, in: [true]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`where.in: true is a bool, not a string or number: quote it to match the string`}},
		{"unknown where key", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [order], value: x}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`field value not found in where (field, in, default)`}},
		{"bad field path", routesHead + `routes:
  - topic: events
    where: {field: "meta.", in: [order]}
    table: {name: shop.orders}
  - topic: events
    where: {field: " kind", in: [refund]}
    table: {name: shop.refunds}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{`routes[0] (table shop.orders): where.field: "meta.": each dotted part must be a field name, not empty or padded with spaces`,
			`routes[1] (table shop.refunds): where.field: " kind": each dotted part must be a field name, not empty or padded with spaces`}},
		{"route without where beside field routes", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [order]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
  - topic: events
    table: {name: shop.all}
`, []string{"routes[2] (table shop.all): where: required, since other routes of topic events route by field"}},
		{"duplicate table", routesHead + `routes:
  - topic: clicks
    table: {name: analytics.clicks}
  - topic: clicks2
    table: {name: analytics.clicks}
`, []string{"routes[1] (table analytics.clicks): table.name: analytics.clicks is also the table of routes[0] (table analytics.clicks)"}},
		{"duplicate group", routesHead + `routes:
  - topic: clicks
    group: g
    table: {name: analytics.clicks}
  - topic: views
    group: g
    table: {name: analytics.views}
`, []string{"routes[1] (table analytics.views): group: g is also the group of routes[0] (table analytics.clicks)"}},
		{"missing topic and table", routesHead + `routes:
  - table: {name: analytics.clicks}
  - topic: views
`, []string{"routes[0] (table analytics.clicks): topic: required", "routes[1]: table.name: required"}},
		{"bad where", routesHead + `routes:
  - topic: events
    where: {field: kind}
    table: {name: shop.orders}
  - topic: events
    where: {default: true, field: kind}
    table: {name: shop.other}
`, []string{"routes[0] (table shop.orders): where.in: required: the values of kind this route takes",
			"routes[1] (table shop.other): where: default: true takes what the other routes do not; it has no field or in"}},
		{"two routing fields", routesHead + `routes:
  - topic: events
    where: {field: kind, in: [order]}
    table: {name: shop.orders}
  - topic: events
    where: {field: type, in: [refund]}
    table: {name: shop.refunds}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{"routes of topic events: route by one field, not 2 (kind, type)"}},
		{"where on avro", routesHead + `routes:
  - topic: events
    format: avro
    schema: ../schemas/examples/payments.avsc
    where: {field: kind, in: [order]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.other}
`, []string{"routes[0] (table shop.orders): where: routing by field reads JSON values; format avro is not supported"}},
		{"shared enrichment cache file", routesHead + `enrich:
  url: http://127.0.0.1:9/lookup
  key: user_id
  fields: [{name: segment, type: string}]
  cache_file: /tmp/floe-enrich.cache
routes:
  - topic: clicks
    table: {name: analytics.clicks}
  - topic: views
    table: {name: analytics.views}
`, []string{"routes[1] (table analytics.views): enrich.cache_file: /tmp/floe-enrich.cache is also the cache file of routes[0] (table analytics.clicks)"}},
		{"one enrichment cache file spelled twice", routesHead + `routes:
  - topic: clicks
    table: {name: analytics.clicks}
    enrich:
      url: http://127.0.0.1:9/lookup
      key: user_id
      fields: [{name: segment, type: string}]
      cache_file: /tmp/floe/enrich.cache
  - topic: views
    table: {name: analytics.views}
    enrich:
      url: http://127.0.0.1:9/lookup
      key: session_id
      fields: [{name: segment, type: string}]
      cache_file: /tmp/floe/../floe/./enrich.cache
`, []string{"routes[1] (table analytics.views): enrich.cache_file: /tmp/floe/../floe/./enrich.cache is also the cache file of routes[0] (table analytics.clicks)"}},
		{"route-specific and shared problems", strings.Replace(routesHead, "  brokers: [127.0.0.1:9092]\n", "", 1) + `routes:
  - topic: clicks
    table: {name: analytics.clicks}
  - topic: views
    format: xml
    table: {name: analytics.views}
`, []string{"kafka.brokers: at least one broker address is required", `routes[1] (table analytics.views): format: "xml": want json, avro or protobuf`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := loadRoutes(t, tc.body)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not contain %q:\n%v", w, err)
				}
			}
			if n := strings.Count(err.Error(), "kafka.brokers:"); n > 1 {
				t.Errorf("a top-level problem is reported %d times, once per route:\n%v", n, err)
			}
		})
	}
}

// TestRouteCacheFileSharedThroughALink: two routes whose cache_file is one
// file, named once through a link to its directory, are refused as when it
// is spelled twice. Paths were compared made absolute and clean only, so
// the routes were taken and the last to stop overwrote the other's cache.
func TestRouteCacheFileSharedThroughALink(t *testing.T) {
	dir := t.TempDir()
	real, link := filepath.Join(dir, "real"), filepath.Join(dir, "link")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	route := func(topic, table, file string) string {
		return `
  - topic: ` + topic + `
    table: {name: ` + table + `}
    enrich:
      url: http://127.0.0.1:9/lookup
      key: user_id
      fields: [{name: segment, type: string}]
      cache_file: ` + file
	}
	body := routesHead + "routes:" + route("clicks", "analytics.clicks", filepath.Join(real, "enrich.cache")) +
		route("views", "analytics.views", filepath.Join(link, "enrich.cache")) + "\n"
	_, err := loadRoutes(t, body)
	want := "routes[1] (table analytics.views): enrich.cache_file: " + filepath.Join(link, "enrich.cache") +
		" is also the cache file of routes[0] (table analytics.clicks)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("one cache file named through a link to its directory: %v, want %q", err, want)
	}
}

// TestRouteMetrics registers two routes' members in one registry: their
// series are told apart by the table label, and /readyz waits for both.
func TestRouteMetrics(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	clicks, orders := &pipeline.Stats{}, &pipeline.Stats{}
	clicks.Rows.Store(7)
	orders.Filtered.Store(3)
	clicks.Assigned.Store(2)
	serve, err := pipeline.ListenRouteMetrics(t.Context(), addr, prometheus.NewRegistry(),
		map[string]*pipeline.Stats{"analytics.clicks": clicks, "shop.orders": orders})
	if err != nil {
		t.Fatal(err)
	}
	go serve()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get("/metrics")
	for _, want := range []string{`floe_rows_committed_total{table="analytics.clicks"} 7`, `floe_rows_committed_total{table="shop.orders"} 0`,
		`floe_records_filtered_total{table="shop.orders"} 3`, `floe_assigned_partitions{table="analytics.clicks"} 2`} {
		if code != http.StatusOK || !strings.Contains(body, want+"\n") {
			t.Errorf("/metrics (%d) lacks %s", code, want)
		}
	}
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "shop.orders: no partitions assigned") ||
		strings.Contains(body, "analytics.clicks") {
		t.Errorf("/readyz with one route unassigned: %d %q", code, body)
	}
	orders.Assigned.Store(1)
	if code, body := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz with every route assigned: %d %q", code, body)
	}
}
