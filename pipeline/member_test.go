package pipeline_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/catalog/rest"
	"github.com/apache/iceberg-go/table"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/internal/unwritable"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// startMember runs one in-process member against a fresh broker and table,
// with the commit settings of commit, after producing n records.
func startMember(t *testing.T, n int, commit pipeline.CommitConfig) (*lakehouse.Table, map[int32]int64, *pipeline.Member) {
	t.Helper()
	return startEnrichedMember(t, n, commit, nil)
}

// startEnrichedMember is startMember with an enrich section (nil: none).
func startEnrichedMember(t *testing.T, n int, commit pipeline.CommitConfig, enrichCfg *enrich.Config) (*lakehouse.Table, map[int32]int64, *pipeline.Member) {
	t.Helper()
	return startMemberWith(t, n, commit, enrichCfg, nil)
}

// startMemberWith is startEnrichedMember whose member commits through a
// fault-injecting wrapper of the real catalog with these faults planned.
func startMemberWith(t *testing.T, n int, commit pipeline.CommitConfig, enrichCfg *enrich.Config, faults []faultcat.Fault, opts ...pipeline.Option) (*lakehouse.Table, map[int32]int64, *pipeline.Member) {
	t.Helper()
	j := newJob(t, n, commit, enrichCfg)
	memberTable := j.tbl
	if faults != nil {
		var fc *faultcat.Catalog
		memberTable, fc = faultyTable(t, j)
		fc.Inject(faults...)
	}
	return j.tbl, j.end, runMember(t, j.cfg, memberTable, j.sc, opts...)
}

