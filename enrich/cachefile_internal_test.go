package enrich

import (
	"bytes"
	"encoding/gob"
	"hash/crc32"
	"slices"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/floe-dev/floe/schemas"
)

// TestCacheFileAcrossClocks: entries saved by one process are loaded by the
// next, whose monotonic clock starts afresh, with the time they had left by
// the wall clock; entries expired when saved or when loaded are dropped; a
// lowered TTL shortens what was saved; and a truncated file adds nothing.
func TestCacheFileAcrossClocks(t *testing.T) {
	h := cacheFileHeader{Version: cacheFileVersion, Key: "user_id", Fields: []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}}}
	lookedUp := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	mono0 := int64(time.Hour) // the first process's clock at the lookups
	c := newCache(100, DefaultCacheMaxBytes, time.Second)
	c.put("ok", Values{schemas.StringAttr("gold")}, false, 10*time.Minute, mono0)
	c.put("miss", nil, true, 5*time.Minute, mono0)
	c.put("short", Values{schemas.StringAttr("tin")}, false, 30*time.Second, mono0)
	c.put("later", Values{schemas.StringAttr("iron")}, false, 10*time.Minute, mono0+int64(2*time.Minute))
	var saved bytes.Buffer
	// Saved 3 minutes later: "short" has expired.
	if n, err := c.save(&saved, h, lookedUp.Add(3*time.Minute), mono0+int64(3*time.Minute), 10*time.Minute, 5*time.Minute); err != nil || n != 3 {
		t.Fatalf("save: %d entries, %v; want 3", n, err)
	}
	file := saved.Bytes()

	// Loaded by a process started later, 4 minutes after the lookups.
	const mono1 = int64(5 * time.Second)
	loadedAt := lookedUp.Add(4 * time.Minute)
	left := func(c *cache, key string, after time.Duration) freshness {
		_, f := c.get([]byte(key), mono1+int64(after))
		return f
	}
	d := newCache(100, DefaultCacheMaxBytes, time.Second)
	if n, err := d.load(bytes.NewReader(file), h, loadedAt, mono1, 10*time.Minute, 5*time.Minute, nil); err != nil || n != 3 {
		t.Fatalf("load: %d entries, %v; want 3", n, err)
	}
	// "ok" has 6 minutes left, and is due for a refresh after 4 (80 %).
	if f := left(d, "ok", 4*time.Minute-time.Millisecond); f != fresh {
		t.Fatalf("ok 1 ms before its refresh: %v, want fresh", f)
	}
	if f := left(d, "ok", 4*time.Minute+time.Millisecond); f != stale {
		t.Fatalf("ok after its refresh time: %v, want stale", f)
	}
	if f := left(d, "miss", time.Minute-time.Millisecond); f == absent {
		t.Fatal("the miss expired before its 5 minutes")
	}
	if f := left(d, "ok", 6*time.Minute); f != absent {
		t.Fatalf("ok 10 minutes after its lookup: %v, want absent", f)
	}
	if f := left(d, "miss", time.Minute); f != absent {
		t.Fatalf("the miss 5 minutes after its lookup: %v, want absent", f)
	}

	// cache_ttl lowered to 3 minutes since, counted from each lookup:
	// "ok", looked up 4 minutes ago, is gone; "later", 2 minutes ago, lives
	// one more (it lived 3 more, counted from the load).
	d = newCache(100, DefaultCacheMaxBytes, time.Second)
	if n, err := d.load(bytes.NewReader(file), h, loadedAt, mono1, 3*time.Minute, 5*time.Minute, nil); err != nil || n != 2 {
		t.Fatalf("load with a lower TTL: %d entries, %v; want 2 (the miss and \"later\")", n, err)
	}
	if f := left(d, "ok", 0); f != absent {
		t.Fatalf("ok, 4 minutes after its lookup, with a TTL of 3: %v, want absent", f)
	}
	if f := left(d, "later", time.Minute-time.Millisecond); f == absent {
		t.Fatal("later expired before its 3 minutes")
	}
	if f := left(d, "later", time.Minute); f != absent {
		t.Fatalf("later 3 minutes after its lookup: %v, want absent", f)
	}

	// A file cut short adds nothing.
	d = newCache(100, DefaultCacheMaxBytes, time.Second)
	if _, err := d.load(bytes.NewReader(file[:len(file)-3]), h, loadedAt, mono1, 10*time.Minute, 5*time.Minute, nil); err == nil || d.len() != 0 {
		t.Fatalf("truncated file: %v, %d entries added; want an error and none", err, d.len())
	}
}

