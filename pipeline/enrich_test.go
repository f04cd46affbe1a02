package pipeline_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// enrichedRow is what the enrichment tests read back from the table.
type enrichedRow struct {
	partition int32
	offset    int64
	session   string
	seq       int64
	user      string
	status    string
	segment   string // "" when null
}

func readEnriched(t *testing.T, tbl *lakehouse.Table) []enrichedRow {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := it.Scan(table.WithSelectedFields("_kafka_partition", "_kafka_offset", "session_id", "seq",
		"user_id", "_enrich_status", "segment")).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var rows []enrichedRow
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		checkBufferedInOrder(t, b)
		col := func(n string) int { return b.Schema().FieldIndices(n)[0] }
		ps := b.Column(col("_kafka_partition")).(*array.Int32)
		os := b.Column(col("_kafka_offset")).(*array.Int64)
		ss := b.Column(col("session_id")).(*array.String)
		sq := b.Column(col("seq")).(*array.Int64)
		us := b.Column(col("user_id")).(*array.String)
		st := b.Column(col("_enrich_status")).(*array.String)
		sg := b.Column(col("segment")).(*array.String)
		for i := 0; i < int(b.NumRows()); i++ {
			r := enrichedRow{ps.Value(i), os.Value(i), ss.Value(i), sq.Value(i), us.Value(i), st.Value(i), ""}
			if !sg.IsNull(i) {
				r.segment = sg.Value(i)
			}
			rows = append(rows, r)
		}
		b.Release()
	}
	return rows
}

// checkBufferedInOrder asserts that within one batch of a scan, which comes
// from one data file, each session's rows are in offset order. A file's rows
// are sorted by session with a stable sort, so this is the order they were
// buffered in: it fails if a record overtook an earlier one of its
// partition on the way to the buffer, which the offsets and seqs of the
// rows alone cannot show.
func checkBufferedInOrder(t *testing.T, b arrow.RecordBatch) {
	t.Helper()
	col := func(n string) int { return b.Schema().FieldIndices(n)[0] }
	os := b.Column(col("_kafka_offset")).(*array.Int64)
	ss := b.Column(col("session_id")).(*array.String)
	last := map[string]int64{}
	for i := 0; i < int(b.NumRows()); i++ {
		s, o := ss.Value(i), os.Value(i)
		if p, ok := last[s]; ok && o <= p {
			t.Fatalf("session %s: offset %d written after offset %d in one data file: records buffered out of order", s, o, p)
		}
		last[s] = o
	}
}

// checkOnceInOrder asserts no (partition, offset) repeats and each session's
// seq grows with its offsets.
func checkOnceInOrder(t *testing.T, rows []enrichedRow) {
	t.Helper()
	seen := map[[2]int64]bool{}
	type at struct{ offset, seq int64 }
	last := map[string]at{}
	byOffset := map[int32][]enrichedRow{}
	for _, r := range rows {
		id := [2]int64{int64(r.partition), r.offset}
		if seen[id] {
			t.Fatalf("duplicate row %v", id)
		}
		seen[id] = true
		byOffset[r.partition] = append(byOffset[r.partition], r)
	}
	for _, rs := range byOffset {
		sortRows(rs)
		for _, r := range rs {
			if p, ok := last[r.session]; ok && r.seq <= p.seq {
				t.Fatalf("session %s: seq %d at offset %d after seq %d at %d", r.session, r.seq, r.offset, p.seq, p.offset)
			}
			last[r.session] = at{r.offset, r.seq}
		}
	}
}

func sortRows(rs []enrichedRow) {
	for i := 1; i < len(rs); i++ {
		for j := i; j > 0 && rs[j].offset < rs[j-1].offset; j-- {
			rs[j], rs[j-1] = rs[j-1], rs[j]
		}
	}
}

