package enrich

import (
	"sync"
	"time"
	"unsafe"

	"github.com/floe-dev/floe/schemas"
)

// cache is a size-bounded cache of lookup outcomes with a TTL per entry
// (results and misses expire differently), sharded to keep lanes from
// contending on one lock.
//
// Each shard keeps two generations of entries, stored by value in plain
// maps: new and recently read entries live in cur; when the shard is full,
// cur becomes old and the previous old is dropped, and an entry read from
// old moves back to cur. That evicts roughly the least recently used half,
// like an LRU, but a hit costs one map read and nothing else: no list nodes
// to move, no pointer to follow to the entry (a hit is taken for every
// enriched record, and with tens of thousands of keys each memory access of
// it misses the CPU cache). Expired entries are dropped when read or when
// their generation is.
type cache struct {
	shards [cacheShards]cacheShard
	// refreshAfter is the share of the TTL after which a hit also asks for a
	// background refresh; retryRefresh is how long a refresh is given before
	// another hit may ask again.
	refreshAfter float64
	retryRefresh time.Duration
}

const cacheShards = 16

// DefaultCacheMaxBytes bounds the cache's memory when Config.CacheMaxBytes
// is 0.
const DefaultCacheMaxBytes = 256 << 20

type cacheShard struct {
	mu       sync.Mutex
	cur, old map[string]cached
	gen      int // entries per generation: half the shard's share of the size
	// genBytes bounds a generation's bytes (half the shard's share of the
	// byte bound); curBytes is what cur holds, by entryBytes.
	genBytes, curBytes int
}

// entryBytes estimates what an entry costs in memory: its key, its
// strings, its attributes and the map's slot. A service that answers with
// long strings fills the byte bound before the count one.
func entryBytes(key string, v cached) int {
	return len(key) + v.strBytes + len(v.vals)*int(unsafe.Sizeof(schemas.Attr{})) + 96
}

// cached is one lookup outcome. Times are monoNow values.
type cached struct {
	vals     Values // nil for a miss
	strBytes int    // see Result
	miss     bool
	expires  int64
	refresh  int64
}

// freshness of a cache read.
type freshness uint8

const (
	absent freshness = iota
	fresh
	stale // usable, but the caller should refresh it in the background
)

// newCache returns a cache of at most size entries and about maxBytes
// bytes (by entryBytes), or nil (every read misses) when size < 1.
func newCache(size, maxBytes int, retryRefresh time.Duration) *cache {
	if size < 1 {
		return nil
	}
	c := &cache{refreshAfter: 0.8, retryRefresh: retryRefresh}
	per := (size + cacheShards - 1) / cacheShards
	perBytes := maxBytes / cacheShards
	for i := range c.shards {
		c.shards[i] = cacheShard{cur: map[string]cached{}, old: map[string]cached{}, gen: max(per/2, 1), genBytes: perBytes / 2}
	}
	return c
}

// shard picks key's shard by FNV-1a: far cheaper than maphash for short
// keys, and the shard's map hashes the key again with its own seed, so a
// skewed choice of shards only costs lock contention.
func (c *cache) shard(key []byte) *cacheShard {
	h := uint32(2166136261)
	for i := 0; i < len(key); i++ {
		h = (h ^ uint32(key[i])) * 16777619
	}
	return &c.shards[h%cacheShards]
}

