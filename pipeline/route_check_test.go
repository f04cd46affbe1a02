package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// routeRig is a broker with a 2-partition topic clicks and a catalog, for
// tests that run routes one after another, each until caught up.
type routeRig struct {
	cl     *embedded.Cluster
	dir    string
	gen    *clickgen.Generator
	tables map[string]*lakehouse.Table // by table and group
}

func newRouteRig(t *testing.T) *routeRig {
	t.Helper()
	cl, err := embedded.StartTopic(t.Context(), "clicks", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return &routeRig{cl: cl, dir: t.TempDir(), gen: clickgen.New(clickgen.Config{Sessions: 50, Seed: 11}),
		tables: map[string]*lakehouse.Table{}}
}

// produce adds n clickstream records and returns the topic's end offsets.
func (r *routeRig) produce(t *testing.T, n int) map[int32]int64 {
	t.Helper()
	if _, err := r.cl.ProduceRate(t.Context(), "clicks", r.gen, n, 0); err != nil {
		t.Fatal(err)
	}
	end, err := r.cl.EndOffsets(t.Context(), "clicks")
	if err != nil {
		t.Fatal(err)
	}
	return end
}

// config returns the jobs of a configuration on the rig's broker and
// catalog: the single-table form when topic and name are set, else routes.
func (r *routeRig) config(t *testing.T, group, topic, name, routes string) []pipeline.Config {
	t.Helper()
	var single [2]string
	if topic != "" {
		single = [2]string{"\n  topic: " + topic, "\n  name: " + name}
	}
	cfg, err := pipeline.LoadConfig(writeConfig(t, fmt.Sprintf(`
kafka:
  brokers: [%s]
  group: %s%s
  session_timeout: 6s
  heartbeat_interval: 250ms
  rebalance_timeout: 10s
table:%s
  catalog:
    type: sql
    uri: file:%s
    sql.dialect: sqlite
    sql.driver: sqlite
    warehouse: file://%s
commit:
  interval: 200ms
%s`, r.cl.Addrs()[0], group, single[0], single[1], filepath.Join(r.dir, "c.db"), filepath.Join(r.dir, "wh"), routes)))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	return cfg.Jobs()
}

// table opens job's table under its group (once per test), with its
// enrichment columns.
func (r *routeRig) table(t *testing.T, job pipeline.Config) (*lakehouse.Table, *schemas.Schema) {
	t.Helper()
	sc, err := schemas.Lookup(job.Schema)
	if err != nil {
		t.Fatal(err)
	}
	if sc, err = pipeline.WithEnrichment(sc, job.Enrich); err != nil {
		t.Fatal(err)
	}
	key := job.Table.Name + "/" + job.Kafka.Group
	if tbl := r.tables[key]; tbl != nil {
		return tbl, sc
	}
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: job.Table.Name, Catalog: job.Table.Catalog, Group: job.Kafka.Group}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	r.tables[key] = tbl
	return tbl, sc
}

// run runs job until its table's watermarks reach end.
func (r *routeRig) run(t *testing.T, job pipeline.Config, end map[int32]int64) {
	t.Helper()
	tbl, sc := r.table(t, job)
	m, err := pipeline.NewMember(job, tbl, sc, pipeline.UntilOffsets(end))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := m.Run(ctx); err != nil {
		t.Fatalf("running %s: %v", job.Table.Name, err)
	}
}

// check runs CheckStart over jobs.
func (r *routeRig) check(t *testing.T, jobs []pipeline.Config, ov pipeline.StartOverrides) error {
	t.Helper()
	st := make([]pipeline.StartTable, len(jobs))
	for i, j := range jobs {
		tbl, _ := r.table(t, j)
		st[i] = pipeline.StartTable{Config: j, Table: tbl}
	}
	return pipeline.CheckStart(t.Context(), st, ov, slog.New(slog.DiscardHandler))
}

const (
	routesPurchase = `routes:
  - topic: clicks
    where: {field: event_type, in: [purchase]}
    table: {name: shop.orders}
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
`
	// routesCheckout adds checkout to shop.orders.
	routesCheckout = `routes:
  - topic: clicks
    where: {field: event_type, in: [checkout, purchase]}
    table: {name: shop.orders}
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
`
)