func enrichConfig(url string, policy enrich.Policy) *enrich.Config {
	return &enrich.Config{
		URL: url + "/lookup", Key: "user_id",
		Fields:    []enrich.Field{{Name: "segment", Type: enrich.TypeString}, {Name: "score", Type: enrich.TypeDouble}, {Name: "vip", Type: enrich.TypeBoolean}},
		BatchSize: 200, Timeout: enrich.Duration(time.Second), Retries: 1, BackoffMin: enrich.Duration(10 * time.Millisecond), BackoffMax: enrich.Duration(50 * time.Millisecond),
		Breaker: enrich.BreakerConfig{Policy: policy, MinRequests: 2, OpenTimeout: enrich.Duration(500 * time.Millisecond)},
	}
}

func startServer(t *testing.T, cfg enrich.ServerConfig) (*enrich.Server, string) {
	t.Helper()
	srv := enrich.NewServer(cfg)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv, url
}

var fastCommit = pipeline.CommitConfig{Interval: pipeline.Duration(300 * time.Millisecond)}

func TestEnrichmentValuesAndOrder(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 20 * time.Millisecond, P99: 300 * time.Millisecond, MissRate: 0.1})
	reg := prometheus.NewRegistry()
	tbl, end, _ := startMemberWith(t, 3000, fastCommit, enrichConfig(url, enrich.PolicyPause), nil, pipeline.WithRegisterer(reg))
	waitCaughtUp(t, tbl, end, 60*time.Second)
	if n, err := testutil.GatherAndCount(reg, "floe_enrich_results_total"); err != nil || n == 0 {
		t.Fatalf("enrichment metrics not registered: %d series, %v", n, err)
	}
	rows := readEnriched(t, tbl)
	if len(rows) != 3000 {
		t.Fatalf("%d rows, want 3000", len(rows))
	}
	checkOnceInOrder(t, rows)
	var ok, miss int
	for _, r := range rows {
		switch r.status {
		case "ok":
			ok++
			if want := enrich.Attributes(r.user)["segment"]; r.segment != want {
				t.Fatalf("user %s: segment %q, want %q", r.user, r.segment, want)
			}
		case "miss":
			miss++
			if srv.Knows(r.user) || r.segment != "" {
				t.Fatalf("user %s: miss, but the server knows it (segment %q)", r.user, r.segment)
			}
		default:
			t.Fatalf("status %q", r.status)
		}
	}
	if ok == 0 || miss == 0 {
		t.Fatalf("ok %d, miss %d: want both", ok, miss)
	}
	if srv.Requests() >= 3000/10 {
		t.Fatalf("%d requests for 3000 records: lookups are not batched", srv.Requests())
	}
}

// TestEnrichmentPauseOutage: with the service down for 30 s under the pause
// policy, nothing is committed past the last enriched record, nothing is
// lost or duplicated, and the pipeline resumes by itself.
func TestEnrichmentPauseOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("30-second outage")
	}
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	srv.SetOutage(true)
	tbl, end, m := startEnrichedMember(t, 2000, fastCommit, enrichConfig(url, enrich.PolicyPause))
	time.Sleep(30 * time.Second)
	if n := m.Stats().Rows.Load(); n != 0 {
		t.Fatalf("%d rows committed during the outage under pause", n)
	}
	srv.SetOutage(false)
	waitCaughtUp(t, tbl, end, 60*time.Second)
	rows := readEnriched(t, tbl)
	if len(rows) != 2000 {
		t.Fatalf("%d rows, want 2000", len(rows))
	}
	checkOnceInOrder(t, rows)
	for _, r := range rows {
		if r.status != "ok" {
			t.Fatalf("row %d/%d: status %q after the outage, want ok", r.partition, r.offset, r.status)
		}
	}
}

