package embedded_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// benchTopic is a 12-partition topic preloaded with benchRecords clickstream
// messages, shared by the benchmarks of one run and closed by TestMain.
type benchTopic struct {
	c     *embedded.Cluster
	topic string
	ends  map[int32]int64
	n     int64
	bytes int64
}

var (
	benchOnce sync.Once
	bench     *benchTopic
	benchErr  error
)

// benchRecords is FLOE_BENCH_RECORDS, default 1,000,000: the size of the
// backlog the raw consume rate is measured on.
func benchRecords() int {
	if s := os.Getenv("FLOE_BENCH_RECORDS"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n > 0 {
			return n
		}
	}
	return 1_000_000
}

func loadBenchTopic(b *testing.B) *benchTopic {
	benchOnce.Do(func() {
		bench, benchErr = newBenchTopic(benchRecords())
		if benchErr == nil {
			fixturesMu.Lock()
			fixtures = append(fixtures, bench.c)
			fixturesMu.Unlock()
		}
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return bench
}

func newBenchTopic(n int) (*benchTopic, error) {
	ctx := context.Background()
	bt := &benchTopic{topic: "clicks"}
	c, err := embedded.StartTopic(ctx, bt.topic, 12)
	if err != nil {
		return nil, err
	}
	bt.c = c
	start := time.Now()
	got, err := c.ProduceRate(ctx, bt.topic, clickgen.New(clickgen.Config{Seed: 1}), n, 0)
	if err != nil {
		c.Close()
		return nil, err
	}
	took := time.Since(start)
	if bt.ends, err = c.EndOffsets(ctx, bt.topic); err != nil {
		c.Close()
		return nil, err
	}
	for _, e := range bt.ends {
		bt.n += e
	}
	if bt.n != int64(got) {
		c.Close()
		return nil, fmt.Errorf("produced %d, broker holds %d", got, bt.n)
	}
	fmt.Fprintf(os.Stderr, "bench fixture: produced %d records to 12 partitions in %v (%.0f rec/s)\n",
		n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	return bt, nil
}

// BenchmarkRawConsume is the baseline every floe throughput figure is
// compared to: how fast kafka-go's per-partition Readers, one per partition
// of a 12-partition topic as floe's source uses them, drain a backlog of
// ~333 B clickstream records from the in-process broker, doing nothing with
// them. One op drains the whole backlog; records/s is the figure to quote.
func BenchmarkRawConsume(b *testing.B) {
	bt := loadBenchTopic(b)
	for _, maxBytes := range []int{1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("maxbytes=%dMiB", maxBytes>>20), func(b *testing.B) {
			var bytes atomic.Int64
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				bytes.Store(0)
				drain(b, bt, maxBytes, &bytes)
			}
			cpu := cpuTime() - cpu0
			secs := b.Elapsed().Seconds()
			records := float64(bt.n) * float64(b.N)
			b.ReportMetric(records/secs, "records/s")
			b.ReportMetric(float64(bytes.Load())*float64(b.N)/secs/1e6, "MB/s")
			// CPU per record, broker and consumer together (both are in
			// this process): steadier than records/s on a shared machine.
			b.ReportMetric(cpu.Seconds()*1e6/records, "cpu-µs/record")
		})
	}
}

// drain reads every partition of bt from offset 0 to its end offset with one
// Reader per partition, concurrently.
func drain(b *testing.B, bt *benchTopic, maxBytes int, bytes *atomic.Int64) {
	ctx := context.Background()
	var wg sync.WaitGroup
	for p, end := range bt.ends {
		wg.Go(func() {
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:   bt.c.Addrs(),
				Topic:     bt.topic,
				Partition: int(p),
				MinBytes:  1,
				MaxBytes:  maxBytes,
				MaxWait:   100 * time.Millisecond,
			})
			defer r.Close()
			var n int64
			for pos := int64(0); pos < end; {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					b.Error(err)
					return
				}
				pos = m.Offset + 1
				n += int64(len(m.Key) + len(m.Value))
			}
			bytes.Add(n)
		})
	}
	wg.Wait()
}

// cpuTime returns the user plus system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
