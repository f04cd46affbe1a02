package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// benchRecords is the backlog size; FLOE_BENCH_RECORDS overrides it.
func benchRecords() int {
	if v, err := strconv.Atoi(os.Getenv("FLOE_BENCH_RECORDS")); err == nil && v > 0 {
		return v
	}
	return 1_000_000
}

// backlogCluster starts a broker whose 12-partition topic holds n
// clickstream records over 50,000 sessions; gen continues the stream.
func backlogCluster(b *testing.B, n int, seed int64) (*embedded.Cluster, *clickgen.Generator) {
	ctx := context.Background()
	cl, err := embedded.StartTopic(ctx, testTopic, 12)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	gen := clickgen.New(clickgen.Config{Sessions: 50000, Seed: seed})
	started := time.Now()
	if _, err := cl.ProduceRate(ctx, testTopic, gen, n, 0); err != nil {
		b.Fatal(err)
	}
	b.Logf("produced %d records in %s", n, time.Since(started).Round(time.Millisecond))
	return cl, gen
}

// BenchmarkEndToEnd drains a clickstream backlog from the in-process broker
// into a SQLite-catalog table with `floe run --until-caught-up` (a separate
// process, so its peak RSS is its own), and measures, in the same run and
// against the same broker, the raw kafka-go consume rate with the reader
// configuration floe uses, and floe on the same records encoded as Avro in
// the Confluent wire format with the schema in a registry (franz-go's
// srfake). Run it with `make bench`.
func BenchmarkEndToEnd(b *testing.B) {
	n := benchRecords()
	cl, _ := backlogCluster(b, n, 1)
	ctx := context.Background()
	end, err := cl.EndOffsets(ctx, testTopic)
	if err != nil {
		b.Fatal(err)
	}
	reg := srfake.New()
	defer reg.Close()
	avsc, err := filepath.Abs("../../schemas/clickstream.avsc")
	if err != nil {
		b.Fatal(err)
	}
	if err := produceAvro(b, cl, reg.URL(), avroTopic, avsc, n, 1); err != nil {
		b.Fatal(err)
	}

	for i := 0; i < b.N; i++ {
		raw := rawConsume(b, cl.Addrs(), end)
		const limit = "memory_limit: 256MiB\n"
		js := floeRun(b, cl.Addrs(), limit)
		av := floeRunConfig(b, benchConfigTopic(b, cl.Addrs(), avroTopic,
			"schema: "+avsc+"\nformat: avro\nregistry:\n  url: "+reg.URL()+"\n"+limit))
		rawRate := float64(n) / raw.Seconds()
		b.ReportMetric(rawRate, "raw-rec/s")
		b.ReportMetric(js.rate(n), "floe-rec/s")
		b.ReportMetric(js.rate(n)/rawRate, "ratio")
		b.ReportMetric(float64(js.rss)/(1<<20), "floe-peak-MiB")
		b.ReportMetric(av.rate(n), "avro-rec/s")
		b.Logf("\n| %d records, %d cores | records/s | vs raw | CPU µs/record | peak RSS |\n|---|---|---|---|---|\n"+
			"| raw kafka-go consume (same broker, same run) | %.0f | 1.00 | | |\n"+
			"| floe run --until-caught-up → Iceberg (SQLite, local files), JSON | %.0f | %.2f | %.1f | %d MiB |\n"+
			"| the same records as Avro, Confluent wire format, registry | %.0f | %.2f | %.1f | %d MiB |",
			n, runtime.NumCPU(), rawRate, js.rate(n), js.rate(n)/rawRate, js.cpuPerRecord(n), js.rss>>20,
			av.rate(n), av.rate(n)/rawRate, av.cpuPerRecord(n), av.rss>>20)
	}
}

// avroTopic holds BenchmarkEndToEnd's records as registry Avro.
const avroTopic = "clicks-avro"

// avroClick is a clickstream record as clickstream.avsc declares it; the
// pointer fields are its ["null", …] unions.
type avroClick struct {
	EventID   *string   `avro:"event_id"`
	SessionID string    `avro:"session_id"`
	UserID    *string   `avro:"user_id"`
	EventType string    `avro:"event_type"`
	URL       *string   `avro:"url"`
	Referrer  *string   `avro:"referrer"`
	UserAgent *string   `avro:"user_agent"`
	TS        time.Time `avro:"ts"`
	Seq       *int64    `avro:"seq"`
}

