package enrich_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
)

// cacheFileRecords is two lanes over keys u-0 … u-59, each key twice.
func cacheFileRecords() [][]record {
	recs := make([][]record, 2)
	for i := range recs {
		for j := range 60 {
			recs[i] = append(recs[i], record{lane: i, seq: j, key: key((j + 30*i) % 60)})
		}
	}
	return recs
}

// TestCacheFileCarriesLookupsToTheNextRun: a stage with cache_file saves its
// cache when it stops, removing what a save killed long ago left behind but
// not the file of a save under way; the next stage loads it and answers
// every key the first looked up, results and misses alike, without a
// request, with the service's values; a key it never saw is still looked
// up.
func TestCacheFileCarriesLookupsToTheNextRun(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: time.Millisecond, P99: 5 * time.Millisecond, MissRate: 0.2, Seed: 2})
	cfg := testConfig(url)
	dir := t.TempDir()
	cfg.CacheFile = filepath.Join(dir, "enrich.cache")
	killed, underWay := cfg.CacheFile+".1.tmp", cfg.CacheFile+".2.tmp"
	for _, name := range []string{killed, underWay} {
		if err := os.WriteFile(name, []byte("half a cache file"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(killed, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	recs := cacheFileRecords()

	first := startStage(t, cfg)
	checkLanes(t, srv, recs, runLanes(t, first.st, recs))
	first.stop()
	if st, err := os.Stat(cfg.CacheFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("cache file after the first run: %v, %v (want mode 0600)", st, err)
	}
	if files, err := os.ReadDir(dir); err != nil || len(files) != 2 || files[0].Name() != "enrich.cache" || files[1].Name() != filepath.Base(underWay) {
		t.Fatalf("the directory holds %v (%v), want the cache file and the other save's", files, err)
	}
	if !strings.Contains(first.logs.String(), "entries=60") {
		t.Fatalf("the first run did not log saving 60 entries:\n%s", first.logs)
	}
	before := srv.Requests()

	second := startStage(t, cfg)
	checkLanes(t, srv, recs, runLanes(t, second.st, recs))
	if n := srv.Requests() - before; n != 0 {
		t.Fatalf("the second run sent %d requests for keys the first had looked up", n)
	}
	if hits := second.metric(t, "floe_enrich_cache_hits_total"); hits != 120 {
		t.Fatalf("second run: %v cache hits, want 120", hits)
	}
	other := [][]record{{{key: key(1000)}}}
	checkLanes(t, srv, other, runLanes(t, second.st, other))
	if n := srv.Requests() - before; n != 1 {
		t.Fatalf("%d requests for one key the first run never saw, want 1", n)
	}
}

// TestCacheFileLoadLogsWhatItKept: a run whose cache is smaller than the
// file its last run saved logs both the file's entries and how many the
// cache kept. Only the file's were logged, as if all were cached.
func TestCacheFileLoadLogsWhatItKept(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: time.Millisecond, P99: 5 * time.Millisecond, Seed: 2})
	cfg := testConfig(url)
	cfg.CacheFile = filepath.Join(t.TempDir(), "enrich.cache")
	recs := cacheFileRecords()
	first := startStage(t, cfg)
	checkLanes(t, srv, recs, runLanes(t, first.st, recs))
	first.stop()

	cfg.CacheSize = 16 // a generation of one entry per shard: 32 at most
	second := startStage(t, cfg)
	m := regexp.MustCompile(`msg="enrichment cache loaded" .* entries=(\d+) kept=(\d+)`).FindStringSubmatch(second.logs.String())
	if m == nil || m[1] != "60" {
		t.Fatalf("the load did not log 60 entries and what it kept:\n%s", second.logs)
	}
	if kept, _ := strconv.Atoi(m[2]); kept == 0 || kept > 32 {
		t.Fatalf("kept=%s logged by a cache of at most 32 entries", m[2])
	}
}

// TestCacheFileIgnoredWhenItDoesNotFit: an expired entry is looked up
// again; a file saved for other fields or against another url, or one that
// is not a cache file at all, is ignored with a warning and the stage
// starts cold.
func TestCacheFileIgnoredWhenItDoesNotFit(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: time.Millisecond, P99: 5 * time.Millisecond, Seed: 2})
	cfg := testConfig(url)
	cfg.CacheFile = filepath.Join(t.TempDir(), "enrich.cache")
	cfg.CacheTTL = enrich.Duration(300 * time.Millisecond)
	recs := cacheFileRecords()
	// lookedUp runs recs through a new stage with cfg (checking the values
	// when it has all the fields) and returns how many requests it sent
	// and what it logged.
	lookedUp := func(cfg enrich.Config) (int64, string) {
		t.Helper()
		h := startStage(t, cfg)
		before := srv.Requests()
		out := runLanes(t, h.st, recs)
		if len(cfg.Fields) == len(testFields) {
			checkLanes(t, srv, recs, out)
		}
		h.stop()
		return srv.Requests() - before, h.logs.String()
	}

	if n, _ := lookedUp(cfg); n == 0 {
		t.Fatal("the first run sent no request")
	}
	time.Sleep(cfg.CacheTTL.D())
	if n, _ := lookedUp(cfg); n == 0 {
		t.Fatal("entries past their TTL were used")
	}
	other := cfg
	other.CacheTTL = enrich.Duration(time.Minute)
	other.Fields = other.Fields[:2]
	if n, logs := lookedUp(other); n == 0 || !strings.Contains(logs, "saved for another key or other fields") {
		t.Fatalf("a file saved for other fields was used (%d requests), or not explained:\n%s", n, logs)
	}
	if n, _ := lookedUp(cfg); n == 0 {
		t.Fatal("the run after one with other fields used their file")
	}
	moved := cfg
	moved.CacheTTL = enrich.Duration(time.Minute)
	moved.URL = strings.Replace(cfg.URL, "127.0.0.1", "localhost", 1)
	if moved.URL == cfg.URL {
		t.Fatalf("the test server's url %s is not on 127.0.0.1", cfg.URL)
	}
	if n, logs := lookedUp(moved); n == 0 || !strings.Contains(logs, "saved against another url or mode") {
		t.Fatalf("a file saved against another url was used (%d requests), or not explained:\n%s", n, logs)
	}
	if n, _ := lookedUp(moved); n != 0 {
		t.Fatalf("the next run against the same url sent %d requests, want 0", n)
	}
	if err := os.WriteFile(cfg.CacheFile, []byte("not a cache file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if n, logs := lookedUp(cfg); n == 0 || !strings.Contains(logs, "enrichment cache file not read") {
		t.Fatalf("a corrupt file was used (%d requests), or not explained:\n%s", n, logs)
	}
}