func TestEnrichmentOutagePolicies(t *testing.T) {
	for _, tc := range []struct {
		policy   enrich.Policy
		statuses map[string]bool // allowed _enrich_status values
		dead     bool            // records go to the dead-letter topic
	}{
		{enrich.PolicyPassthrough, map[string]bool{"skipped": true, "error": true}, false},
		{enrich.PolicyDLQ, nil, true},
	} {
		t.Run(string(tc.policy), func(t *testing.T) {
			srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
			srv.SetOutage(true)
			tbl, end, m := startEnrichedMember(t, 1000, fastCommit, enrichConfig(url, tc.policy))
			waitCaughtUp(t, tbl, end, 60*time.Second)
			rows := readEnriched(t, tbl)
			checkOnceInOrder(t, rows)
			if tc.dead {
				if len(rows) != 0 || m.Stats().DeadLettered.Load() != 1000 {
					t.Fatalf("%d rows, %d dead letters; want 0 and 1000", len(rows), m.Stats().DeadLettered.Load())
				}
				return
			}
			if len(rows) != 1000 {
				t.Fatalf("%d rows, want 1000", len(rows))
			}
			for _, r := range rows {
				if !tc.statuses[r.status] || r.segment != "" {
					t.Fatalf("status %q segment %q under %s", r.status, r.segment, tc.policy)
				}
			}
		})
	}
}

// TestEnrichmentRetriesAndSingleMode: a service failing a third of its
// requests (retried) and a service without a batch endpoint (single-key GET
// with coalescing) both end with every row enriched exactly once.
func TestEnrichmentRetriesAndSingleMode(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server enrich.ServerConfig
		mode   string
	}{
		{"retried 503s", enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 50 * time.Millisecond, ErrorRate: 0.8, Seed: 5}, enrich.ModeBatch},
		{"single-key GET", enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 50 * time.Millisecond}, enrich.ModeSingle},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, url := startServer(t, tc.server)
			cfg := enrichConfig(url, enrich.PolicyPause)
			cfg.Retries = 5
			cfg.BatchSize = 10             // many requests, so many are failed and retried
			cfg.Breaker.MinRequests = 1000 // the 503s must be retried, not trip the breaker
			if tc.mode == enrich.ModeSingle {
				cfg.Mode, cfg.URL = enrich.ModeSingle, url+"/lookup/{key}"
			}
			reg := prometheus.NewRegistry()
			tbl, end, _ := startMemberWith(t, 1500, fastCommit, cfg, nil, pipeline.WithRegisterer(reg))
			waitCaughtUp(t, tbl, end, 60*time.Second)
			if tc.server.ErrorRate > 0 {
				if retries := gatherCounter(t, reg, "floe_enrich_retries_total"); retries == 0 {
					t.Fatal("no request was retried: the failures were not exercised")
				}
			}
			rows := readEnriched(t, tbl)
			if len(rows) != 1500 {
				t.Fatalf("%d rows, want 1500", len(rows))
			}
			checkOnceInOrder(t, rows)
			for _, r := range rows {
				if r.status != "ok" || r.segment != enrich.Attributes(r.user)["segment"] {
					t.Fatalf("user %s: status %q segment %q", r.user, r.status, r.segment)
				}
			}
			if srv.Requests() == 0 {
				t.Fatal("the service was never asked")
			}
		})
	}
}