// faultyTable opens j's table again through a fault-injecting wrapper of
// the real catalog.
func faultyTable(t *testing.T, j *job) (*lakehouse.Table, *faultcat.Catalog) {
	t.Helper()
	cat, err := lakehouse.OpenCatalog(t.Context(), j.cfg.Table.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	fc := faultcat.Wrap(cat)
	tbl, err := lakehouse.OpenIn(t.Context(), fc, lakehouse.Config{Table: j.cfg.Table.Name, Group: "g"}, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return tbl, fc
}

// waitRun waits up to within for a Run started by startRun to return, and
// fails the test, saying what it waited for, if it does not, or fails.
func waitRun(t *testing.T, done <-chan error, within time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(within):
		t.Fatalf("%s within %s", what, within)
	}
}

// startRun starts m.Run in the background; done receives its result, and
// stop cancels it.
func startRun(m *pipeline.Member) (done <-chan error, stop context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	go func() { ch <- m.Run(ctx) }()
	return ch, cancel
}

// runMember starts a member of cfg on tbl; the test's cleanup stops it and
// fails the test if Run returned an error.
func runMember(t *testing.T, cfg pipeline.Config, tbl *lakehouse.Table, sc *schemas.Schema, opts ...pipeline.Option) *pipeline.Member {
	t.Helper()
	m, err := pipeline.NewMember(cfg, tbl, sc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return m
}

// runUntilCaughtUp runs a member of j until its table holds every record
// produced, then stops it; a failed Run fails the test.
func runUntilCaughtUp(t *testing.T, j *job) {
	t.Helper()
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// job is a broker with n records on a 4-partition topic, a config and a
// table, for tests that run members or replays on them.
type job struct {
	cl  *embedded.Cluster
	cfg pipeline.Config
	tbl *lakehouse.Table
	sc  *schemas.Schema
	end map[int32]int64
}

func newJob(t *testing.T, n int, commit pipeline.CommitConfig, enrichCfg *enrich.Config) *job {
	t.Helper()
	cl, err := embedded.StartTopic(t.Context(), "clicks", 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return newJobOn(t, cl, n, commit, enrichCfg)
}

// newJobOn is newJob on cl, which has the topic "clicks".
func newJobOn(t *testing.T, cl *embedded.Cluster, n int, commit pipeline.CommitConfig, enrichCfg *enrich.Config) *job {
	t.Helper()
	ctx := t.Context()
	if n > 0 {
		if _, err := cl.ProduceRate(ctx, "clicks", clickgen.New(clickgen.Config{Sessions: 100, Seed: 3}), n, 0); err != nil {
			t.Fatal(err)
		}
	}
	end, err := cl.EndOffsets(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	cfg := pipeline.Config{
		Kafka: pipeline.KafkaConfig{Brokers: cl.Addrs(), Topic: "clicks", Group: "g",
			SessionTimeout: pipeline.Duration(6 * time.Second), HeartbeatInterval: pipeline.Duration(250 * time.Millisecond),
			RebalanceTimeout: pipeline.Duration(10 * time.Second)},
		Table: pipeline.TableConfig{Name: "t.clicks", Catalog: map[string]string{
			"type": "sql", "uri": "file:" + filepath.Join(dir, "c.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
			"warehouse": "file://" + filepath.Join(dir, "wh")}},
		Commit: commit,
		Enrich: enrichCfg,
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	sc, _ := schemas.Lookup(schemas.Clickstream)
	sc, err = pipeline.WithEnrichment(sc, cfg.Enrich)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := lakehouse.Open(ctx, lakehouse.Config{Table: cfg.Table.Name, Catalog: cfg.Table.Catalog, Group: "g"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return &job{cl: cl, cfg: cfg, tbl: tbl, sc: sc, end: end}
}

// waitFor polls cond until it holds, failing the test with what (what did
// not happen) once within has passed.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal(what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitCaughtUp polls the table until its watermarks reach end.
func waitCaughtUp(t *testing.T, tbl *lakehouse.Table, end map[int32]int64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		wm, err := tbl.Watermarks(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		caught := true
		for p, o := range end {
			if w, _ := wm.Get("clicks", p); w < o {
				caught = false
			}
		}
		if caught {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("not caught up within %s", within)
}

// commitSizes returns the rows of each floe commit, oldest first.
func commitSizes(t *testing.T, tbl *lakehouse.Table) []int {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, s := range it.Metadata().Snapshots() {
		if v, ok := s.Summary.Properties[lakehouse.RowsKey]; ok {
			n, _ := strconv.Atoi(v)
			sizes = append(sizes, n)
		}
	}
	return sizes
}

func TestFlushTriggers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		records  int
		commit   pipeline.CommitConfig
		maxRows  int // no commit may hold more rows (a trigger may overshoot by one record per partition)
		minCount int // at least this many commits
	}{
		// The interval flushes only the remainder here.
		{"record count", 4000, pipeline.CommitConfig{Interval: pipeline.Duration(2 * time.Second), MaxRecords: 1000}, 1000 + 4, 4},
		{"buffered bytes", 2000, pipeline.CommitConfig{Interval: pipeline.Duration(2 * time.Second), MaxBytes: 64 << 10}, 400, 5},
		{"interval", 300, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, 300, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tbl, end, _ := startMember(t, tc.records, tc.commit)
			waitCaughtUp(t, tbl, end, 30*time.Second)
			sizes := commitSizes(t, tbl)
			total := 0
			for _, n := range sizes {
				total += n
				if n > tc.maxRows {
					t.Fatalf("a commit held %d rows, over the trigger's %d (all: %v)", n, tc.maxRows, sizes)
				}
			}
			if len(sizes) < tc.minCount || total != tc.records {
				t.Fatalf("%d commits with %d rows in all (%v), want at least %d commits and %d rows", len(sizes), total, sizes, tc.minCount, tc.records)
			}
		})
	}
}

func TestMetricsEndpoint(t *testing.T) {
	tbl, end, m := startMember(t, 500, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	serve, err := pipeline.ListenMetrics(t.Context(), addr, prometheus.NewRegistry(), m.Stats())
	if err != nil {
		t.Fatal(err)
	}
	go serve()
	if _, err := pipeline.ListenMetrics(t.Context(), addr, prometheus.NewRegistry(), m.Stats()); err == nil {
		t.Fatal("a second listener on a taken port did not fail")
	}
	waitCaughtUp(t, tbl, end, 30*time.Second)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz = %d while assigned", code)
	}
	if code, _ := get("/livez"); code != http.StatusOK {
		t.Fatalf("/livez = %d", code)
	}
	_, body := get("/metrics")
	wants := []string{"floe_rows_committed_total 500", "floe_records_consumed_total 500", "floe_assigned_partitions 4",
		"floe_rebalances_total 1", "floe_topic_partitions 4", "floe_stalled 0", "floe_commit_conflicts_total 0"}
	for p := range 4 {
		wants = append(wants, fmt.Sprintf(`floe_consumer_lag_records{partition="%d",topic="clicks"} 0`, p),
			fmt.Sprintf(`floe_consumer_lag_seconds{partition="%d",topic="clicks"} 0`, p))
	}
	for _, want := range wants {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	commits := m.Stats().Commits.Load()
	if !strings.Contains(body, fmt.Sprintf("floe_flush_rows_count %d", commits)) || !strings.Contains(body, "floe_flush_rows_sum 500") {
		t.Errorf("/metrics: flush size histogram does not count %d flushes of 500 rows in all", commits)
	}
	if m.Stats().FreshnessNanos.Load() <= 0 {
		t.Error("floe_freshness_seconds was not set by the commits")
	}
}

// TestPartitionsAdded: partitions added to the topic while the job runs are
// picked up without a restart and read from their start (even with
// start_offset: latest, whose records would otherwise be skipped), and the
// change is counted as an ordering hazard and recorded in the table.
func TestPartitionsAdded(t *testing.T) {
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, nil)
	j.cfg.Kafka.StartOffset = "latest"
	ctx := t.Context()
	m := runMember(t, j.cfg, j.tbl, j.sc)
	deadline := time.Now().Add(30 * time.Second)
	for m.Stats().Assigned.Load() != 4 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second) // readers positioned at the end
	gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 5})
	if _, err := j.cl.ProduceRate(ctx, "clicks", gen, 400, 0); err != nil {
		t.Fatal(err)
	}
	end, err := j.cl.EndOffsets(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, j.tbl, end, 30*time.Second)
	if n, ok, err := j.tbl.PartitionCount(ctx, "clicks"); err != nil || !ok || n != 4 {
		t.Fatalf("recorded partition count = %d, %v, %v; want 4", n, ok, err)
	}

	if err := j.cl.AddPartitions(ctx, "clicks", 6); err != nil {
		t.Fatal(err)
	}
	// The producer learns the new count by an asynchronous metadata
	// refresh: produce until both new partitions have records.
	produced := 400
	for range 20 {
		if _, err := j.cl.ProduceRate(ctx, "clicks", gen, 300, 0); err != nil {
			t.Fatal(err)
		}
		produced += 300
		if end, err = j.cl.EndOffsets(ctx, "clicks"); err != nil {
			t.Fatal(err)
		}
		if len(end) == 6 && end[4] > 0 && end[5] > 0 {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	if len(end) != 6 || end[4] == 0 || end[5] == 0 {
		t.Fatalf("end offsets %v: the new partitions got no records", end)
	}
	waitCaughtUp(t, j.tbl, end, 60*time.Second)
	if n := distinctIDs(t, j.tbl); n != produced {
		t.Fatalf("%d distinct ids, want %d", n, produced)
	}
	if got := m.Stats().PartitionsAdded.Load(); got != 2 {
		t.Fatalf("floe_partitions_added_total = %d, want 2", got)
	}
	if n, _, _ := j.tbl.PartitionCount(ctx, "clicks"); n != 6 {
		t.Fatalf("recorded partition count = %d, want 6", n)
	}
}

// growTo6 grows j's topic from 4 partitions to 6 and writes 50 records to
// each added one; it returns the generator, for more records, and how many
// it wrote.
func growTo6(t *testing.T, j *job) (*clickgen.Generator, int) {
	t.Helper()
	if err := j.cl.AddPartitions(t.Context(), "clicks", 6); err != nil {
		t.Fatal(err)
	}
	gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 5})
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	produced := 0
	for _, p := range []int32{4, 5} {
		for range 50 {
			msg := gen.Next()
			if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "clicks", Partition: p, Key: msg.Key, Value: msg.Value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			produced++
		}
	}
	return gen, produced
}

// TestPartitionsAddedDuringTheFirstGenerationsStart: partitions added to a
// start_offset latest topic after the job's first generation was assigned
// (4 partitions) but before its member read the topic's partition count
// for the pins (here: while the catalog did not answer the watermarks'
// read) were recorded in the pins as partitions the topic had when the job
// first started (floe.start_partitions=6). The next generation pinned them
// at their end, skipping what was written to them before the rebalance.
func TestPartitionsAddedDuringTheFirstGenerationsStart(t *testing.T) {
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, nil)
	j.cfg.Kafka.StartOffset = "latest"
	ctx := t.Context()
	tbl, fc := faultyTable(t, j)
	fc.Outage(true)
	m, err := pipeline.NewMember(j.cfg, tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "4 partitions assigned", func() bool { return m.Stats().Assigned.Load() == 4 && fc.FailedLoads() >= 1 })
	time.Sleep(time.Second) // the partition watcher has read its count (4)
	gen, produced := growTo6(t, j)
	fc.Outage(false)
	if m.Stats().Assigned.Load() != 4 {
		t.Fatalf("rebalanced before the outage ended; the test proves nothing")
	}
	waitFor(t, 60*time.Second, "6 partitions assigned", func() bool { return m.Stats().Assigned.Load() == 6 })
	time.Sleep(time.Second)
	if _, err := j.cl.ProduceRate(ctx, "clicks", gen, 300, 0); err != nil {
		t.Fatal(err)
	}
	produced += 300
	end, err := j.cl.EndOffsets(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, tbl, end, 60*time.Second)
	if n := distinctIDs(t, tbl); n != produced {
		t.Fatalf("%d distinct ids, want %d: records written to partitions added during the job's first start were skipped", n, produced)
	}
	stop()
	waitRun(t, done, 60*time.Second, "the member did not stop")
}

// TestPartitionsAddedBeforeTheFirstCommitAreReadFromTheirStart: partitions
// added to the topic of a start_offset "latest" job whose table holds
// nothing yet are read from their start, as those added later are. An
// added partition used to be recognised only by the table's watermarks for
// the topic: before the job's first commit it was taken for one of a job
// starting, pinned at its end when the rebalance assigned it, and what
// producers wrote to it meanwhile was skipped (verify saw nothing: the pin
// is where its coverage began). The group's pins now record how many
// partitions the topic had when the job first started.
func TestPartitionsAddedBeforeTheFirstCommitAreReadFromTheirStart(t *testing.T) {
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, nil)
	j.cfg.Kafka.StartOffset = "latest"
	ctx := t.Context()
	m := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 30*time.Second, "4 partitions assigned", func() bool { return m.Stats().Assigned.Load() == 4 })
	waitFor(t, 30*time.Second, "the job's start pinned", func() bool {
		at, err := pipeline.GroupOffsets(ctx, j.cfg.Kafka, []int{0, 1, 2, 3})
		return err == nil && len(at) == 4
	})

	// Records to the added partitions only, before kafka-go notices them
	// (it looks every 10 s).
	gen, produced := growTo6(t, j)
	end, err := j.cl.EndOffsets(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	if m.Stats().Assigned.Load() != 4 {
		t.Fatalf("rebalanced before the records were written; the test proves nothing")
	}
	t.Logf("written before the rebalance: end offsets %v", end)
	waitFor(t, 60*time.Second, "6 partitions assigned", func() bool { return m.Stats().Assigned.Load() == 6 })
	// A few more, after the rebalance, so that every partition commits.
	if _, err := j.cl.ProduceRate(ctx, "clicks", gen, 300, 0); err != nil {
		t.Fatal(err)
	}
	produced += 300
	if end, err = j.cl.EndOffsets(ctx, "clicks"); err != nil {
		t.Fatal(err)
	}
	waitCaughtUp(t, j.tbl, end, 60*time.Second)
	if n := distinctIDs(t, j.tbl); n != produced {
		t.Fatalf("%d distinct ids, want %d: records written to the added partitions before the rebalance were skipped", n, produced)
	}
}

// TestCatalogOutageRetriedInPlace: a catalog that fails every commit for a
// while (more attempts than one Commit makes) pauses the member in place: no
// new generation (no rebalance), and everything is committed exactly once
// when it answers again.
func TestCatalogOutageRetriedInPlace(t *testing.T) {
	faults := make([]faultcat.Fault, 30)
	for i := range faults {
		faults[i] = faultcat.Unavailable
	}
	tbl, end, m := startMemberWith(t, 2000, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, nil, faults)
	deadline := time.Now().Add(30 * time.Second)
	for !m.Stats().Stalled.Load() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if !m.Stats().Stalled.Load() {
		t.Fatal("the member never reported itself stalled during the outage")
	}
	var lag int64
	for _, l := range m.Stats().Lag() {
		lag += l
	}
	if lag == 0 {
		t.Fatal("consumer lag is 0 while no commit succeeds")
	}
	waitCaughtUp(t, tbl, end, 90*time.Second)
	if g := m.Stats().Generations.Load(); g != 1 {
		t.Fatalf("%d generations: the outage caused a rebalance", g)
	}
	if m.Stats().FlushRetries.Load() == 0 {
		t.Fatal("no flush was retried: the outage was not exercised")
	}
	if n := distinctIDs(t, tbl); n != 2000 {
		t.Fatalf("%d distinct ids, want 2000", n)
	}
	if m.Stats().Stalled.Load() {
		t.Fatal("still stalled after the commits succeeded")
	}
	for p, l := range m.Stats().Lag() {
		if l != 0 {
			t.Fatalf("partition %d: lag %d after catching up", p, l)
		}
	}
}

// distinctIDs scans the table and returns how many distinct (partition,
// offset) ids it holds, failing on a duplicate.
func distinctIDs(t *testing.T, tbl *lakehouse.Table) int {
	t.Helper()
	return len(rowIDs(t, tbl))
}

// rowIDs scans the table and returns its rows' (partition, offset) ids,
// failing on a duplicate.
func rowIDs(t *testing.T, tbl *lakehouse.Table) [][2]int64 {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := it.Scan(table.WithSelectedFields("_kafka_partition", "_kafka_offset")).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	seen := map[[2]int64]bool{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		ps := b.Column(b.Schema().FieldIndices("_kafka_partition")[0]).(*array.Int32)
		os := b.Column(b.Schema().FieldIndices("_kafka_offset")[0]).(*array.Int64)
		for i := 0; i < int(b.NumRows()); i++ {
			id := [2]int64{int64(ps.Value(i)), os.Value(i)}
			if seen[id] {
				t.Fatalf("duplicate row %v", id)
			}
			seen[id] = true
		}
		b.Release()
	}
	return slices.Collect(maps.Keys(seen))
}

// TestAmbiguousCommitNotTakenForAFence: a commit that applied while the
// member saw an error, and whose check then failed, is retried in place
// under the same commit id and found: the member is not fenced by its own
// first attempt (it dropped its buffers and rejoined, a group-wide
// rebalance), and every record is in the table once.
func TestAmbiguousCommitNotTakenForAFence(t *testing.T) {
	j := newJob(t, 2000, fastCommit, nil)
	mt, fc := faultyTable(t, j)
	fc.Inject(faultcat.Ambiguous)
	fc.Before(func() { fc.InjectLoads(faultcat.Unavailable) }) // the check's reload fails
	m := runMember(t, j.cfg, mt, j.sc)
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)
	// The applied attempt caught the table up: wait for the retry to
	// succeed or be fenced.
	s := m.Stats()
	waitFor(t, 30*time.Second, "the failed commit was not retried", func() bool {
		return s.Commits.Load() > 0 || s.Fenced.Load() > 0 || s.Generations.Load() >= 2
	})
	time.Sleep(500 * time.Millisecond) // a fence ends the generation just after
	if got := fc.Injected(faultcat.Ambiguous); got != 1 {
		t.Fatalf("ambiguous commits injected: %d, want 1", got)
	}
	if n := distinctIDs(t, j.tbl); n != 2000 {
		t.Fatalf("%d distinct ids, want 2000", n)
	}
	if f, g := m.Stats().Fenced.Load(), m.Stats().Generations.Load(); f != 0 || g != 1 {
		t.Fatalf("fenced %d times, %d generations; want 0 and 1", f, g)
	}
	// The failed call's attempt, the one that applied, is counted.
	if a, c := s.CommitAttempts.Load(), s.Commits.Load(); a != c || s.CommitConflicts.Load() != 0 {
		t.Fatalf("%d commit attempts, %d conflicts for %d commits; want %d and 0", a, s.CommitConflicts.Load(), c, c)
	}
}

// TestScheduledIdleTickSurvivesAFailedLoad: a scheduled member with
// nothing to read asks the table for its watermarks at each flush tick; a
// tick whose read fails is asked again at the next, where it ended the
// generation (a rebalance of the whole group) before ending the run.
func TestScheduledIdleTickSurvivesAFailedLoad(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	mt, fc := faultyTable(t, j)
	cfg := j.cfg
	cfg.Kafka.StartOffset = "latest" // no partition has anything to read
	cfg.Commit.Interval = pipeline.Duration(2 * time.Second)
	m, err := pipeline.NewMember(cfg, mt, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	// Once the generation has started, the next load (the first tick's) fails.
	waitFor(t, 30*time.Second, "no partitions assigned", func() bool { return m.Stats().Assigned.Load() > 0 })
	time.Sleep(500 * time.Millisecond)
	fc.InjectLoads(faultcat.Unavailable)
	waitRun(t, done, 30*time.Second, "the scheduled run did not end")
	if fc.FailedLoads() != 1 || m.Stats().Generations.Load() != 1 {
		t.Fatalf("%d failed loads, %d generations; want 1 and 1", fc.FailedLoads(), m.Stats().Generations.Load())
	}
}

// TestUnwritableTableEndsAScheduledRun: flushes the table's storage refuses
// (permission denied: a changed ACL, a wrong hdfs.user) end a scheduled run
// with the error, while the long-running job retries them, logging an
// error, and commits once access is granted. The scheduled run retried
// them too, for ever: `floe run --until-caught-up` never exited.
func TestUnwritableTableEndsAScheduledRun(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	it, err := j.tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	data := strings.TrimPrefix(it.Location(), "file://") + "/data"
	if err := os.MkdirAll(data, 0o755); err != nil {
		t.Fatal(err)
	}
	restore := unwritable.Dir(t, data)

	endsScheduledRetriesLong(t, j, func(err error) bool {
		return errors.Is(err, fs.ErrPermission) && strings.Contains(err.Error(), data)
	}, "a permission error naming "+data, "access denied", restore)
}

// runFails runs m (what), which must end within d with an error ok
// accepts (want says which).
func runFails(t *testing.T, m *pipeline.Member, d time.Duration, what string, ok func(error) bool, want string) {
	t.Helper()
	done, stop := startRun(m)
	defer stop()
	select {
	case err := <-done:
		if !ok(err) {
			t.Fatalf("%s: %v; want %s", what, err, want)
		}
	case <-time.After(d):
		t.Fatalf("the %s still running after %s; want %s", what, d, want)
	}
}

// endsScheduledRetriesLong runs a scheduled member of j, which must end
// within 30 s with an error ok accepts (want says which), then a
// long-running one, which must log an ERROR containing logged, and catch up
// once fix has run.
func endsScheduledRetriesLong(t *testing.T, j *job, ok func(error) bool, want, logged string, fix func()) {
	t.Helper()
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	runFails(t, m, 30*time.Second, "scheduled run", ok, want)

	log := &lockedBuffer{}
	m, err = pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "the long-running job logged no error", func() bool {
		out := log.String()
		return strings.Contains(out, "level=ERROR") && strings.Contains(out, logged)
	})
	fix()
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second) // retried within 30 s
	stop()
	waitRun(t, done, 30*time.Second, "the member did not stop")
}

// TestStopWhileJoiningIsLogged: a member stopped by a signal while it waits
// to join its group (a rebalance under way, as when another member joins
// just before a deployment stops them all) logs its stop and the signal, as
// a stop in a generation does. It returned without a word.
func TestStopWhileJoiningIsLogged(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	var joins atomic.Int32
	j.cl.Kfake().ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		j.cl.Kfake().KeepControl()
		joins.Add(1)
		return nil, nil, true // no answer: the join waits
	})
	log := &lockedBuffer{}
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancelCause(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	waitFor(t, 30*time.Second, "the member never asked to join", func() bool { return joins.Load() > 0 })
	stop(errors.New("terminated signal received"))
	waitRun(t, done, 30*time.Second, "the member did not stop")
	const want = `msg="stopping between generations: nothing buffered, leaving the group" cause="terminated signal received"`
	if out := log.String(); !strings.Contains(out, want) {
		t.Fatalf("stopped while joining, the member logged:\n%s\nwant a line with %s", out, want)
	}
}

