package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

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

// BenchmarkEndToEnd drains a clickstream backlog from the in-process broker
// into a SQLite-catalog table with `floe run --until-caught-up` (a separate
// process, so its peak RSS is its own), and measures, in the same run and
// against the same broker, the raw kafka-go consume rate with the reader
// configuration floe uses. Run it with `make bench`.
func BenchmarkEndToEnd(b *testing.B) {
	n := benchRecords()
	cl, err := embedded.Start(1)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Close()
	ctx := context.Background()
	if err := cl.CreateTopic(ctx, testTopic, 12); err != nil {
		b.Fatal(err)
	}
	gen := clickgen.New(clickgen.Config{Sessions: 50000, Seed: 1})
	started := time.Now()
	if _, err := cl.ProduceRate(ctx, testTopic, gen, n, 0); err != nil {
		b.Fatal(err)
	}
	b.Logf("produced %d records in %s", n, time.Since(started).Round(time.Millisecond))
	end, err := cl.EndOffsets(ctx, testTopic)
	if err != nil {
		b.Fatal(err)
	}

	for i := 0; i < b.N; i++ {
		raw := rawConsume(b, cl.Addrs(), end)
		e2e, rss := floeRun(b, cl.Addrs())
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
// peak resident memory.
func floeRun(b *testing.B, brokers []string) (time.Duration, int64) {
	dir := b.TempDir()
	cfg := filepath.Join(dir, "floe.yaml")
	yaml := fmt.Sprintf(`kafka:
  brokers: [%s]
  topic: %s
  group: floe-bench
table:
  name: bench.clicks
  catalog:
    type: sql
    uri: file:%s/catalog.db
    sql.dialect: sqlite
    sql.driver: sqlite
    warehouse: file://%s/warehouse
commit:
  interval: 10s
  max_records: 250000
  max_bytes: 64MiB
memory_limit: 256MiB
`, brokers[0], testTopic, dir, dir)
	if err := os.WriteFile(cfg, []byte(yaml), 0o644); err != nil {
		b.Fatal(err)
	}
	args := []string{"run", "--until-caught-up", "--config", cfg, "--log-level", "debug"}
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