// gatherCounter sums the counter or gauge family name in reg.
func gatherCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// TestLagDuringEnrichmentOutage: while an enrichment service is down under
// policy pause, the records waiting in the lanes show as lag, in records
// and in seconds, and as records in flight. floe_consumer_lag_seconds read
// 0 on every partition (the records never reached a buffer), lag in records
// froze at the end offsets read when the partitions were assigned, and a
// lane holding fewer than 256 records never reported them in flight.
func TestLagDuringEnrichmentOutage(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://" + ln.Addr().String() // nothing answers there
	ln.Close()
	j := newJob(t, 400, fastCommit, enrichConfig(dead, enrich.PolicyPause))
	reg := prometheus.NewRegistry()
	m := runMember(t, j.cfg, j.tbl, j.sc, pipeline.WithRegisterer(reg))
	if err := m.Stats().Register(reg); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the breaker to open with every partition assigned", func() bool {
		return gatherCounter(t, reg, "floe_enrich_breaker_state") == 2 && m.Stats().Assigned.Load() == 4
	})
	if _, err := j.cl.ProduceRate(t.Context(), "clicks", clickgen.New(clickgen.Config{Sessions: 100, Seed: 9}), 400, 0); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "lag of the 800 records waiting, in records and seconds, and them in flight", func() bool {
		return gatherCounter(t, reg, "floe_consumer_lag_records") == 800 && gatherCounter(t, reg, "floe_consumer_lag_seconds") > 0 &&
			gatherCounter(t, reg, "floe_enrich_in_flight_records") > 0
	})
	if c := m.Stats().Commits.Load(); c != 0 {
		t.Fatalf("%d commits with the service down", c)
	}
}

// TestEnrichmentOnlyWhatTheRouteTakes: a field route of an enriched topic
// looks up the keys of the records it takes and no others; the others pass
// its lanes in order without a lookup, and its watermark covers them.
func TestEnrichmentOnlyWhatTheRouteTakes(t *testing.T) {
	_, url := startServer(t, enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 50 * time.Millisecond})
	const n = 3000
	j := newJob(t, n, fastCommit, enrichConfig(url, enrich.PolicyPause))
	cfg := j.cfg
	table := cfg.Table.Name
	cfg.Kafka.Topic, cfg.Table.Name = "", ""
	cfg.Routes = []pipeline.RouteConfig{
		{Topic: "clicks", Group: "g", Table: pipeline.TableConfig{Name: table},
			Where: &pipeline.WhereConfig{Field: "event_type", In: []string{"page_view"}}},
		{Topic: "clicks", Group: "g.other", Table: pipeline.TableConfig{Name: "t.other"},
			Where: &pipeline.WhereConfig{Default: true}},
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	route := cfg.Jobs()[0]
	reg := prometheus.NewRegistry()
	m := runMember(t, route, j.tbl, j.sc, pipeline.WithRegisterer(reg))
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)

	rows := readEnriched(t, j.tbl)
	checkOnceInOrder(t, rows)
	filtered := m.Stats().Filtered.Load()
	if len(rows) == 0 || filtered == 0 || int64(len(rows))+filtered != n {
		t.Fatalf("%d rows and %d records filtered, want both and %d in all", len(rows), filtered, n)
	}
	for _, r := range rows {
		if r.status != "ok" || r.segment != enrich.Attributes(r.user)["segment"] {
			t.Fatalf("user %s: status %q segment %q", r.user, r.status, r.segment)
		}
	}
	// Every record the route takes has a user_id, so each is one cache
	// read (a hit, or a miss that joins or starts a lookup); the others none.
	// A lane reports the records it skipped within half a second, so the
	// counters may lag the table that long.
	var looked, results float64
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		looked = gatherCounter(t, reg, "floe_enrich_cache_hits_total") + gatherCounter(t, reg, "floe_enrich_cache_misses_total")
		results = gatherCounter(t, reg, "floe_enrich_results_total")
		if (looked >= float64(len(rows)) && results >= float64(len(rows))) || time.Now().After(deadline) {
			break
		}
	}
	if looked != float64(len(rows)) || results != float64(len(rows)) {
		t.Fatalf("%v cache reads and %v results for %d rows taken: records of other routes were looked up", looked, results, len(rows))
	}
}