// TestUnansweredOffsetCommitHoldsNothing: a group coordinator that never
// answers an offset commit (the advisory Kafka offsets) holds neither the
// flushes, which commit every record to the table, nor the final flush past
// commit.grace: kafka-go's call takes no context and waited up to the
// rebalance timeout + 5 s at every flush.
func TestUnansweredOffsetCommitHoldsNothing(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	j.cfg.Commit.Grace = pipeline.Duration(time.Second)
	var commits atomic.Int32
	j.cl.Kfake().ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		j.cl.Kfake().KeepControl()
		commits.Add(1)
		return nil, nil, true // no answer
	})
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 5})
	for round := range 3 {
		if _, err := j.cl.ProduceRate(t.Context(), "clicks", gen, 300, 0); err != nil {
			t.Fatal(err)
		}
		end, err := j.cl.EndOffsets(t.Context(), "clicks")
		if err != nil {
			t.Fatal(err)
		}
		waitCaughtUp(t, j.tbl, end, 5*time.Second) // flushes every 300 ms
		if round == 0 {
			// Sent in the background after the table's commit: it may
			// come a moment later.
			waitFor(t, 5*time.Second, "an offset commit to reach the broker", func() bool { return commits.Load() > 0 })
		}
	}
	stop()
	// commit.grace (1 s), leaving the group (10 s at most: kafka-go waits
	// for its heartbeat, queued behind the commit) and 5 s.
	waitRun(t, done, 16*time.Second, "the member did not stop")
	if n := distinctIDs(t, j.tbl); n != 900 {
		t.Fatalf("%d distinct ids, want 900", n)
	}
}

// runScheduled runs j as a scheduled job (UntilOffsets of the topic's end
// offsets now) until it ends, and returns its member.
func runScheduled(t *testing.T, j *job, what string) *pipeline.Member {
	t.Helper()
	end, err := pipeline.EndOffsets(t.Context(), j.cfg.Kafka) // as floe run --until-caught-up
	if err != nil {
		t.Fatal(err)
	}
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitRun(t, done, 60*time.Second, what+" did not end")
	return m
}

// TestLatestPinSurvivesAFailedOffsetCommit: the pin of start_offset
// "latest" (the group's Kafka offsets at the first start) is committed
// again when its commit fails, as a coordinator busy rebalancing makes it.
// It was sent once: the next scheduled run resolved "latest" anew and
// skipped what had been written since the job first started.
func TestLatestPinSurvivesAFailedOffsetCommit(t *testing.T) {
	latestPinCarries(t, 400, true) // history on all 4 partitions
}

// latestPinCarries runs the first scheduled run of a start_offset "latest"
// job on a topic of n records, its first offset commit failed with failOne,
// then has 50 records written, and checks the next run ingests them.
func latestPinCarries(t *testing.T, n int, failOne bool) {
	t.Helper()
	j := newJob(t, n, fastCommit, nil)
	j.cfg.Kafka.StartOffset = "latest"
	if failOne {
		failed := j.cl.FailOffsetCommits(1)
		defer func() {
			if failed() != 1 {
				t.Errorf("%d offset commits failed, want the pin's", failed())
			}
		}()
	}
	runScheduled(t, j, "the first run") // nothing to read: it only pins the job's start
	gen := clickgen.New(clickgen.Config{Sessions: 5, Seed: 9})
	if _, err := j.cl.ProduceRate(t.Context(), "clicks", gen, 50, 0); err != nil {
		t.Fatal(err)
	}
	runScheduled(t, j, "the second run")
	if got := distinctIDs(t, j.tbl); got != 50 {
		t.Fatalf("after the second run: %d rows, want the 50 written since the job first started", got)
	}
}

