package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestExactlyOnceTorture runs several members of one group over a
// 12-partition topic while it is being produced to, and abuses them: a member
// SIGKILLed mid-stream (no flush, no leave), members added and removed
// (rebalances), a member SIGSTOPped past its session timeout and resumed (the
// zombie), injected catalog conflicts, an ambiguous commit (applied, but
// reported as failed), an unavailable catalog, and failing Kafka offset
// commits. Table maintenance runs throughout: every member compacts, expires
// and rewrites manifests every 2s (maintain.interval), and `floe maintain`
// runs beside them. Then it checks the table independently: every produced
// offset is a row or a dead letter exactly once, per-session order holds,
// and no watermark ever went backwards.
func TestExactlyOnceTorture(t *testing.T) {
	if testing.Short() {
		t.Skip("torture test skipped in -short mode")
	}
	e := newEnv(t, 12, "maintain:\n  interval: 2s\n  expire_older_than: 5s\n")
	ctx := t.Context()
	stopWatch := watchWatermarks(t, e)
	gen := clickgen.New(clickgen.Config{Sessions: 2000, MalformedRate: 0.01, Seed: 42})

	// A backlog first, then a live stream while members come and go.
	if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 40000, 0); err != nil {
		t.Fatal(err)
	}
	produced := make(chan error, 1)
	go func() {
		_, err := e.cluster.ProduceRate(ctx, e.topic, gen, 40000, 2500)
		produced <- err
	}()

	// Broker-side fault: the first offset commits fail as after a rebalance.
	failedKafkaCommits := e.cluster.FailOffsetCommits(5)

	a := e.start("a", "run")
	b := e.start("b", "run")

	// An in-process member whose catalog injects faults around real commits.
	faulty, stopFaulty := startFaultyMember(t, e)

	e.waitProgress(10000, 60*time.Second)
	a.signal(t, syscall.SIGKILL) // killed without flushing or leaving
	c := e.start("c", "run")     // a member added
	e.waitProgress(30000, 60*time.Second)
	maintained := []*proc{e.start("maintain-1", "maintain", "--json")}

	// The zombie: paused past its session timeout while others take over.
	b.signal(t, syscall.SIGSTOP)
	time.Sleep(9 * time.Second)
	b.signal(t, syscall.SIGCONT)

	e.waitProgress(50000, 60*time.Second)
	maintained = append(maintained, e.start("maintain-2", "maintain", "--json"))
	stopFaulty() // a member removed
	if faulty.Injected(faultcat.Ambiguous) == 0 || faulty.Injected(faultcat.Conflict) == 0 || faulty.FailedLoads() == 0 {
		t.Errorf("faulty member saw ambiguous %d, conflicts %d, failed loads %d: the injected faults were never exercised",
			faulty.Injected(faultcat.Ambiguous), faulty.Injected(faultcat.Conflict), faulty.FailedLoads())
	}
	d := e.start("d", "run")
	d.waitLog(t, "msg=assigned", 30*time.Second)

	end := e.drain(t, produced, b, c, d)
	if failedKafkaCommits() < 5 {
		t.Errorf("only %d Kafka offset commits were failed", failedKafkaCommits())
	}
	stopWatch()
	compactions, expiries := checkMaintenance(t, append(maintained, b, c, d))
	// A last, quiet run compacts what is left; the check reads the result.
	final := e.start("maintain-final", "maintain", "--json")
	if err := final.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe maintain after the run: %v\n%s", err, final.output())
	}

	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	var total int64
	for _, o := range end {
		total += o
	}
	if rows+dead != total {
		t.Fatalf("rows %d + dead letters %d != produced %d", rows, dead, total)
	}
	t.Logf("produced %d: %d rows, %d dead letters; faults: ambiguous %d, conflicts %d, unavailable %d, failed loads %d, kafka commit failures %d; maintenance runs that compacted %d, expired %d",
		total, rows, dead, faulty.Injected(faultcat.Ambiguous), faulty.Injected(faultcat.Conflict),
		faulty.Injected(faultcat.Unavailable), faulty.FailedLoads(), failedKafkaCommits(), compactions, expiries)
}