// TestEnrichmentCachedRecordWaitsItsTurn: once a lane is idle, a record
// whose key is cached skips it (enrich.Queue.Direct), but never while an
// earlier record of its partition waits for a lookup. One session (so one
// partition) first brings a user into the cache, then sends a record of an
// unknown user followed by records of the cached one, which must be
// buffered after it; then a cached, an unknown and a cached one again. All
// rows are committed once, enriched, in the order of their offsets.
func TestEnrichmentCachedRecordWaitsItsTurn(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 400 * time.Millisecond, P99: 400 * time.Millisecond})
	reg := prometheus.NewRegistry()
	j := newJob(t, 0, fastCommit, enrichConfig(url, enrich.PolicyPause))
	runMember(t, j.cfg, j.tbl, j.sc, pipeline.WithRegisterer(reg))

	seq := 0
	produce := func(users ...string) map[int32]int64 {
		t.Helper()
		msgs := make([]clickgen.Message, len(users))
		for i, u := range users {
			seq++
			msgs[i] = clickgen.Message{Key: []byte("s-1"), Value: fmt.Appendf(nil,
				`{"event_id":"e-%d","session_id":"s-1","user_id":%q,"event_type":"page_view","ts":1732860000000,"seq":%d}`, seq, u, seq)}
		}
		got, err := j.cl.Produce(t.Context(), "clicks", msgs)
		if err != nil {
			t.Fatal(err)
		}
		end := map[int32]int64{}
		for p, offs := range got {
			end[p] = offs[len(offs)-1] + 1
		}
		return end
	}
	waitCaughtUp(t, j.tbl, produce("u-warm", "u-warm"), 30*time.Second)
	waitCaughtUp(t, j.tbl, produce("u-cold", "u-warm", "u-warm", "u-warm"), 30*time.Second)
	// The lane idle again: the first record skips it, the next one needs
	// it, and the last one queues behind that.
	waitCaughtUp(t, j.tbl, produce("u-warm", "u-new", "u-warm"), 30*time.Second)

	rows := readEnriched(t, j.tbl) // checks the order they were buffered in
	if len(rows) != 9 {
		t.Fatalf("%d rows, want 9", len(rows))
	}
	checkOnceInOrder(t, rows)
	for _, r := range rows {
		if want := enrich.Attributes(r.user)["segment"]; r.status != "ok" || r.segment != want {
			t.Fatalf("offset %d, user %s: status %s, segment %q; want ok, %q", r.offset, r.user, r.status, r.segment, want)
		}
	}
	if n := srv.Requests(); n != 3 {
		t.Fatalf("%d lookup requests, want 3 (one per user)", n)
	}
	// Every u-warm but the first two hit the cache (the second joined the
	// first's lookup), through the lane or not; what skipped it reaches
	// the metrics within a second, however quiet the partition.
	deadline := time.Now().Add(5 * time.Second)
	for gatherCounter(t, reg, "floe_enrich_cache_hits_total") != 5 {
		if time.Now().After(deadline) {
			t.Fatalf("%v cache hits, want 5", gatherCounter(t, reg, "floe_enrich_cache_hits_total"))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestEnrichmentCacheFileWarmsTheNextRun: a job with enrich.cache_file saves
// its cache when it stops, and the next run (a scheduled job's) looks up
// none of the users the first one did, and still writes their values.
func TestEnrichmentCacheFileWarmsTheNextRun(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 50 * time.Millisecond, MissRate: 0.1})
	ecfg := enrichConfig(url, enrich.PolicyPause)
	ecfg.CacheFile = filepath.Join(t.TempDir(), "enrich.cache")
	// run consumes the same 2,000 records into a new table until caught
	// up, stops, checks the rows and returns the lookup requests it sent.
	run := func() int64 {
		t.Helper()
		j := newJob(t, 2000, fastCommit, ecfg)
		before := srv.Requests()
		runUntilCaughtUp(t, j)
		rows := readEnriched(t, j.tbl)
		checkOnceInOrder(t, rows)
		for _, r := range rows {
			known := srv.Knows(r.user)
			if (!known && r.status != "miss") || (known && (r.status != "ok" || r.segment != enrich.Attributes(r.user)["segment"])) {
				t.Fatalf("user %s (known to the service: %v): status %q segment %q", r.user, known, r.status, r.segment)
			}
		}
		if len(rows) != 2000 {
			t.Fatalf("%d rows, want 2000", len(rows))
		}
		return srv.Requests() - before
	}
	if n := run(); n == 0 {
		t.Fatal("the first run sent no lookup request")
	}
	if n := run(); n != 0 {
		t.Fatalf("the second run sent %d lookup requests for the users the first looked up", n)
	}
}