// TestLatestIsWhereTheJobFirstStarted: start_offset "latest" is where the
// job first started. Each scheduled run used to resolve it anew for a
// partition with nothing in the table, skipping what was written between
// runs; and once another partition had committed, a quiet partition was
// taken for one added while running and read from its start, history and
// all.
func TestLatestIsWhereTheJobFirstStarted(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil) // history on all 4 partitions
	j.cfg.Kafka.StartOffset = "latest"
	batch := func(key string, n int) []clickgen.Message {
		gen := clickgen.New(clickgen.Config{Sessions: 1, Seed: int64(len(key))})
		msgs := make([]clickgen.Message, n)
		for i := range msgs {
			msgs[i] = gen.Next()
			msgs[i].Key = []byte(key)
		}
		return msgs
	}

	runScheduled(t, j, "the first run") // nothing to read: it only starts the job
	keyPart := map[string]int32{}
	produceByKey(t, j.cl, "clicks", batch("hot", 50), keyPart)
	runScheduled(t, j, "the second run")
	if n := distinctIDs(t, j.tbl); n != 50 {
		t.Fatalf("after the second run: %d rows, want the 50 written since the first", n)
	}

	// 10 records to a partition that has had nothing to commit.
	quiet := ""
	for i := 0; quiet == ""; i++ {
		k := "quiet-" + strconv.Itoa(i)
		produceByKey(t, j.cl, "clicks", batch(k, 1), keyPart)
		if keyPart[k] != keyPart["hot"] {
			quiet = k
		}
	}
	produceByKey(t, j.cl, "clicks", batch(quiet, 9), keyPart)
	runScheduled(t, j, "the third run")
	wm, err := j.tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	end, _ := j.cl.EndOffsets(t.Context(), "clicks")
	if w, _ := wm.Get("clicks", keyPart[quiet]); w != end[keyPart[quiet]] {
		t.Fatalf("W(%d) = %d, want %d", keyPart[quiet], w, end[keyPart[quiet]])
	}
	// The quiet partition's 10, and any records of the keys tried before
	// it (on the hot partition, also written after the job started).
	want := 50 + int(end[keyPart[quiet]]-j.end[keyPart[quiet]]) + int(end[keyPart["hot"]]-j.end[keyPart["hot"]]) - 50
	if n := distinctIDs(t, j.tbl); n != want {
		t.Fatalf("after the third run: %d rows, want %d (none of the history written before the job started)", n, want)
	}
}

// TestAddedPartitionsWaitForTheGroupsOffsets: the group's offsets that
// tell a partition added since a start_offset "latest" job first started
// (before its first commit) from one to pin are asked again while the
// coordinator fails to answer, not taken for none: the added partition
// would be pinned at its end, skipping what was written to it.
func TestAddedPartitionsWaitForTheGroupsOffsets(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil) // history on all 4 partitions
	j.cfg.Kafka.StartOffset = "latest"
	ctx := t.Context()
	runScheduled(t, j, "the first run") // nothing to read: it pins the job's start
	if err := j.cl.AddPartitions(ctx, "clicks", 6); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 5})
	for _, p := range []int32{4, 5} {
		for range 50 {
			msg := gen.Next()
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "clicks", Partition: p, Key: msg.Key, Value: msg.Value}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	// floe's own OffsetFetch (kafka-go's consumer group sends version 1)
	// fails three times.
	var failed atomic.Int32
	kf := j.cl.Kfake()
	kf.ControlKey(kmsg.OffsetFetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		if r.GetVersion() < 2 || failed.Load() >= 3 {
			return nil, nil, false
		}
		failed.Add(1)
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil, true
	})
	runScheduled(t, j, "the second run")
	if n := distinctIDs(t, j.tbl); n != 100 {
		t.Fatalf("%d rows, want the 100 written to the added partitions", n)
	}
	if failed.Load() != 3 {
		t.Fatalf("%d group offset reads failed, want 3", failed.Load())
	}
}

// TestLatestPinsOfConcurrentFirstStarts: members of a start_offset
// "latest" job's first generation pin their partitions each at its own
// pace; a member that finds another's pins before its own, the table still
// empty, pins its partitions at their end too rather than take them for
// partitions added since the job started and read their history. The
// other member's pins (partitions 0 and 1, committed with the metadata
// floe gives them) are committed here before this one starts.
func TestLatestPinsOfConcurrentFirstStarts(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil) // history on all 4 partitions
	j.cfg.Kafka.StartOffset = "latest"
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var pins kadm.Offsets
	for _, p := range []int32{0, 1} {
		pins.Add(kadm.Offset{Topic: "clicks", Partition: p, At: j.end[p], LeaderEpoch: -1, Metadata: "floe.start_partitions=4"})
	}
	if err := adm.CommitAllOffsets(t.Context(), "g", pins); err != nil {
		t.Fatal(err)
	}

	runScheduled(t, j, "the run") // nothing to read: it pins partitions 2 and 3
	if n := distinctIDs(t, j.tbl); n != 0 {
		t.Fatalf("%d rows: the history of partitions the other member had not pinned yet was read", n)
	}
	got, err := adm.FetchOffsets(t.Context(), "g")
	if err != nil {
		t.Fatal(err)
	}
	for p := range int32(4) {
		o, ok := got.Lookup("clicks", p)
		// Pins committed before pins recorded their time have none.
		if !ok || o.At != j.end[p] || !strings.HasPrefix(o.Metadata+";", "floe.start_partitions=4;") {
			t.Errorf("partition %d: group offset %+v (found %v), want %d with metadata floe.start_partitions=4", p, o, ok, j.end[p])
		}
	}
}

// TestUnansweredDeadLetterWriteHoldsNoStop: a dead-letter topic whose
// leader never answers holds the flush (retried in place, by design), but
// not a stop beyond commit.grace and a few seconds. The member used to
// close its dead-letter writer before leaving the group, and kafka-go's
// Close waited for the abandoned batch, 5 attempts × 10 s: about 52 s
// against the 45 s the deploy manifests give. Nothing is lost: the flush
// holding the dead letters never committed, and the next run writes them
// and the rows.
func TestUnansweredDeadLetterWriteHoldsNoStop(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	j.cfg.Commit.Grace = pipeline.Duration(time.Second)
	gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 6, MalformedRate: 0.2})
	if _, err := j.cl.ProduceRate(t.Context(), "clicks", gen, 400, 0); err != nil {
		t.Fatal(err)
	}
	end, err := j.cl.EndOffsets(t.Context(), "clicks")
	if err != nil {
		t.Fatal(err)
	}
	j.end = end
	var answer atomic.Bool
	var swallowed atomic.Int32
	kf := j.cl.Kfake()
	kf.ControlKey(kmsg.Produce.Int16(), func(req kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		for _, tp := range req.(*kmsg.ProduceRequest).Topics {
			if tp.Topic == "clicks.dlq" && !answer.Load() {
				swallowed.Add(1)
				return nil, nil, true // no answer
			}
		}
		return nil, nil, false
	})
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "no dead-letter write reached the broker", func() bool { return swallowed.Load() > 0 })
	stop()
	// commit.grace (1 s), closing the dead-letter writer (5 s) and 5 s.
	waitRun(t, done, 11*time.Second, "the member did not stop")

	answer.Store(true)
	runUntilCaughtUp(t, j)
	if rep := verifyWithDeadLetters(t, j); !rep.OK() || rep.DeadLetters == 0 {
		var out strings.Builder
		rep.WriteText(&out)
		t.Fatalf("verify after the restart (%d dead letters):\n%s", rep.DeadLetters, out.String())
	}
}

// TestStalledMemberHoldsOnlyItsWindow: a member whose commits fail (the
// catalog down) stops fetching once its window is full, and holds little
// more than the window: kafka-go's reader went on fetching into its queue
// of 1000 records a partition, here 400 records of 200 KB (80 MB) held
// beside a window of 5. Once the catalog is back, every record commits.
func TestStalledMemberHoldsOnlyItsWindow(t *testing.T) {
	pipeline.SetPauseAfter(t, 300*time.Millisecond)
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond), MaxRecords: 5}, nil)
	gen := clickgen.New(clickgen.Config{Sessions: 1, Seed: 8})
	pad := strings.Repeat("x", 200_000)
	msgs := make([]clickgen.Message, 400)
	for i := range msgs {
		msgs[i] = gen.Next()
		msgs[i].Value = bytes.Replace(msgs[i].Value, []byte(`"user_agent":"`), []byte(`"user_agent":"`+pad), 1)
	}
	got, err := j.cl.Produce(t.Context(), "clicks", msgs)
	if err != nil || len(got) != 1 {
		t.Fatalf("produced to %d partitions (%v), want one", len(got), err)
	}
	tbl, fc := faultyTable(t, j)
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	m, err := pipeline.NewMember(j.cfg, tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "nothing consumed", func() bool { return m.Stats().Consumed.Load() > 0 })
	fc.Outage(true)
	waitFor(t, 30*time.Second, "the member's commits did not fail", func() bool { return m.Stats().FlushRetries.Load() >= 3 })
	time.Sleep(time.Second) // past pauseAfter: the reader is closed
	if grew := int64(heap()) - int64(before); grew > 24<<20 {
		t.Errorf("a stalled member holding %d records grew the heap by %d MiB", m.Stats().Consumed.Load(), grew>>20)
	}
	fc.Outage(false)
	end, _ := j.cl.EndOffsets(t.Context(), "clicks")
	waitCaughtUp(t, tbl, end, 60*time.Second)
	stop()
	waitRun(t, done, 30*time.Second, "the member did not stop")
	if n := distinctIDs(t, tbl); n != len(msgs) {
		t.Fatalf("%d rows, want %d", n, len(msgs))
	}
}

