package enrich

import (
	"strconv"
	"testing"
	"time"

	"github.com/floe-dev/floe/schemas"
)

// TestCacheKeepsReadEntries checks the generations: an entry that is read
// survives any number of rotations, one that is not is evicted, and the
// size bound holds throughout.
func TestCacheKeepsReadEntries(t *testing.T) {
	c := newCache(16*100, time.Second) // 100 entries a shard, 50 a generation
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

// BenchmarkCacheGet is a hit among 25,000 cached keys (the clickstream
// benchmark's users), in a random order: the lookup every enriched record
// makes.
func BenchmarkCacheGet(b *testing.B) {
	const keys = 25000
	c := newCache(200000, time.Second)
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