// toAvroClick reads a generated JSON record as the clickstream decoder
// does: ts is epoch milliseconds or an RFC 3339 string.
func toAvroClick(p *fastjson.Parser, value []byte) (avroClick, error) {
	v, err := p.ParseBytes(value)
	if err != nil {
		return avroClick{}, err
	}
	opt := func(name string) *string {
		if f := v.Get(name); f != nil && f.Type() == fastjson.TypeString {
			s := string(f.GetStringBytes())
			return &s
		}
		return nil
	}
	c := avroClick{
		EventID: opt("event_id"), SessionID: string(v.GetStringBytes("session_id")), UserID: opt("user_id"),
		EventType: string(v.GetStringBytes("event_type")), URL: opt("url"), Referrer: opt("referrer"),
		UserAgent: opt("user_agent"),
	}
	if f := v.Get("seq"); f != nil && f.Type() == fastjson.TypeNumber {
		n := f.GetInt64()
		c.Seq = &n
	}
	switch ts := v.Get("ts"); {
	case ts == nil:
		return c, errors.New("no ts")
	case ts.Type() == fastjson.TypeNumber:
		c.TS = time.UnixMilli(ts.GetInt64()).UTC()
	default:
		t, err := time.Parse(time.RFC3339, string(ts.GetStringBytes()))
		if err != nil {
			return c, fmt.Errorf("ts: %w", err)
		}
		c.TS = t.UTC()
	}
	return c, nil
}

// produceAvro writes to a new 12-partition topic the n records
// backlogCluster's generator makes from seed, as Avro in the Confluent wire
// format (magic byte, schema id, body), registering clickstream.avsc in
// the registry at url under the topic's value subject.
func produceAvro(b *testing.B, cl *embedded.Cluster, url, topic, avsc string, n int, seed int64) error {
	ctx := context.Background()
	if err := cl.CreateTopic(ctx, topic, 12); err != nil {
		return err
	}
	text, err := os.ReadFile(avsc)
	if err != nil {
		return err
	}
	rc, err := sr.NewClient(sr.URLs(url))
	if err != nil {
		return err
	}
	ss, err := rc.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: string(text)})
	if err != nil {
		return fmt.Errorf("registering clickstream.avsc: %w", err)
	}
	w, err := avro.Parse(string(text))
	if err != nil {
		return err
	}
	gen := clickgen.New(clickgen.Config{Sessions: 50000, Seed: seed})
	var p fastjson.Parser
	started := time.Now()
	const chunk = 20000
	msgs := make([]clickgen.Message, 0, chunk)
	for done := 0; done < n; {
		msgs = msgs[:0]
		for ; len(msgs) < chunk && done < n; done++ {
			m := gen.Next()
			c, err := toAvroClick(&p, m.Value)
			if err != nil {
				return fmt.Errorf("record %d: %w", done, err)
			}
			body, err := avro.Marshal(w, c)
			if err != nil {
				return fmt.Errorf("record %d as Avro: %w", done, err)
			}
			v := make([]byte, 5, 5+len(body))
			binary.BigEndian.PutUint32(v[1:], uint32(ss.ID))
			msgs = append(msgs, clickgen.Message{Key: append([]byte(nil), m.Key...), Value: append(v, body...)})
		}
		if _, err := cl.Produce(ctx, topic, msgs); err != nil {
			return err
		}
	}
	b.Logf("produced %d Avro records in %s", n, time.Since(started).Round(time.Millisecond))
	return nil
}

// rawConsume reads every partition to its end with kafka-go Readers
// configured as floe's, discarding the messages.
func rawConsume(b *testing.B, brokers []string, end map[int32]int64) time.Duration {
	k := pipeline.KafkaConfig{Brokers: brokers, Topic: testTopic, FetchMaxBytes: 1 << 20}
	dialer := &kafka.Dialer{Timeout: 10 * time.Second}
	var wg sync.WaitGroup
	var total atomic.Int64
	started := time.Now()
	for p, last := range end {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(pipeline.ReaderConfig(k, p, dialer))
			defer r.Close()
			for {
				m, err := r.FetchMessage(context.Background())
				if err != nil {
					b.Error(err)
					return
				}
				total.Add(1)
				if m.Offset+1 >= last {
					return
				}
			}
		}()
	}
	wg.Wait()
	return time.Since(started)
}

// run is one `floe run`: its wall time, peak resident memory and the CPU
// time (user + system) it used. CPU time is what to compare on this shared
// machine: wall time moves with the other users' load, CPU per record much
// less.
type run struct {
	took time.Duration
	rss  int64
	cpu  time.Duration
	// commits are the run's table commits, from its debug log.
	commits []commitAt
}

// commitAt is one table commit: when it ended, counted from the process's
// start, and the rows it added.
type commitAt struct {
	at   time.Duration
	rows int64
	// cpu is the CPU time the process had used by then; 0 if unknown.
	cpu time.Duration
}

// firstCommit is when the run's first commit ended: the start-up, and with
// enrichment the cold start (the first lookups), before the pipeline
// reaches its steady rate.
func (r run) firstCommit() time.Duration {
	if len(r.commits) == 0 {
		return r.took
	}
	return r.commits[0].at
}