// TestRouteRoutingChange changes the where of a route while the routes are
// at different offsets (refused: the records between them would land in no
// table or in two), and once they are at a common offset (accepted; also
// after a restart with one route already on the new routing), then checks
// that every offset is in exactly one table and that checkout records went
// to shop.other before the change and to shop.orders after it.
func TestRouteRoutingChange(t *testing.T) {
	r := newRouteRig(t)
	old := r.config(t, "floe", "", "", routesPurchase)
	end1 := r.produce(t, 2000)
	if err := r.check(t, old, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("first start: %v", err)
	}
	r.run(t, old[0], end1) // shop.orders ahead; shop.other has not run yet

	changed := r.config(t, "floe", "", "", routesCheckout)
	err := r.check(t, changed, pipeline.StartOverrides{})
	if !errors.Is(err, pipeline.ErrRoutingChanged) {
		t.Fatalf("routing changed with shop.orders at %v and shop.other at none: got %v, want ErrRoutingChanged", end1, err)
	}
	for _, want := range []string{"topic clicks", "shop.orders", "shop.other at no watermarks", `"checkout"`, "--accept-routing-change"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not mention %q: %v", want, err)
		}
	}
	if err := r.check(t, changed, pipeline.StartOverrides{RoutingChange: true}); err != nil {
		t.Fatalf("with the override: %v", err)
	}
	// The old configuration is unchanged: it starts.
	if err := r.check(t, old, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("old routing: %v", err)
	}

	r.run(t, old[1], end1) // both at end1: a common offset
	if err := r.check(t, changed, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("routes at a common offset: %v", err)
	}
	end2 := r.produce(t, 2000)
	r.run(t, changed[0], end2) // shop.orders on the new routing, shop.other not yet
	if err := r.check(t, changed, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("restart after shop.orders moved on the new routing: %v", err)
	}
	// Going back now is refused: shop.other (old) is behind shop.orders.
	if err := r.check(t, old, pipeline.StartOverrides{}); !errors.Is(err, pipeline.ErrRoutingChanged) {
		t.Fatalf("going back to the old routing: got %v, want ErrRoutingChanged", err)
	}
	r.run(t, changed[1], end2)
	if err := r.check(t, changed, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("after both ran the new routing: %v", err)
	}

	orders, _ := r.table(t, changed[0])
	other, _ := r.table(t, changed[1])
	dl, err := pipeline.ReadDeadLetters(t.Context(), changed[0].Kafka, nil, "shop.orders", "shop.other")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := lakehouse.VerifyRoutes(t.Context(), "clicks", []*lakehouse.Table{orders, other}, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	var rows int64
	for _, p := range rep.Partitions {
		if p.InSeveral > 0 || p.GapOffsets > 0 || p.Watermark != end2[p.Partition] {
			t.Errorf("partition %d: %d offsets in several tables, %d gap offsets, watermark %d (want %d)",
				p.Partition, p.InSeveral, p.GapOffsets, p.Watermark, end2[p.Partition])
		}
		for _, n := range p.Rows {
			rows += n
		}
	}
	if rows+rep.DeadLetters != 4000 {
		t.Errorf("%d rows + %d dead letters, want 4000 records", rows, rep.DeadLetters)
	}
	// checkout: in shop.other below end1, in shop.orders from end1 on.
	for _, c := range []struct {
		tbl        *lakehouse.Table
		before     bool
		name, want string
	}{{other, true, "shop.other", "below"}, {orders, false, "shop.orders", "at or above"}} {
		got := eventOffsets(t, c.tbl, "checkout")
		if len(got) == 0 {
			t.Errorf("%s holds no checkout rows", c.name)
		}
		for _, o := range got {
			if (o.off < end1[o.part]) != c.before {
				t.Errorf("%s holds checkout %d@%d, want only offsets %s %d", c.name, o.part, o.off, c.want, end1[o.part])
			}
		}
	}
}

type partOffset struct {
	part int32
	off  int64
}

// eventOffsets returns the coordinates of tbl's rows of this event type.
func eventOffsets(t *testing.T, tbl *lakehouse.Table, eventType string) []partOffset {
	t.Helper()
	var out []partOffset
	for _, row := range scanRows(t, tbl, "event_type", "_kafka_partition", "_kafka_offset") {
		if row[0] == eventType {
			var o partOffset
			if _, err := fmt.Sscan(row[1]+" "+row[2], &o.part, &o.off); err != nil {
				t.Fatal(err)
			}
			out = append(out, o)
		}
	}
	return out
}

