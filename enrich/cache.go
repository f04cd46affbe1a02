package enrich

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/hashicorp/golang-lru/v2/simplelru"
)

// cache is a size-bounded LRU of lookup outcomes with a TTL per entry
// (results and misses expire differently), sharded to keep lanes from
// contending on one lock.
//
// It is built on golang-lru's simplelru rather than its expirable package:
// expirable.LRU (v2.0.7) starts a cleanup goroutine that can never be
// stopped, which would leak a goroutine and pin the whole cache for every
// stage ever created. Here expired entries are dropped when they are read or
// when the size bound evicts them.
type cache struct {
	seed   maphash.Seed
	shards [cacheShards]cacheShard
	// refreshAfter is the share of the TTL after which a hit also asks for a
	// background refresh; retryRefresh is how long a refresh is given before
	// another hit may ask again.
	refreshAfter float64
	retryRefresh time.Duration
}

const cacheShards = 16

type cacheShard struct {
	mu  sync.Mutex
	lru *simplelru.LRU[string, cached]
}

// cached is one lookup outcome. Times are monoNow values.
type cached struct {
	vals     Values // nil for a miss
	miss     bool
	expires  int64
	refresh  int64
	promoted int64 // last moved to the front of the LRU
}

// promoteEvery limits how often a hot entry is moved to the front of the
// LRU: moving touches three list nodes at random places in memory, which
// cost more than the rest of a hit. Recency is kept to within this period.
const promoteEvery = int64(time.Second)

// freshness of a cache read.
type freshness uint8

const (
	absent freshness = iota
	fresh
	stale // usable, but the caller should refresh it in the background
)

// newCache returns nil (every read misses) when size < 1.
func newCache(size int, retryRefresh time.Duration) *cache {
	if size < 1 {
		return nil
	}
	c := &cache{seed: maphash.MakeSeed(), refreshAfter: 0.8, retryRefresh: retryRefresh}
	per := (size + cacheShards - 1) / cacheShards
	for i := range c.shards {
		c.shards[i].lru, _ = simplelru.NewLRU[string, cached](per, nil) // per >= 1: no error
	}
	return c
}

func (c *cache) shard(key string) *cacheShard {
	return &c.shards[maphash.String(c.seed, key)%cacheShards]
}

// get returns the outcome cached for key. A stale answer is returned once
// per retryRefresh period; other readers meanwhile see it as fresh, so one
// refresh is asked for at a time.
func (c *cache) get(key string, n int64) (cached, freshness) {
	if c == nil {
		return cached{}, absent
	}
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v, ok := sh.lru.Peek(key)
	switch {
	case !ok:
		return cached{}, absent
	case n >= v.expires:
		sh.lru.Remove(key)
		return cached{}, absent
	case n >= v.refresh:
		v.refresh = n + int64(c.retryRefresh)
		v.promoted = n
		sh.lru.Add(key, v) // updates in place and moves to the front
		return v, stale
	case n-v.promoted >= promoteEvery:
		v.promoted = n
		sh.lru.Add(key, v)
	}
	return v, fresh
}

// put caches an outcome for ttl.
func (c *cache) put(key string, vals Values, miss bool, ttl time.Duration, n int64) {
	if c == nil || ttl <= 0 {
		return
	}
	v := cached{vals: vals, miss: miss, expires: n + int64(ttl), refresh: n + int64(float64(ttl)*c.refreshAfter), promoted: n}
	sh := c.shard(key)
	sh.mu.Lock()
	sh.lru.Add(key, v)
	sh.mu.Unlock()
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
		n += sh.lru.Len()
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
