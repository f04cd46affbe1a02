package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	neturl "net/url"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

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
	cl, err := embedded.Start(1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(cl.Close)
	ctx := context.Background()
	if err := cl.CreateTopic(ctx, testTopic, 12); err != nil {
		b.Fatal(err)
	}
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
// configuration floe uses. Run it with `make bench`.
func BenchmarkEndToEnd(b *testing.B) {
	n := benchRecords()
	cl, _ := backlogCluster(b, n, 1)
	ctx := context.Background()
	end, err := cl.EndOffsets(ctx, testTopic)
	if err != nil {
		b.Fatal(err)
	}

	for i := 0; i < b.N; i++ {
		raw := rawConsume(b, cl.Addrs(), end)
		e2e, rss := floeRun(b, cl.Addrs(), "memory_limit: 256MiB\n")
		rawRate, e2eRate := float64(n)/raw.Seconds(), float64(n)/e2e.Seconds()
		b.ReportMetric(rawRate, "raw-rec/s")
		b.ReportMetric(e2eRate, "floe-rec/s")
		b.ReportMetric(e2eRate/rawRate, "ratio")
		b.ReportMetric(float64(rss)/(1<<20), "floe-peak-MiB")
		b.Logf("\n| %d records, %d cores | records/s | vs raw | peak RSS |\n|---|---|---|---|\n| raw kafka-go consume (same broker, same run) | %.0f | 1.00 | |\n| floe run --until-caught-up → Iceberg (SQLite, local files) | %.0f | %.2f | %d MiB |",
			n, runtime.NumCPU(), rawRate, e2eRate, e2eRate/rawRate, rss>>20)
	}
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

// floeRun runs the floe binary until caught up and returns its wall time and
// peak resident memory. extra is appended to its config.
func floeRun(b *testing.B, brokers []string, extra string) (time.Duration, int64) {
	cfg := benchConfig(b, brokers, extra)
	args := []string{"run", "--until-caught-up", "--config", cfg}
	if p := os.Getenv("FLOE_BENCH_CPUPROFILE"); p != "" {
		args = append(args, "--cpuprofile", p)
	}
	cmd := exec.Command(floeBinary(b), args...)
	cmd.Stderr = os.Stderr
	started := time.Now()
	if err := cmd.Run(); err != nil {
		b.Fatalf("floe run: %v", err)
	}
	took := time.Since(started)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return took, ru.Maxrss << 10
}

// benchConfig writes the benchmark's floe config to a new directory.
func benchConfig(b *testing.B, brokers []string, extra string) string {
	dir := b.TempDir()
	return writeConfig(b, dir, brokers[0], fmt.Sprintf("floe-bench-%d", time.Now().UnixNano()), "bench.clicks", "",
		"commit:\n  interval: 10s\n  max_records: 250000\n  max_bytes: 64MiB\n"+extra)
}

// enrichYAML is the enrich section the enrichment benchmarks use: user_id
// looked up in batches of 500, all six reference attributes kept.
func enrichYAML(url string) string {
	return fmt.Sprintf(`enrich:
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

// BenchmarkEnrichment compares, in one run on one backlog: floe without
// enrichment, floe with the reference service at p50 600 ms / p99 2.8 s, and
// the case studies' design — a consumer per partition making one synchronous
// lookup per record (measured over 15 s, it would take days to finish).
func BenchmarkEnrichment(b *testing.B) {
	n := benchRecords()
	cl, _ := backlogCluster(b, n, 1)
	srv := enrich.NewServer(enrich.ServerConfig{}) // p50 600ms, p99 2.8s
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()

	for i := 0; i < b.N; i++ {
		plain, plainRSS := floeRun(b, cl.Addrs(), "")
		enriched, enrichedRSS := floeRun(b, cl.Addrs(), enrichYAML(url))
		syncRate := syncLookupRate(b, cl.Addrs(), url, 15*time.Second)
		pr, er := float64(n)/plain.Seconds(), float64(n)/enriched.Seconds()
		b.ReportMetric(pr, "plain-rec/s")
		b.ReportMetric(er, "enriched-rec/s")
		b.ReportMetric(er/pr, "enriched/plain")
		b.ReportMetric(syncRate, "sync-rec/s")
		b.ReportMetric(float64(enrichedRSS)/(1<<20), "enriched-peak-MiB")
		b.Logf("\n| %d records, 12 partitions, %d cores | records/s | vs plain | peak RSS |\n|---|---|---|---|\n"+
			"| floe, no enrichment | %.0f | 1.00 | %d MiB |\n| floe, enrichment p50 600 ms / p99 2.8 s (%d requests) | %.0f | %.2f | %d MiB |\n"+
			"| synchronous lookup per record, one consumer per partition | %.1f | %.5f | |",
			n, runtime.NumCPU(), pr, plainRSS>>20, srv.Requests(), er, er/pr, enrichedRSS>>20, syncRate, syncRate/pr)
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
// drained by one floe process with enrichment at p50 600 ms / p99 2.8 s. It
// reports the time until the lag is below one second of arrivals.
func BenchmarkBacklogDrain(b *testing.B) {
	backlog := 2_100_000
	if v, err := strconv.Atoi(os.Getenv("FLOE_BENCH_BACKLOG")); err == nil && v > 0 {
		backlog = v
	}
	const arrivals = 45000
	cl, gen := backlogCluster(b, backlog, 9)
	ctx := context.Background()
	srv := enrich.NewServer(enrich.ServerConfig{})
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()

	for i := 0; i < b.N; i++ {
		cfg := benchConfig(b, cl.Addrs(), enrichYAML(url))
		prodCtx, stopProducing := context.WithCancel(ctx)
		produced := make(chan int, 1)
		go func() {
			n, _ := cl.ProduceRate(prodCtx, testTopic, gen, 0, arrivals)
			produced <- n
		}()
		cmd := exec.Command(floeBinary(b), "run", "--config", cfg)
		cmd.Stderr = os.Stderr
		started := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		lag, drained := waitDrained(b, cl, cfg, arrivals, 10*time.Minute)
		took := time.Since(started)
		stopProducing()
		n := <-produced
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := cmd.Wait(); err != nil {
			b.Fatalf("floe run: %v", err)
		}
		rss := cmd.ProcessState.SysUsage().(*syscall.Rusage).Maxrss << 10
		if !drained {
			// A result, not a crash: report how far it got.
			b.ReportMetric(float64(lag), "lag-after-10min")
			b.ReportMetric(float64(rss)/(1<<20), "peak-MiB")
			b.Logf("\n| backlog | arriving | after 10 min | peak RSS |\n|---|---|---|---|\n| %d | %d/s | not drained: lag %d (%.0f committed/s) | %d MiB |",
				backlog, arrivals, lag, float64(backlog+n-int(lag))/took.Seconds(), rss>>20)
			continue
		}
		b.ReportMetric(took.Seconds(), "drain-s")
		b.ReportMetric(float64(backlog+n)/took.Seconds(), "committed-rec/s")
		b.ReportMetric(float64(rss)/(1<<20), "peak-MiB")
		b.Logf("\n| backlog | arriving | drained in | committed/s | peak RSS |\n|---|---|---|---|---|\n| %d | %d/s | %.1f s | %.0f | %d MiB |",
			backlog, arrivals, took.Seconds(), float64(backlog+n)/took.Seconds(), rss>>20)
	}
}

// waitDrained polls the table's watermarks and the topic's end offsets until
// the lag is below one second of arrivals.
func waitDrained(b *testing.B, cl *embedded.Cluster, cfgPath string, arrivals int, within time.Duration) (int64, bool) {
	cfg, err := pipeline.LoadConfig(cfgPath)
	if err != nil {
		b.Fatal(err)
	}
	cat, err := lakehouse.OpenCatalog(context.Background(), cfg.Table.Catalog)
	if err != nil {
		b.Fatal(err)
	}
	ident := strings.Split(cfg.Table.Name, ".")
	deadline := time.Now().Add(within)
	var lag int64
	for time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
		end, err := cl.EndOffsets(context.Background(), testTopic)
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
		lag = 0
		for p, e := range end {
			w, _ := wm.Get(testTopic, p)
			lag += e - w
		}
		if lag < int64(arrivals) {
			return lag, true
		}
	}
	return lag, false
}