// scanRows returns the values of columns of every row of tbl, as strings.
func scanRows(t *testing.T, tbl *lakehouse.Table, columns ...string) [][]string {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if it.CurrentSnapshot() == nil {
		return nil
	}
	_, batches, err := it.Scan(table.WithSelectedFields(columns...)).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		for i := range int(b.NumRows()) {
			row := make([]string, len(columns))
			for k, c := range columns {
				row[k] = b.Column(b.Schema().FieldIndices(c)[0]).ValueStr(i)
			}
			out = append(out, row)
		}
		b.Release()
	}
	return out
}

// TestRouteGroupChange moves a single-table job into routes: its route's
// default group holds no offsets in the table (refused, naming the group to
// set); with routes[0].group set it starts and continues from the table's
// watermarks. A renamed kafka.group of the single-table form is refused the
// same way, unless accepted.
// TestRouteAddedJoinsAtTheCommonOffset adds a field route to a topic whose
// only route (the default one) is caught up: the start is accepted, the new
// route's table starts at the old route's watermarks (it used to be refused
// at "no watermarks", and with the override to start at start_offset,
// taking records the old route already held), every offset ends up in
// exactly one table, and a replay of the new route below where it joined is
// refused.
func TestRouteAddedJoinsAtTheCommonOffset(t *testing.T) {
	r := newRouteRig(t)
	old := r.config(t, "floe", "", "", `routes:
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
`)
	end1 := r.produce(t, 2000)
	r.run(t, old[0], end1)

	added := r.config(t, "floe", "", "", routesPurchase)
	if err := r.check(t, added, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("adding a route at a common offset: %v", err)
	}
	orders, _ := r.table(t, added[0])
	if wm, _ := orders.Watermarks(t.Context()); !maps.Equal(wm["clicks"], end1) {
		t.Fatalf("the new route starts at %v, want the old route's %v", wm["clicks"], end1)
	}
	if err := r.check(t, added, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("restarting before the new route ran: %v", err)
	}
	end2 := r.produce(t, 500)
	r.run(t, added[0], end2)
	r.run(t, added[1], end2)
	other, _ := r.table(t, added[1])
	dl, err := pipeline.ReadDeadLetters(t.Context(), added[0].Kafka, nil, "shop.orders", "shop.other")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := lakehouse.VerifyRoutes(t.Context(), "clicks", []*lakehouse.Table{orders, other}, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range rep.Partitions {
		if p.InSeveral > 0 || p.GapOffsets > 0 || p.Watermark != end2[p.Partition] {
			t.Errorf("partition %d: %d offsets in two tables, %d in none, watermark %d (want %d)",
				p.Partition, p.InSeveral, p.GapOffsets, p.Watermark, end2[p.Partition])
		}
	}
	for _, id := range rowIDs(t, orders) {
		if id[1] < end1[int32(id[0])] {
			t.Fatalf("shop.orders holds %d/%d, below where it joined (%v)", id[0], id[1], end1)
		}
	}
	// Below where it joined shop.other holds its purchases: a replay from
	// there is refused (it used to insert them, in two tables).
	_, sc := r.table(t, added[0])
	_, err = pipeline.Replay(t.Context(), added[0], orders, sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: end2[0]}},
		pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if want := fmt.Sprintf("applies from offset %d of clicks/0", end1[0]); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a replay of shop.orders from 0: %v, want an error containing %q", err, want)
	}
	// Above its watermark too: a routing change applies from there, and
	// would give another route's table the offsets the replay inserted.
	end3 := r.produce(t, 100)
	_, err = pipeline.Replay(t.Context(), added[0], orders, sc, []pipeline.ReplayRange{{Partition: 0, From: end2[0], To: end3[0]}},
		pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if want := fmt.Sprintf("its watermark %d", end2[0]); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a replay of shop.orders above its watermark: %v, want an error containing %q", err, want)
	}
}