// watchWatermarks polls the table's watermarks until stopped and fails the
// test if any partition's ever goes backwards (or disappears), as it would
// if maintenance expired the snapshot carrying the offset map.
func watchWatermarks(t *testing.T, e *env) (stop func()) {
	t.Helper()
	// Opens e.cat before the goroutine shares it; the table may not exist yet.
	if _, err := e.loadTable(t.Context()); e.cat == nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		last := map[int32]int64{}
		for {
			wm := e.watermarks(t.Context())
			if wm == nil { // the table could not be loaded this time
				wm = last
			}
			for p, prev := range last {
				if cur, ok := wm[p]; !ok || cur < prev {
					t.Errorf("watermark of partition %d went from %d to %d (present %v)", p, prev, cur, ok)
				}
			}
			maps.Copy(last, wm)
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
	}
}

// checkMaintenance waits for the `floe maintain` runs among ps, which must
// succeed or give up after bounded conflicts (never fail otherwise), and
// counts the maintenance runs in all logs that compacted files or expired
// snapshots; some must have.
func checkMaintenance(t *testing.T, ps []*proc) (compactions, expiries int) {
	t.Helper()
	for _, p := range ps {
		if strings.HasPrefix(p.name, "maintain") {
			if err := p.wait(t, 60*time.Second); err != nil && !strings.Contains(p.output(), "conflicting attempts") {
				t.Errorf("%s: %v\n%s", p.name, err, p.output())
			}
		}
		for _, line := range strings.Split(p.output(), "\n") {
			if !strings.Contains(line, `msg="table maintained"`) {
				continue
			}
			if !strings.Contains(line, " files_rewritten=0 ") {
				compactions++
			}
			if !strings.Contains(line, " snapshots_expired=0 ") {
				expiries++
			}
		}
		if strings.Contains(p.output(), "refusing to commit") {
			t.Errorf("%s: maintenance would have changed an offset map:\n%s", p.name, p.output())
		}
	}
	if compactions == 0 || expiries == 0 {
		t.Errorf("maintenance compacted in %d runs and expired in %d; both must have happened during the run", compactions, expiries)
	}
	return compactions, expiries
}

// startFaultyMember runs a pipeline member in this process through a
// fault-injecting wrapper of the real SQLite catalog. The faults are planned
// up front: a conflict, an ambiguous commit, an unavailable catalog, then
// more of each while it runs; and table loads that fail, now and then.
func startFaultyMember(t *testing.T, e *env) (*faultcat.Catalog, func()) {
	t.Helper()
	cfg, err := pipeline.LoadConfig(e.config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	cat, err := lakehouse.OpenCatalog(t.Context(), cfg.Table.Catalog)
	if err != nil {
		t.Fatal(err)
	}
	fc := faultcat.Wrap(cat)
	fc.Inject(faultcat.Conflict, faultcat.None, faultcat.Ambiguous, faultcat.None, faultcat.Unavailable,
		faultcat.None, faultcat.Conflict, faultcat.Ambiguous)
	N, U := faultcat.None, faultcat.Unavailable
	fc.InjectLoads(N, N, N, U, N, N, N, N, N, U, N, N, N, N, N, N, U, N, N, U, U, N, N, N, N, N, N, N, N, U)
	sc, _ := schemas.Lookup(schemas.Clickstream)
	tbl, err := lakehouse.OpenIn(t.Context(), fc, lakehouse.Config{Table: cfg.Table.Name, Group: cfg.Kafka.Group}, sc)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	m, err := pipeline.NewMember(cfg, tbl, sc, pipeline.WithLogger(log))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("faulty member: %v", err)
		}
		tbl.Close()
	}
	t.Cleanup(stop)
	return fc, stop
}