// TestDeadLettersKeepSourceHeaders: a record that does not decode, and with
// enrichment one the dlq policy sends away during an outage, reach the
// dead-letter topic of a real broker with their own headers beside floe's.
func TestDeadLettersKeepSourceHeaders(t *testing.T) {
	for _, enriched := range []bool{false, true} {
		t.Run(fmt.Sprint("enriched=", enriched), func(t *testing.T) {
			var cfg *enrich.Config
			if enriched {
				srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
				srv.SetOutage(true)
				cfg = enrichConfig(url, enrich.PolicyDLQ)
			}
			j := newJob(t, 0, fastCommit, cfg)
			cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.ConsumeTopics(j.cfg.Kafka.DLQTopic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			valid := clickgen.New(clickgen.Config{Sessions: 1, Seed: 4}).Next()
			produced := cl.ProduceSync(t.Context(),
				&kgo.Record{Topic: "clicks", Key: valid.Key, Value: valid.Value, Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("t-valid")}}},
				&kgo.Record{Topic: "clicks", Key: []byte("s-bad"), Value: []byte("{"), Headers: []kgo.RecordHeader{
					{Key: "traceparent", Value: []byte("t-bad")}, {Key: pipeline.HeaderReason, Value: []byte("stale")}}})
			if err := produced.FirstErr(); err != nil {
				t.Fatal(err)
			}
			if j.end, err = j.cl.EndOffsets(t.Context(), "clicks"); err != nil {
				t.Fatal(err)
			}
			runUntilCaughtUp(t, j)

			want := map[string]string{"t-bad": "malformed_json"} // traceparent → floe.reason
			if enriched {
				want["t-valid"] = pipeline.ReasonEnrichFailed
			}
			got := map[string]string{}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			for len(got) < len(want) && ctx.Err() == nil {
				cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
					var trace, reasons []string
					for _, h := range r.Headers {
						switch h.Key {
						case "traceparent":
							trace = append(trace, string(h.Value))
						case pipeline.HeaderReason:
							reasons = append(reasons, string(h.Value))
						}
					}
					if len(trace) != 1 || len(reasons) != 1 {
						t.Fatalf("dead letter at %d: traceparent %q, %s %q; want one of each", r.Offset, trace, pipeline.HeaderReason, reasons)
					}
					got[trace[0]] = reasons[0]
				})
			}
			if !maps.Equal(got, want) {
				t.Fatalf("dead letters by traceparent: %v, want %v", got, want)
			}
		})
	}
}

// TestEnrichFailedOnlyForRecordsThatWouldBeRows: under policy dlq during
// an outage, records whose lookup key is found but that cannot become rows
// (malformed, over max_message_bytes, a required field missing) are
// dead-lettered for their own fault; only the valid record gets
// enrich_failed. Before, every record the stage completed as dead was
// dead-lettered as enrich_failed undecoded: a reason of the moment, which a
// replay or verify would take for a row that could still come.
func TestEnrichFailedOnlyForRecordsThatWouldBeRows(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	srv.SetOutage(true)
	j := newJob(t, 0, fastCommit, enrichConfig(url, enrich.PolicyDLQ))
	j.cfg.Kafka.MaxMessageBytes = 4 << 10
	valid := string(clickgen.New(clickgen.Config{Sessions: 1, Seed: 4}).Next().Value)
	cases := []struct{ value, reason string }{
		{valid, pipeline.ReasonEnrichFailed},
		{strings.Replace(valid, `"seq":1`, `"seq":01`, 1), schemas.ReasonMalformedJSON},
		{strings.Replace(valid, `"referrer":""`, `"referrer":"`+strings.Repeat("r", 8<<10)+`"`, 1), schemas.ReasonTooLarge},
		{`{"session_id":"s-0","user_id":"u-0","event_type":"page_view"}`, schemas.ReasonMissingField},
	}
	for i, got := range ingestReasons(t, j, cases) {
		if got != cases[i].reason {
			t.Errorf("dead letter of %.60s…: reason %q, want %q", cases[i].value, got, cases[i].reason)
		}
	}
}

