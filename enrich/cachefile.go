package enrich

import (
	"bufio"
	"crypto/sha256"
	"encoding/gob"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/floe-dev/floe/schemas"
)

// Config.CacheFile: the cache saved when the stage stops and loaded when it
// starts, so that a scheduled job's next run starts with the keys its last
// run looked up instead of a cold start (every record of a lane waiting for
// the slowest of the first requests). An entry keeps the expiry it had: a
// result is used for CacheTTL and a miss for NegativeCacheTTL from its
// lookup, whichever run it was, and no longer than those settings now
// allow.

// cacheFileVersion is the format of the cache file; a file of another
// version is ignored. 3: the end mark carries a checksum. 4: the service's
// answers as values.go has converted them since (a string not UTF-8 is a
// null, a repeated member counts by its last value, longs are read
// exactly, timestamps may spell t and z in lower case). Raise it whenever
// those conversions change: an older file holds what the old ones made,
// which would be served with status ok until cache_ttl ran out; a cold
// start once costs less.
const cacheFileVersion = 4

// cacheFileHeader opens a cache file. A file saved for other fields or
// another key field holds values that do not fit, and one saved against
// another service (URL and mode) answers that may not be this one's: both
// are ignored. The URL is kept as its SHA-256, since it may carry a token.
type cacheFileHeader struct {
	Version int
	Service [sha256.Size]byte
	Key     string
	Fields  []Field
}

// cacheFileEntry is one cached outcome; times are Unix nanoseconds. The
// last entry of a file is End, with Sum alone: a file cut between two
// entries still decodes to its end, and would otherwise pass for a whole
// one. Sum is the CRC-32C of the file's bytes before the end mark: a byte
// changed in an attribute string (a bad sector, a partial overwrite) still
// decodes, and would be written into rows as the key's enrichment, status
// ok, until its cache_ttl ran out. CRC-32C, not a cryptographic hash: the
// file guards against damage, not against whoever may write it, and the
// CPU computes it at many GB/s, which keeps a scheduled job's start fast.
// LookedUp is when the outcome was looked up (at the latest: its expiry
// less the TTL of the run that saved it).
type cacheFileEntry struct {
	Key      string
	Values   []schemas.Attr
	Miss     bool
	Expires  int64
	Refresh  int64
	LookedUp int64
	End      bool
	Sum      uint32
}

// castagnoli is CRC-32C's table, for cacheFileEntry.Sum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// summingWriter passes writes on to w, adding their bytes to sum.
type summingWriter struct {
	w   io.Writer
	sum uint32
}

func (s *summingWriter) Write(p []byte) (int, error) {
	s.sum = crc32.Update(s.sum, castagnoli, p)
	return s.w.Write(p)
}

// summingReader adds the bytes read from r to sum. gob reads a message's
// bytes exactly (its length, then that many bytes) from a reader that is
// an io.ByteReader, which it then does not buffer: sum before a message
// is decoded covers the bytes before it.
type summingReader struct {
	r   *bufio.Reader
	sum uint32
}

func (s *summingReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.sum = crc32.Update(s.sum, castagnoli, p[:n])
	return n, err
}

func (s *summingReader) ReadByte() (byte, error) {
	b, err := s.r.ReadByte()
	if err == nil {
		s.sum = crc32.Update(s.sum, castagnoli, []byte{b})
	}
	return b, err
}

func (s *Stage) cacheFileHeader() cacheFileHeader {
	return cacheFileHeader{Version: cacheFileVersion, Service: serviceID(s.cfg), Key: s.cfg.Key, Fields: s.cfg.Fields}
}

// serviceID identifies the service a cache file's answers came from.
func serviceID(cfg Config) [sha256.Size]byte {
	return sha256.Sum256([]byte(cfg.Mode + " " + cfg.URL))
}