// TestLargeRecordsAreNotFetchedFarAhead: records near max_message_bytes
// (900 KB) with a small commit.max_bytes: what each partition's reader
// fetches ahead stays within a few MiB, so the member holds about its
// windows, not the backlog. kafka-go's queue of 1000 records a partition
// held nearly the whole topic live at once.
func TestLargeRecordsAreNotFetchedFarAhead(t *testing.T) {
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(time.Second), MaxBytes: 8 << 20}, nil)
	gen := clickgen.New(clickgen.Config{Sessions: 50, Seed: 8})
	pad := strings.Repeat("x", 900<<10)
	msgs := make([]clickgen.Message, 240)
	for i := range msgs {
		msgs[i] = gen.Next()
		msgs[i].Value = bytes.Replace(msgs[i].Value, []byte(`"user_agent":"`), []byte(`"user_agent":"`+pad), 1)
	}
	if _, err := j.cl.Produce(t.Context(), "clicks", msgs); err != nil {
		t.Fatal(err)
	}
	end, err := j.cl.EndOffsets(t.Context(), "clicks")
	if err != nil {
		t.Fatal(err)
	}
	topic := len(msgs) * len(msgs[0].Value)
	msgs = nil
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	base := live[0].Value.Uint64()
	var peak atomic.Uint64
	sampled := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			metrics.Read(live)
			if v := live[0].Value.Uint64(); v > peak.Load() {
				peak.Store(v)
			}
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	runMember(t, j.cfg, j.tbl, j.sc)
	waitCaughtUp(t, j.tbl, end, 60*time.Second)
	close(done)
	<-sampled
	over := int64(peak.Load()) - int64(base)
	t.Logf("peak live heap %d MiB over the base; the topic holds %d MiB", over>>20, topic>>20)
	// Windows of 8 MiB, their flushes (sorted copies, Parquet pages and
	// statistics of 900 KB values: a few times the window for a moment),
	// and 4 MiB fetched ahead a partition: 110-125 MiB here, 235-265 MiB
	// with 1000 records a partition fetched ahead.
	if over > int64(topic)*3/4 {
		t.Errorf("the member held %d MiB live with commit.max_bytes 8 MiB; the topic holds %d MiB", over>>20, topic>>20)
	}
	if n := distinctIDs(t, j.tbl); n != 240 {
		t.Fatalf("%d rows, want 240", n)
	}
}

// TestReadAheadCountsBytesAfterSmallRecords: a partition whose first records
// are small and whose next ones are large (900 KB), read while the window is
// full (its flush stalled on a catalog that does not answer). The reader's
// queue was sized in records by the first records it returned (1000 for
// small ones) and shrunk only once a large one was returned: meanwhile it
// fetched up to 1000 large records ahead, ≈ 130 MiB here instead of the
// documented 4 MiB.
func TestReadAheadCountsBytesAfterSmallRecords(t *testing.T) {
	const small, large = 40, 150
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(time.Hour), MaxRecords: 20}, nil)
	gen := clickgen.New(clickgen.Config{Sessions: 1, Seed: 8})
	pad := strings.Repeat("x", 900<<10)
	var msgs []clickgen.Message
	for range small {
		msgs = append(msgs, gen.Next())
	}
	for range large {
		m := gen.Next()
		m.Value = bytes.Replace(m.Value, []byte(`"user_agent":"`), []byte(`"user_agent":"`+pad), 1)
		msgs = append(msgs, m)
	}
	if got, err := j.cl.Produce(t.Context(), "clicks", msgs); err != nil || len(got) != 1 {
		t.Fatalf("produced to %d partitions (%v), want one", len(got), err)
	}
	msgs = nil
	tbl, fc := faultyTable(t, j)
	fc.Inject(faultcat.Stall) // the first flush does not return until the stop
	runtime.GC()
	live := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(live)
	base := live[0].Value.Uint64()
	m, err := pipeline.NewMember(j.cfg, tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "nothing consumed", func() bool { return m.Stats().Consumed.Load() >= 20 })
	time.Sleep(time.Second) // the window is full: the worker waits
	var peak uint64
	// Sampled within pauseAfter (5 s) of the stall, while the reader is open.
	for deadline := time.Now().Add(4 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		runtime.GC()
		metrics.Read(live)
		peak = max(peak, live[0].Value.Uint64())
	}
	over := int64(peak) - int64(base)
	consumed := m.Stats().Consumed.Load()
	t.Logf("consumed %d records; live heap peaked %d MiB over the base", consumed, over>>20)
	// What the member consumed (its window and the stalled flush), 4 MiB
	// fetched ahead, and slack.
	if allowed := max(0, consumed-small)*(900<<10) + 32<<20; over > allowed {
		t.Errorf("a member that consumed %d records (%d of them large) held %d MiB live, over the %d MiB its records and 4 MiB fetched ahead explain",
			consumed, max(0, consumed-small), over>>20, allowed>>20)
	}
	stop()
	waitRun(t, done, 60*time.Second, "the member did not stop")
}

// TestNotReadyWhileWatermarksAreUnreadable: a generation that cannot read
// its watermarks (the catalog down) fetches and commits nothing, and
// /readyz says so, then ready once the catalog is back and commits land,
// and not ready again once told to stop. It answered ready throughout.
func TestNotReadyWhileWatermarksAreUnreadable(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	tbl, fc := faultyTable(t, j)
	fc.Outage(true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	m, err := pipeline.NewMember(j.cfg, tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	serve, err := pipeline.ListenMetrics(t.Context(), addr, prometheus.NewRegistry(), m.Stats())
	if err != nil {
		t.Fatal(err)
	}
	go serve()
	ready := func() int {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "not assigned, or the watermarks not read", func() bool { return m.Stats().Assigned.Load() > 0 && fc.FailedLoads() >= 3 })
	if code := ready(); code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz %d while the watermarks cannot be read, want 503", code)
	}
	fc.Outage(false)
	waitCaughtUp(t, tbl, j.end, 60*time.Second)
	if code := ready(); code != http.StatusOK {
		t.Fatalf("/readyz %d once committing, want 200", code)
	}
	stop()
	waitRun(t, done, 30*time.Second, "the member did not stop")
	// The endpoint outlives the stop (floe run serves it until the final
	// flush is done), and says the member is stopping.
	resp, err := http.Get("http://" + addr + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "stopping") {
		t.Fatalf("/readyz %d %q once told to stop, want 503 saying it is stopping", resp.StatusCode, body)
	}
}

// TestLagCountsFromWhereTheJobReads: a job started at the latest offsets
// reports no lag for partitions with nothing new: the lag gauge counted
// the whole history before its start, for good on a quiet partition.
func TestLagCountsFromWhereTheJobReads(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil) // history on all 4 partitions
	j.cfg.Kafka.StartOffset = "latest"
	m := runMember(t, j.cfg, j.tbl, j.sc)
	var lag map[int32]int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lag = m.Stats().Lag()
		if len(lag) == 4 && lag[0] == 0 && lag[1] == 0 && lag[2] == 0 && lag[3] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag %v with nothing written since the start (end offsets %v), want none", lag, j.end)
		}
	}
}

// TestLagCountsFromTheLogStart: under start_offset earliest, a partition
// retention emptied before the job's first commit reports no lag: nothing
// is left to read. The gauge counted from offset 0, and with nothing to
// fetch no commit ever moved it: the deleted history was lag for good,
// where `floe doctor` said 0.
func TestLagCountsFromTheLogStart(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil)
	if j.end[0] == 0 {
		t.Fatal("partition 0 got no records")
	}
	// Retention deletes everything in partition 0.
	if err := j.cl.DeleteRecords(t.Context(), "clicks", map[int32]int64{0: j.end[0]}); err != nil {
		t.Fatal(err)
	}
	m := runMember(t, j.cfg, j.tbl, j.sc)
	var lag map[int32]int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lag = m.Stats().Lag()
		if len(lag) == 4 && lag[0] == 0 && lag[1] == 0 && lag[2] == 0 && lag[3] == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lag %v; want none (partition 0 emptied at %d, end offsets %v)", lag, j.end[0], j.end)
		}
	}
}

// TestReadDeadLettersTriesEveryBroker: verify's read of the dead-letter
// topic asks any listed broker, as every other Kafka request of floe does:
// it dialed kafka.brokers[0] alone, and with that broker down (a rolling
// restart) every dead letter counted as a gap.
func TestReadDeadLettersTriesEveryBroker(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	gen := clickgen.New(clickgen.Config{Sessions: 10, Seed: 6, MalformedRate: 0.2})
	if _, err := j.cl.ProduceRate(t.Context(), "clicks", gen, 200, 0); err != nil {
		t.Fatal(err)
	}
	var err error
	if j.end, err = j.cl.EndOffsets(t.Context(), "clicks"); err != nil {
		t.Fatal(err)
	}
	runUntilCaughtUp(t, j)
	count := func(d lakehouse.DeadLetters) (n int) {
		for _, offs := range d {
			n += len(offs)
		}
		return n
	}
	want, err := pipeline.ReadDeadLetters(t.Context(), j.cfg.Kafka, nil)
	if err != nil || count(want) == 0 {
		t.Fatalf("dead letters: %d, %v; want some", count(want), err)
	}
	k := j.cfg.Kafka
	k.Brokers = append([]string{"127.0.0.1:1"}, k.Brokers...) // the first broker is down
	got, err := pipeline.ReadDeadLetters(t.Context(), k, nil)
	if err != nil || count(got) != count(want) {
		t.Fatalf("with the first broker down: %d dead letters, %v; want %d", count(got), err, count(want))
	}
}