// TestPauseDoesNotHoldRecordsThatCannotBeRows: under policy pause, records
// whose key the service keeps failing (a 500 for that key alone) but that
// could not become rows anyway (malformed, over max_message_bytes, a
// required field missing) are dead-lettered at once with their own
// reasons, and the records behind them are stored. They waited for an
// answer they could not use, and their partition stopped for as long as
// the service failed the key.
func TestPauseDoesNotHoldRecordsThatCannotBeRows(t *testing.T) {
	_, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency, FailKeys: []string{"u-poison"}})
	j := newJob(t, 0, fastCommit, enrichConfig(url, enrich.PolicyPause))
	j.cfg.Kafka.MaxMessageBytes = 4 << 10
	valid := string(clickgen.New(clickgen.Config{Sessions: 1, Seed: 4}).Next().Value)
	user := regexp.MustCompile(`"user_id":"[^"]*"`)
	poison := user.ReplaceAllString(valid, `"user_id":"u-poison"`)
	cases := []struct{ value, reason string }{
		{strings.Replace(poison, `"seq":1`, `"seq":01`, 1), schemas.ReasonMalformedJSON},
		{strings.Replace(poison, `"referrer":""`, `"referrer":"`+strings.Repeat("r", 8<<10)+`"`, 1), schemas.ReasonTooLarge},
		{`{"session_id":"s-0","user_id":"u-poison","event_type":"page_view"}`, schemas.ReasonMissingField},
		{valid, ""},
	}
	if !strings.Contains(cases[0].value, "u-poison") || cases[0].value == poison {
		t.Fatalf("the malformed record is not one: %s", cases[0].value)
	}
	for i, got := range ingestReasons(t, j, cases) {
		if got != cases[i].reason {
			t.Errorf("dead letter of %.60s…: reason %q, want %q", cases[i].value, got, cases[i].reason)
		}
	}
	if rows := readEnriched(t, j.tbl); len(rows) != 1 || rows[0].status != string(enrich.StatusOK) {
		t.Errorf("rows %+v, want the valid record's, enriched", rows)
	}
}

