package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// routingPayments is the payments schema of the routing test: its own
// columns (no session_id), keyed by account so that seq orders each
// account's payments.
const routingPayments = `{"type": "record", "name": "Payment",
 "floe.key": "account_id", "floe.event-time": "created_at", "floe.partition": ["day(created_at)"],
 "fields": [
  {"name": "payment_id", "type": "string"},
  {"name": "account_id", "type": "string"},
  {"name": "seq", "type": "long"},
  {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 18, "scale": 2}},
  {"name": "currency", "type": "string"},
  {"name": "created_at", "type": {"type": "long", "logicalType": "timestamp-micros"}}]}`

// orderTypes are the event types the shop.orders route takes from topic
// events; shop.other_events takes the rest.
var orderTypes = map[string]bool{"add_to_cart": true, "checkout": true, "purchase": true}

// routedTable is one route of the routing test as the checker sees it.
type routedTable struct {
	ident table.Identifier
	group string
	topic string
	key   string // the ordering column: seq increases along it
}

var routedTables = []routedTable{
	{table.Identifier{"analytics", "clicks"}, "floe-rt.analytics.clicks", "clicks", "session_id"},
	{table.Identifier{"finance", "payments"}, "floe-rt.finance.payments", "payments", "account_id"},
	{table.Identifier{"shop", "orders"}, "floe-rt.shop.orders", "events", "session_id"},
	{table.Identifier{"shop", "other_events"}, "floe-rt.shop.other_events", "events", "session_id"},
}