// TestCacheFileDirectoryMustExist: a cache_file in a directory that does
// not exist, or cannot be written, fails the stage at start, not when it
// stops and would save.
func TestCacheFileDirectoryMustExist(t *testing.T) {
	cfg := testConfig("http://127.0.0.1:9")
	cfg.CacheFile = filepath.Join(t.TempDir(), "gone", "enrich.cache")
	_, err := enrich.NewStage(cfg, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `enrich.cache_file: "`+cfg.CacheFile+`": its directory does not exist`) {
		t.Fatalf("NewStage: %v", err)
	}
	// /proc takes no new files, even from root (which file modes would not
	// stop).
	cfg.CacheFile = "/proc/floe-enrich.cache"
	_, err = enrich.NewStage(cfg, nil, nil)
	if err == nil || !strings.Contains(err.Error(), `enrich.cache_file: "/proc/floe-enrich.cache": its directory cannot be written`) {
		t.Fatalf("NewStage: %v", err)
	}
}

// TestCacheFileMustBeAFile: a cache_file that exists and is not a regular
// file (a directory, a link to one, a named pipe) fails the stage at start;
// a link to a file, or one to nothing yet, is taken. A directory passed:
// every run then warned it could not read the file nor save it, and a
// named pipe held NewStage until something opened it to write.
func TestCacheFileMustBeAFile(t *testing.T) {
	dir := t.TempDir()
	mk := func(name string, make func(path string) error) string {
		t.Helper()
		path := filepath.Join(dir, name)
		if err := make(path); err != nil {
			t.Fatal(err)
		}
		return path
	}
	file := mk("file", func(p string) error { return os.WriteFile(p, nil, 0o600) })
	sub := mk("dir", func(p string) error { return os.Mkdir(p, 0o700) })
	for _, tc := range []struct {
		path    string
		refused bool
	}{
		{sub, true},
		{mk("link-to-dir", func(p string) error { return os.Symlink(sub, p) }), true},
		{file, false},
		{mk("link-to-file", func(p string) error { return os.Symlink(file, p) }), false},
		{mk("link-to-nothing", func(p string) error { return os.Symlink(filepath.Join(dir, "nothing"), p) }), false},
		// Last: taken, it blocks the test (the checks above stop it first).
		{mk("pipe", func(p string) error { return syscall.Mkfifo(p, 0o600) }), true},
	} {
		cfg := testConfig("http://127.0.0.1:9")
		cfg.CacheFile = tc.path
		_, err := enrich.NewStage(cfg, nil, nil)
		refused := err != nil && strings.Contains(err.Error(), `enrich.cache_file: "`+tc.path+`": it is not a regular file`)
		if refused != tc.refused || (err != nil && !refused) {
			t.Fatalf("%s: NewStage: %v (want refused: %v)", filepath.Base(tc.path), err, tc.refused)
		}
	}
}