// TestRouteAddedJoinsWhenRoutingChangeAccepted adds a field route while the
// old routes are at different offsets (shop.orders ahead of shop.other),
// accepted with the override: the new route's table starts at the
// watermark of the route that took its values before — the least of them
// when it takes values from two, with the range that may be in two tables
// logged. It used to start at start_offset (earliest here): every checkout
// below shop.other's watermark in two tables.
func TestRouteAddedJoinsWhenRoutingChangeAccepted(t *testing.T) {
	for _, c := range []struct {
		name, old, added string
		// twice: checkout records between the old routes' watermarks are
		// in two tables (shop.orders took them before the change).
		twice bool
	}{
		{name: "from the default route", old: routesPurchase, added: `routes:
  - topic: clicks
    where: {field: event_type, in: [purchase]}
    table: {name: shop.orders}
  - topic: clicks
    where: {field: event_type, in: [checkout]}
    table: {name: shop.checkouts}
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
`},
		{name: "from two routes", old: routesCheckout, twice: true, added: `routes:
  - topic: clicks
    where: {field: event_type, in: [purchase]}
    table: {name: shop.orders}
  - topic: clicks
    where: {field: event_type, in: [checkout, search]}
    table: {name: shop.checkouts}
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
`},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRouteRig(t)
			old := r.config(t, "floe", "", "", c.old)
			end1 := r.produce(t, 2000)
			r.run(t, old[0], end1)
			r.run(t, old[1], end1)
			end2 := r.produce(t, 500)
			r.run(t, old[0], end2) // shop.orders ahead of shop.other

			added := r.config(t, "floe", "", "", c.added)
			if err := r.check(t, added, pipeline.StartOverrides{}); !errors.Is(err, pipeline.ErrRoutingChanged) {
				t.Fatalf("routes at %v and %v: got %v, want ErrRoutingChanged", end2, end1, err)
			}
			st := make([]pipeline.StartTable, len(added))
			for i, j := range added {
				tbl, _ := r.table(t, j)
				st[i] = pipeline.StartTable{Config: j, Table: tbl}
			}
			var log strings.Builder
			if err := pipeline.CheckStart(t.Context(), st, pipeline.StartOverrides{RoutingChange: true}, slog.New(slog.NewTextHandler(&log, nil))); err != nil {
				t.Fatalf("with the override: %v", err)
			}
			checkouts, _ := r.table(t, added[1])
			if wm, _ := checkouts.Watermarks(t.Context()); !maps.Equal(wm["clicks"], end1) {
				t.Fatalf("shop.checkouts starts at %v, want shop.other's %v", wm["clicks"], end1)
			}
			risk := fmt.Sprintf(`at_risk="{0:%d-%d 1:%d-%d}"`, end1[0], end2[0], end1[1], end2[1])
			if strings.Contains(log.String(), risk) != c.twice {
				t.Errorf("log mentions %s: %v, want %v\n%s", risk, !c.twice, c.twice, log.String())
			}

			end3 := r.produce(t, 500)
			for _, j := range added {
				r.run(t, j, end3)
			}
			orders, _ := r.table(t, added[0])
			other, _ := r.table(t, added[2])
			dl, err := pipeline.ReadDeadLetters(t.Context(), added[0].Kafka, nil, "shop.orders", "shop.checkouts", "shop.other")
			if err != nil {
				t.Fatal(err)
			}
			rep, err := lakehouse.VerifyRoutes(t.Context(), "clicks", []*lakehouse.Table{orders, checkouts, other}, dl.Read)
			if err != nil {
				t.Fatal(err)
			}
			for _, p := range rep.Partitions {
				if p.GapOffsets > 0 || p.InSeveral > 0 != c.twice || p.Watermark != end3[p.Partition] {
					t.Errorf("partition %d: %d offsets in two tables, %d in none, watermark %d (want %d; in two tables: %v)",
						p.Partition, p.InSeveral, p.GapOffsets, p.Watermark, end3[p.Partition], c.twice)
				}
			}
			for _, o := range eventOffsets(t, checkouts, "checkout") {
				if o.off < end1[o.part] {
					t.Fatalf("shop.checkouts holds checkout %d@%d, below where it joined (%v)", o.part, o.off, end1)
				}
			}
		})
	}
}