// loadCacheFile fills the cache from Config.CacheFile, if set. A missing
// file is a first run; a file that is not whole, or was saved for other
// fields, is logged and the stage starts cold.
func (s *Stage) loadCacheFile() {
	path := s.cfg.CacheFile
	if path == "" || s.cache == nil {
		return
	}
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	if err != nil {
		s.log.Warn("enrichment cache file not read; starting with an empty cache", "file", path, "err", err)
		return
	}
	defer f.Close()
	n, err := s.cache.load(f, s.cacheFileHeader(), time.Now(), monoNow(), s.cfg.CacheTTL.D(), s.cfg.NegativeCacheTTL.D(), s.client.dec.interns)
	if err != nil {
		s.log.Warn("enrichment cache file not read; starting with an empty cache", "file", path, "err", err)
		return
	}
	// The cache holds fewer than the file's entries when cache_size or
	// cache_max_bytes is lower than the run that saved it had.
	s.log.Info("enrichment cache loaded", "file", path, "entries", n, "kept", s.cache.len())
}

// checkCacheFile reports a CacheFile whose directory does not exist or
// cannot be written, or that exists and is not a regular file, when the
// stage is made rather than when it stops.
func checkCacheFile(path string) error {
	if path == "" {
		return nil
	}
	if st, err := os.Stat(filepath.Dir(path)); err != nil || !st.IsDir() {
		return fmt.Errorf("enrich.cache_file: %q: its directory does not exist", path)
	}
	// Followed if it is a link, as the load opens it: a directory fails
	// every load and every save (the rename onto it), a named pipe blocks
	// the load. A link to a file is read, then replaced by the save.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return fmt.Errorf("enrich.cache_file: %q: it is not a regular file (mode %s)", path, st.Mode())
	}
	f, err := createCacheTemp(path)
	if err != nil {
		return fmt.Errorf("enrich.cache_file: %q: its directory cannot be written: %w", path, err)
	}
	f.Close()
	if err := os.Remove(f.Name()); err != nil {
		return fmt.Errorf("enrich.cache_file: %q: %w", path, err)
	}
	return nil
}

// createCacheTemp creates a temporary file beside path, readable by its
// owner only. Each has a name of its own, so that saves that overlap (a
// scheduled run starting before the last has stopped) each rename a
// whole file into place.
func createCacheTemp(path string) (*os.File, error) {
	return os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
}

// staleCacheTemp is the age past which a temporary file beside the cache
// file is a save's that was killed (a save takes seconds), and is removed.
const staleCacheTemp = 10 * time.Minute

