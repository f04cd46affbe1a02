package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	_ "github.com/apache/iceberg-go/catalog/sql"
	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	_ "modernc.org/sqlite"

	"github.com/floe-dev/floe/pipeline/embedded"
)

// The harness runs floe as real processes (so members can be SIGKILLed,
// SIGSTOPped and SIGTERMed) against an in-process kfake broker, a SQLite
// catalog and a local warehouse, and checks the table independently of
// floe's own code: iceberg-go reads the table, franz-go reads the
// dead-letter topic.

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// TestMain removes the binary floeBinary built: each test run builds its
// own (140 MB), and left behind they fill the disk run after run.
func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// floeBinary builds the floe binary once per test run.
func floeBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "floe-bin-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "floe")
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

type env struct {
	t       *testing.T
	dir     string
	cluster *embedded.Cluster
	// brokers, when cluster is nil, are the seed brokers of a real Kafka
	// cluster the checker reads (see interop_kafka_test.go).
	brokers []string
	topic   string
	config  string
	cat     catalog.Catalog
	// catalog, when set, are the properties of the catalog holding the
	// table (see interop_catalog_test.go); nil means the SQLite catalog in dir.
	catalog map[string]string
	// procEnv are NAME=value pairs added to the environment of the floe
	// processes started from now on (t.Setenv is not allowed in parallel
	// tests).
	procEnv []string
}

// seeds returns the addresses the checker's franz-go clients connect to.
func (e *env) seeds() []string {
	if e.cluster == nil {
		return e.brokers
	}
	return e.cluster.Addrs()
}

// endOffsets returns the high watermarks of topic's partitions.
func (e *env) endOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	if e.cluster != nil {
		return e.cluster.EndOffsets(ctx, topic)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	out := map[int32]int64{}
	var perr error
	ends.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			perr = fmt.Errorf("end offset of %s/%d: %w", topic, o.Partition, o.Err)
		}
		out[o.Partition] = o.Offset
	})
	if perr != nil {
		return nil, perr
	}
	return out, nil
}

const testTopic = "clicks"

// newEnv starts a broker with a 12-partition topic and writes a config.
func newEnv(t *testing.T, partitions int, extra string) *env {
	t.Helper()
	cl, err := embedded.StartTopic(t.Context(), testTopic, partitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.CreateTopic(t.Context(), testTopic+".dlq", 2); err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: t.TempDir(), cluster: cl, topic: testTopic}
	e.config = writeConfig(t, e.dir, cl.Addrs()[0], "floe-test", "analytics.clicks",
		"  session_timeout: 6s\n  heartbeat_interval: 500ms\n  rebalance_timeout: 15s\n",
		"commit:\n  interval: 500ms\n  max_records: 5000\n  grace: 5s\n"+extra)
	return e
}

// writeConfig writes dir/floe.yaml: topic testTopic on broker, a SQLite
// catalog and a warehouse in dir; kafkaExtra goes in the kafka section,
// extra after it.
func writeConfig(tb testing.TB, dir, broker, group, table, kafkaExtra, extra string) string {
	tb.Helper()
	return writeConfigCatalog(tb, dir, broker, group, table, sqliteCatalog(dir), kafkaExtra, extra)
}

// sqliteCatalog is the default test catalog: SQLite and a warehouse in dir.
func sqliteCatalog(dir string) map[string]string {
	return map[string]string{
		"type": "sql", "uri": "file:" + dir + "/catalog.db", "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + dir + "/warehouse",
	}
}

// writeConfigCatalog is writeConfig with the table in the catalog given by
// its properties (table.catalog).
func writeConfigCatalog(tb testing.TB, dir, broker, group, table string, catalog map[string]string, kafkaExtra, extra string) string {
	tb.Helper()
	var cat strings.Builder
	keys := make([]string, 0, len(catalog))
	for k := range catalog {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, _ := json.Marshal(catalog[k]) // a JSON string is a YAML double-quoted scalar
		fmt.Fprintf(&cat, "    %s: %s\n", k, v)
	}
	path := filepath.Join(dir, "floe.yaml")
	cfg := fmt.Sprintf(`kafka:
  brokers: [%s]
  topic: %s
  group: %s
%stable:
  name: %s
  catalog:
%s%s`, broker, testTopic, group, kafkaExtra, table, cat.String(), extra)
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	return path
}

type proc struct {
	name string
	cmd  *exec.Cmd
	log  *bytes.Buffer
	done chan error
}

