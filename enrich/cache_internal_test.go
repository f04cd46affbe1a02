package enrich

import (
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/schemas"
)

// TestCacheKeepsReadEntries checks the generations: an entry that is read
// survives any number of rotations, one that is not is evicted, and the
// size bound holds throughout.
func TestCacheKeepsReadEntries(t *testing.T) {
	c := newCache(16*100, DefaultCacheMaxBytes, time.Second) // 100 entries a shard, 50 a generation
	now := int64(time.Second)
	c.put("hot", Values{schemas.StringAttr("h")}, false, time.Hour, now)
	c.put("cold", Values{schemas.StringAttr("c")}, false, time.Hour, now)
	for i := range 20000 {
		c.put("k"+strconv.Itoa(i), nil, true, time.Hour, now)
		if i%10 == 0 {
			if v, fr := c.get([]byte("hot"), now); fr != fresh || v.vals[0].Str != "h" {
				t.Fatalf("after %d inserts the read entry is %v (%v)", i, v, fr)
			}
		}
		if n := c.len(); n > 16*100 {
			t.Fatalf("%d entries in a cache of %d", n, 16*100)
		}
	}
	v, _ := c.get([]byte("hot"), now)
	if x := cachedResult(v).Extra(); x.StrBytes != len("h") || len(x.Attrs) != 1 {
		t.Fatalf("cached result's Extra %+v, want one attribute of %d string bytes", x, len("h"))
	}
	if _, fr := c.get([]byte("cold"), now); fr != absent {
		t.Fatal("an entry nobody read survived 20,000 inserts")
	}
	// A key put again replaces its entry, in whichever generation it is.
	c.put("hot", nil, true, time.Hour, now)
	if v, fr := c.get([]byte("hot"), now); fr != fresh || !v.miss {
		t.Fatalf("replaced entry: %v %v", v, fr)
	}
}

// TestCacheBoundedByBytes: a service that answers with long strings fills
// the cache's byte bound long before its count bound, and the cache holds
// about the bytes it was given (one generation of a shard may exceed its
// share by one entry): 10,000 answers of 10 KB were all kept, 100 MB
// against a bound of 1 MiB, while the recently read ones stay.
func TestCacheBoundedByBytes(t *testing.T) {
	const maxBytes = 1 << 20
	c := newCache(200000, maxBytes, time.Second)
	now := int64(time.Second)
	long := strings.Repeat("x", 10_000)
	for i := range 10_000 {
		c.put("k"+strconv.Itoa(i), Values{schemas.StringAttr(long)}, false, time.Hour, now)
		if i%100 == 0 {
			c.put("hot", Values{schemas.StringAttr("h")}, false, time.Hour, now)
		}
		if _, fr := c.get([]byte("hot"), now); i > 0 && fr != fresh {
			t.Fatalf("after %d inserts the entry read after each was evicted", i)
		}
	}
	total, entries := 0, 0
	for i := range c.shards {
		for _, gen := range []map[string]cached{c.shards[i].cur, c.shards[i].old} {
			for k, v := range gen {
				total += entryBytes(k, v)
				entries++
			}
		}
	}
	if maxEntry := entryBytes("k9999", newCached(Values{schemas.StringAttr(long)}, false, 0, 0)); total > maxBytes+2*cacheShards*maxEntry {
		t.Fatalf("%d entries of %d bytes in a cache of %d bytes", entries, total, maxBytes)
	}
	if entries < 50 {
		t.Fatalf("%d entries kept: the byte bound evicts too much", entries)
	}
}

// TestCacheSkipsEntriesLargerThanAGeneration: an entry larger than a
// generation of a shard may hold (1/32 of the byte bound) was stored after
// a rotation all the same, so every generation of every shard could hold
// one: 200 answers of 8 MiB kept 256 MiB under a bound of 4 MiB. Such an
// answer is returned but not cached, and what the cache held for its key
// goes; one that fits is cached.
func TestCacheSkipsEntriesLargerThanAGeneration(t *testing.T) {
	const maxBytes = 4 << 20
	share := maxBytes / cacheShards / 2
	c := newCache(200000, maxBytes, time.Second)
	now := int64(time.Second)
	c.put("k0", Values{schemas.StringAttr("small")}, false, time.Hour, now)
	big := strings.Repeat("x", share) // with its key and attribute, over the share
	for i := range 200 {
		k := "k" + strconv.Itoa(i)
		r := cachedResult(c.put(k, Values{schemas.StringAttr(big)}, false, time.Hour, now))
		if r.Status != StatusOK || r.Values[0].Str != big {
			t.Fatalf("key %s: the outcome returned is %s", k, r.Status)
		}
		if v, fr := c.get([]byte(k), now); fr != absent {
			t.Fatalf("key %s: an entry of %d bytes cached (%v) under a bound of %d bytes", k, entryBytes(k, v), fr, maxBytes)
		}
	}
	if n := c.len(); n != 0 {
		t.Fatalf("%d entries cached", n)
	}
	fits := strings.Repeat("x", share-200)
	c.put("k0", Values{schemas.StringAttr(fits)}, false, time.Hour, now)
	if v, fr := c.get([]byte("k0"), now); fr != fresh || v.vals[0].Str != fits {
		t.Fatalf("an entry of %d bytes, within a generation's %d, is not cached", entryBytes("k0", v), share)
	}
}

// TestCacheMemoryBoundedByBytesWithLargeCount: with a large cache_size the
// byte bound is what holds the cache, and its memory stays near it. Each
// rotation used to make the new generation's map with room for the count
// bound: 20,000 small entries under a 1 MiB bound took 319 MiB of heap.
func TestCacheMemoryBoundedByBytesWithLargeCount(t *testing.T) {
	const maxBytes = 1 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := newCache(2_000_000, maxBytes, time.Second)
	for i := range 20_000 { // ≈ 2.5 MB of entries: every shard rotates
		c.put("k"+strconv.Itoa(i), Values{schemas.StringAttr("gold")}, false, time.Hour, int64(time.Second))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 8*maxBytes {
		t.Fatalf("the heap grew by %d MiB for a cache of %d entries bounded to %d MiB", grew>>20, c.len(), maxBytes>>20)
	}
	runtime.KeepAlive(c)
}

// BenchmarkCacheGet is a hit among 25,000 cached keys (the clickstream
// benchmark's users), in a random order: the lookup every enriched record
// makes.
func BenchmarkCacheGet(b *testing.B) {
	const keys = 25000
	c := newCache(200000, DefaultCacheMaxBytes, time.Second)
	names := make([][]byte, keys)
	for i := range names {
		names[i] = []byte("u-" + strconv.Itoa(i))
		c.put(string(names[i]), Values{schemas.StringAttr("gold"), schemas.StringAttr("DE"), schemas.DoubleAttr(0.5), schemas.LongAttr(3), schemas.BoolAttr(true), schemas.TimeAttr(time.Unix(0, 0))}, false, time.Hour, 0)
	}
	order := make([]int, 1<<16)
	x := uint32(1)
	for i := range order {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		order[i] = int(x % keys)
	}
	b.ResetTimer()
	for i := range b.N {
		if _, fr := c.get(names[order[i&(len(order)-1)]], 1); fr == absent {
			b.Fatal("miss")
		}
	}
}
