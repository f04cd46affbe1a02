package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// runDemoCmd runs a small, fast `floe demo` in-process with args added.
func runDemoCmd(t *testing.T, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	root := rootCmd()
	root.SetArgs(append([]string{"demo", "--records", "100", "--rate", "0", "--partitions", "1", "--no-enrich",
		"--commit-interval", "200ms", "--json", "--log-level", "error"}, args...))
	return root.ExecuteContext(ctx)
}

// TestDemoRefusesADirItDidNotWrite: floe demo --dir D replaces the catalog
// and warehouse a previous demo left in D, and refuses (status 2, naming D)
// a D holding another job's. It deleted D/catalog.db and D/warehouse
// whatever they held, so `floe demo --dir /var/lib/floe`, README's layout
// for a real job, wiped that job's table.
func TestDemoRefusesADirItDidNotWrite(t *testing.T) {
	e := newEnv(t, 2, "")
	if _, err := e.cluster.ProduceRate(t.Context(), e.topic, clickgen.New(clickgen.Config{Seed: 1}), 400, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("job", "run", "--until-caught-up").wait(t, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	end, err := e.endOffsets(t.Context(), e.topic)
	if err != nil {
		t.Fatal(err)
	}
	err = runDemoCmd(t, "--dir", e.dir)
	if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), e.dir) || !strings.Contains(err.Error(), "catalog.db, warehouse") {
		t.Errorf("floe demo --dir %s, beside a job's table: %v (status %d); want status 2 naming the directory, catalog.db and warehouse", e.dir, err, exitCode(err))
	}
	if _, err := os.Stat(filepath.Join(e.dir, ".floe-demo")); err == nil {
		t.Errorf("the refused demo left .floe-demo, so the next one would delete the job's table")
	}
	if rows, _ := e.check(end, 0); rows != 400 {
		t.Errorf("the job's table holds %d rows after the refused demo, want 400", rows)
	}

	// A demo's own directory is replaced run after run.
	dir := t.TempDir()
	for run := range 2 {
		if err := runDemoCmd(t, "--dir", dir); err != nil {
			t.Fatalf("demo run %d in %s: %v", run+1, dir, err)
		}
	}
}

// TestDemoRefusesBadGeneratorFlags: --sessions and --malformed out of range
// are refused naming the flag. The errors named the generator's fields
// ("clickgen: Sessions must be >= 0"), which no user of floe demo sets.
func TestDemoRefusesBadGeneratorFlags(t *testing.T) {
	for _, args := range [][]string{{"--sessions", "-1"}, {"--malformed", "2"}, {"--malformed", "-0.1"}, {"--malformed", "NaN"}} {
		err := runDemoCmd(t, append(args, "--dir", t.TempDir())...)
		if want := strings.Join(args, " "); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("floe demo %s: %v (status %d); want status 2 naming %q", want, err, exitCode(err), want)
		}
	}
}

// TestDemoRefusesBadIntervalsBeforeEmptyingItsDir: --commit-interval and
// --maintain-interval out of range are refused naming the flag, before the
// previous demo's table in --dir is replaced. They were checked last, as
// commit.interval and maintain.interval (keys the user never wrote), once
// that table was gone.
func TestDemoRefusesBadIntervalsBeforeEmptyingItsDir(t *testing.T) {
	for _, args := range [][]string{{"--commit-interval", "-1s"}, {"--commit-interval", "0s"}, {"--maintain-interval", "-5m0s"}} {
		dir := t.TempDir()
		for _, p := range []string{demoMarker, "catalog.db"} {
			if err := os.WriteFile(filepath.Join(dir, p), []byte("a previous demo's\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := runDemoCmd(t, append(args, "--dir", dir, "--no-enrich")...)
		if want := strings.Join(args, " "); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), want) {
			t.Errorf("floe demo %s: %v (status %d); want status 2 naming %q", want, err, exitCode(err), want)
		}
		if _, err := os.Stat(filepath.Join(dir, "catalog.db")); err != nil {
			t.Errorf("floe demo %s, refused, removed the previous demo's catalog: %v", strings.Join(args, " "), err)
		}
	}
}

// TestDemoMaintainsItsTable: a demo compacts its table while it runs
// (--maintain-interval), and its verify at the end still reconciles. A demo
// left running never did: planning each flush's scan over ever more small
// files took most of its CPU after half an hour.
func TestDemoMaintainsItsTable(t *testing.T) {
	dir := t.TempDir()
	if err := runDemoCmd(t, "--dir", dir, "--records", "4000", "--rate", "1000", "--maintain-interval", "1s"); err != nil {
		t.Fatal(err)
	}
	cat, err := catalog.Load(t.Context(), "floe", iceberg.Properties(sqliteCatalog(dir)))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := cat.LoadTable(t.Context(), table.Identifier{"demo", "clicks"})
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	for _, s := range tbl.Metadata().Snapshots() {
		if s.Summary != nil {
			ops = append(ops, string(s.Summary.Operation))
		}
	}
	if !slices.Contains(ops, string(table.OpReplace)) {
		t.Fatalf("the demo's snapshots are %v: no compaction (replace) in 4 s of commits every 200ms with --maintain-interval 1s", ops)
	}
}