func TestRouteGroupChange(t *testing.T) {
	r := newRouteRig(t)
	single := r.config(t, "floe-clicks", "clicks", "analytics.clicks", "")
	end1 := r.produce(t, 1000)
	r.run(t, single[0], end1)

	moved := r.config(t, "floe", "", "", "routes:\n  - topic: clicks\n    table: {name: analytics.clicks}\n")
	err := r.check(t, moved, pipeline.StartOverrides{})
	if !errors.Is(err, pipeline.ErrGroupChanged) {
		t.Fatalf("job moved into routes (group %s): got %v, want ErrGroupChanged", moved[0].Kafka.Group, err)
	}
	want := "table analytics.clicks holds offsets of topic clicks under group floe-clicks and none under group floe.analytics.clicks: set routes[0].group: floe-clicks"
	if !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}

	kept := r.config(t, "floe", "", "", "routes:\n  - topic: clicks\n    group: floe-clicks\n    table: {name: analytics.clicks}\n")
	if err := r.check(t, kept, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("route with the table's group: %v", err)
	}
	end2 := r.produce(t, 1000)
	r.run(t, kept[0], end2)
	tbl, _ := r.table(t, kept[0])
	if n := len(scanRows(t, tbl, "_kafka_offset")); n != 2000 {
		t.Errorf("%d rows after continuing in routes, want 2000 (each record once)", n)
	}

	renamed := r.config(t, "floe-renamed", "clicks", "analytics.clicks", "")
	err = r.check(t, renamed, pipeline.StartOverrides{})
	if !errors.Is(err, pipeline.ErrGroupChanged) || !strings.Contains(err.Error(), "set kafka.group: floe-clicks (or --group floe-clicks)") {
		t.Fatalf("renamed group: got %v, want ErrGroupChanged naming kafka.group: floe-clicks", err)
	}
	if err := r.check(t, renamed, pipeline.StartOverrides{GroupChange: true}); err != nil {
		t.Fatalf("renamed group with the override: %v", err)
	}
	// Another topic's offsets under another group are no reason to refuse.
	other := r.config(t, "floe-other", "views", "analytics.clicks", "")
	if err := r.check(t, other, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("another topic into the same table: %v", err)
	}
}

// TestRouteDeadLettersByTable runs two routes that both take the whole
// topic into one dead-letter topic: analytics.clicks stores every record,
// finance.payments (another schema) dead-letters every one. Each route's
// dead letters carry its table, so verifying analytics.clicks counts none
// of the other route's: read unfiltered, they would flag every row as
// "row and dead letter".
func TestRouteDeadLettersByTable(t *testing.T) {
	r := newRouteRig(t)
	payments, err := filepath.Abs("../schemas/examples/payments.avsc")
	if err != nil {
		t.Fatal(err)
	}
	jobs := r.config(t, "floe", "", "", fmt.Sprintf(`routes:
  - topic: clicks
    table: {name: analytics.clicks}
  - topic: clicks
    table: {name: finance.payments}
    schema: %s
`, payments))
	end := r.produce(t, 500)
	for _, j := range jobs {
		r.run(t, j, end)
	}
	count := func(dl lakehouse.DeadLetters) int {
		n := 0
		for _, offs := range dl {
			n += len(offs)
		}
		return n
	}
	k := jobs[0].Kafka
	if k.DLQTopic != jobs[1].Kafka.DLQTopic {
		t.Fatalf("dead-letter topics %s and %s: the test wants them shared", k.DLQTopic, jobs[1].Kafka.DLQTopic)
	}
	for _, c := range []struct {
		tables []string
		want   int
	}{{[]string{"analytics.clicks"}, 0}, {[]string{"finance.payments"}, 500}, {nil, 500}} {
		dl, err := pipeline.ReadDeadLetters(t.Context(), k, nil, c.tables...)
		if err != nil {
			t.Fatal(err)
		}
		if got := count(dl); got != c.want {
			t.Errorf("dead letters of %v: %d, want %d", c.tables, got, c.want)
		}
	}
	clicks, _ := r.table(t, jobs[0])
	own, err := pipeline.ReadDeadLetters(t.Context(), k, nil, "analytics.clicks")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := clicks.Verify(t.Context(), "clicks", own.Read)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Rows != 500 || rep.DeadLetters != 0 {
		t.Errorf("verify of analytics.clicks with its own dead letters: ok %v, %d rows, %d dead letters; want ok, 500, 0",
			rep.OK(), rep.Rows, rep.DeadLetters)
	}
	all, err := pipeline.ReadDeadLetters(t.Context(), k, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep, err = clicks.Verify(t.Context(), "clicks", all.Read); err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Error("verify of analytics.clicks with the other route's dead letters is ok; want rows flagged as row and dead letter")
	}
}

