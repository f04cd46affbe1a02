package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|` + "`[^`]*`")
	promMatchers = regexp.MustCompile(`\{([^}]*)\}`)
	promMatcher  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promRange    = regexp.MustCompile(`\[[^\]]*\]`)
	promVariable = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?`)
	promNumber   = regexp.MustCompile(`\b[0-9]+(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?(?:ms|[smhdwy])?\b`) // numbers and durations (offset 1d)
	promIdent    = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	promKeywords = map[string]bool{"bool": true, "and": true, "or": true, "unless": true, "offset": true, "inf": true, "nan": true, "atan2": true,
		"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true}
)

// promQLNames returns the metric names a PromQL expression reads and the
// label names it groups or matches on. It is a tokenizer, not a parser: it
// drops strings, ranges, numbers and Grafana variables, takes identifiers
// inside by/without/on/ignoring(...) and {...} as labels, and every other
// identifier not followed by "(" (a function or aggregation) as a metric.
func promQLNames(expr string) (metrics, labels []string) {
	add := func(list []string, s string) []string {
		if s != "" && !slices.Contains(list, s) {
			list = append(list, s)
		}
		return list
	}
	e := promString.ReplaceAllString(expr, `""`)
	for _, m := range promMatchers.FindAllStringSubmatch(e, -1) {
		for _, l := range promMatcher.FindAllStringSubmatch(m[1], -1) {
			labels = add(labels, l[1])
		}
	}
	e = promMatchers.ReplaceAllString(e, " ")
	for _, m := range promGrouping.FindAllStringSubmatch(e, -1) {
		for _, l := range strings.Split(m[1], ",") {
			labels = add(labels, strings.TrimSpace(l))
		}
	}
	e = promGrouping.ReplaceAllString(e, " ")
	e = promRange.ReplaceAllString(e, " ")
	e = promVariable.ReplaceAllString(e, " ")
	e = promNumber.ReplaceAllString(e, " ")
	for _, loc := range promIdent.FindAllStringIndex(e, -1) {
		id := e[loc[0]:loc[1]]
		if strings.HasPrefix(strings.TrimLeft(e[loc[1]:], " \t\n"), "(") || promKeywords[id] {
			continue
		}
		metrics = add(metrics, id)
	}
	return metrics, labels
}

func TestPromQLNames(t *testing.T) {
	for _, tc := range []struct {
		expr            string
		metrics, labels []string
	}{
		{`floe_rows_committed_total`, []string{"floe_rows_committed_total"}, nil},
		{`sum(rate(floe_rows_committed_total{job=~"$job", instance=~"a|b"}[$__rate_interval]))`,
			[]string{"floe_rows_committed_total"}, []string{"job", "instance"}},
		{`histogram_quantile(0.99, sum by (le) (rate(floe_flush_rows_bucket[5m])))`,
			[]string{"floe_flush_rows_bucket"}, []string{"le"}},
		{`sum by (topic, partition) (floe_consumer_lag_records) / ignoring(x) group_left max(floe_topic_partitions) > 1e3`,
			[]string{"floe_consumer_lag_records", "floe_topic_partitions"}, []string{"topic", "partition", "x"}},
		{`sum(rate(a_total[1h] offset 1d)) - sum without (status) (b{status!="ok"}) and bool c`,
			[]string{"a_total", "b", "c"}, []string{"status"}},
		{`count(up{job="floe"} > 0)`, []string{"up"}, []string{"job"}},
	} {
		m, l := promQLNames(tc.expr)
		if !slices.Equal(m, tc.metrics) || !slices.Equal(l, tc.labels) {
			t.Errorf("promQLNames(%q) = %q, %q; want %q, %q", tc.expr, m, l, tc.metrics, tc.labels)
		}
	}
}

// servedSeries maps every series name a scrape of floe offers to PromQL
// (histograms as _bucket/_sum/_count) to the label names it carries.
func servedSeries(families map[string]*dto.MetricFamily) map[string]map[string]bool {
	out := map[string]map[string]bool{}
	add := func(name string, labels []*dto.LabelPair, extra ...string) {
		set := out[name]
		if set == nil {
			set = map[string]bool{}
			out[name] = set
		}
		for _, l := range labels {
			set[l.GetName()] = true
		}
		for _, l := range extra {
			set[l] = true
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			switch f.GetType() {
			case dto.MetricType_HISTOGRAM, dto.MetricType_GAUGE_HISTOGRAM:
				add(name+"_bucket", m.GetLabel(), "le")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			case dto.MetricType_SUMMARY:
				add(name, m.GetLabel(), "quantile")
				add(name+"_sum", m.GetLabel())
				add(name+"_count", m.GetLabel())
			default:
				add(name, m.GetLabel())
			}
		}
	}
	return out
}

// runFloeForMetrics runs the floe binary the image builds, as `floe run`,
// against an in-process Kafka-protocol broker, the reference enrichment
// server and a SQLite catalog, until it has committed every produced record;
// it then checks the committed counts and lag on /metrics, stops floe with
// SIGTERM, and returns the metric families of that last scrape. With routed
// set, the job has two routes, topics clicks and clicks2 into a table each,
// the same records produced to both.
func runFloeForMetrics(t *testing.T, routed bool) map[string]*dto.MetricFamily {
	t.Helper()
	bin := floeBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	const topic, partitions = "clicks", 3
	cluster, err := embedded.StartTopic(ctx, topic, partitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	topics := []string{topic}
	if routed {
		topics = append(topics, topic+"2")
		if err := cluster.CreateTopic(ctx, topics[1], partitions); err != nil {
			t.Fatal(err)
		}
	}
	for _, tp := range topics {
		if err := cluster.CreateTopic(ctx, tp+".dlq", 1); err != nil {
			t.Fatal(err)
		}
	}
	gen := clickgen.New(clickgen.Config{Seed: 7, Sessions: 300, MalformedRate: 0.01})
	msgs := make([]clickgen.Message, 3000)
	for i := range msgs {
		msgs[i] = gen.Next()
	}
	total, malformed := gen.Counts()
	if malformed == 0 {
		t.Fatal("the generator made no malformed message: the dead-letter series would go unchecked")
	}
	for _, tp := range topics {
		if _, err := cluster.Produce(ctx, tp, msgs); err != nil {
			t.Fatal(err)
		}
	}

	srv := enrich.NewServer(enrich.ServerConfig{P50: 2 * time.Millisecond, P99: 20 * time.Millisecond, MissRate: 0.05})
	lookup, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "floe.yaml")
	brokers, _ := json.Marshal(cluster.Addrs())
	source := fmt.Sprintf(`kafka: {brokers: %s, topic: %s, group: floe-dashboard-test, dlq_topic: %s.dlq}
table:
  name: analytics.clicks
`, brokers, topic, topic)
	if routed {
		source = fmt.Sprintf(`kafka: {brokers: %s, group: floe-dashboard-test}
routes:
  - {topic: %s, dlq_topic: %s.dlq, table: {name: analytics.clicks}}
  - {topic: %s, dlq_topic: %s.dlq, table: {name: analytics.clicks2}}
table:
`, brokers, topics[0], topics[0], topics[1], topics[1])
	}
	cfg := source + fmt.Sprintf(`  catalog: {type: sql, uri: "file:%s/catalog.db", sql.dialect: sqlite, sql.driver: sqlite, warehouse: "file://%s/warehouse"}
commit: {interval: 300ms}
metrics: {listen: "%s"}
enrich:
  url: %s/lookup
  key: user_id
  fields: [{name: segment, type: string}, {name: score, type: double}]
`, dir, dir, metricsAddr, lookup)
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}

	var logs bytes.Buffer
	cmd := exec.Command(bin, "run", "--config", cfgFile, "--log-json")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("floe run's log:\n%s", logs.String())
		}
	}()

	value := func(families map[string]*dto.MetricFamily, name string) (sum float64, series int) {
		for _, m := range families[name].GetMetric() {
			series++
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
		return sum, series
	}
	k := float64(len(topics)) // every count is per route
	rows := k * float64(total-malformed)
	var families map[string]*dto.MetricFamily
	for {
		select {
		case err := <-exited:
			stopped = true
			t.Fatalf("floe run exited before committing everything: %v", err)
		case <-ctx.Done():
			committed, _ := value(families, "floe_rows_committed_total")
			t.Fatalf("floe committed %.0f of %.0f rows before the deadline", committed, rows)
		case <-time.After(200 * time.Millisecond):
		}
		f, err := scrape(ctx, "http://"+metricsAddr+"/metrics")
		if err != nil {
			continue // not listening yet
		}
		families = f
		committed, _ := value(f, "floe_rows_committed_total")
		lag, lagSeries := value(f, "floe_consumer_lag_records")
		// The stage reports what its fast path answered within 500 ms
		// (enrich's reportIdle), which may be after the rows' commit: a
		// scrape in between counted 5916 results of 6000.
		results, _ := value(f, "floe_enrich_results_total")
		if committed >= rows && lagSeries == len(topics)*partitions && lag == 0 && results >= k*float64(total) {
			break
		}
	}

	// Real outcomes on the scrape: every valid record a row, every
	// malformed one a dead letter, every partition drained, each enriched.
	for name, want := range map[string]float64{
		"floe_rows_committed_total":        rows,
		"floe_records_dead_lettered_total": k * float64(malformed),
		"floe_records_consumed_total":      k * float64(total),
		"floe_duplicates_skipped_total":    0,
		"floe_assigned_partitions":         k * partitions,
		"floe_enrich_results_total":        k * float64(total), // every record passes the stage once, malformed ones too
	} {
		if got, _ := value(families, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if _, n := value(families, "floe_consumer_lag_seconds"); n != len(topics)*partitions {
		t.Errorf("floe_consumer_lag_seconds has %d series, want one per partition (%d)", n, len(topics)*partitions)
	}
	if c := families["floe_flush_rows"].GetMetric(); len(c) != len(topics) {
		t.Errorf("floe_flush_rows has %d series, want one per route (%d)", len(c), len(topics))
	} else {
		for _, m := range c {
			if m.GetHistogram().GetSampleCount() == 0 {
				t.Errorf("floe_flush_rows%v observed no flush", m.GetLabel())
			}
		}
	}

	// SIGTERM: flush, commit, leave the group, exit 0.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("floe run after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Error("floe run did not exit within 30s of SIGTERM")
	}
	return families
}

func scrape(ctx context.Context, url string) (map[string]*dto.MetricFamily, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	return p.TextToMetricFamilies(resp.Body)
}

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	ID      int              `json:"id"`
	Type    string           `json:"type"`
	Title   string           `json:"title"`
	GridPos map[string]int   `json:"gridPos"`
	Panels  []dashboardPanel `json:"panels"`
	Targets []struct {
		RefID      string `json:"refId"`
		Expr       string `json:"expr"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
	} `json:"targets"`
}