// writeRoutingConfig writes the routes of the test: two topics into two
// tables with different schemas, and topic events routed by event_type into
// two tables. metrics is the metrics listen address ("" for none).
func writeRoutingConfig(t *testing.T, dir, name, broker, metrics string) string {
	t.Helper()
	var cat strings.Builder
	props := sqliteCatalog(dir)
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := json.Marshal(props[k])
		fmt.Fprintf(&cat, "    %s: %s\n", k, v)
	}
	schema := filepath.Join(dir, "payments.avsc")
	if err := os.WriteFile(schema, []byte(routingPayments), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  group: floe-rt
  session_timeout: 6s
  heartbeat_interval: 500ms
  rebalance_timeout: 15s
table:
  catalog:
%scommit:
  interval: 500ms
  max_records: 5000
  grace: 5s
metrics:
  listen: %q
routes:
  - topic: clicks
    table: {name: analytics.clicks}
  - topic: payments
    table: {name: finance.payments}
    schema: %s
  - topic: events
    where: {field: event_type, in: [add_to_cart, checkout, purchase]}
    table: {name: shop.orders}
  - topic: events
    where: {default: true}
    table: {name: shop.other_events}
`, broker, cat.String(), metrics, schema)
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// payments returns n payment messages keyed by account, numbered from first;
// seq counts each account's payments (seqs carries the counts across calls).
func payments(first, n int, seqs map[string]int64) []clickgen.Message {
	out := make([]clickgen.Message, n)
	for i := range n {
		id := first + i
		acct := "a-" + strconv.Itoa(id*7919%97)
		seqs[acct]++
		v := fmt.Sprintf(`{"payment_id":"p-%d","account_id":"%s","seq":%d,"amount":"%d.%02d","currency":"EUR","created_at":"2026-11-29T10:%02d:%02dZ"}`,
			id, acct, seqs[acct], id%5000, id%100, id/60%60, id%60)
		out[i] = clickgen.Message{Key: []byte(acct), Value: []byte(v)}
	}
	return out
}

// TestRoutingExactlyOnce runs a job with four routes — clicks and payments
// (two topics, two schemas) and topic events routed by event_type into two
// tables — as two floe processes, SIGKILLs one mid-stream and starts another,
// stops them, then lets `floe run --until-caught-up` drain what arrived
// since, and checks every table independently: each produced offset is a row of
// exactly one table of its topic or a dead letter, the field routes hold
// only their event types, per-session (per-account) seq order holds in each
// table, and each table's snapshots carry only their own group's offset map.
// `floe verify` must agree, and scraping one process's metrics must show
// every route under its table label.
func TestRoutingExactlyOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("routing end-to-end test skipped in -short mode")
	}
	started := time.Now()
	cl, err := embedded.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	ctx := t.Context()
	for topic, n := range map[string]int{"clicks": 4, "payments": 3, "events": 6, "clicks.dlq": 1, "payments.dlq": 1, "events.dlq": 2} {
		if err := cl.CreateTopic(ctx, topic, n); err != nil {
			t.Fatal(err)
		}
	}
	e := &env{t: t, dir: t.TempDir(), cluster: cl, topic: "clicks"}
	e.config = writeRoutingConfig(t, e.dir, "floe.yaml", cl.Addrs()[0], "")
	metricsAddr := freeAddr(t)
	metricsConfig := writeRoutingConfig(t, e.dir, "floe-metrics.yaml", cl.Addrs()[0], metricsAddr)

	clicks := clickgen.New(clickgen.Config{Sessions: 300, MalformedRate: 0.01, Seed: 7})
	events := clickgen.New(clickgen.Config{Sessions: 500, MalformedRate: 0.01, Seed: 11})
	seqs := map[string]int64{}
	if _, err := cl.ProduceRate(ctx, "clicks", clicks, 8000, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ProduceRate(ctx, "events", events, 15000, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Produce(ctx, "payments", payments(0, 3000, seqs)); err != nil {
		t.Fatal(err)
	}
	// The live part: all three topics keep receiving while members come
	// and go.
	produced := make(chan error, 1)
	go func() {
		produced <- func() error {
			for i := range 10 {
				if _, err := cl.ProduceRate(ctx, "clicks", clicks, 500, 2000); err != nil {
					return err
				}
				if _, err := cl.ProduceRate(ctx, "events", events, 1000, 4000); err != nil {
					return err
				}
				if _, err := cl.Produce(ctx, "payments", payments(3000+i*300, 300, seqs)); err != nil {
					return err
				}
			}
			return nil
		}()
	}()

	a := e.start("a", "run")
	e.config, metricsConfig = metricsConfig, e.config
	b := e.start("b", "run") // serves metrics
	e.config, metricsConfig = metricsConfig, e.config
	waitRoutes(t, e, 3000, 90*time.Second)
	a.signal(t, syscall.SIGKILL) // mid-stream: no flush, no leave, in every route
	c := e.start("c", "run")
	// Up and in the groups before anything else: a SIGTERM before its main
	// runs would kill it (and on a fast run, b alone may finish the topics).
	c.waitLog(t, "msg=assigned", 60*time.Second)

	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	ends := map[string]map[int32]int64{}
	for _, topic := range []string{"clicks", "payments", "events"} {
		if ends[topic], err = cl.EndOffsets(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	for _, rt := range routedTables {
		waitTableCommitted(t, e, rt, ends[rt.topic], 180*time.Second)
	}

	// Metrics of the four routes in one process, told apart by table.
	body := httpGet(t, "http://"+metricsAddr+"/metrics")
	for _, rt := range routedTables {
		name := strings.Join(rt.ident, ".")
		if !strings.Contains(body, `floe_commits_total{table="`+name+`"}`) {
			t.Errorf("metrics lack floe_commits_total of table %s", name)
		}
	}
	// Most events are not orders: a member of shop.orders that read a few
	// hundred filtered some (b's share depends on the rebalances).
	if read, v := metricValue(t, body, `floe_records_consumed_total{table="shop.orders"}`),
		metricValue(t, body, `floe_records_filtered_total{table="shop.orders"}`); read >= 200 && v <= 0 {
		t.Errorf("route shop.orders read %v records and filtered %v; it leaves most events to shop.other_events", read, v)
	}
	// Ready once every route holds partitions (not during a rebalance).
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ready := httpGet(t, "http://"+metricsAddr+"/readyz")
		if ready == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not ready within 30s: %q", ready)
		}
	}

	for _, p := range []*proc{b, c} {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range []*proc{b, c} {
		if err := p.wait(t, 30*time.Second); err != nil {
			t.Errorf("%s exited with %v after SIGTERM", p.name, err)
		}
	}

	// A scheduled run of every route drains what arrived since, then exits.
	if _, err := cl.ProduceRate(ctx, "clicks", clicks, 1000, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ProduceRate(ctx, "events", events, 2000, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Produce(ctx, "payments", payments(6000, 500, seqs)); err != nil {
		t.Fatal(err)
	}
	for _, topic := range []string{"clicks", "payments", "events"} {
		if ends[topic], err = cl.EndOffsets(ctx, topic); err != nil {
			t.Fatal(err)
		}
	}
	sched := e.start("scheduled", "run", "--until-caught-up")
	if err := sched.wait(t, 120*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	for _, rt := range routedTables {
		waitTableCommitted(t, e, rt, ends[rt.topic], time.Second)
	}

	// The independent check.
	_, clicksBad := clicks.Counts()
	_, eventsBad := events.Counts()
	got := map[string]int64{}
	byPart := map[string]map[int32]int64{}
	for topic, wantDead := range map[string]int64{"clicks": clicksBad, "payments": 0, "events": eventsBad} {
		var tables []routedTable
		for _, rt := range routedTables {
			if rt.topic == topic {
				tables = append(tables, rt)
			}
		}
		rows, dead := checkRoutes(t, e, topic, tables, ends[topic])
		if dead != wantDead {
			t.Errorf("topic %s: %d distinct dead letters, the generator produced %d malformed records", topic, dead, wantDead)
		}
		for name, ps := range rows {
			byPart[name] = ps
			for _, n := range ps {
				got[name] += n
			}
		}
	}
	if got["shop.orders"] == 0 || got["shop.other_events"] == 0 {
		t.Fatalf("field routing left a table empty: %v", got)
	}

	// floe verify agrees, and tells the tables apart.
	v := e.start("verify", "verify", "--json")
	if err := v.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe verify: %v\n%s", err, v.output())
	}
	out := v.output()
	var verdict routesVerdict
	if err := json.Unmarshal([]byte(jsonTail(out, "{\n  \"tables\"")), &verdict); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if len(verdict.Tables) != 2 || len(verdict.FieldRoutes) != 1 || len(verdict.FieldRoutes[0].Tables) != 2 {
		t.Fatalf("verify reported %d tables and %d field-routed topics, want 2 and 1", len(verdict.Tables), len(verdict.FieldRoutes))
	}
	for _, r := range verdict.Tables {
		if r.Rows != got[r.Table] || r.DuplicateIDs != 0 {
			t.Errorf("verify %s: %d rows, %d duplicates; the checker counted %d rows", r.Table, r.Rows, r.DuplicateIDs, got[r.Table])
		}
	}
	fr := verdict.FieldRoutes[0]
	for _, tr := range fr.Tables {
		if tr.Rows != got[tr.Table] || tr.DuplicateIDs != 0 {
			t.Errorf("verify %s: %d rows, %d duplicates; the checker counted %d rows", tr.Table, tr.Rows, tr.DuplicateIDs, got[tr.Table])
		}
	}
	if fr.DeadLetters != eventsBad {
		t.Errorf("verify of topic events: %d dead letters, want %d", fr.DeadLetters, eventsBad)
	}

	text := e.start("verify-text", "verify")
	if err := text.wait(t, 60*time.Second); err != nil || !strings.Contains(text.output(),
		"verify routes of topic events (by field: shop.orders, shop.other_events): OK") {
		t.Errorf("floe verify: %v\n%s", err, text.output())
	}
	// --table of a field route verifies it with its siblings, alone it
	// would miss the offsets they took.
	one := e.start("verify-one", "verify", "--table", "shop.other_events")
	if err := one.wait(t, 60*time.Second); err != nil || !strings.Contains(one.output(),
		"verify routes of topic events (by field: shop.orders, shop.other_events): OK") || strings.Contains(one.output(), "analytics.clicks") {
		t.Errorf("floe verify --table shop.other_events: %v\n%s", err, one.output())
	}

	// A replay of a field route re-reads the whole partition but only its
	// own records reach the MERGE (all present: skipped).
	rp := e.start("replay", "replay", "--table", "shop.orders", "--partition", "0", "--from", "0",
		"--to", strconv.FormatInt(ends["events"][0], 10), "--json")
	if err := rp.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe replay --table shop.orders: %v\n%s", err, rp.output())
	}
	var replayed struct {
		Read     int64 `json:"read"`
		Inserted int64 `json:"inserted"`
		Skipped  int64 `json:"skipped"`
	}
	out = rp.output()
	if err := json.Unmarshal([]byte(jsonTail(out, "{\"ranges\"")), &replayed); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, out)
	}
	if replayed.Read != ends["events"][0] || replayed.Inserted != 0 || replayed.Skipped != byPart["shop.orders"][0] {
		t.Errorf("replay of shop.orders partition 0: %+v; want %d read, 0 inserted, %d skipped (its rows)",
			replayed, ends["events"][0], byPart["shop.orders"][0])
	}

	// Commands that work on one table need --table with routes.
	m := e.start("maintain", "maintain", "--dry-run")
	if err := m.wait(t, 30*time.Second); err == nil || !strings.Contains(m.output(), "pick one with --table (analytics.clicks, finance.payments, shop.orders, shop.other_events)") {
		t.Errorf("floe maintain without --table: %v\n%s", err, m.output())
	}
	m = e.start("maintain-orders", "maintain", "--dry-run", "--table", "shop.orders")
	if err := m.wait(t, 60*time.Second); err != nil {
		t.Errorf("floe maintain --table shop.orders: %v\n%s", err, m.output())
	}
	var total int64
	for _, end := range ends {
		for _, o := range end {
			total += o
		}
	}
	t.Logf("produced %d records to 3 topics; rows %v; dead letters clicks %d, events %d; %s",
		total, got, clicksBad, eventsBad, time.Since(started).Round(time.Second))
}

// waitRoutes waits until every routed table has committed at least min
// offsets of its topic.
func waitRoutes(t *testing.T, e *env, min int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, rt := range routedTables {
		for {
			var sum int64
			for _, o := range tableWatermarks(t, e, rt) {
				sum += o
			}
			if sum >= min {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s committed fewer than %d offsets within %s", strings.Join(rt.ident, "."), min, timeout)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
}

// waitTableCommitted waits until the table's watermarks reach end.
func waitTableCommitted(t *testing.T, e *env, rt routedTable, end map[int32]int64, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		wm := tableWatermarks(t, e, rt)
		done := true
		for p, o := range end {
			if o > 0 && wm[p] < o {
				done = false
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not committed within %s: watermarks %v, end offsets %v", strings.Join(rt.ident, "."), timeout, wm, end)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// loadRouted loads a routed table with iceberg-go, not through floe.
func loadRouted(t *testing.T, e *env, rt routedTable) (*table.Table, error) {
	t.Helper()
	if e.cat == nil {
		if _, err := e.loadTable(t.Context()); e.cat == nil {
			return nil, err
		}
	}
	return e.cat.LoadTable(t.Context(), rt.ident)
}

// tableWatermarks reads the route's group's offset map for its topic from
// the table's newest snapshot carrying it; empty before the first commit.
func tableWatermarks(t *testing.T, e *env, rt routedTable) map[int32]int64 {
	t.Helper()
	tbl, err := loadRouted(t, e, rt)
	if err != nil {
		return map[int32]int64{}
	}
	meta := tbl.Metadata()
	for s := meta.CurrentSnapshot(); s != nil; {
		if raw, ok := s.Summary.Properties[lakehouse.OffsetsKeyPrefix+rt.group]; ok {
			return parseOffsets(t, raw, rt.topic)
		}
		if s.ParentSnapshotID == nil {
			break
		}
		s = meta.SnapshotByID(*s.ParentSnapshotID)
	}
	return map[int32]int64{}
}

// routedRow is what the checker keeps of a row.
type routedRow struct {
	offset int64
	seq    int64
	key    string
}

// checkRoutes asserts, for one topic and the tables its routes write, that
// every offset below end is a row of exactly one table or a dead letter,
// that each table's snapshots carry only their own group's offset map (of
// their own topic), that the field routes of events hold only their event
// types, and that seq increases along each key within each table and
// partition. It returns each table's row count per partition and the dead
// letters.
func checkRoutes(t *testing.T, e *env, topic string, tables []routedTable, end map[int32]int64) (rows map[string]map[int32]int64, dead int64) {
	t.Helper()
	ctx := t.Context()
	rows = map[string]map[int32]int64{}
	where := map[int32]map[int64]string{} // partition → offset → table
	for _, rt := range tables {
		name := strings.Join(rt.ident, ".")
		tbl, err := loadRouted(t, e, rt)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range tbl.Metadata().Snapshots() {
			for k, raw := range s.Summary.Properties {
				if !strings.HasPrefix(k, lakehouse.OffsetsKeyPrefix) {
					continue
				}
				if k != lakehouse.OffsetsKeyPrefix+rt.group {
					t.Fatalf("%s: snapshot %d carries %s, not only its own group's offset map", name, s.SnapshotID, k)
				}
				var m map[string]json.RawMessage
				if err := json.Unmarshal([]byte(raw), &m); err != nil || len(m) != 1 || m[topic] == nil {
					t.Fatalf("%s: snapshot %d offset map %s is not of topic %s alone", name, s.SnapshotID, raw, topic)
				}
			}
		}
		cols := []string{"_kafka_topic", "_kafka_partition", "_kafka_offset", rt.key, "seq"}
		if topic == "events" {
			cols = append(cols, "event_type")
		}
		_, batches, err := tbl.Scan(table.WithSelectedFields(cols...)).ToArrowRecords(ctx)
		if err != nil {
			t.Fatal(err)
		}
		byPart := map[int32][]routedRow{}
		for b, err := range batches {
			if err != nil {
				t.Fatal(err)
			}
			idx := func(n string) int { return b.Schema().FieldIndices(n)[0] }
			tops := b.Column(idx("_kafka_topic")).(*array.String)
			ps := b.Column(idx("_kafka_partition")).(*array.Int32)
			offs := b.Column(idx("_kafka_offset")).(*array.Int64)
			ks := b.Column(idx(rt.key)).(*array.String)
			sq := b.Column(idx("seq")).(*array.Int64)
			var ets *array.String
			if topic == "events" {
				ets = b.Column(idx("event_type")).(*array.String)
			}
			for i := range int(b.NumRows()) {
				if tops.Value(i) != topic {
					t.Fatalf("%s holds a row of topic %s", name, tops.Value(i))
				}
				if ets != nil && orderTypes[ets.Value(i)] != (rt.ident[1] == "orders") {
					t.Fatalf("%s holds event type %s at %d@%d: routed to the wrong table", name, ets.Value(i), ps.Value(i), offs.Value(i))
				}
				byPart[ps.Value(i)] = append(byPart[ps.Value(i)], routedRow{offs.Value(i), sq.Value(i), ks.Value(i)})
			}
			b.Release()
		}
		for p, rs := range byPart {
			sort.Slice(rs, func(i, j int) bool { return rs[i].offset < rs[j].offset })
			last := map[string]int64{}
			if where[p] == nil {
				where[p] = map[int64]string{}
			}
			for _, r := range rs {
				if other, ok := where[p][r.offset]; ok {
					t.Fatalf("%s/%d@%d is a row of %s and of %s", topic, p, r.offset, other, name)
				}
				where[p][r.offset] = name
				if r.offset >= end[p] {
					t.Fatalf("%s: %s/%d@%d beyond the produced end %d", name, topic, p, r.offset, end[p])
				}
				if prev, ok := last[r.key]; ok && r.seq <= prev {
					t.Fatalf("%s: %s %s: seq %d at offset %d after seq %d: order broken", name, rt.key, r.key, r.seq, r.offset, prev)
				}
				last[r.key] = r.seq
			}
			if rows[name] == nil {
				rows[name] = map[int32]int64{}
			}
			rows[name][p] = int64(len(rs))
		}
	}
	de := *e
	de.topic = topic
	dl := de.readDeadLetters(ctx)
	for p, last := range end {
		for o := range last {
			in, isRow := where[p][o]
			switch {
			case isRow && dl[p][o]:
				t.Fatalf("%s/%d@%d is both a row of %s and a dead letter", topic, p, o, in)
			case !isRow && !dl[p][o]:
				t.Fatalf("%s/%d@%d lost: in no table and not a dead letter", topic, p, o)
			}
		}
		dead += int64(len(dl[p]))
	}
	return rows, dead
}

// jsonTail returns out from the last occurrence of start: the JSON a
// command printed after its log lines ("" when there is none).
func jsonTail(out, start string) string {
	if i := strings.LastIndex(out, start); i >= 0 {
		return out[i:]
	}
	return ""
}

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// metricValue returns the value of the series named exactly by series (name
// and labels as exposed), failing the test when it is absent.
func metricValue(t *testing.T, body, series string) float64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	t.Fatalf("no series %s in the metrics", series)
	return 0
}

// TestRoutingRouteFailureStopsAll runs a job whose second route reads a
// topic that does not exist: that route fails, the clicks route is stopped
// (not left running), and `floe run` exits with status 2 naming the route.
func TestRoutingRouteFailureStopsAll(t *testing.T) {
	cl := clicksCluster(t, 3, 500)
	e := &env{t: t, dir: t.TempDir(), cluster: cl, topic: "clicks"}
	props, _ := json.Marshal(sqliteCatalog(e.dir))
	e.config = filepath.Join(e.dir, "floe.yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s], group: floe-rt, session_timeout: 6s, heartbeat_interval: 500ms}
table: {catalog: %s}
commit: {interval: 500ms, grace: 2s}
routes:
  - {topic: clicks, table: {name: analytics.clicks}}
  - {topic: nosuchtopic, table: {name: analytics.none}}
`, cl.Addrs()[0], props)
	if err := os.WriteFile(e.config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	p := e.start("run", "run")
	err := p.wait(t, 60*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("floe run exited with %v, want status 2\n%s", err, p.output())
	}
	if out := p.output(); !strings.Contains(out, "route of table analytics.none") || !strings.Contains(out, "nosuchtopic") {
		t.Fatalf("the error does not name the failed route and its topic:\n%s", out)
	}
}