// TestReadDeadLettersLogsRetriedReadErrors: a read error kafka-go's reader
// retries while verify reads the dead-letter topic (here its refusal of a
// fetch size above int32) is logged at WARN, naming the topic. The
// dead-letter reader alone had no ErrorLogger: verify waited without a word.
func TestReadDeadLettersLogsRetriedReadErrors(t *testing.T) {
	cl, err := embedded.StartTopic(t.Context(), "clicks", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.CreateTopic(t.Context(), "clicks.dlq", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Produce(t.Context(), "clicks.dlq", []clickgen.Message{clickgen.New(clickgen.Config{Seed: 1}).Next()}); err != nil {
		t.Fatal(err)
	}
	k := pipeline.KafkaConfig{Brokers: cl.Addrs(), Topic: "clicks", DLQTopic: "clicks.dlq", FetchMaxBytes: 3 << 30}
	log := &lockedBuffer{}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if _, err := pipeline.ReadDeadLetters(ctx, k, slog.New(slog.NewTextHandler(log, nil))); err == nil {
		t.Fatal("the dead-letter topic was read with every fetch refused")
	}
	if out := log.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "topic=clicks.dlq") {
		t.Fatalf("2 s of refused fetches logged %q; want a WARN naming clicks.dlq", out)
	}
}

// TestScheduledRunAlreadyCaughtUpJoinsNothing: a scheduled run whose end
// offsets the table holds already ends without joining the group (it
// joined, rebalancing the members that own the partitions, and when it
// owned none of them it waited for the next rebalance, for ever beside a
// long-running job).
func TestScheduledRunAlreadyCaughtUpJoinsNothing(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	runUntilCaughtUp(t, j)
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitRun(t, done, 10*time.Second, "the scheduled run did not end")
	if n := m.Stats().Generations.Load(); n != 0 {
		t.Fatalf("%d generations joined, want none", n)
	}
}

// TestStoppedMemberReportsNoLag: a member whose generation has ended
// reports no partition's lag (it kept its partitions' gauges until the next
// generation, while their new owners reported them too).
func TestStoppedMemberReportsNoLag(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)
	if lag := m.Stats().Lag(); len(lag) != 4 {
		t.Fatalf("lag of %d partitions while running, want 4", len(lag))
	}
	stop()
	waitRun(t, done, 30*time.Second, "the member did not stop")
	if lag := m.Stats().Lag(); len(lag) != 0 {
		t.Fatalf("lag %v after the generation ended, want none", lag)
	}
}

// loadHookCat runs hook (once, when armed) before a LoadTable reaches the
// real catalog: another member's commit landing just before this read.
type loadHookCat struct {
	catalog.Catalog
	mu   sync.Mutex
	hook func()
}

func (c *loadHookCat) LoadTable(ctx context.Context, ident table.Identifier) (*table.Table, error) {
	c.mu.Lock()
	h := c.hook
	c.hook = nil
	c.mu.Unlock()
	if h != nil {
		h()
	}
	return c.Catalog.LoadTable(ctx, ident)
}

// TestSessionTimeoutTheBrokerRefuses: a kafka.session_timeout outside the
// broker's bounds (Kafka's and kfake's minimum is 6 s) ends the run with an
// error naming it. Every join was refused and retried: a scheduled run never
// ended and never said why.
func TestSessionTimeoutTheBrokerRefuses(t *testing.T) {
	j := newJob(t, 50, fastCommit, nil)
	j.cfg.Kafka.SessionTimeout = pipeline.Duration(5 * time.Second)
	j.cfg.Kafka.HeartbeatInterval = pipeline.Duration(500 * time.Millisecond)
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "kafka.session_timeout 5s") {
			t.Fatalf("run ended with %v, want an error naming kafka.session_timeout", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the run still joins after 30 s")
	}
}

// TestGroupOffsetsOfAnUnknownGroup: a group the broker does not know has
// no offsets. kfake's GROUP_ID_NOT_FOUND was an error, and the first
// scheduled run of every start_offset latest job warned that reading the
// group's offsets had failed.
func TestGroupOffsetsOfAnUnknownGroup(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	k := j.cfg.Kafka
	k.Group = "never-used"
	if at, err := pipeline.GroupOffsets(t.Context(), k, []int{0, 1, 2, 3}); err != nil || len(at) != 0 {
		t.Fatalf("offsets of an unknown group: %v, %v; want none", at, err)
	}
}

// TestScheduledRunBesideALiveLatestJob: a long-running job started with
// start_offset "latest" on a topic with history pins its start in the
// group's Kafka offsets; with nothing written since, the table holds no
// watermark of its partitions. A scheduled run of the group beside it ends
// caught up: nothing below its end offsets is to be ingested. It waited for
// ever for watermarks of the partitions the live job owned, which never
// come.
func TestScheduledRunBesideALiveLatestJob(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	j.cfg.Kafka.StartOffset = "latest"
	live := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 30*time.Second, "the live job to own every partition", func() bool { return live.Stats().Assigned.Load() == 4 })
	waitFor(t, 30*time.Second, "the live job's pins to reach the group", func() bool {
		at, err := pipeline.GroupOffsets(t.Context(), j.cfg.Kafka, []int{0, 1, 2, 3})
		return err == nil && len(at) == 4
	})
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitRun(t, done, 30*time.Second, "the scheduled run beside the live job did not end")
	if !m.CaughtUp() {
		t.Fatal("the scheduled run ended, not caught up")
	}
}

// TestScheduledRunBesideALiveJob: a scheduled run started beside a
// long-running job of the same table, whose commit lands just before the
// run reads the watermarks (holding records produced after the run read
// the end offsets), is caught up, not a log behind the table: the end
// offsets it compares with the watermarks are read after them. Read
// before, the run failed as if the topic had been recreated.
func TestScheduledRunBesideALiveJob(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	runUntilCaughtUp(t, j)
	until := j.end

	cat, err := lakehouse.OpenCatalog(t.Context(), j.cfg.Table.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	hc := &loadHookCat{Catalog: cat}
	tbl, err := lakehouse.OpenIn(t.Context(), hc, lakehouse.Config{Table: j.cfg.Table.Name, Group: "g"}, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	m, err := pipeline.NewMember(j.cfg, tbl, j.sc, pipeline.UntilOffsets(until))
	if err != nil {
		t.Fatal(err)
	}
	hc.mu.Lock()
	hc.hook = func() {
		// The live job's next commit: new records, ingested and committed.
		if _, err := j.cl.ProduceRate(context.Background(), "clicks", clickgen.New(clickgen.Config{Sessions: 100, Seed: 9}), 100, 0); err != nil {
			t.Error(err)
			return
		}
		end, err := j.cl.EndOffsets(context.Background(), "clicks")
		if err != nil {
			t.Error(err)
			return
		}
		j.end = end
		runUntilCaughtUp(t, j)
	}
	hc.mu.Unlock()
	done, stop := startRun(m)
	defer stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("scheduled run beside a live job's commit: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("the scheduled run did not end")
	}
	if !m.CaughtUp() {
		t.Fatal("not caught up")
	}
}

// TestCompactedTopicVerifies: offsets the log cleaner removed from a
// compacted topic, inside a flush's range and between a watermark and the
// next record read, are recorded by the commits and reported by verify as
// absent from the log, also after maintenance expired the snapshots that
// recorded them. Verify reported each of them as a gap: NOT OK, exit 1.
func TestCompactedTopicVerifies(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	ctx := t.Context()
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "cleanup.policy", Value: new("compact")}}, "clicks"); err != nil {
		t.Fatal(err)
	}
	// produce writes one record of key to partition 0 per offset of [from,
	// to), except the last, which gets key last.
	produce := func(from, to int64, key, last string) {
		for off := from; off < to; off++ {
			k := key
			if off == to-1 {
				k = last
			}
			v := fmt.Appendf(nil, `{"event_id":"e%d","session_id":"s","user_id":"u","event_type":"click","ts":1700000000000,"seq":%d}`, off, off)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "clicks", Partition: 0, Key: []byte(k), Value: v}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	run := func(end int64) {
		ctx, cancel := context.WithCancel(ctx)
		m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- m.Run(ctx) }()
		waitCaughtUp(t, j.tbl, map[int32]int64{0: end}, 30*time.Second)
		cancel()
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	// a@0, b@1..9, c@10: the cleaner keeps 0, 9 and 10; 1..8 are absent
	// inside the first flush's range.
	produce(0, 1, "a", "a")
	produce(1, 11, "b", "c")
	j.cl.Kfake().Compact()
	run(11)
	// b@11..19, d@20: the job resumes from watermark 11 and reads 19
	// first; 11..18 are absent below the second flush's range.
	produce(11, 21, "b", "d")
	j.cl.Kfake().Compact()
	run(21)

	check := func(when string) {
		dl, err := pipeline.ReadDeadLetters(ctx, j.cfg.Kafka, nil)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := j.tbl.Verify(ctx, "clicks", dl.Read)
		if err != nil {
			t.Fatal(err)
		}
		var out strings.Builder
		rep.WriteText(&out)
		if !rep.OK() || rep.AbsentFromLog != 16 || !strings.Contains(out.String(), "16 offsets absent from the log") {
			t.Fatalf("verify %s: OK %v, absent %d, want OK and 16 absent:\n%s", when, rep.OK(), rep.AbsentFromLog, out.String())
		}
	}
	check("after ingestion")
	time.Sleep(20 * time.Millisecond)
	mrep, err := j.tbl.Maintain(ctx, lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if mrep.SnapshotsExpired == 0 {
		t.Fatal("maintenance expired no snapshot")
	}
	check("after maintenance")
}

// TestRecordsWithoutTimestamp: records whose Kafka timestamp is -1 (none:
// the v0 message format, or a producer that set none), 0, or past 2262
// (milliseconds written as microseconds) count as read when fetched for
// floe_consumer_lag_seconds and floe_freshness_seconds. kafka-go gives the
// first two as the zero time.Time, whose Unix nanoseconds overflow: both
// gauges read about 272 years, and the third made freshness negative.
func TestRecordsWithoutTimestamp(t *testing.T) {
	for _, ms := range []int64{-1, 0, 1_700_000_000_000_000} {
		t.Run(strconv.FormatInt(ms, 10), func(t *testing.T) {
			// The fourth record makes the flush; three wait for it.
			j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(time.Hour), MaxRecords: 4}, nil)
			cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			produce := func(from, to int) {
				for i := from; i < to; i++ {
					v := fmt.Appendf(nil, `{"event_id":"e%d","session_id":"s","user_id":"u","event_type":"click","ts":1700000000000,"seq":%d}`, i, i)
					r := &kgo.Record{Topic: "clicks", Partition: 0, Value: v, Timestamp: time.UnixMilli(ms)}
					if err := cl.ProduceSync(t.Context(), r).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			produce(0, 3)
			m := runMember(t, j.cfg, j.tbl, j.sc)
			reg := prometheus.NewRegistry()
			if err := m.Stats().Register(reg); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "the records were not consumed", func() bool { return m.Stats().Consumed.Load() == 3 })
			if lag := gatherCounter(t, reg, "floe_consumer_lag_seconds"); lag < 0 || lag > 60 {
				t.Errorf("floe_consumer_lag_seconds %g for records fetched a moment ago", lag)
			}
			produce(3, 4)
			waitCaughtUp(t, j.tbl, map[int32]int64{0: 4}, 20*time.Second)
			if f := time.Duration(m.Stats().FreshnessNanos.Load()); f < 0 || f > time.Minute {
				t.Errorf("floe_freshness_seconds %s for records committed a moment after they were read", f)
			}
		})
	}
}