// TestGrafanaDashboard checks deploy/grafana/floe.json against the metrics
// a running floe actually serves: every panel's PromQL may read only series
// on that scrape (plus Prometheus' own job and instance labels), and the
// dashboard covers lag, throughput, commits, conflicts, fences, rebalances,
// duplicates, dead letters, flush sizes, freshness, enrichment and the Go
// runtime. It scrapes a job without routes and one with two: a panel
// reading series a route labels with its table must match on the
// dashboard's table variable. Renaming a metric in floe breaks this test
// until the dashboard follows.
func TestGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(deployDir(), "grafana", "floe.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID        string           `json:"uid"`
		Title      string           `json:"title"`
		Panels     []dashboardPanel `json:"panels"`
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&dash); err != nil {
		t.Fatalf("deploy/grafana/floe.json: %v", err)
	}
	if dash.UID == "" || dash.Title == "" {
		t.Error("the dashboard needs a uid and a title")
	}
	vars := map[string]string{}
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
	}

	// A job with routes labels its series with the route's table: the
	// dashboard must match on it (else it sums the routes) and may only
	// where the series carry it.
	if vars["table"] != "query" {
		t.Error("the dashboard needs a table variable (a query), to show one route of a job with routes")
	}
	served := servedSeries(runFloeForMetrics(t, false))
	for name, labels := range servedSeries(runFloeForMetrics(t, true)) {
		if served[name] == nil {
			served[name] = map[string]bool{}
		}
		for l := range labels {
			served[name][l] = true
		}
	}
	referenced := map[string]bool{}
	ids := map[int]bool{}
	var check func([]dashboardPanel)
	check = func(panels []dashboardPanel) {
		for _, p := range panels {
			if ids[p.ID] {
				t.Errorf("panel %q: id %d is used twice", p.Title, p.ID)
			}
			ids[p.ID] = true
			if p.Title == "" || p.GridPos["w"] == 0 || p.GridPos["h"] == 0 {
				t.Errorf("panel %d: needs a title and a gridPos with w and h", p.ID)
			}
			check(p.Panels)
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			for _, tg := range p.Targets {
				if ds := strings.Trim(tg.Datasource.UID, "${}"); vars[ds] != "datasource" {
					t.Errorf("panel %q target %s: datasource %q is not the dashboard's datasource variable", p.Title, tg.RefID, tg.Datasource.UID)
				}
				for _, v := range promVariable.FindAllString(tg.Expr, -1) {
					if name := strings.Trim(v, "${}"); !strings.HasPrefix(name, "__") && vars[name] == "" {
						t.Errorf("panel %q: %s is not a dashboard variable", p.Title, v)
					}
				}
				metrics, labels := promQLNames(tg.Expr)
				if len(metrics) == 0 {
					t.Errorf("panel %q target %s reads no metric: %s", p.Title, tg.RefID, tg.Expr)
				}
				for _, m := range metrics {
					referenced[m] = true
					if served[m] == nil {
						t.Errorf("panel %q reads %s, which floe does not serve", p.Title, m)
					}
					if served[m]["table"] && !slices.Contains(labels, "table") {
						t.Errorf("panel %q reads %s without matching on table: it would sum a job's routes", p.Title, m)
					}
				}
				for _, l := range labels {
					if l == "job" || l == "instance" {
						continue // added by Prometheus when it scrapes
					}
					if !slices.ContainsFunc(metrics, func(m string) bool { return served[m][l] }) {
						t.Errorf("panel %q groups or matches on label %q, which none of %v carries", p.Title, l, metrics)
					}
				}
			}
		}
	}
	check(dash.Panels)

	for _, want := range []string{
		"floe_consumer_lag_records", "floe_consumer_lag_seconds", "floe_rows_committed_total",
		"floe_commits_total", "floe_commit_attempts_total", "floe_zombie_fences_total", "floe_rebalances_total",
		"floe_duplicates_skipped_total", "floe_records_dead_lettered_total", "floe_flush_rows_bucket",
		"floe_flush_bytes_bucket", "floe_freshness_seconds", "floe_enrich_request_duration_seconds_bucket",
		"floe_enrich_results_total", "floe_enrich_in_flight_records", "floe_enrich_breaker_state",
		"go_goroutines", "process_resident_memory_bytes",
	} {
		if !referenced[want] {
			t.Errorf("the dashboard charts no %s", want)
		}
	}
	var floeSeries []string
	for name := range served {
		if strings.HasPrefix(name, "floe_") && !strings.HasSuffix(name, "_sum") && !strings.HasSuffix(name, "_count") && !referenced[name] {
			floeSeries = append(floeSeries, name)
		}
	}
	slices.Sort(floeSeries)
	t.Logf("floe series served but not charted: %s", strconv.Quote(strings.Join(floeSeries, " ")))
}