// get returns the outcome cached for key. A stale answer is returned once
// per retryRefresh period; other readers meanwhile see it as fresh, so one
// refresh is asked for at a time. key is a []byte so that a hit, the common
// case, needs no string of it: only the rare paths that store the key copy
// it.
func (c *cache) get(key []byte, n int64) (cached, freshness) {
	if c == nil {
		return cached{}, absent
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, inCur := sh.cur[string(key)] // no allocation for the lookup
	if !inCur {
		var inOld bool
		if v, inOld = sh.old[string(key)]; !inOld {
			return cached{}, absent
		}
		delete(sh.old, string(key))
		if n < v.expires {
			sh.addLocked(string(key), v) // recently used: keep it through the next rotation
		}
	}
	switch {
	case n >= v.expires:
		if inCur { // one found in old was not put back expired
			delete(sh.cur, string(key))
			sh.curBytes -= entryBytes(string(key), v)
		}
		return cached{}, absent
	case n >= v.refresh:
		v.refresh = n + int64(c.retryRefresh)
		sh.cur[string(key)] = v
		return v, stale
	}
	return v, fresh
}

// newCached is the cache entry of an outcome.
func newCached(vals Values, miss bool, expires, refresh int64) cached {
	return cached{vals: vals, strBytes: schemas.NewExtra(vals).StrBytes, miss: miss, expires: expires, refresh: refresh}
}

// put caches an outcome for ttl and returns its entry, which is also the
// outcome's Result (cachedResult) when nothing is cached: no cache, no ttl,
// or an entry too large for it (see addLocked).
func (c *cache) put(key string, vals Values, miss bool, ttl time.Duration, n int64) cached {
	if c == nil || ttl <= 0 {
		return newCached(vals, miss, 0, 0)
	}
	v := newCached(vals, miss, n+int64(ttl), n+int64(float64(ttl)*c.refreshAfter))
	c.store(key, v)
	return v
}

// store caches v for key, replacing what either generation holds.
func (c *cache) store(key string, v cached) {
	sh := c.shard([]byte(key)) // does not escape: no copy
	sh.mu.Lock()
	delete(sh.old, key)
	sh.addLocked(key, v)
	sh.mu.Unlock()
}

// addLocked stores v in cur (key is not in old), rotating the generations
// first when cur is full, by count or by bytes: cur becomes old, and the
// previous old, whose entries nobody read during a whole generation, goes.
// What cur held for key is taken out first: replaced in place without that
// check, misses refreshed with long answers grew cur past the bound.
// An entry larger than a generation may hold is not stored: stored after a
// rotation all the same, one in each generation of each shard, such entries
// held 32 times that share whatever the bound.
func (sh *cacheShard) addLocked(key string, v cached) {
	if prev, ok := sh.cur[key]; ok {
		delete(sh.cur, key)
		sh.curBytes -= entryBytes(key, prev)
	}
	n := entryBytes(key, v)
	if n > sh.genBytes {
		return
	}
	if len(sh.cur) > 0 && (len(sh.cur) >= sh.gen || sh.curBytes+n > sh.genBytes) {
		// The new generation is sized by the one just filled: by sh.gen
		// it would reserve room for the count bound, far beyond the byte
		// bound when cache_size is large.
		sh.old, sh.cur = sh.cur, make(map[string]cached, len(sh.cur))
		sh.curBytes = 0
	}
	sh.cur[key] = v
	sh.curBytes += n
}

// emptyCopy is a cache with c's bounds and nothing in it.
func (c *cache) emptyCopy() *cache {
	e := &cache{refreshAfter: c.refreshAfter, retryRefresh: c.retryRefresh}
	for i := range e.shards {
		sh := &c.shards[i]
		e.shards[i] = cacheShard{cur: map[string]cached{}, old: map[string]cached{}, gen: sh.gen, genBytes: sh.genBytes}
	}
	return e
}

// storeAll stores in c what from holds, its older generation first. from
// must not be in use.
func (c *cache) storeAll(from *cache) {
	for i := range from.shards {
		for _, gen := range []map[string]cached{from.shards[i].old, from.shards[i].cur} {
			for k, v := range gen {
				c.store(k, v)
			}
		}
	}
}

// len is the number of entries, expired ones included.
func (c *cache) len() int {
	if c == nil {
		return 0
	}
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.cur) + len(sh.old)
		sh.mu.Unlock()
	}
	return n
}

// processStart anchors monoNow.
var processStart = time.Now()

// monoNow is a monotonic clock in nanoseconds: immune to wall-clock steps,
// and half the cost of time.Now (which reads both clocks) on a path taken
// once per record.
func monoNow() int64 { return int64(time.Since(processStart)) }