// TestLogAppendTimeTopicWarned: a job on a topic whose records carry the
// broker's time (message.timestamp.type LogAppendTime) warns once at start
// that _kafka_timestamp and the lag and freshness gauges follow the
// producers' clocks (kafka-go reads the producer's CreateTime); a
// CreateTime topic gets no warning. Nothing said so.
func TestLogAppendTimeTopicWarned(t *testing.T) {
	for _, typ := range []string{"CreateTime", "LogAppendTime"} {
		t.Run(typ, func(t *testing.T) {
			j := newJob(t, 1, fastCommit, nil)
			cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := kadm.NewClient(cl).AlterTopicConfigs(t.Context(), []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "message.timestamp.type", Value: new(typ)}}, "clicks"); err != nil {
				t.Fatal(err)
			}
			log := &lockedBuffer{}
			m := runMember(t, j.cfg, j.tbl, j.sc, pipeline.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
			waitFor(t, 20*time.Second, "the record was not consumed", func() bool { return m.Stats().Consumed.Load() == 1 })
			warned := strings.Count(log.String(), "level=WARN msg=\"the topic stamps records with the broker's time")
			if want := map[string]int{"CreateTime": 0, "LogAppendTime": 1}[typ]; warned != want {
				t.Fatalf("%d warnings about the timestamp type, want %d:\n%s", warned, want, log.String())
			}
		})
	}
}

// TestStopBeforeFetchingSaysNothingWasLost: a stop while the generation is
// still retrying its watermark read (catalog down) has buffered nothing;
// it logged that "the final flush failed; the next owner redoes its
// records", telling the operator records were abandoned.
func TestStopBeforeFetchingSaysNothingWasLost(t *testing.T) {
	j := newJob(t, 50, fastCommit, nil)
	tbl, fc := faultyTable(t, j)
	fc.Outage(true)
	var logs lockedBuffer
	m, err := pipeline.NewMember(j.cfg, tbl, j.sc, pipeline.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "assigned with failing watermark reads", func() bool {
		return m.Stats().Assigned.Load() > 0 && fc.FailedLoads() >= 2
	})
	stop()
	waitRun(t, done, 30*time.Second, "the member did not stop")
	if out := logs.String(); strings.Contains(out, "final flush failed") || !strings.Contains(out, "stopping: buffers committed") {
		t.Errorf("a stop before anything was buffered logged:\n%s", out)
	}
}

// forbiddingCatalog answers every table commit with a REST catalog's 403
// while forbid is set.
type forbiddingCatalog struct {
	catalog.Catalog
	forbid *atomic.Bool
}

func (c forbiddingCatalog) CommitTable(ctx context.Context, ident table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	if c.forbid.Load() {
		return nil, "", fmt.Errorf("%w: principal may not commit to %v", rest.ErrForbidden, ident)
	}
	return c.Catalog.CommitTable(ctx, ident, reqs, updates)
}

// TestForbiddenCommitEndsAScheduledRun: a REST catalog that answers the
// job's commits 403 ends a scheduled run with the error, and a
// long-running job retries them, logged as an ERROR, until access is
// granted. The scheduled run retried it until it was killed.
func TestForbiddenCommitEndsAScheduledRun(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	cat, err := lakehouse.OpenCatalog(t.Context(), j.cfg.Table.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	var forbid atomic.Bool
	forbid.Store(true)
	tbl, err := lakehouse.OpenIn(t.Context(), forbiddingCatalog{cat, &forbid}, lakehouse.Config{Table: j.cfg.Table.Name, Group: "g"}, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	j.tbl = tbl
	endsScheduledRetriesLong(t, j, func(err error) bool { return errors.Is(err, rest.ErrForbidden) },
		"the catalog's 403", "access denied", func() { forbid.Store(false) })
}

// TestNewMemberWarnsTinyCommit: a member whose commit.max_bytes is 128
// (meant as MiB, read as bytes) logs a warning naming the key and value
// when it is built, once: it was accepted silently and made a table
// commit per record or so.
func TestNewMemberWarnsTinyCommit(t *testing.T) {
	j := newJob(t, 0, pipeline.CommitConfig{MaxBytes: 128}, nil)
	var logs bytes.Buffer
	if _, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))); err != nil {
		t.Fatal(err)
	}
	got := logs.String()
	if strings.Count(got, "level=WARN") != 1 || !strings.Contains(got, "commit.max_bytes is below 1MiB") || !strings.Contains(got, "commit.max_bytes=128") {
		t.Fatalf("logged %q, want one warning naming commit.max_bytes=128", got)
	}
}