// TestRoutingChangeRefused runs one field route of a topic alone (--table),
// then changes its where: `floe run` refuses to start (the routes are not at
// a common offset) with an error naming the hazard and the override, and
// starts with --accept-routing-change.
func TestRoutingChangeRefused(t *testing.T) {
	cl := clicksCluster(t, 5, 500)
	dir := t.TempDir()
	old, changed := splitClicksConfig(t, cl, dir, "purchase"), splitClicksConfig(t, cl, dir, "checkout, purchase")
	if out, err := runFloe(t, "run", "--config", old, "--table", "shop.orders", "--until-caught-up"); err != nil {
		t.Fatalf("floe run --table shop.orders: %v\n%s", err, out)
	}
	out, err := runFloe(t, "run", "--config", changed, "--until-caught-up")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("floe run with the changed routing exited with %v, want status 2\n%s", err, out)
	}
	wantContains(t, out, "routing changed: topic clicks", "shop.other at no watermarks", "--accept-routing-change")
	if out, err := runFloe(t, "run", "--config", changed, "--until-caught-up", "--accept-routing-change"); err != nil {
		t.Fatalf("floe run --accept-routing-change: %v\n%s", err, out)
	}
}

// TestRoutingReplayFromTheRoutingChange changes the routing of topic clicks
// at a common offset (checkout moves from shop.other to shop.orders), the
// safe way. A replay of shop.orders is then refused below that offset, where
// shop.other holds the checkouts, and with the old configuration; from the
// offset it inserts nothing and the routes still verify (also after
// maintenance). Before, the replay
// kept the records of the new where all the way down: every checkout below
// the change was inserted into shop.orders too, the same offset in two
// tables.
func TestRoutingReplayFromTheRoutingChange(t *testing.T) {
	cl, err := embedded.StartTopic(t.Context(), "clicks", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	gen := clickgen.New(clickgen.Config{Seed: 11}) // one generator: its sessions go on in order
	if _, err := cl.ProduceRate(t.Context(), "clicks", gen, 600, 0); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	old, changed := splitClicksConfig(t, cl, dir, "purchase"), splitClicksConfig(t, cl, dir, "checkout, purchase")
	if out, err := runFloe(t, "run", "--config", old, "--until-caught-up"); err != nil {
		t.Fatalf("floe run (old routing): %v\n%s", err, out)
	}
	change, err := cl.EndOffsets(t.Context(), "clicks")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.ProduceRate(t.Context(), "clicks", gen, 300, 0); err != nil {
		t.Fatal(err)
	}
	end, err := cl.EndOffsets(t.Context(), "clicks")
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runFloe(t, "run", "--config", changed, "--until-caught-up"); err != nil {
		t.Fatalf("floe run (changed routing, at a common offset): %v\n%s", err, out)
	}
	// Maintenance snapshots carry where the routing applies from.
	if out, err := runFloe(t, "maintain", "--config", changed, "--table", "shop.orders"); err != nil {
		t.Fatalf("floe maintain: %v\n%s", err, out)
	}
	replay := func(config string, from int64) (string, error) {
		return runFloe(t, "replay", "--config", config, "--table", "shop.orders", "--partition", "0",
			"--from", strconv.FormatInt(from, 10), "--to", strconv.FormatInt(end[0], 10), "--json")
	}
	out, err := replay(changed, 0)
	if err == nil {
		t.Fatalf("a replay of shop.orders from 0, below the routing change at %d, ran:\n%s", change[0], out)
	}
	wantContains(t, out, fmt.Sprintf("applies from offset %d of clicks/0", change[0]), fmt.Sprintf("want from >= %d, got 0", change[0]))
	if out, err := replay(old, change[0]); err == nil || !strings.Contains(out, "table shop.orders was written under routing") {
		t.Errorf("a replay with the configuration of the old routing: %v\n%s", err, out)
	}
	out, err = replay(changed, change[0])
	if err != nil {
		t.Fatalf("floe replay from the routing change: %v\n%s", err, out)
	}
	var replayed struct {
		Inserted int64 `json:"inserted"`
	}
	if err := json.Unmarshal([]byte(jsonTail(out, "{\"ranges\"")), &replayed); err != nil || replayed.Inserted != 0 {
		t.Errorf("replay of shop.orders [%d, %d) of partition 0: %v, %d inserted, want 0\n%s", change[0], end[0], err, replayed.Inserted, out)
	}
	if out, err := runFloe(t, "verify", "--config", changed); err != nil {
		t.Fatalf("floe verify after the replay: %v\n%s", err, out)
	}
}

// TestRoutingReplayOfANewRouteCreatesNoTable: a replay of a field route
// whose table does not exist yet (a new route, floe run not started) is
// refused, as one above the route's watermarks is, and creates nothing: it
// created the table, then refused.
func TestRoutingReplayOfANewRouteCreatesNoTable(t *testing.T) {
	cl := clicksCluster(t, 5, 50)
	dir := t.TempDir()
	config := splitClicksConfig(t, cl, dir, "purchase")
	cat, err := catalog.Load(t.Context(), "floe", iceberg.Properties(sqliteCatalog(dir))) // the catalog exists
	if err != nil {
		t.Fatal(err)
	}
	root := rootCmd()
	root.SetArgs([]string{"replay", "--config", config, "--table", "shop.orders", "--log-level", "error",
		"--partition", "0", "--from", "0", "--to", "1"})
	err = root.ExecuteContext(t.Context())
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "table shop.orders, routed by field, does not exist") {
		t.Errorf("replay of a field route without a table: %v, want it refused", err)
	}
	if _, err := cat.LoadTable(t.Context(), []string{"shop", "orders"}); !errors.Is(err, catalog.ErrNoSuchTable) {
		t.Fatalf("the refused replay left table shop.orders behind (load: %v)", err)
	}
}