// start runs `floe <args> --config <env config>` as a child process.
func (e *env) start(name string, args ...string) *proc {
	e.t.Helper()
	args = append(args, "--config", e.config, "--log-level", "debug")
	p := &proc{name: name, cmd: exec.Command(floeBinary(e.t), args...), log: &bytes.Buffer{}, done: make(chan error, 1)}
	p.cmd.Stdout = &lockedWriter{w: p.log}
	p.cmd.Stderr = p.cmd.Stdout
	if len(e.procEnv) > 0 {
		p.cmd.Env = append(os.Environ(), e.procEnv...)
	}
	if err := p.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	e.t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if e.t.Failed() {
			e.t.Logf("--- log of %s ---\n%s", p.name, tail(p.output(), 6000))
		}
	})
	return p
}

func (p *proc) signal(t *testing.T, s syscall.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(s); err != nil {
		t.Fatalf("%s: signal %v: %v", p.name, s, err)
	}
}

// wait waits for the process to exit and returns its exit error.
func (p *proc) wait(t *testing.T, timeout time.Duration) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %s", p.name, timeout)
		return nil
	}
}

// waitLog waits until the process has logged substr.
func (p *proc) waitLog(t *testing.T, substr string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if strings.Contains(p.output(), substr) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s did not log %q within %s", p.name, substr, timeout)
}

func (p *proc) output() string {
	w := p.cmd.Stdout.(*lockedWriter)
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.String()
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// loadTable opens the table with iceberg-go directly, not through floe.
func (e *env) loadTable(ctx context.Context) (*table.Table, error) {
	if e.cat == nil {
		props := iceberg.Properties{
			"type": "sql", "uri": "file:" + e.dir + "/catalog.db?_pragma=busy_timeout(30000)",
			"sql.dialect": "sqlite", "sql.driver": "sqlite", "warehouse": "file://" + e.dir + "/warehouse",
		}
		if e.catalog != nil {
			props = iceberg.Properties(maps.Clone(e.catalog))
		}
		cat, err := catalog.Load(ctx, "floe", props)
		if err != nil {
			return nil, err
		}
		e.cat = cat
		e.t.Cleanup(func() {
			if c, ok := cat.(interface{ Close() error }); ok {
				c.Close()
			}
		})
	}
	return e.cat.LoadTable(ctx, table.Identifier{"analytics", "clicks"})
}

// watermarks reads the group's offset map from the newest snapshot summary.
func (e *env) watermarks(ctx context.Context) map[int32]int64 {
	tbl, err := e.loadTable(ctx)
	if err != nil {
		return nil
	}
	meta := tbl.Metadata()
	for s := meta.CurrentSnapshot(); s != nil; {
		if raw, ok := s.Summary.Properties["floe.offsets.floe-test"]; ok {
			return parseOffsets(e.t, raw, e.topic)
		}
		if s.ParentSnapshotID == nil {
			break
		}
		s = meta.SnapshotByID(*s.ParentSnapshotID)
	}
	return map[int32]int64{}
}

func parseOffsets(t *testing.T, raw, topic string) map[int32]int64 {
	var m map[string]map[string]int64
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		t.Fatalf("offset map %q: %v", raw, err)
	}
	out := map[int32]int64{}
	for p, o := range m[topic] {
		n, _ := strconv.Atoi(p)
		out[int32(n)] = o
	}
	return out
}

// drain waits for the producer to finish, then until every produced offset
// is committed, then stops procs with SIGTERM (each must exit cleanly), and
// returns the end offsets.
func (e *env) drain(t *testing.T, produced <-chan error, procs ...*proc) map[int32]int64 {
	t.Helper()
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	end, err := e.endOffsets(t.Context(), e.topic)
	if err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(end, 120*time.Second)
	for _, p := range procs {
		p.signal(t, syscall.SIGTERM)
	}
	for _, p := range procs {
		if err := p.wait(t, 30*time.Second); err != nil {
			t.Errorf("%s exited with %v after SIGTERM", p.name, err)
		}
		if out := p.output(); !stopLogged.MatchString(out) {
			t.Errorf("%s's stop is not logged as one the signal asked for:\n%s", p.name, tail(out, 2000))
		}
	}
	return end
}

// stopLogged matches the line a member logs when a SIGTERM stops it, in a
// generation or between two (a rebalance under way, as when a member
// joins just before the stop).
var stopLogged = regexp.MustCompile(`msg="stopping[^"]*" cause="terminated signal received"`)

