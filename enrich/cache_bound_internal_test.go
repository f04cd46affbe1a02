package enrich

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floe-dev/floe/schemas"
)

// cacheBytes is what the cache holds, by entryBytes.
func cacheBytes(c *cache) (total, entries int) {
	for i := range c.shards {
		for _, gen := range []map[string]cached{c.shards[i].cur, c.shards[i].old} {
			for k, v := range gen {
				total += entryBytes(k, v)
				entries++
			}
		}
	}
	return total, entries
}

// TestCacheByteBoundHoldsWhenEntriesGrow: keys first cached as misses (a
// user the profile service does not know yet), then refreshed with their
// answers (put again while in cur), were replaced in place without the
// generation's byte check: 10 MB held under a bound of 1 MiB.
func TestCacheByteBoundHoldsWhenEntriesGrow(t *testing.T) {
	const maxBytes = 1 << 20
	c := newCache(200000, maxBytes, time.Second)
	now := int64(time.Second)
	var keys []string
	for i := range 5000 {
		k := "user-" + strconv.Itoa(i)
		c.put(k, nil, true, time.Minute, now) // a miss: ~106 bytes
		keys = append(keys, k)
	}
	before, n0 := cacheBytes(c)
	answer := strings.Repeat("x", 4000) // an answer well below 1/32 of the bound
	for _, k := range keys {
		if _, fr := c.get([]byte(k), now); fr == absent {
			continue
		}
		// The refresh of a hot key: its answer replaces the miss.
		c.put(k, Values{schemas.StringAttr(answer)}, false, time.Hour, now)
	}
	after, n1 := cacheBytes(c)
	t.Logf("misses: %d entries, %d bytes; after their refreshes: %d entries, %d bytes; bound %d", n0, before, n1, after, maxBytes)
	maxEntry := entryBytes("user-9999", newCached(Values{schemas.StringAttr(answer)}, false, 0, 0))
	if after > maxBytes+2*cacheShards*maxEntry {
		t.Fatalf("the cache holds %d bytes (%d entries) under a bound of %d bytes", after, n1, maxBytes)
	}
}

// TestStageCacheByteBoundAfterMissesRefreshed is the same through the stage:
// users first unknown to the service (cached as misses), then known with
// answers of 4 KB, refreshed in the background while their misses are
// read; cache_max_bytes is 1 MiB.
func TestStageCacheByteBoundAfterMissesRefreshed(t *testing.T) {
	var known atomic.Bool
	answer := strings.Repeat("x", 4000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Keys []string }
		_ = json.NewDecoder(r.Body).Decode(&req)
		res := map[string]any{}
		if known.Load() {
			for _, k := range req.Keys {
				res[k] = map[string]any{"segment": answer}
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"results": res})
	}))
	defer srv.Close()
	cfg := Config{URL: srv.URL + "/lookup", Key: "user_id", Fields: []Field{{Name: "segment", Type: TypeString}},
		CacheMaxBytes: 1 << 20, NegativeCacheTTL: Duration(2 * time.Second), CacheTTL: Duration(time.Hour),
		Linger: Duration(time.Millisecond)}
	s, err := NewStage(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Run(ctx)
	const users = 2500
	pass := func() (statuses map[Status]int) {
		q := s.NewQueue()
		go func() {
			for i := range users {
				if err := q.Submit(ctx, "user-"+strconv.Itoa(i), i); err != nil {
					t.Error(err)
				}
			}
			q.Close()
		}()
		statuses = map[Status]int{}
		for c := range q.Out() {
			statuses[c.Result.Status]++
		}
		return statuses
	}
	t.Logf("first pass: %v", pass())
	b0, n0 := cacheBytes(s.cache)
	known.Store(true)
	time.Sleep(1700 * time.Millisecond) // past 80 % of negative_cache_ttl: the misses are stale
	t.Logf("second pass (stale misses, refreshed in the background): %v", pass())
	time.Sleep(300 * time.Millisecond) // the refreshes land
	b1, n1 := cacheBytes(s.cache)
	t.Logf("cache: %d entries, %d bytes after the misses; %d entries, %d bytes after their refreshes; cache_max_bytes %d", n0, b0, n1, b1, 1<<20)
	if b1 > 2<<20 {
		t.Fatalf("the cache holds %d bytes under cache_max_bytes %d", b1, 1<<20)
	}
}

// peakReader samples the live heap as the load reads the file.
type peakReader struct {
	r     io.Reader
	calls int
	peak  uint64
}

func (p *peakReader) Read(b []byte) (int, error) {
	if p.calls++; p.calls%64 == 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.peak = max(p.peak, ms.HeapAlloc)
	}
	n, err := p.r.Read(b)
	if err == io.EOF {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		p.peak = max(p.peak, ms.HeapAlloc)
	}
	return n, err
}

// TestCacheFileLoadBoundedByTheCache: a file saved by a run whose
// cache_max_bytes was 64 MiB, loaded by one whose cache_max_bytes is 4 MiB
// (lowered for the memory it took). The load decoded every entry of the file
// before the cache kept the few it may: the start took the old run's memory
// (68 MiB of heap here).
func TestCacheFileLoadBoundedByTheCache(t *testing.T) {
	h := cacheFileHeader{Version: cacheFileVersion, Key: "user_id", Fields: []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}}}
	now := time.Now()
	path := filepath.Join(t.TempDir(), "enrich.cache")
	func() {
		c := newCache(1_000_000, 64<<20, time.Second)
		for i := range 150_000 {
			c.put("user-"+strconv.Itoa(i), Values{schemas.StringAttr(strings.Repeat("x", 200) + strconv.Itoa(i))}, false, time.Hour, 10)
		}
		f, err := os.Create(path)
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriter(f)
		n, err := c.save(w, h, now, 10, time.Hour, time.Hour)
		if err == nil {
			err = w.Flush()
		}
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		st, _ := os.Stat(path)
		t.Logf("saved %d entries, %d MiB", n, st.Size()>>20)
	}()
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	const bound = 4 << 20
	d := newCache(1_000_000, bound, time.Second)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	pr := &peakReader{r: f}
	n, err := d.load(pr, h, now, 10, time.Hour, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	held, _ := cacheBytes(d)
	t.Logf("loaded %d entries, kept %d (%d KiB); heap during the load peaked %d MiB above the start, %d MiB after",
		n, d.len(), held>>10, (pr.peak-base.HeapAlloc)>>20, (int64(after.HeapAlloc)-int64(base.HeapAlloc))>>20)
	if grew := pr.peak - base.HeapAlloc; grew > 4*bound {
		t.Fatalf("loading into a cache of %d MiB took %d MiB of heap", bound>>20, grew>>20)
	}
	runtime.KeepAlive(d)
}