// TestPinnedPartitionsRecheckedWhileBusy: a scheduled run of a
// start_offset "latest" job beside a live member of the group, which owns
// two quiet partitions it has only pinned (no watermark, group offset =
// end); the run owns the two others, which keep receiving records, and its
// first read of the group's offsets fails once (a coordinator loading).
// The run ends: the pins are asked again after each flush that commits.
// Only a flush with nothing to commit asked again, so while its own
// partitions were busy the run never ended.
func TestPinnedPartitionsRecheckedWhileBusy(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	j.cfg.Kafka.StartOffset = "latest"
	live := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 30*time.Second, "the live job to own every partition", func() bool { return live.Stats().Assigned.Load() == 4 })
	waitFor(t, 30*time.Second, "the live job's pins to reach the group", func() bool {
		at, err := pipeline.GroupOffsets(t.Context(), j.cfg.Kafka, []int{0, 1, 2, 3})
		return err == nil && len(at) == 4
	})
	// The next OffsetFetch of floe's own client (version >= 2; the
	// consumer group's is version 1) fails once.
	var failed atomic.Int32
	kf := j.cl.Kfake()
	kf.ControlKey(kmsg.OffsetFetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		if r.GetVersion() < 2 || failed.Load() >= 1 {
			return nil, nil, false
		}
		failed.Add(1)
		resp := r.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = kerr.CoordinatorLoadInProgress.Code
		return resp, nil, true
	})
	cfg := j.cfg
	cfg.Commit.Interval = pipeline.Duration(3 * time.Second)
	m, err := pipeline.NewMember(cfg, j.tbl, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitFor(t, 30*time.Second, "the run to own two partitions", func() bool { return len(m.Stats().Lag()) == 2 })
	var mine []int32
	for p := range m.Stats().Lag() {
		mine = append(mine, p)
	}
	t.Logf("the run owns %v; the group's offset read failed %d time(s)", mine, failed.Load())
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithCancel(context.Background())
	traffic := make(chan struct{})
	go func() {
		defer close(traffic)
		gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 5})
		for ctx.Err() == nil {
			for _, p := range mine {
				msg := gen.Next()
				cl.ProduceSync(ctx, &kgo.Record{Topic: "clicks", Partition: p, Key: msg.Key, Value: msg.Value})
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	defer func() { cancel(); <-traffic }()
	select {
	case err := <-done:
		if err != nil || !m.CaughtUp() {
			t.Fatalf("run ended: %v, caught up %v", err, m.CaughtUp())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("the scheduled run has not ended 20 s after it owned its partitions (%d commits of its own since), "+
			"though every end offset is committed or pinned", m.Stats().Commits.Load())
	}
}

// TestLatestFirstRunOnAnEmptyTopicPins: the first scheduled run of a
// start_offset "latest" job that finds the topic empty records where the
// job first started, so the next run ingests what was written between the
// two. Caught up before it joined, it ended without a generation, so
// without a pin, and the next run resolved "latest" anew: 0 rows.
func TestLatestFirstRunOnAnEmptyTopicPins(t *testing.T) {
	latestPinCarries(t, 0, false) // an empty topic
}

// TestLatestPinLostEndsTheScheduledRun: the first scheduled run of a
// start_offset "latest" job has nothing to read; its only output is the
// pin. When the pin's commit fails at the generation's start and at every
// send until commit.grace (the coordinator rebalancing the group), the run
// ends with an error saying so (status 2), not caught up: it exited 0,
// and the next run resolved "latest" anew, skipping silently what was
// written between the runs.
func TestLatestPinLostEndsTheScheduledRun(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil) // history on all 4 partitions
	j.cfg.Kafka.StartOffset = "latest"
	failed := j.cl.FailOffsetCommits(2)
	end, err := pipeline.EndOffsets(t.Context(), j.cfg.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	select {
	case err := <-done:
		if err == nil || m.CaughtUp() || !strings.Contains(err.Error(), "its start was not recorded") {
			t.Fatalf("the run ended with %v (caught up %v, %d commits failed), want the lost pin named", err, m.CaughtUp(), failed())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the run did not end")
	}
}

// TestLatestPinsOutliveTheBrokersOffsetRetention: the pins of a scheduled
// start_offset "latest" job whose topic stays empty are group offsets,
// which the broker deletes a retention period (offsets.retention.minutes)
// after the group last became empty — after the last run that joined it,
// as kfake does here in 4 s. Runs caught up before joining did not join,
// so the pins went, and the first run after something was written resolved
// "latest" anew and skipped it (0 rows of 50). A run now joins and commits
// them again once the newest is older than half the retention, and a run
// that finds them fresh does not join.
func TestLatestPinsOutliveTheBrokersOffsetRetention(t *testing.T) {
	const retention, refresh = 4 * time.Second, 2 * time.Second
	pipeline.SetPinRefresh(t, refresh)
	cl, err := embedded.Start(1, kfake.BrokerConfigs(map[string]string{
		"offset.retention.ms":                 strconv.Itoa(int(retention.Milliseconds())),
		"offsets.retention.check.interval.ms": "100",
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.CreateTopic(t.Context(), "clicks", 4); err != nil {
		t.Fatal(err)
	}
	j := newJobOn(t, cl, 0, fastCommit, nil)
	j.cfg.Kafka.StartOffset = "latest"
	var joins atomic.Int32
	kf := cl.Kfake()
	kf.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		joins.Add(1)
		return nil, nil, false // counted, then handled by kfake
	})
	run := func(what string) int32 {
		before := joins.Load()
		if m := runScheduled(t, j, what); !m.CaughtUp() {
			t.Fatalf("%s: not caught up", what)
		}
		return joins.Load() - before
	}
	run("the first run") // pins the job's start
	began := time.Now()
	time.Sleep(refresh + 100*time.Millisecond)
	if n := run("a run after the refresh age"); n == 0 {
		t.Errorf("a caught-up run %v after the pins were committed did not join to commit them again", refresh+100*time.Millisecond)
	}
	if n := run("a run right after"); n != 0 {
		t.Errorf("a run right after the pins were committed again joined the group (%d JoinGroup); want none", n)
	}
	// Past the retention since the first run, the last one that joined
	// without the refresh.
	time.Sleep(refresh + 100*time.Millisecond)
	gen := clickgen.New(clickgen.Config{Sessions: 5, Seed: 9})
	if _, err := cl.ProduceRate(t.Context(), "clicks", gen, 50, 0); err != nil {
		t.Fatal(err)
	}
	run("the run after 50 were written")
	if got := distinctIDs(t, j.tbl); got != 50 {
		t.Fatalf("%d rows %v after the first run, want the 50 written since the job first started", got, time.Since(began))
	}
}

// TestLatestPinRefreshThatFailsEndsCaughtUp: a caught-up run that joins
// only to commit the group's pins again for their age, and cannot (the
// coordinator refusing every commit until commit.grace), ends caught up,
// with a warning: the pins are still the group's, and the next run tries
// again — also when partitions were added since the job first started,
// which it reads from their start, pinning nothing new (it ended with
// status 2, "its start was not recorded"). A pin the job's first run
// cannot commit ends that run with status 2:
// TestLatestPinLostEndsTheScheduledRun.
func TestLatestPinRefreshThatFailsEndsCaughtUp(t *testing.T) {
	for _, grow := range []bool{false, true} {
		t.Run(fmt.Sprintf("partitions added %v", grow), func(t *testing.T) {
			j := newJob(t, 0, fastCommit, nil) // an empty topic of 4 partitions
			j.cfg.Kafka.StartOffset = "latest"
			runScheduled(t, j, "the first run")
			if grow {
				if err := j.cl.AddPartitions(t.Context(), "clicks", 6); err != nil {
					t.Fatal(err)
				}
			}
			pipeline.SetPinRefresh(t, time.Nanosecond)
			j.cfg.Commit.Grace = pipeline.Duration(time.Second)
			failed := j.cl.FailOffsetCommits(1000)
			if m := runScheduled(t, j, "the refreshing run"); !m.CaughtUp() || failed() == 0 {
				t.Fatalf("the refreshing run: caught up %v after %d failed commits; want caught up after some", m.CaughtUp(), failed())
			}
			offs, err := pipeline.GroupOffsets(t.Context(), j.cfg.Kafka, []int{0, 1, 2, 3})
			if err != nil || len(offs) != 4 {
				t.Fatalf("group offsets after the failed refresh: %v, %v; want the 4 pins", offs, err)
			}
		})
	}
}

// TestLatestPinRefreshLeavesALiveMemberAlone: pins older than the refresh
// age need no refresh while the group has a member (a long-running job
// beside the scheduled runs): the brokers keep such a group's offsets. A
// caught-up scheduled run joined all the same, rebalancing the live
// member twice, at every run, since that member never commits them again.
func TestLatestPinRefreshLeavesALiveMemberAlone(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil) // an empty topic of 4 partitions
	j.cfg.Kafka.StartOffset = "latest"
	runScheduled(t, j, "the first run")
	live := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 30*time.Second, "the live member was not assigned the 4 partitions", func() bool { return live.Stats().Assigned.Load() == 4 })
	pipeline.SetPinRefresh(t, time.Nanosecond)
	before := live.Stats().Generations.Load()
	for i := range 3 {
		if m := runScheduled(t, j, fmt.Sprintf("scheduled run %d", i)); !m.CaughtUp() || m.Stats().Generations.Load() != 0 {
			t.Fatalf("scheduled run %d: caught up %v after %d generations; want caught up without joining", i, m.CaughtUp(), m.Stats().Generations.Load())
		}
	}
	if after := live.Stats().Generations.Load(); after != before {
		t.Errorf("the live member went through %d generations during three caught-up scheduled runs; want none", after-before)
	}
}

// TestLatestEmptyTopicAddedPartitionsJoinEveryRun: a scheduled
// start_offset "latest" job on an empty topic pins its partitions at the
// first run, after which a run caught up before joining ends without
// joining the group — also once partitions were added to the topic after
// that first run, which are read from their start and have no pin to wait
// for; what is written next, to an added partition or a pinned one, is
// ingested. Before, as long as the table held no offset of the topic, a
// run wanted a group offset for every partition, and every later run
// joined the group (rebalancing any live member) and pinned nothing.
func TestLatestEmptyTopicAddedPartitionsJoinEveryRun(t *testing.T) {
	for _, grow := range []bool{false, true} {
		name := "unchanged"
		if grow {
			name = "partitions added"
		}
		t.Run(name, func(t *testing.T) {
			j := newJob(t, 0, fastCommit, nil) // an empty topic of 4 partitions
			j.cfg.Kafka.StartOffset = "latest"
			var joins atomic.Int32
			kf := j.cl.Kfake()
			kf.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				kf.KeepControl()
				joins.Add(1)
				return nil, nil, false // counted, then handled by kfake
			})
			run := func(what string) (int32, int64) {
				before := joins.Load()
				m := runScheduled(t, j, what)
				if !m.CaughtUp() {
					t.Fatalf("%s: not caught up", what)
				}
				return joins.Load() - before, m.Stats().Generations.Load()
			}
			if n, _ := run("the first run"); n == 0 {
				t.Fatal("the first run did not join: it must, to pin the job's start")
			}
			if grow {
				if err := j.cl.AddPartitions(t.Context(), "clicks", 6); err != nil {
					t.Fatal(err)
				}
			}
			n2, g2 := run("the second run")
			n3, g3 := run("the third run")
			offs, err := pipeline.GroupOffsets(t.Context(), j.cfg.Kafka, []int{0, 1, 2, 3, 4, 5})
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: second run %d JoinGroup (%d generations), third run %d JoinGroup (%d generations); group offsets %v",
				name, n2, g2, n3, g3, offs)
			if n3 != 0 || g3 != 0 {
				t.Errorf("the third run of a caught-up job joined the group (%d JoinGroup, %d generations); want none", n3, g3)
			}
			// Whatever the fix, what is written next is ingested: to an
			// added partition from its start, to a pinned one from its pin.
			cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			gen := clickgen.New(clickgen.Config{Sessions: 10, Seed: 7})
			parts := []int32{0}
			if grow {
				parts = append(parts, 4)
			}
			for _, p := range parts {
				for range 20 {
					msg := gen.Next()
					if err := cl.ProduceSync(t.Context(), &kgo.Record{Topic: "clicks", Partition: p, Key: msg.Key, Value: msg.Value}).FirstErr(); err != nil {
						t.Fatal(err)
					}
				}
			}
			run("the fourth run")
			if got, want := distinctIDs(t, j.tbl), 20*len(parts); got != want {
				t.Fatalf("after the fourth run: %d rows, want %d", got, want)
			}
		})
	}
}

// TestLatestEmptyTopicAddedPartitionsRebalanceALiveMember: the same beside
// a long-running member of the group: scheduled runs caught up before they
// join leave it alone. Before, each of them rebalanced it.
func TestLatestEmptyTopicAddedPartitionsRebalanceALiveMember(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	j.cfg.Kafka.StartOffset = "latest"
	runScheduled(t, j, "the first run") // pins partitions 0-3 at 0
	if err := j.cl.AddPartitions(t.Context(), "clicks", 6); err != nil {
		t.Fatal(err)
	}
	live := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 30*time.Second, "the live member owns no partitions", func() bool { return live.Stats().Assigned.Load() == 6 })
	before := live.Stats().Generations.Load()
	for i := range 2 {
		m := runScheduled(t, j, "scheduled run "+strconv.Itoa(i))
		t.Logf("scheduled run %d: %d generations, caught up %v", i, m.Stats().Generations.Load(), m.CaughtUp())
	}
	time.Sleep(2 * time.Second) // the live member's rejoin after the scheduled member leaves
	if after := live.Stats().Generations.Load(); after != before {
		t.Errorf("the live member went through %d generations during two caught-up scheduled runs; want none", after-before)
	}
}