// splitClicksConfig writes a configuration splitting topic clicks of cl
// by event_type: the values orderTypes (a YAML list's items) to
// shop.orders, the rest to shop.other; the catalog is in dir.
func splitClicksConfig(t *testing.T, cl *embedded.Cluster, dir, orderTypes string) string {
	props, _ := json.Marshal(sqliteCatalog(dir))
	path := filepath.Join(dir, "floe-"+strings.ReplaceAll(orderTypes, ", ", "-")+".yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s], group: floe-rc, session_timeout: 6s, heartbeat_interval: 500ms}
table: {catalog: %s}
commit: {interval: 300ms, grace: 2s}
routes:
  - {topic: clicks, where: {field: event_type, in: [%s]}, table: {name: shop.orders}}
  - {topic: clicks, where: {default: true}, table: {name: shop.other}}
`, cl.Addrs()[0], props, orderTypes)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestRoutingSharedDeadLetters runs two routes that take the whole topic
// clicks and share its dead-letter topic: analytics.clicks stores every
// record, finance.payments (another schema) dead-letters every one. `floe
// verify` of analytics.clicks counts none of the other route's dead letters
// (read as its own they would flag each row as "row and dead letter"), and
// that of finance.payments counts all of its own.
func TestRoutingSharedDeadLetters(t *testing.T) {
	cl := clicksCluster(t, 7, 400)
	dir := t.TempDir()
	schema, err := filepath.Abs("../../schemas/examples/payments.avsc")
	if err != nil {
		t.Fatal(err)
	}
	props, _ := json.Marshal(sqliteCatalog(dir))
	config := filepath.Join(dir, "floe.yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s], group: floe-dl, session_timeout: 6s, heartbeat_interval: 500ms}
table: {catalog: %s}
commit: {interval: 300ms, grace: 2s}
routes:
  - {topic: clicks, table: {name: analytics.clicks}}
  - {topic: clicks, table: {name: finance.payments}, schema: %s}
`, cl.Addrs()[0], props, schema)
	if err := os.WriteFile(config, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := runFloe(t, "run", "--config", config, "--until-caught-up"); err != nil {
		t.Fatalf("floe run: %v\n%s", err, out)
	}
	for _, c := range []struct {
		table      string
		rows, dead int64
	}{{"analytics.clicks", 400, 0}, {"finance.payments", 0, 400}} {
		out, err := runFloe(t, "verify", "--config", config, "--table", c.table, "--json")
		if err != nil {
			t.Fatalf("floe verify --table %s: %v\n%s", c.table, err, out)
		}
		var v struct {
			Tables []lakehouse.Report `json:"tables"`
		}
		if err := json.Unmarshal([]byte(jsonTail(out, "{\n  \"tables\"")), &v); err != nil || len(v.Tables) != 1 {
			t.Fatalf("floe verify --table %s --json: %v\n%s", c.table, err, out)
		}
		if r := v.Tables[0]; r.Rows != c.rows || r.DeadLetters != c.dead {
			t.Errorf("%s: %d rows, %d dead letters; want %d, %d", c.table, r.Rows, r.DeadLetters, c.rows, c.dead)
		}
	}
}

// clicksCluster starts a broker whose 2-partition topic clicks holds n
// clickstream records generated with seed.
func clicksCluster(t *testing.T, seed int64, n int) *embedded.Cluster {
	cl, err := embedded.StartTopic(t.Context(), "clicks", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := cl.ProduceRate(t.Context(), "clicks", clickgen.New(clickgen.Config{Seed: seed}), n, 0); err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestRunOneRouteIgnoresItsSiblingsFiles: `floe run --table shop.orders`
// runs that field route only, and is not refused for the files of its
// sibling shop.other (here a cache file in a directory this host lacks),
// which comes along for the routing checks, not to run: each deployment of
// a split topic mounts its own route's files. The start-up checks of the
// members' settings checked the siblings' too.
func TestRunOneRouteIgnoresItsSiblingsFiles(t *testing.T) {
	cl := clicksCluster(t, 5, 300)
	dir := t.TempDir()
	props, _ := json.Marshal(sqliteCatalog(dir))
	path := filepath.Join(dir, "floe.yaml")
	cfg := fmt.Sprintf(`kafka: {brokers: [%s], group: floe-rc, session_timeout: 6s, heartbeat_interval: 500ms}
table: {catalog: %s}
commit: {interval: 300ms, grace: 2s}
routes:
  - {topic: clicks, where: {field: event_type, in: [purchase]}, table: {name: shop.orders}}
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
    enrich:
      url: http://127.0.0.1:1/lookup
      key: user_id
      fields: [{name: segment, type: string}]
      cache_file: %s/elsewhere/enrich.cache
`, cl.Addrs()[0], props, dir)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	root := rootCmd()
	root.SetArgs([]string{"run", "--config", path, "--table", "shop.orders", "--until-caught-up", "--log-level", "error"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Fatalf("floe run --table shop.orders: %v; the cache file is shop.other's, a route this run does not run", err)
	}
	root = rootCmd()
	root.SetArgs([]string{"run", "--config", path, "--until-caught-up", "--log-level", "error"})
	if err := root.ExecuteContext(t.Context()); err == nil || !strings.Contains(err.Error(), "enrich.cache_file") {
		t.Fatalf("floe run of both routes: %v, want shop.other's cache file refused", err)
	}
}