// TestRouteLatestStartsEveryRouteAtOneOffset: the field routes of a topic
// with start_offset latest start each partition at one offset, whenever
// each first runs. Each route resolved "latest" for its own group when its
// member first got the partitions, so shop.other, started after
// shop.orders had run (floe run --table, or just a slower join), started
// past it: the non-purchase records written in between were in no table,
// CheckStart accepted it and verify failed on a freshly deployed job.
func TestRouteLatestStartsEveryRouteAtOneOffset(t *testing.T) {
	r := newRouteRig(t)
	jobs := r.config(t, "floe", "", "", routesPurchase)
	for i := range jobs {
		jobs[i].Kafka.StartOffset = "latest"
	}
	end0 := r.produce(t, 200) // history before the job starts
	if err := r.check(t, jobs, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("first start: %v", err)
	}
	r.run(t, jobs[0], end0) // shop.orders starts
	end1 := r.produce(t, 600)
	r.run(t, jobs[0], end1) // shop.orders takes the purchases of [end0, end1)
	if err := r.check(t, jobs, pipeline.StartOverrides{}); err != nil {
		t.Fatalf("starting shop.other: %v", err)
	}
	r.run(t, jobs[1], end1) // shop.other starts
	end2 := r.produce(t, 600)
	r.run(t, jobs[0], end2)
	r.run(t, jobs[1], end2)
	verifyLatestRoutes(t, r, jobs, end0, end2)
}

// TestRouteLatestStartsWhereTheOtherRoutesStarted: a route of a start_offset
// latest topic that first starts after its siblings started without it
// (their members resolved "latest" before floe set the routes' start at
// once: here run without CheckStart) starts where they started — the
// group offset a sibling pinned, or its first committed offset — not at
// "latest" anew, which skipped its records in between.
func TestRouteLatestStartsWhereTheOtherRoutesStarted(t *testing.T) {
	for _, committed := range []bool{false, true} {
		t.Run(fmt.Sprintf("committed=%v", committed), func(t *testing.T) {
			r := newRouteRig(t)
			jobs := r.config(t, "floe", "", "", routesPurchase)
			for i := range jobs {
				jobs[i].Kafka.StartOffset = "latest"
			}
			end0 := r.produce(t, 200)
			r.run(t, jobs[0], end0) // shop.orders pins its partitions at end0
			end1 := r.produce(t, 600)
			if committed {
				r.run(t, jobs[0], end1) // and commits from there
			}
			if err := r.check(t, jobs, pipeline.StartOverrides{}); err != nil {
				t.Fatalf("starting shop.other: %v", err)
			}
			r.run(t, jobs[1], end1)
			end2 := r.produce(t, 300)
			r.run(t, jobs[1], end2)
			r.run(t, jobs[0], end2)
			verifyLatestRoutes(t, r, jobs, end0, end2)
		})
	}
}

// verifyLatestRoutes checks that the routes of jobs (routesPurchase) hold
// every record of [from, to) once, and verify finds no gap from from on.
func verifyLatestRoutes(t *testing.T, r *routeRig, jobs []pipeline.Config, from, to map[int32]int64) {
	t.Helper()
	orders, _ := r.table(t, jobs[0])
	other, _ := r.table(t, jobs[1])
	dl, err := pipeline.ReadDeadLetters(t.Context(), jobs[0].Kafka, nil, "shop.orders", "shop.other")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := lakehouse.VerifyRoutes(t.Context(), "clicks", []*lakehouse.Table{orders, other}, dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	var rows, want int64
	for _, p := range rep.Partitions {
		for _, n := range p.Rows {
			rows += n
		}
		if p.First != from[p.Partition] || p.GapOffsets > 0 || p.InSeveral > 0 {
			t.Errorf("partition %d: first %d (want %d), %d gap offsets %v, %d in several tables",
				p.Partition, p.First, from[p.Partition], p.GapOffsets, p.Coverage.Gaps, p.InSeveral)
		}
	}
	for p := range to {
		want += to[p] - from[p]
	}
	if rows+rep.DeadLetters != want || !rep.OK() {
		t.Errorf("%d rows + %d dead letters of the %d records written after the job started; verify OK: %v",
			rows, rep.DeadLetters, want, rep.OK())
	}
}
