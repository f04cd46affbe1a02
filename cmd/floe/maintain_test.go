package main

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestMaintainCommand: after a run that committed many small files,
// `floe maintain --dry-run` plans a compaction and changes nothing, `floe
// maintain` then compacts with every row kept (checked independently), and
// bad flags end it with status 2 and a message naming the flag.
func TestMaintainCommand(t *testing.T) {
	e := newEnv(t, 1, "")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 100, MalformedRate: 0.01, Seed: 3})
	run := e.start("run", "run")
	// 4000 records over ~4s with commit.interval 500ms: several small files.
	if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 4000, 1000); err != nil {
		t.Fatal(err)
	}
	end, err := e.cluster.EndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(end, 60*time.Second)
	run.signal(t, syscall.SIGTERM)
	if err := run.wait(t, 30*time.Second); err != nil {
		t.Fatalf("run: %v", err)
	}

	report := func(name string, args ...string) lakehouse.MaintainReport {
		t.Helper()
		p := e.start(name, append([]string{"maintain", "--json"}, args...)...)
		if err := p.wait(t, 60*time.Second); err != nil {
			t.Fatalf("floe maintain %v: %v\n%s", args, err, p.output())
		}
		out := p.output()
		var rep lakehouse.MaintainReport
		if err := json.NewDecoder(strings.NewReader(out[strings.Index(out, "\n{")+1:])).Decode(&rep); err != nil {
			t.Fatalf("maintain --json: %v\n%s", err, out)
		}
		return rep
	}
	dry := report("dry run", "--dry-run")
	if !dry.DryRun || dry.FilesRewritten < lakehouse.DefaultMinInputFiles || dry.After != dry.Before {
		t.Fatalf("dry run: %+v, want a planned compaction of at least %d files and an unchanged table", dry, lakehouse.DefaultMinInputFiles)
	}
	// A data file the storage does not serve fails its group: the report
	// still says what the run did, then the error (it printed the error
	// alone).
	var data []string
	if err := filepath.WalkDir(filepath.Join(e.dir, "warehouse"), func(path string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(path, ".parquet") {
			data = append(data, path)
		}
		return err
	}); err != nil || len(data) == 0 {
		t.Fatalf("data files: %v, %v", data, err)
	}
	aside := filepath.Join(t.TempDir(), "aside.parquet")
	if err := os.Rename(data[0], aside); err != nil {
		t.Fatal(err)
	}
	failed := e.start("maintain, a file gone", "maintain")
	var exit *exec.ExitError
	if err := failed.wait(t, 60*time.Second); !errors.As(err, &exit) || exit.ExitCode() != 2 ||
		!strings.Contains(failed.output(), "compaction: 1 group failed and left as they were") ||
		!strings.Contains(failed.output(), "compaction groups failed") {
		t.Fatalf("maintain with a data file gone: %v, want status 2 after the report\n%s", err, failed.output())
	}
	if err := os.Rename(aside, data[0]); err != nil {
		t.Fatal(err)
	}
	rep := report("maintain", "--retain-last", "2", "--target-file-size", "64MiB")
	if rep.FilesRewritten != dry.FilesRewritten || rep.FilesWritten == 0 ||
		rep.After.DataFiles != rep.Before.DataFiles-rep.FilesRewritten+rep.FilesWritten || rep.After.Rows != rep.Before.Rows {
		t.Fatalf("maintain: %+v; the dry run planned %d files", rep, dry.FilesRewritten)
	}
	t.Logf("data files %d → %d, manifests %d → %d, snapshots %d → %d, bytes %d → %d",
		rep.Before.DataFiles, rep.After.DataFiles, rep.Before.Manifests, rep.After.Manifests,
		rep.Before.Snapshots, rep.After.Snapshots, rep.Before.DataBytes, rep.After.DataBytes)
	_, malformed := gen.Counts()
	if rows, dead := e.check(end, malformed); rows+dead != end[0] {
		t.Fatalf("rows %d + dead letters %d != produced %d", rows, dead, end[0])
	}
	if wm := e.watermarks(ctx); wm[0] != end[0] {
		t.Fatalf("watermark %d after maintenance, want %d", wm[0], end[0])
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--orphan-older-than", "5m"}, "orphan-older-than"},
		{[]string{"--retain-last", "0"}, "--retain-last"},
		{[]string{"--target-file-size", "big"}, "--target-file-size"},
	} {
		p := e.start("bad flag", append([]string{"maintain"}, tc.args...)...)
		err := p.wait(t, 60*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(p.output(), tc.want) {
			t.Errorf("floe maintain %v: %v, want status 2 naming %q\n%s", tc.args, err, tc.want, p.output())
		}
	}
}

