package enrich_test

import (
	"context"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
)

// BenchmarkStage measures records/s through the stage with 12 lanes (the
// case study's 12 partitions) and keys drawn uniformly from 50,000 users.
//
//   - cached: every key already cached, an immediate server: the stage's own
//     CPU cost per record (what the enriched pipeline pays on top of the
//     un-enriched one in steady state).
//   - p50=600ms/p99=2.8s cold: the reference server at the case study's
//     latency, starting with an empty cache: the first pass over the users
//     stalls the lanes, then the cache carries them.
//   - p50=600ms/p99=2.8s no-cache: every record needs a lookup (coalescing
//     still applies): the Little's-law bound of the lanes' in-flight records.
//
// Run with e.g. -benchtime 2000000x; it reports records/s, the CPU time per
// record (the harness's own submitting and receiving included, and the
// in-process server's work), requests and the peak heap.
func BenchmarkStage(b *testing.B) {
	const lanes = 12
	keys := make([]string, 50_000)
	for i := range keys {
		keys[i] = "u-" + strconv.Itoa(i)
	}
	for _, bc := range []struct {
		name   string
		server enrich.ServerConfig
		users  int
		cache  int
		warm   bool
	}{
		// clickgen's default stream has 5,000 users (10,000 sessions).
		{"cached/users=5000", enrich.ServerConfig{P50: enrich.NoLatency}, 5000, 0, true},
		{"cached/users=50000", enrich.ServerConfig{P50: enrich.NoLatency}, 50_000, 0, true},
		{"p50=600ms,p99=2.8s/cold", enrich.ServerConfig{Seed: 1}, 50_000, 0, false},
		{"p50=600ms,p99=2.8s/no-cache", enrich.ServerConfig{Seed: 1}, 50_000, -1, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			srv, url := startServer(b, bc.server)
			cfg := testConfig(url)
			cfg.Timeout = enrich.Duration(10 * time.Second)
			cfg.CacheSize = bc.cache
			h := startStage(b, cfg)
			if bc.warm {
				pump(b, h.st, lanes, bc.users, func(i int) string { return keys[i] })
			}
			before := srv.Requests()
			rng := make([]*rand.Rand, lanes)
			for i := range rng {
				rng[i] = rand.New(rand.NewPCG(uint64(i), 1))
			}
			var peak atomic.Uint64
			stopSampling := sampleHeap(&peak)
			b.ReportAllocs()
			b.ResetTimer()
			start, cpu0 := time.Now(), cpuTime()
			pumpLanes(b, h.st, lanes, b.N, func(lane, _ int) string { return keys[rng[lane].IntN(bc.users)] })
			elapsed, cpu := time.Since(start), cpuTime()-cpu0
			b.StopTimer()
			stopSampling()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "records/s")
			b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/record")
			b.ReportMetric(float64(srv.Requests()-before), "requests")
			b.ReportMetric(float64(peak.Load())/(1<<20), "peak-heap-MiB")
		})
	}
}

// pump sends n records with key(i) through the stage's lanes.
func pump(b *testing.B, st *enrich.Stage, lanes, n int, key func(i int) string) {
	pumpLanes(b, st, lanes, n, func(lane, j int) string { return key(j*lanes + lane) })
}

// pumpLanes sends n records over the lanes, lane i taking every i-th, and
// waits for all of them to come out.
func pumpLanes(b *testing.B, st *enrich.Stage, lanes, n int, key func(lane, j int) string) {
	var wg sync.WaitGroup
	for l := range lanes {
		q := st.NewQueue()
		count := n / lanes
		if l < n%lanes {
			count++
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer q.Close()
			for j := range count {
				if err := q.Submit(context.Background(), key(l, j), j); err != nil {
					b.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			got := 0
			for c := range q.Out() {
				if c.Item.(int) != got {
					b.Errorf("lane %d: order broken", l)
				}
				got++
			}
			if got != count {
				b.Errorf("lane %d: %d of %d records", l, got, count)
			}
		}()
	}
	wg.Wait()
}

// cpuTime is the process's user+system CPU time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// sampleHeap records the peak heap in use until the returned func is called.
func sampleHeap(peak *atomic.Uint64) func() {
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapInuse > peak.Load() {
				peak.Store(ms.HeapInuse)
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-stopped }
}

// BenchmarkCacheEntryBytes reports the heap one cached result costs, with the
// reference server's six attributes: the basis for sizing enrich.cache_size.
func BenchmarkCacheEntryBytes(b *testing.B) {
	const n = 200_000
	_, url := startServer(b, enrich.ServerConfig{P50: enrich.NoLatency})
	for range b.N {
		cfg := testConfig(url)
		cfg.CacheSize = n
		h := startStage(b, cfg)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		pump(b, h.st, 4, n, func(i int) string { return "u-" + strconv.Itoa(i) })
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/entry")
		h.stop()
	}
}