// TestGracefulShutdown sends SIGTERM mid-stream: the member flushes, commits
// and leaves the group at once (not after a session timeout); a restart then
// finishes the topic with nothing lost and nothing duplicated.
func TestGracefulShutdown(t *testing.T) {
	e := newEnv(t, 12, "")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 500, MalformedRate: 0.01, Seed: 7})
	produced := make(chan error, 1)
	go func() {
		_, err := e.cluster.ProduceRate(ctx, e.topic, gen, 30000, 6000)
		produced <- err
	}()

	p := e.start("first", "run")
	e.waitProgress(5000, 60*time.Second)
	p.signal(t, syscall.SIGTERM)
	if err := p.wait(t, 20*time.Second); err != nil {
		t.Fatalf("exit after SIGTERM: %v", err)
	}
	// A member that left cleanly leaves an empty group right away.
	adm := kadm.NewClient(mustClient(t, e))
	groups, err := adm.DescribeGroups(ctx, "floe-test")
	if err != nil {
		t.Fatal(err)
	}
	if g := groups["floe-test"]; len(g.Members) != 0 || g.State != "Empty" {
		t.Fatalf("after SIGTERM the group is %q with %d members, want Empty with 0", g.State, len(g.Members))
	}
	committedAtStop := e.watermarks(ctx)

	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	end, err := e.cluster.EndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	second := e.start("second", "run", "--until-caught-up")
	if err := second.wait(t, 90*time.Second); err != nil {
		t.Fatalf("scheduled run: %v", err)
	}
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	var total, before int64
	for p, o := range end {
		total += o
		before += committedAtStop[p]
	}
	if before == 0 {
		t.Fatal("nothing was committed by the first member's final flush")
	}
	if rows+dead != total {
		t.Fatalf("rows %d + dead letters %d != produced %d", rows, dead, total)
	}

	// floe verify agrees with the independent check, and exits 0.
	v := e.start("verify", "verify", "--json")
	if err := v.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe verify: %v\n%s", err, v.output())
	}
	out := v.output()
	var rep struct {
		Rows         int64 `json:"rows"`
		DuplicateIDs int64 `json:"duplicate_ids"`
		DeadLetters  int64 `json:"dead_letters"`
	}
	if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
		t.Fatalf("verify --json: %v\n%s", err, out)
	}
	if rep.Rows != rows || rep.DeadLetters != dead || rep.DuplicateIDs != 0 {
		t.Fatalf("verify reports rows %d, dead letters %d, duplicates %d; the checker found %d, %d, 0",
			rep.Rows, rep.DeadLetters, rep.DuplicateIDs, rows, dead)
	}

	// Replaying a committed partition inserts nothing.
	r := e.start("replay", "replay", "--partition", "0", "--from", "0", "--to", strconv.FormatInt(end[0], 10), "--json")
	if err := r.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe replay: %v\n%s", err, r.output())
	}
	out = r.output()
	var res struct {
		Read, Inserted, Skipped int64
		DeadLettered            int64 `json:"dead_lettered"`
	}
	at := strings.LastIndex(out, `{"ranges"`)
	if at < 0 {
		t.Fatalf("replay --json printed no summary:\n%s", out)
	}
	if err := json.Unmarshal([]byte(out[at:]), &res); err != nil {
		t.Fatalf("replay --json: %v\n%s", err, out)
	}
	if res.Inserted != 0 || res.Read != end[0] || res.Skipped+res.DeadLettered != end[0] {
		t.Fatalf("replay of committed partition 0 [0,%d): %+v, want nothing inserted", end[0], res)
	}
	if again, _ := e.check(end, malformed); again != rows {
		t.Fatalf("after the replay the table holds %d rows, before %d", again, rows)
	}
}

func mustClient(t *testing.T, e *env) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestRunFailsClearly: bad input to `floe run` ends it with exit status 2 and
// a message naming the problem, never a hang or a crash.
func TestRunFailsClearly(t *testing.T) {
	e := newEnv(t, 1, "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"unreachable broker", []string{"run", "--brokers", "127.0.0.1:1"}, "127.0.0.1:1"},
		{"unreachable broker, scheduled", []string{"run", "--until-caught-up", "--brokers", "127.0.0.1:1"}, "kafka.brokers 127.0.0.1:1"},
		{"missing topic", []string{"run", "--topic", "nosuchtopic"}, "nosuchtopic"},
		{"bad table name", []string{"run", "--table", "nodot"}, "table.name"},
		{"stray argument", []string{"run", "extra"}, "extra"},
		{"replay without a range", []string{"replay"}, "give a range"},
		{"replay offsets and times", []string{"replay", "--partition", "0", "--from", "0", "--to", "5", "--from-time", "2026-11-29T10:00:00Z"}, "not both"},
		{"replay offsets without partition", []string{"replay", "--from", "0", "--to", "5"}, "need --partition"},
		{"replay bad time", []string{"replay", "--from-time", "yesterday", "--to-time", "2026-11-29T10:00:00Z"}, "RFC 3339"},
		{"reenrich without enrichment", []string{"replay", "--partition", "0", "--from", "0", "--to", "1", "--reenrich"}, "needs an enrich section"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := e.start(tc.name, tc.args...)
			err := p.wait(t, 60*time.Second)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 {
				t.Fatalf("exit: %v, want status 2\n%s", err, p.output())
			}
			if !strings.Contains(p.output(), tc.want) {
				t.Fatalf("output does not mention %q:\n%s", tc.want, p.output())
			}
		})
	}
}