// TestCacheFileNeedsItsEndMark: a file that ends between two entries (a
// save cut short there) adds nothing, nor does one that goes on after its
// end mark; with the mark last, its entries load.
func TestCacheFileNeedsItsEndMark(t *testing.T) {
	h := cacheFileHeader{Version: cacheFileVersion, Key: "user_id", Fields: []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}}}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var file bytes.Buffer
	enc := gob.NewEncoder(&file)
	load := func() (int, error) {
		c := newCache(100, DefaultCacheMaxBytes, time.Second)
		n, err := c.load(bytes.NewReader(file.Bytes()), h, now, 0, time.Hour, time.Hour, nil)
		if err != nil && c.len() != 0 {
			t.Fatalf("a failed load added %d entries", c.len())
		}
		return n, err
	}
	for _, e := range []any{h, cacheFileEntry{Key: "a", Values: []schemas.Attr{schemas.StringAttr("gold")}, Expires: now.Add(time.Minute).UnixNano(), Refresh: now.Add(time.Minute).UnixNano(), LookedUp: now.UnixNano()}} {
		if err := enc.Encode(e); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := load(); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Fatalf("a file without its end mark: %v, want it refused as cut short", err)
	}
	if err := enc.Encode(cacheFileEntry{End: true, Sum: crc32.Checksum(file.Bytes(), castagnoli)}); err != nil {
		t.Fatal(err)
	}
	if n, err := load(); err != nil || n != 1 {
		t.Fatalf("a whole file: %d entries, %v; want 1", n, err)
	}
	if err := enc.Encode(cacheFileEntry{Key: "b"}); err != nil {
		t.Fatal(err)
	}
	if _, err := load(); err == nil || !strings.Contains(err.Error(), "after its end mark") {
		t.Fatalf("a file going on after its end mark: %v, want it refused", err)
	}
}

// TestCacheFileDamagedIsIgnored: a byte changed before the end mark (a
// bad sector, a partial overwrite) makes the file load nothing.
// The file had no checksum: a byte changed in an attribute string loaded
// as another value, written into rows as the key's enrichment, status ok,
// until its cache_ttl ran out.
func TestCacheFileDamagedIsIgnored(t *testing.T) {
	h := cacheFileHeader{Version: cacheFileVersion, Key: "user_id", Fields: []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}}}
	now, mono := time.Now(), int64(time.Hour)
	c := newCache(100, DefaultCacheMaxBytes, time.Second)
	c.put("u-1", Values{schemas.StringAttr("platinum")}, false, time.Hour, mono)
	c.put("u-2", nil, true, time.Hour, mono)
	var saved bytes.Buffer
	if _, err := c.save(&saved, h, now, mono, time.Hour, time.Hour); err != nil {
		t.Fatal(err)
	}
	load := func(file []byte) (*cache, error) {
		d := newCache(100, DefaultCacheMaxBytes, time.Second)
		_, err := d.load(bytes.NewReader(file), h, now, mono, time.Hour, time.Hour, nil)
		return d, err
	}
	if d, err := load(saved.Bytes()); err != nil || d.len() != 2 {
		t.Fatalf("the whole file: %d entries, %v; want 2", d.len(), err)
	}
	at := bytes.Index(saved.Bytes(), []byte("platinum"))
	for _, i := range []int{at, at + len("platinum") - 1} {
		file := bytes.Clone(saved.Bytes())
		file[i] ^= 0x10 // "platinum" reads "`latinum" or "platinue"
		d, err := load(file)
		if err == nil || d.len() != 0 {
			v, _ := d.get([]byte("u-1"), mono)
			t.Fatalf("byte %d changed: %v, %d entries loaded (u-1: %v); want an error and none", i, err, d.len(), v.vals)
		}
		if !strings.Contains(err.Error(), "checksum does not match") {
			t.Fatalf("byte %d changed: %v, want a checksum mismatch", i, err)
		}
	}
}