// ingestReasons produces cases' values to one partition, in this order,
// runs a member of j until the table holds them, and returns each record's
// dead-letter reason ("" when it has none).
func ingestReasons(t *testing.T, j *job, cases []struct{ value, reason string }) []string {
	t.Helper()
	msgs := make([]clickgen.Message, len(cases))
	for i, c := range cases {
		msgs[i] = clickgen.Message{Key: []byte("s-0"), Value: []byte(c.value)}
	}
	landed, err := j.cl.Produce(t.Context(), "clicks", msgs)
	if err != nil {
		t.Fatal(err)
	}
	if j.end, err = j.cl.EndOffsets(t.Context(), "clicks"); err != nil {
		t.Fatal(err)
	}
	runUntilCaughtUp(t, j)
	dl, err := pipeline.ReadDeadLetters(t.Context(), j.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	reasons := make([]string, len(cases))
	for p, offs := range landed {
		for i, off := range offs {
			reasons[i] = dl[p][off]
		}
	}
	return reasons
}

// TestEnrichFailedDeadLettersRedoneAsRowsVerify: under policy dlq during
// an outage, a flush writes its enrich_failed dead letters (acknowledged)
// and then cannot commit (the catalog refusing until the stop's
// commit.grace; a crash between the two steps does the same). The next run
// redoes those offsets with the service answering, and stores them as
// rows. Each offset is then a row and a dead letter; verify reported the
// table as not reconciling (exit 1 from `floe verify`) although nothing
// was lost or duplicated. The dead letters now carry their reason, and
// verify counts them as superseded by the rows.
func TestEnrichFailedDeadLettersRedoneAsRowsVerify(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	srv.SetOutage(true)
	j := newJob(t, 200, fastCommit, enrichConfig(url, enrich.PolicyDLQ))
	j.cfg.Commit.Grace = pipeline.Duration(time.Second)
	ft, fc := faultyTable(t, j)
	refused := make([]faultcat.Fault, 10000)
	for i := range refused {
		refused[i] = faultcat.Unavailable
	}
	fc.Inject(refused...)
	m, err := pipeline.NewMember(j.cfg, ft, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	for deadline := time.Now().Add(30 * time.Second); m.Stats().DeadLettered.Load() < 200 || m.Stats().FlushRetries.Load() < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("dead-lettered %d, flush retries %d; want 200 written and their commit refused",
				m.Stats().DeadLettered.Load(), m.Stats().FlushRetries.Load())
		}
	}
	stop()
	waitRun(t, done, 20*time.Second, "the member did not stop")

	srv.SetOutage(false)
	runUntilCaughtUp(t, j)
	dl, err := pipeline.ReadDeadLetters(t.Context(), j.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, offs := range dl {
		for o, reason := range offs {
			if reason != pipeline.ReasonEnrichFailed {
				t.Fatalf("dead letter of %d/%d: reason %q, want %s", p, o, reason, pipeline.ReasonEnrichFailed)
			}
		}
	}
	rep, err := j.tbl.Verify(t.Context(), "clicks", dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := rep.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	var superseded int64
	for _, p := range rep.Partitions {
		superseded += p.DeadLettersSuperseded
	}
	if !rep.OK() || rep.Rows != 200 || rep.DeadLetters == 0 || superseded != rep.DeadLetters {
		t.Fatalf("verify after the redo: OK %v, %d rows, %d dead letters, %d superseded; want OK, 200 rows, every dead letter superseded\n%s",
			rep.OK(), rep.Rows, rep.DeadLetters, superseded, out.String())
	}
}

// TestWithEnrichmentNamesTheField: an enrichment field whose name a column
// of the schema has, also in another case ("Session_Id" beside session_id,
// "_ENRICH_STATUS"), or an earlier field has, is refused with its index in
// enrich.fields. Names that differ only in case were accepted; Spark and
// Trino cannot read such a table.
func TestWithEnrichmentNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		fields []enrich.Field
		want   string
	}{
		{[]enrich.Field{{Name: "segment", Type: enrich.TypeString}, {Name: "Session_Id", Type: enrich.TypeString}},
			`enrich.fields[1] Session_Id: schema clickstream: column "Session_Id" differs from column "session_id" only in case`},
		{[]enrich.Field{{Name: "_ENRICH_STATUS", Type: enrich.TypeString}}, `enrich.fields[0] _ENRICH_STATUS: `},
		{[]enrich.Field{{Name: "segment", Type: enrich.TypeString}, {Name: "tier", Type: enrich.TypeLong}, {Name: "SEGMENT", Type: enrich.TypeString}},
			`enrich.fields[2] SEGMENT: schema clickstream: column "SEGMENT" differs from column "segment" only in case`},
		{[]enrich.Field{{Name: "user_id", Type: enrich.TypeString}}, `enrich.fields[0] user_id: schema clickstream: column "user_id" collides with enrichment column`},
	} {
		sc, err := schemas.Lookup(schemas.Clickstream)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pipeline.WithEnrichment(sc, &enrich.Config{Fields: tc.fields}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("WithEnrichment(%v) = %v, want an error with %q", tc.fields, err, tc.want)
		}
	}
}