// steadyRate is records per second from the first commit to the last: the
// rate without the start-up and cold start. Zero with fewer than two commits.
func (r run) steadyRate() float64 {
	if len(r.commits) < 2 {
		return 0
	}
	var rows int64
	for _, c := range r.commits[1:] {
		rows += c.rows
	}
	return float64(rows) / (r.commits[len(r.commits)-1].at - r.commits[0].at).Seconds()
}

// coresToFirstCommit is the CPU time the run used until its first commit
// over the wall time that took: how busy it kept the cores while starting
// up and, with enrichment, while the first lookups were answered. 0 when
// unknown.
func (r run) coresToFirstCommit() float64 {
	if len(r.commits) == 0 || r.commits[0].cpu == 0 {
		return 0
	}
	return r.commits[0].cpu.Seconds() / r.commits[0].at.Seconds()
}

// steadyRatio is enriched's rate after its first commit over plain's, or
// 0 when either has no such rate.
func steadyRatio(plain, enriched run) float64 {
	p, e := plain.steadyRate(), enriched.steadyRate()
	if p == 0 || e == 0 {
		return 0
	}
	return e / p
}

// commitLog passes a floe process's log through to w, except its debug
// lines, and keeps the times and row counts of its "committed" lines. It
// never fails a write: a failed one would stop the copy of the process's
// stderr, and the process would block on the full pipe.
type commitLog struct {
	w       io.Writer
	started time.Time
	partial []byte
	commits []commitAt
	pid     atomic.Int32 // the process's, once started
}

func (l *commitLog) Write(p []byte) (int, error) {
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			return len(p), nil
		}
		line := string(l.partial[:i+1])
		l.partial = l.partial[i+1:]
		if !strings.Contains(line, " level=DEBUG ") {
			_, _ = io.WriteString(l.w, line) // see commitLog
			continue
		}
		if !strings.Contains(line, " msg=committed ") {
			continue
		}
		if rows, ok := logField(line, "rows"); ok {
			n, err := strconv.ParseInt(rows, 10, 64)
			if err == nil {
				l.commits = append(l.commits, commitAt{at: time.Since(l.started), rows: n, cpu: procCPU(int(l.pid.Load()))})
			}
		}
	}
}

// logField returns the value of key=value in a logfmt line.
func logField(line, key string) (string, bool) {
	i := strings.Index(line, " "+key+"=")
	if i < 0 {
		return "", false
	}
	v := line[i+len(key)+2:]
	if j := strings.IndexAny(v, " \n"); j >= 0 {
		v = v[:j]
	}
	return v, true
}

// procCPU is the CPU time (user + system) process pid has used so far, read
// from /proc/<pid>/stat in clock ticks (Linux's USER_HZ, 100 a second), or
// 0 if it cannot be read.
func procCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name, field 2, is in parentheses and may hold spaces;
	// utime and stime, fields 14 and 15, are the 12th and 13th after it.
	i := bytes.LastIndexByte(st, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(st[i+1:]))
	if len(f) < 13 {
		return 0
	}
	user, err1 := strconv.ParseInt(f[11], 10, 64)
	sys, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0
	}
	return time.Duration(user+sys) * 10 * time.Millisecond
}

// rate is records per second of wall time.
func (r run) rate(n int) float64 { return float64(n) / r.took.Seconds() }

// cpuPerRecord is the process's CPU time per record, in microseconds.
func (r run) cpuPerRecord(n int) float64 { return float64(r.cpu.Microseconds()) / float64(n) }