// TestReadingCommandsDoNotCreateTables: `floe verify`, `floe maintain` and
// `floe doctor` on a table the catalog lacks (a misspelt --table, a wrong
// catalog uri or warehouse) fail naming it, and create nothing: verify
// used to create an empty table and report OK with status 0.
func TestReadingCommandsDoNotCreateTables(t *testing.T) {
	dir := t.TempDir()
	cfg := writeConfig(t, dir, "127.0.0.1:1", "floe-test", "analytics.clicks", "", "")
	cat, err := catalog.Load(t.Context(), "floe", iceberg.Properties(sqliteCatalog(dir)))
	if err != nil {
		t.Fatal(err)
	}
	for _, sub := range [][]string{
		{"verify", "--no-dlq"},
		{"maintain"},
		{"doctor"},
	} {
		root := rootCmd()
		root.SetArgs(append(sub, "--config", cfg, "--table", "analytics.clikcs", "--log-level", "error"))
		err := root.ExecuteContext(t.Context())
		if err == nil || exitCode(err) == 0 || !strings.Contains(err.Error(), "table analytics.clikcs") || !strings.Contains(err.Error(), "floe run creates it") {
			t.Errorf("floe %v on a table that does not exist: %v (status %d), want it named as missing", sub, err, exitCode(err))
		}
		if _, lerr := cat.LoadTable(t.Context(), []string{"analytics", "clikcs"}); !errors.Is(lerr, catalog.ErrNoSuchTable) {
			t.Fatalf("after floe %v: the table exists (%v)", sub, lerr)
		}
	}
}

// TestReadingCommandsDoNotCreateCatalogs: `floe verify`, `floe maintain`
// and `floe doctor` with a sql catalog whose SQLite file does not exist (a
// misspelt uri) fail naming table.catalog.uri and create no file: they
// created an empty catalog database there, then refused the table.
func TestReadingCommandsDoNotCreateCatalogs(t *testing.T) {
	dir := t.TempDir()
	cat := sqliteCatalog(dir)
	db := filepath.Join(dir, "catalgo.db")
	cat["uri"] = "file:" + db
	cfg := writeConfigCatalog(t, dir, "127.0.0.1:1", "floe-test", "analytics.clicks", cat, "", "")
	for _, sub := range [][]string{
		{"verify", "--no-dlq"},
		{"maintain"},
		{"doctor"},
	} {
		root := rootCmd()
		root.SetArgs(append(sub, "--config", cfg, "--log-level", "error"))
		err := root.ExecuteContext(t.Context())
		if want := "table.catalog.uri file:" + db + ": the SQLite database " + db + " does not exist"; err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("floe %v on a SQLite catalog that does not exist: %v (status %d), want status 2 naming %q", sub, err, exitCode(err), want)
		}
		if _, serr := os.Stat(db); !errors.Is(serr, fs.ErrNotExist) {
			t.Fatalf("after floe %v: %s exists (%v)", sub, db, serr)
		}
	}
}

// TestMaintainChecksItsFlagsFirst: a bad flag of `floe maintain` is named
// before the catalog is asked for the table: with a catalog out of reach
// the error was the catalog's, and the flag's only once it answered.
func TestMaintainChecksItsFlagsFirst(t *testing.T) {
	dir := t.TempDir()
	cat := map[string]string{"type": "rest", "uri": "http://127.0.0.1:1"}
	cfg := writeConfigCatalog(t, dir, "127.0.0.1:1", "floe-test", "analytics.clicks", cat, "", "")
	for _, tc := range []struct{ flag, value, want string }{
		{"--target-file-size", "10XB", `--target-file-size: "10XB" is not a byte size`},
		{"--expire-older-than", "-1h", "--expire-older-than -1h0m0s: must be positive"},
		{"--retain-last", "0", "--retain-last 0: at least 1 snapshot"},
		// Below the minimum: it was refused only once the table was loaded.
		{"--orphan-older-than", "5m", "--orphan-older-than 5m0s: at least 1h0m0s"},
		{"--orphan-older-than", "0s", "--orphan-older-than 0s: at least 1h0m0s"},
	} {
		root := rootCmd()
		root.SetArgs([]string{"maintain", "--config", cfg, "--log-level", "error", tc.flag, tc.value})
		if err := root.ExecuteContext(t.Context()); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("floe maintain %s %s with the catalog out of reach: %v, want status 2 naming the flag: %q", tc.flag, tc.value, err, tc.want)
		}
	}
}