// TestCacheFileSharesStrings: a loaded attribute string is the response
// decoder's shared copy, not one more allocation per key.
func TestCacheFileSharesStrings(t *testing.T) {
	h := cacheFileHeader{Version: cacheFileVersion, Key: "user_id", Fields: []Field{{Name: "segment", Type: TypeString, Attribute: "segment"}}}
	now, mono := time.Now(), int64(time.Hour)
	c := newCache(100, DefaultCacheMaxBytes, time.Second)
	c.put("a", Values{schemas.StringAttr("gold")}, false, time.Hour, mono)
	var saved bytes.Buffer
	if _, err := c.save(&saved, h, now, mono, time.Hour, time.Minute); err != nil {
		t.Fatal(err)
	}
	in := &interner{m: map[string]string{}}
	gold := in.share(string([]byte("gold"))) // as a response would have made it
	d := newCache(100, DefaultCacheMaxBytes, time.Second)
	if n, err := d.load(&saved, h, now, mono, time.Hour, time.Hour, []*interner{in}); err != nil || n != 1 {
		t.Fatalf("load: %d, %v", n, err)
	}
	v, f := d.get([]byte("a"), mono)
	if f == absent || v.vals[0].Str != "gold" || unsafe.StringData(v.vals[0].Str) != unsafe.StringData(gold) {
		t.Fatalf("loaded %v (%v), not the shared copy", v.vals, f)
	}
}

// TestCacheFileHoldsTodaysConversions: a file saved before the service's
// answers were converted as they are now (format 3) loads nothing, and a
// string attribute that is not UTF-8 loads as a null, as the decoder makes
// it, the entry's other attributes kept. A format-3 file passed, and its
// entries were served as the older floe had converted them: a string not
// UTF-8 went into a string column with status ok until cache_ttl ran out.
func TestCacheFileHoldsTodaysConversions(t *testing.T) {
	h := cacheFileHeader{Version: cacheFileVersion, Key: "user_id", Fields: []Field{
		{Name: "segment", Type: TypeString, Attribute: "segment"},
		{Name: "visits", Type: TypeLong, Attribute: "visits"}}}
	now, mono := time.Now(), int64(time.Hour)
	c := newCache(100, DefaultCacheMaxBytes, time.Second)
	// What a floe before 6b92ad0 cached for {"segment":"gold\xff","visits":7}.
	c.put("u-1", Values{schemas.StringAttr("gold\xff"), schemas.LongAttr(7)}, false, time.Hour, mono)
	c.put("u-2", Values{schemas.StringAttr("silver"), schemas.LongAttr(2)}, false, time.Hour, mono)
	load := func(saved cacheFileHeader) (*cache, error) {
		t.Helper()
		var file bytes.Buffer
		if _, err := c.save(&file, saved, now, mono, time.Hour, time.Hour); err != nil {
			t.Fatal(err)
		}
		d := newCache(100, DefaultCacheMaxBytes, time.Second)
		_, err := d.load(&file, h, now, mono, time.Hour, time.Hour, nil)
		return d, err
	}

	old := h
	old.Version = 3
	if d, err := load(old); err == nil || d.len() != 0 || !strings.Contains(err.Error(), "it is of format 3") {
		t.Fatalf("a format-3 file: %v, %d entries loaded; want it refused and none", err, d.len())
	}
	d, err := load(h)
	if err != nil || d.len() != 2 {
		t.Fatalf("load: %d entries, %v; want 2", d.len(), err)
	}
	want := map[string]Values{
		"u-1": {{}, schemas.LongAttr(7)},
		"u-2": {schemas.StringAttr("silver"), schemas.LongAttr(2)},
	}
	for key, w := range want {
		if v, f := d.get([]byte(key), mono); f == absent || !slices.Equal(v.vals, w) {
			t.Errorf("%s loaded as %+v (%v), want %+v", key, v.vals, f, w)
		}
	}
}