// cpuUsed is the CPU time (user + system) an ended process used.
func cpuUsed(ps *os.ProcessState) time.Duration {
	ru := ps.SysUsage().(*syscall.Rusage)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

// peakRSS follows a running process's peak resident set size (VmHWM in
// /proc/<pid>/status, every 25 ms) until stop, which returns the last value
// read. getrusage's ru_maxrss cannot be used for a child: exec carries the
// parent's high-water mark over into the child's (Linux's exec_mmap), so
// every floe run would report at least this benchmark process's own peak,
// which holds a broker full of records. Growth in a run's last 25 ms is
// missed.
func peakRSS(pid int) (stop func() int64) {
	var peak atomic.Int64
	done, exited := make(chan struct{}), make(chan struct{})
	path := fmt.Sprintf("/proc/%d/status", pid)
	go func() {
		defer close(exited)
		t := time.NewTicker(25 * time.Millisecond)
		defer t.Stop()
		for {
			if st, err := os.ReadFile(path); err == nil {
				if i := bytes.Index(st, []byte("VmHWM:")); i >= 0 {
					var kb int64
					if _, err := fmt.Sscan(string(st[i+len("VmHWM:"):]), &kb); err == nil && kb<<10 > peak.Load() {
						peak.Store(kb << 10)
					}
				}
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() int64 {
		close(done)
		<-exited
		return peak.Load()
	}
}

// floeRun runs the floe binary until caught up with the config benchConfig
// writes (extra appended to it).
func floeRun(b *testing.B, brokers []string, extra string) run {
	return floeRunConfig(b, benchConfig(b, brokers, extra))
}

// floeRunConfig runs the floe binary with config cfg until caught up. With
// FLOE_BENCH_CPUPROFILE (FLOE_BENCH_MEMPROFILE) set, each run writes its CPU (allocation) profile to that path
// with a sequence number appended.
func floeRunConfig(b *testing.B, cfg string) run {
	args := append([]string{"run", "--until-caught-up", "--config", cfg, "--log-level", "debug"}, profileArgs()...)
	cmd := exec.Command(floeBinary(b), args...)
	started := time.Now()
	log := &commitLog{w: os.Stderr, started: started}
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		b.Fatalf("floe run: %v", err)
	}
	log.pid.Store(int32(cmd.Process.Pid))
	peak := peakRSS(cmd.Process.Pid)
	err := cmd.Wait()
	rss := peak()
	_, _ = log.w.Write(log.partial) // a last line without a newline
	if err != nil {
		b.Fatalf("floe run: %v", err)
	}
	if len(log.commits) == 0 {
		b.Errorf("floe run: no commit in its debug log (has the \"committed\" line changed?)")
	}
	return run{took: time.Since(started), rss: rss, cpu: cpuUsed(cmd.ProcessState), commits: log.commits}
}

// profileSeq numbers the CPU profiles of one benchmark process.
var profileSeq atomic.Int32

// profileArgs are the flags that make the next floe run write the CPU
// (FLOE_BENCH_CPUPROFILE) and allocation (FLOE_BENCH_MEMPROFILE) profiles
// asked for, numbered by profileSeq.
func profileArgs() []string {
	seq := profileSeq.Add(1)
	var args []string
	if p := os.Getenv("FLOE_BENCH_CPUPROFILE"); p != "" {
		args = append(args, "--cpuprofile", fmt.Sprintf("%s.%d", p, seq))
	}
	if p := os.Getenv("FLOE_BENCH_MEMPROFILE"); p != "" {
		args = append(args, "--memprofile", fmt.Sprintf("%s.%d", p, seq))
	}
	return args
}

// benchCommit is the commit section of every benchmark config.
const benchCommit = "commit:\n  interval: 10s\n  max_records: 250000\n  max_bytes: 64MiB\n"

// benchConfig writes the benchmark's floe config to a new directory.
func benchConfig(b *testing.B, brokers []string, extra string) string {
	dir := b.TempDir()
	return writeConfig(b, dir, brokers[0], fmt.Sprintf("floe-bench-%d", time.Now().UnixNano()), "bench.clicks", "",
		benchCommit+extra)
}

// benchConfigTopic is benchConfig for another topic than testTopic.
func benchConfigTopic(b *testing.B, brokers []string, topic, extra string) string {
	path := benchConfig(b, brokers, extra)
	if topic == testTopic {
		return path
	}
	text, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	out := strings.Replace(string(text), "  topic: "+testTopic+"\n", "  topic: "+topic+"\n", 1)
	if out == string(text) {
		b.Fatalf("benchConfigTopic: no topic line in %s", path)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		b.Fatal(err)
	}
	return path
}

// enrichMemory is the memory budget of the enrichment benchmarks' runs,
// plain and enriched: a job deployed with 1 GiB (DESIGN.md's bound with
// enrichment) sets the Go runtime's soft limit a little below it.
const enrichMemory = "memory_limit: 900MiB\n"

// enrichYAML is the enrich section the enrichment benchmarks use: user_id
// looked up in batches of 500, all six reference attributes kept, and
// enrichMemory.
func enrichYAML(url string) string {
	return enrichMemory + fmt.Sprintf(`enrich:
  url: %s/lookup
  key: user_id
  fields:
    - {name: segment, type: string}
    - {name: country, type: string}
    - {name: score, type: double}
    - {name: visits, type: long}
    - {name: vip, type: boolean}
    - {name: signup_ts, type: timestamp}
`, url)
}

// benchRounds is how many times BenchmarkEnrichment alternates its plain
// and enriched runs (FLOE_BENCH_ROUNDS overrides); the fastest of each is
// reported, the one least disturbed by other users of a shared machine.
func benchRounds() int {
	if v, err := strconv.Atoi(os.Getenv("FLOE_BENCH_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 2
}

// fastest returns the run of rs with the shortest wall time.
func fastest(rs []run) run {
	best := rs[0]
	for _, r := range rs[1:] {
		if r.took < best.took {
			best = r
		}
	}
	return best
}

// referenceServer starts the reference enrichment service at its default
// latencies, p50 600 ms and p99 2.8 s, until the benchmark ends.
func referenceServer(b *testing.B) (*enrich.Server, string) {
	srv := enrich.NewServer(enrich.ServerConfig{})
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { srv.Close() })
	return srv, url
}

// BenchmarkEnrichment compares, in one run on one backlog: floe without
// enrichment, floe with the reference service at p50 600 ms / p99 2.8 s, and
// the case studies' design — a consumer per partition making one synchronous
// lookup per record (measured over 15 s, it would take days to finish). The
// plain and enriched runs alternate benchRounds times, each enriched run
// starting with an empty cache, and each round adds a scheduled job's next
// run with enrich.cache_file, which starts with a previous run's lookups.
func BenchmarkEnrichment(b *testing.B) {
	n := benchRecords()
	cl, _ := backlogCluster(b, n, 1)
	srv, url := referenceServer(b)

	for i := 0; i < b.N; i++ {
		// A scheduled job's next run with enrich.cache_file starts with
		// what the run before looked up: a first run saves the file, and
		// each round's warm run loads it. The enriched runs start cold.
		cacheYAML := enrichYAML(url) + "  cache_file: " + filepath.Join(b.TempDir(), "enrich.cache") + "\n"
		floeRun(b, cl.Addrs(), cacheYAML)
		var plains, enricheds, warms []run
		var requests []int64
		var warmRequests int64
		for range benchRounds() {
			plains = append(plains, floeRun(b, cl.Addrs(), enrichMemory))
			before := srv.Requests()
			enricheds = append(enricheds, floeRun(b, cl.Addrs(), enrichYAML(url)))
			requests = append(requests, srv.Requests()-before)
			before = srv.Requests()
			warms = append(warms, floeRun(b, cl.Addrs(), cacheYAML))
			warmRequests += srv.Requests() - before
		}
		syncRate := syncLookupRate(b, cl.Addrs(), url, 15*time.Second)
		plain, enriched, warm := fastest(plains), fastest(enricheds), fastest(warms)
		pr, er := plain.rate(n), enriched.rate(n)
		b.ReportMetric(pr, "plain-rec/s")
		b.ReportMetric(er, "enriched-rec/s")
		b.ReportMetric(er/pr, "enriched/plain")
		b.ReportMetric(warm.rate(n)/pr, "warm-next-run/plain")
		b.ReportMetric(syncRate, "sync-rec/s")
		b.ReportMetric(float64(plain.rss)/(1<<20), "plain-peak-MiB")
		b.ReportMetric(float64(enriched.rss)/(1<<20), "enriched-peak-MiB")
		// CPU per record moves far less with the machine's other users than
		// wall time: the ratio of the means is what a run bound by CPU on
		// both sides would reach.
		var plainCPU, enrichedCPU, warmCPU float64
		for r := range plains {
			plainCPU += plains[r].cpuPerRecord(n) / float64(len(plains))
			enrichedCPU += enricheds[r].cpuPerRecord(n) / float64(len(plains))
			warmCPU += warms[r].cpuPerRecord(n) / float64(len(plains))
		}
		b.ReportMetric(plainCPU/enrichedCPU, "cpu-plain/enriched")
		b.ReportMetric(plainCPU/warmCPU, "cpu-plain/warm-next-run")
		// Where the wall time goes: until the first commit (start-up, and
		// the cold start's first lookups) and from there on.
		// The rounds' mean; a run of fewer than two commits (a small
		// FLOE_BENCH_RECORDS) has no rate after its first.
		steady, rounds := 0.0, 0
		for r := range plains {
			if ratio := steadyRatio(plains[r], enricheds[r]); ratio > 0 {
				steady += ratio
				rounds++
			}
		}
		if rounds == len(plains) {
			b.ReportMetric(steady/float64(rounds), "steady-enriched/plain")
		}
		var all strings.Builder
		fmt.Fprintf(&all, "\n  CPU µs/record, mean of %d rounds: plain %.1f, enriched %.1f: %.2f; warm next run %.1f: %.2f",
			len(plains), plainCPU, enrichedCPU, plainCPU/enrichedCPU, warmCPU, plainCPU/warmCPU)
		for r := range plains {
			p, e, w := plains[r], enricheds[r], warms[r]
			fmt.Fprintf(&all, "\n  round %d: plain %.0f rec/s (%.1f µs CPU/record), enriched %.0f rec/s (%.1f µs CPU/record, %d requests): %.2f; warm next run %.0f rec/s (%.1f µs CPU/record): %.2f",
				r+1, p.rate(n), p.cpuPerRecord(n), e.rate(n), e.cpuPerRecord(n), requests[r], e.rate(n)/p.rate(n),
				w.rate(n), w.cpuPerRecord(n), w.rate(n)/p.rate(n))
			fmt.Fprintf(&all, "\n    first commit after %.1f s plain, %.1f s enriched (cores busy until then: %.2f and %.2f); from there %.0f and %.0f rec/s: %.2f",
				p.firstCommit().Seconds(), e.firstCommit().Seconds(), p.coresToFirstCommit(), e.coresToFirstCommit(),
				p.steadyRate(), e.steadyRate(), steadyRatio(p, e))
		}
		b.Logf("\n| %d records, 12 partitions, %d cores, fastest of %d | records/s | vs plain | CPU µs/record | peak RSS |\n|---|---|---|---|---|\n"+
			"| floe, no enrichment | %.0f | 1.00 | %.1f | %d MiB |\n| floe, enrichment p50 600 ms / p99 2.8 s | %.0f | %.2f | %.1f | %d MiB |\n"+
			"| the same, a scheduled job's next run with `cache_file` (%d requests in all) | %.0f | %.2f | %.1f | %d MiB |\n"+
			"| synchronous lookup per record, one consumer per partition | %.1f | %.5f | | |",
			n, runtime.NumCPU(), len(plains), pr, plain.cpuPerRecord(n), plain.rss>>20,
			er, er/pr, enriched.cpuPerRecord(n), enriched.rss>>20,
			warmRequests, warm.rate(n), warm.rate(n)/pr, warm.cpuPerRecord(n), warm.rss>>20, syncRate, syncRate/pr)
		// Printed, not logged: the testing package cuts a benchmark's log
		// after ten lines.
		fmt.Printf("BenchmarkEnrichment rounds:%s\n", all.String())
	}
}

// BenchmarkCompare measures a change on this shared machine, where a run's
// CPU time per record moves by 2× with the other users' load: it runs two
// floe binaries, FLOE_BENCH_A and FLOE_BENCH_B (say, built from two
// commits), alternately on one backlog, benchRounds pairs, each pair back to
// back and in swapped order every other round, so that both sides of a pair
// share the machine's state. FLOE_BENCH_COMPARE picks the runs: warm (a
// scheduled job's next run with enrich.cache_file, the default), cold
// (enrichment, empty cache) or plain. It reports B's CPU µs a record less
// A's, per pair and the pairs' median. Skipped unless both binaries are set.
func BenchmarkCompare(b *testing.B) {
	bins := [2]string{os.Getenv("FLOE_BENCH_A"), os.Getenv("FLOE_BENCH_B")}
	if bins[0] == "" || bins[1] == "" {
		b.Skip("set FLOE_BENCH_A and FLOE_BENCH_B to two floe binaries")
	}
	mode := cmp.Or(os.Getenv("FLOE_BENCH_COMPARE"), "warm")
	if mode != "warm" && mode != "cold" && mode != "plain" {
		b.Fatalf("FLOE_BENCH_COMPARE=%q: want warm, cold or plain", mode)
	}
	n := benchRecords()
	cl, _ := backlogCluster(b, n, 1)
	_, url := referenceServer(b)
	warm := enrichYAML(url) + "  cache_file: " + filepath.Join(b.TempDir(), "enrich.cache") + "\n"
	extra := map[string]string{"warm": warm, "cold": enrichYAML(url), "plain": enrichMemory}[mode]
	// cpu runs bin and returns its CPU µs a record and its wall time.
	cpu := func(bin, extra string) (float64, time.Duration) {
		cmd := exec.Command(bin, "run", "--until-caught-up", "--config", benchConfig(b, cl.Addrs(), extra))
		started := time.Now()
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("%s: %v\n%s", bin, err, out)
		}
		return float64(cpuUsed(cmd.ProcessState).Microseconds()) / float64(n), time.Since(started)
	}
	cpu(bins[1], warm) // saves the cache file the warm runs load
	for i := 0; i < b.N; i++ {
		var diffs []float64
		var all strings.Builder
		for r := range benchRounds() {
			var us [2]float64
			var took [2]time.Duration
			for j := range 2 {
				side := (r + j) % 2
				us[side], took[side] = cpu(bins[side], extra)
			}
			diffs = append(diffs, us[1]-us[0])
			fmt.Fprintf(&all, "\n  pair %d: A %.2f, B %.2f µs CPU/record: B-A %+.2f; wall time A %.2f s, B %.2f s",
				r+1, us[0], us[1], us[1]-us[0], took[0].Seconds(), took[1].Seconds())
		}
		slices.Sort(diffs)
		b.ReportMetric(diffs[len(diffs)/2], "median-B-A-µs/record")
		fmt.Printf("BenchmarkCompare pairs:%s\n", all.String())
	}
}

// syncLookupRate is the case studies' design: per partition, fetch a record,
// GET its key from the service, wait, repeat. It returns records/s over d.
func syncLookupRate(b *testing.B, brokers []string, url string, d time.Duration) float64 {
	k := pipeline.KafkaConfig{Brokers: brokers, Topic: testTopic, FetchMaxBytes: 1 << 20}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var done atomic.Int64
	var wg sync.WaitGroup
	for p := int32(0); p < 12; p++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := kafka.NewReader(pipeline.ReaderConfig(k, p, &kafka.Dialer{Timeout: 10 * time.Second}))
			defer r.Close()
			for {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					return
				}
				var ev struct {
					UserID string `json:"user_id"`
				}
				_ = json.Unmarshal(m.Value, &ev)
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/lookup/"+neturl.PathEscape(ev.UserID), nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(done.Load()) / d.Seconds()
}

// BenchmarkBacklogDrain is the case studies' scenario: a 2.1 M record backlog
// (FLOE_BENCH_BACKLOG overrides) while 45,000 new records/s keep arriving,
// drained by one floe process with enrichment at p50 600 ms / p99 2.8 s,
// and, as its baseline, by one without enrichment: each on its own topic
// holding the same backlog and receiving the same arrivals, plain first.
//
// It reports two times: when the backlog (every offset below the end
// offsets at the start) is committed, and when floe has caught up with the
// arrivals — its lag below one flush (commit.max_records, 250,000 records):
// a member that keeps up commits in flushes, so its lag saw-tooths between
// what arrives during a commit and one flush, and never stays below one
// second of arrivals. It also reports the CPU time of the floe process and
// of this benchmark process (the broker and the producer) while draining,
// to show how the two cores were shared.
func BenchmarkBacklogDrain(b *testing.B) {
	backlog := 2_100_000
	if v, err := strconv.Atoi(os.Getenv("FLOE_BENCH_BACKLOG")); err == nil && v > 0 {
		backlog = v
	}
	const seed = 9
	cl, gen := backlogCluster(b, backlog, seed)
	// The baseline's topic: the same backlog, and a generator continuing
	// the same stream.
	const plainTopic = "clicks.plain"
	ctx := context.Background()
	if err := cl.CreateTopic(ctx, plainTopic, 12); err != nil {
		b.Fatal(err)
	}
	plainGen := clickgen.New(clickgen.Config{Sessions: 50000, Seed: seed})
	if _, err := cl.ProduceRate(ctx, plainTopic, plainGen, backlog, 0); err != nil {
		b.Fatal(err)
	}
	_, url := referenceServer(b)
	bin := floeBinary(b) // built now, not while the producer runs
	for i := 0; i < b.N; i++ {
		plain := drainOnce(b, cl, bin, plainTopic, plainGen, backlog, enrichMemory)
		enriched := drainOnce(b, cl, bin, testTopic, gen, backlog, enrichYAML(url))
		rows := ""
		for _, r := range []struct {
			name string
			d    drained
		}{{"floe, no enrichment (baseline)", plain}, {"floe, enrichment p50 600 ms / p99 2.8 s", enriched}} {
			if !r.d.caughtUp() {
				rows += fmt.Sprintf("\n| %s | not caught up after 10 min: backlog committed after %s, lag %d | | | %d MiB |",
					r.name, r.d.backlogAt.Round(time.Second), r.d.lag, r.d.rss>>20)
				continue
			}
			rows += fmt.Sprintf("\n| %s | %.1f s | %.1f s | %.0f | %d MiB |",
				r.name, r.d.backlogAt.Seconds(), r.d.caughtUpAt.Seconds(), r.d.rate, r.d.rss>>20)
		}
		b.Logf("\n| %d backlog, %d/s arriving | backlog committed after | caught up after | committed/s until then | peak RSS |\n|---|---|---|---|---|%s",
			backlog, drainArrivals, rows)
		b.ReportMetric(float64(enriched.rss)/(1<<20), "peak-MiB")
		if !enriched.caughtUp() {
			// A result, not a crash: report how far it got.
			b.ReportMetric(float64(enriched.lag), "lag-after-10min")
			continue
		}
		b.ReportMetric(enriched.backlogAt.Seconds(), "backlog-committed-s")
		b.ReportMetric(enriched.caughtUpAt.Seconds(), "caught-up-s")
		b.ReportMetric(enriched.rate, "committed-rec/s")
		if plain.caughtUp() {
			b.ReportMetric(enriched.rate/plain.rate, "committed-rec/s-enriched/plain")
		}
	}
}

// drainArrivals is BenchmarkBacklogDrain's arrival rate, records/s.
const drainArrivals = 45000

// drained is one drain of BenchmarkBacklogDrain.
type drained struct {
	drain
	rss  int64
	rate float64 // records committed a second until caught up
}

func (d drained) caughtUp() bool { return d.backlogAt != 0 && d.caughtUpAt != 0 }

// drainOnce runs floe with the benchmark config (extra appended) on topic,
// whose backlog records are below its end offsets, while gen produces
// drainArrivals records/s to it, until floe has caught up or 10 minutes
// have passed.
func drainOnce(b *testing.B, cl *embedded.Cluster, bin, topic string, gen *clickgen.Generator, backlog int, extra string) drained {
	ctx := context.Background()
	start, err := cl.EndOffsets(ctx, topic)
	if err != nil {
		b.Fatal(err)
	}
	cfg := benchConfigTopic(b, cl.Addrs(), topic, extra)
	prodCtx, stopProducing := context.WithCancel(ctx)
	produced := make(chan int, 1)
	selfBefore := selfCPU()
	go func() {
		n, _ := cl.ProduceRate(prodCtx, topic, gen, 0, drainArrivals)
		produced <- n
	}()
	cmd := exec.Command(bin, append([]string{"run", "--config", cfg}, profileArgs()...)...)
	cmd.Stderr = os.Stderr
	started := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	peak := peakRSS(cmd.Process.Pid)
	d := waitDrained(b, cl, cfg, topic, start, 250_000, 10*time.Minute)
	took := time.Since(started)
	selfUsed := selfCPU() - selfBefore
	stopProducing()
	n := <-produced
	_ = cmd.Process.Signal(syscall.SIGTERM)
	err = cmd.Wait()
	out := drained{drain: d, rss: peak()}
	if err != nil {
		b.Fatalf("floe run: %v", err)
	}
	floeUsed := cpuUsed(cmd.ProcessState)
	b.Logf("%s: lag every 10 s: %v", topic, d.timeline)
	b.Logf("%s: over %s: floe process %.0f%% of a core, benchmark process (kfake broker, producer at %d/s) %.0f%%; %d records produced",
		topic, took.Round(time.Second), 100*floeUsed.Seconds()/took.Seconds(), drainArrivals,
		100*selfUsed.Seconds()/took.Seconds(), n)
	if out.caughtUp() {
		// Records committed by the time floe caught up: the backlog plus
		// what arrived until then, less the lag left.
		out.rate = (float64(backlog) + drainArrivals*d.caughtUpAt.Seconds() - float64(d.lag)) / d.caughtUpAt.Seconds()
	}
	return out
}

// selfCPU is this process's CPU time so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(syscall.TimevalToNsec(ru.Utime) + syscall.TimevalToNsec(ru.Stime))
}

// drain is what waitDrained observed, times since it started.
type drain struct {
	backlogAt  time.Duration // the table reached the start offsets; 0: never
	caughtUpAt time.Duration // the lag fell below the flush size; 0: never
	lag        int64         // the last lag seen
	timeline   []int64       // the lag every 10 s
}

// waitDrained polls the table's watermarks and the topic's end offsets
// until the table holds every offset below start and the lag is below
// flush records, or within has passed.
func waitDrained(b *testing.B, cl *embedded.Cluster, cfgPath, topic string, start map[int32]int64, flush int64, within time.Duration) drain {
	cfg, err := pipeline.LoadConfig(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	cat, err := lakehouse.OpenCatalog(context.Background(), cfg.Table.Catalog)
	if err != nil {
		b.Fatal(err)
	}
	ident := strings.Split(cfg.Table.Name, ".")
	began := time.Now()
	var d drain
	nextSample := 10 * time.Second
	for time.Since(began) < within {
		time.Sleep(250 * time.Millisecond)
		end, err := cl.EndOffsets(context.Background(), topic)
		if err != nil {
			continue
		}
		tbl, err := cat.LoadTable(context.Background(), ident)
		if err != nil {
			continue
		}
		wm, err := lakehouse.WatermarksOf(tbl, cfg.Kafka.Group)
		if err != nil {
			b.Fatal(err)
		}
		lag, backlogDone := int64(0), true
		for p, e := range end {
			w, _ := wm.Get(topic, p)
			lag += e - max(w, 0)
			if w < start[p] {
				backlogDone = false
			}
		}
		d.lag = lag
		at := time.Since(began)
		for at >= nextSample {
			d.timeline = append(d.timeline, lag)
			nextSample += 10 * time.Second
		}
		if backlogDone && d.backlogAt == 0 {
			d.backlogAt = at
		}
		if d.backlogAt != 0 && lag < flush {
			d.caughtUpAt = at
			return d
		}
	}
	return d
}