// TestRefusedReplayCreatesNoTable: a replay refused for its flags or
// ranges (an inverted or malformed range, a partition the topic lacks or
// given twice — replayed twice, its records counted twice — a range past
// the end) creates no table: it created the table --table
// named first, so a misspelt one was left behind empty.
func TestRefusedReplayCreatesNoTable(t *testing.T) {
	e := newEnv(t, 1, "")
	cat, err := catalog.Load(t.Context(), "floe", iceberg.Properties(sqliteCatalog(e.dir)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--partition", "0", "--from", "10", "--to", "5"}, "want 0 <= from < to"},
		{[]string{"--from-time", "yesterday", "--to-time", "2026-11-29T10:00:00Z"}, "--from-time: want RFC 3339"},
		{[]string{"--from-time", "2026-11-29T10:00:00Z", "--to-time", "2026-11-29T09:00:00Z"}, "is not before"},
		{[]string{"--partition", "7", "--from", "0", "--to", "5"}, "no partition 7"},
		{[]string{"--partition", "0,0", "--from", "0", "--to", "5"}, "partition 0 is given twice"},
		{[]string{"--partition", "0", "--partition", "0", "--from-time", "2026-11-29T09:00:00Z", "--to-time", "2026-11-29T10:00:00Z"}, "partition 0 is given twice"},
		{[]string{"--partition", "0", "--from", "0", "--to", "5"}, "beyond the end"},
		{[]string{"--partition", "0", "--from", "0", "--to", "5", "--reenrich"}, "needs an enrich section"},
	} {
		root := rootCmd()
		root.SetArgs(append([]string{"replay", "--config", e.config, "--table", "analytics.clikcs", "--log-level", "error"}, tc.args...))
		err := root.ExecuteContext(t.Context())
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("floe replay %v: %v (status %d), want status 2 naming %q", tc.args, err, exitCode(err), tc.want)
		}
		if _, lerr := cat.LoadTable(t.Context(), []string{"analytics", "clikcs"}); !errors.Is(lerr, catalog.ErrNoSuchTable) {
			t.Fatalf("after floe replay %v: the table exists (%v)", tc.args, lerr)
		}
	}
	// A time range without records replays nothing, and creates nothing
	// either (it created the table).
	root := rootCmd()
	root.SetArgs([]string{"replay", "--config", e.config, "--table", "analytics.clikcs", "--log-level", "error",
		"--from-time", "2030-01-01T00:00:00Z", "--to-time", "2030-01-01T01:00:00Z"})
	if err := root.ExecuteContext(t.Context()); err != nil {
		t.Errorf("floe replay of an empty time range: %v", err)
	}
	if _, lerr := cat.LoadTable(t.Context(), []string{"analytics", "clikcs"}); !errors.Is(lerr, catalog.ErrNoSuchTable) {
		t.Fatalf("after floe replay of an empty time range: the table exists (%v)", lerr)
	}
}

// TestRefusedConfigCreatesNoTable: `floe run` and `floe replay` refused for
// the configuration — a dedupe key the schema lacks, a route whose schema
// file is missing — create no table. The table was created before the key
// was checked, and with routes each route's table before the next route's
// schema was read, so the refusal left empty tables behind.
func TestRefusedConfigCreatesNoTable(t *testing.T) {
	e := newEnv(t, 1, "dedupe:\n  key: no_such_column\n")
	ctx := t.Context()
	if _, err := e.cluster.Produce(ctx, e.topic, []clickgen.Message{clickgen.New(clickgen.Config{Seed: 1}).Next()}); err != nil {
		t.Fatal(err)
	}
	props, _ := json.Marshal(sqliteCatalog(e.dir))
	routes := filepath.Join(e.dir, "routes.yaml")
	cfg := "kafka: {brokers: [" + e.cluster.Addrs()[0] + "], group: floe-rt}\n" +
		"table: {catalog: " + string(props) + "}\n" +
		"routes:\n" +
		"  - {topic: " + e.topic + ", table: {name: analytics.clicks}}\n" +
		"  - {topic: " + e.topic + ", table: {name: finance.payments}, schema: " + filepath.Join(e.dir, "missing.avsc") + "}\n"
	if err := os.WriteFile(routes, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(ctx, "floe", iceberg.Properties(sqliteCatalog(e.dir)))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--config", e.config, "--until-caught-up"}, "no_such_column"},
		{[]string{"replay", "--config", e.config, "--partition", "0", "--from", "0", "--to", "1"}, "no_such_column"},
		{[]string{"run", "--config", routes, "--until-caught-up"}, "missing.avsc"},
	} {
		root := rootCmd()
		root.SetArgs(append(tc.args, "--log-level", "error"))
		err := root.ExecuteContext(ctx)
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("floe %v: %v (status %d), want status 2 naming %q", tc.args, err, exitCode(err), tc.want)
		}
		for _, name := range [][]string{{"analytics", "clicks"}, {"finance", "payments"}} {
			if _, lerr := cat.LoadTable(ctx, name); !errors.Is(lerr, catalog.ErrNoSuchTable) {
				t.Fatalf("after floe %v: table %s exists (%v)", tc.args, strings.Join(name, "."), lerr)
			}
		}
	}
}