// waitCommitted waits until the table's watermarks reach end.
func (e *env) waitCommitted(end map[int32]int64, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	var wm map[int32]int64
	for time.Now().Before(deadline) {
		wm = e.watermarks(e.t.Context())
		done := true
		for p, o := range end {
			if o > 0 && wm[p] < o {
				done = false
			}
		}
		if done {
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	e.t.Fatalf("not committed within %s: watermarks %v, end offsets %v", timeout, wm, end)
}

// waitProgress waits until the table has committed at least min offsets.
func (e *env) waitProgress(min int64, timeout time.Duration) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		var sum int64
		for _, o := range e.watermarks(e.t.Context()) {
			sum += o
		}
		if sum >= min {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	e.t.Fatalf("fewer than %d offsets committed within %s", min, timeout)
}

type row struct {
	offset  int64
	seq     int64
	session string
}

// check asserts the exactly-once invariant independently of floe: every
// offset below end is a row or a dead letter exactly once, none is both, no
// row is duplicated, and each session's seq increases with its offsets.
// It returns the row and dead-letter counts.
func (e *env) check(end map[int32]int64, wantDead int64) (rows, dead int64) {
	t := e.t
	t.Helper()
	ctx := t.Context()
	tbl, err := e.loadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := tbl.Scan(table.WithSelectedFields("_kafka_partition", "_kafka_offset", "session_id", "seq")).ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byPart := map[int32][]row{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		idx := func(n string) int { return b.Schema().FieldIndices(n)[0] }
		ps := b.Column(idx("_kafka_partition")).(*array.Int32)
		os := b.Column(idx("_kafka_offset")).(*array.Int64)
		ss := b.Column(idx("session_id")).(*array.String)
		sq := b.Column(idx("seq")).(*array.Int64)
		for i := 0; i < int(b.NumRows()); i++ {
			byPart[ps.Value(i)] = append(byPart[ps.Value(i)], row{os.Value(i), sq.Value(i), ss.Value(i)})
		}
		b.Release()
	}
	dl := e.readDeadLetters(ctx)
	sessionPart := map[string]int32{}
	for p, last := range end {
		rs := byPart[p]
		sort.Slice(rs, func(i, j int) bool { return rs[i].offset < rs[j].offset })
		seen := map[int64]bool{}
		lastSeq := map[string]int64{}
		for _, r := range rs {
			if seen[r.offset] {
				t.Fatalf("duplicate row: partition %d offset %d", p, r.offset)
			}
			seen[r.offset] = true
			if dl[p][r.offset] {
				t.Fatalf("partition %d offset %d is both a row and a dead letter", p, r.offset)
			}
			if r.offset >= last {
				t.Fatalf("partition %d offset %d beyond the produced end %d", p, r.offset, last)
			}
			if prev, ok := lastSeq[r.session]; ok && r.seq <= prev {
				t.Fatalf("session %s: seq %d at offset %d after seq %d: order broken", r.session, r.seq, r.offset, prev)
			}
			lastSeq[r.session] = r.seq
			if q, ok := sessionPart[r.session]; ok && q != p {
				t.Fatalf("session %s in partitions %d and %d", r.session, q, p)
			}
			sessionPart[r.session] = p
		}
		for o := int64(0); o < last; o++ {
			if !seen[o] && !dl[p][o] {
				t.Fatalf("partition %d offset %d lost: neither a row nor a dead letter", p, o)
			}
		}
		rows += int64(len(rs))
		dead += int64(len(dl[p]))
	}
	if dead != wantDead {
		t.Fatalf("%d distinct dead letters, the generator produced %d malformed records", dead, wantDead)
	}
	return rows, dead
}

// readDeadLetters reads the dead-letter topic with franz-go and returns the
// source offsets it holds.
func (e *env) readDeadLetters(ctx context.Context) map[int32]map[int64]bool {
	t := e.t
	end, err := e.endOffsets(ctx, e.topic+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, o := range end {
		total += o
	}
	out := map[int32]map[int64]bool{}
	if total == 0 {
		return out
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.seeds()...), kgo.ConsumeTopics(e.topic+".dlq"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for read := int64(0); read < total; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading dead letters: %v after %d of %d", err, read, total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			var p, o int64 = -1, -1
			for _, h := range r.Headers {
				switch h.Key {
				case "floe.source.partition":
					p, _ = strconv.ParseInt(string(h.Value), 10, 32)
				case "floe.source.offset":
					o, _ = strconv.ParseInt(string(h.Value), 10, 64)
				}
			}
			if p < 0 || o < 0 {
				t.Fatalf("dead letter at %d/%d lacks source headers", r.Partition, r.Offset)
			}
			if out[int32(p)] == nil {
				out[int32(p)] = map[int64]bool{}
			}
			out[int32(p)][o] = true
		})
	}
	return out
}