// removeStaleTemps removes the temporary files of path's killed saves.
func removeStaleTemps(path string, now time.Time) {
	dir, base := filepath.Dir(path), filepath.Base(path)
	files, _ := os.ReadDir(dir)
	for _, f := range files {
		name := f.Name()
		if !strings.HasPrefix(name, base+".") || !strings.HasSuffix(name, ".tmp") {
			continue
		}
		if st, err := f.Info(); err == nil && now.Sub(st.ModTime()) > staleCacheTemp {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}

// saveCacheFile writes the cache to Config.CacheFile, if set, replacing the
// file only once the new one is complete. Failures are logged: the next run
// then starts from the previous file, or cold.
func (s *Stage) saveCacheFile() {
	path := s.cfg.CacheFile
	if path == "" || s.cache == nil {
		return
	}
	n, err := s.writeCacheFile(path)
	if err != nil {
		s.log.Warn("enrichment cache not saved", "file", path, "err", err)
		return
	}
	s.log.Info("enrichment cache saved", "file", path, "entries", n)
}

// writeCacheFile writes the cache to a temporary file and renames it to
// path, after removing what killed saves left behind.
func (s *Stage) writeCacheFile(path string) (int, error) {
	removeStaleTemps(path, time.Now())
	tmp, err := createCacheTemp(path)
	if err != nil {
		return 0, err
	}
	defer os.Remove(tmp.Name()) // after the rename, there is nothing to remove
	w := bufio.NewWriter(tmp)
	n, err := s.cache.save(w, s.cacheFileHeader(), time.Now(), monoNow(), s.cfg.CacheTTL.D(), s.cfg.NegativeCacheTTL.D())
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return n, err
}

// save writes h and every unexpired entry to w, with monoNow value mono
// taken at wall time now, and ttl and negTTL the TTLs its entries were
// cached for (a result, a miss); it returns how many entries it wrote.
func (c *cache) save(w io.Writer, h cacheFileHeader, now time.Time, mono int64, ttl, negTTL time.Duration) (int, error) {
	sw := &summingWriter{w: w}
	enc := gob.NewEncoder(sw)
	if err := enc.Encode(h); err != nil {
		return 0, err
	}
	wall := func(m int64) int64 { return now.UnixNano() + m - mono }
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		var entries []cacheFileEntry
		for _, gen := range []map[string]cached{sh.old, sh.cur} {
			for k, v := range gen {
				if v.expires > mono {
					life := ttl
					if v.miss {
						life = negTTL
					}
					entries = append(entries, cacheFileEntry{Key: k, Values: v.vals, Miss: v.miss,
						Expires: wall(v.expires), Refresh: wall(v.refresh), LookedUp: wall(v.expires - int64(life))})
				}
			}
		}
		sh.mu.Unlock()
		for _, e := range entries {
			if err := enc.Encode(e); err != nil {
				return n, err
			}
			n++
		}
	}
	return n, enc.Encode(cacheFileEntry{End: true, Sum: sw.sum})
}

// load adds the unexpired entries saved in r, if its header is want and r
// reads without error to its end mark, whose checksum matches, and ends
// there (else none), with monoNow value mono taken at wall time now. An
// entry lives no longer than ttl (a result) or negTTL (a miss) from its
// lookup, nor from now: the settings may have been lowered since it was
// saved, or the clock was wrong then. A string that is not UTF-8 is a
// null, and the others are shared through interns (by field; nil for
// none), as the response decoder's are. It returns how many live entries
// the file held (the cache's bounds may keep fewer).
func (c *cache) load(r io.Reader, want cacheFileHeader, now time.Time, mono int64, ttl, negTTL time.Duration, interns []*interner) (int, error) {
	sr := &summingReader{r: bufio.NewReader(r)}
	dec := gob.NewDecoder(sr)
	var h cacheFileHeader
	if err := dec.Decode(&h); err != nil {
		return 0, fmt.Errorf("reading its header: %w", err)
	}
	switch {
	case h.Version != want.Version:
		return 0, fmt.Errorf("it is of format %d, this floe reads %d", h.Version, want.Version)
	case h.Service != want.Service:
		return 0, errors.New("it was saved against another url or mode")
	case h.Key != want.Key || !slices.Equal(h.Fields, want.Fields):
		return 0, errors.New("it was saved for another key or other fields")
	}
	monoOf := func(w int64) int64 { return mono + w - now.UnixNano() }
	// The entries go to a cache of c's bounds as they are read, and to c
	// once the file is known whole: a file saved under larger bounds than
	// c's takes no more memory to load than c may hold, not all of it.
	read := c.emptyCopy()
	entries, n := 0, 0
	for {
		var e cacheFileEntry
		sum := sr.sum
		err := dec.Decode(&e)
		if errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("it ends after %d entries, without its end mark: cut short", entries)
		}
		if err != nil {
			return 0, fmt.Errorf("reading entry %d: %w", entries+1, err)
		}
		if e.End {
			if e.Sum != sum {
				return 0, fmt.Errorf("its checksum does not match its %d entries: it was damaged", entries)
			}
			break
		}
		entries++
		life := ttl
		if e.Miss {
			life = negTTL
		}
		from := min(mono, monoOf(e.LookedUp))
		expires := min(monoOf(e.Expires), from+int64(life))
		refresh := min(monoOf(e.Refresh), from+int64(float64(life)*c.refreshAfter))
		if expires <= mono || (!e.Miss && len(e.Values) != len(want.Fields)) {
			continue
		}
		for i := range min(len(e.Values), len(want.Fields)) {
			a := &e.Values[i]
			if want.Fields[i].Type != TypeString || a.Str == "" {
				continue
			}
			// A string column holds UTF-8, and the decoder makes any other
			// string a null: so does the file, whatever wrote it.
			if !utf8.ValidString(a.Str) {
				*a = schemas.Attr{}
				continue
			}
			if i < len(interns) && interns[i] != nil {
				a.Str = interns[i].share(a.Str)
			}
		}
		read.store(e.Key, newCached(e.Values, e.Miss, expires, refresh))
		n++
	}
	if err := dec.Decode(new(cacheFileEntry)); !errors.Is(err, io.EOF) {
		return 0, errors.New("it goes on after its end mark")
	}
	c.storeAll(read)
	return n, nil
}
