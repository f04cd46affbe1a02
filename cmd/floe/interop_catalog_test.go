package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestInteropCatalogs runs the full pipeline against real services with the
// table in each real catalog floe supports besides SQL: Iceberg's REST
// catalog fixture and a Hive Metastore, both with the warehouse on a real
// HDFS and the input in real Apache Kafka (the newest 4.x of
// interopKafkaVersions). A member is SIGKILLed mid-stream; the exactly-once
// checker reads the table with iceberg-go, and then PyIceberg (from PyPI, in
// the venv deploy/setup-python.sh makes) loads the same table through the
// same catalog and checks rows, distinct ids, schema, partition spec and the
// offsets in the snapshot summaries.
func TestInteropCatalogs(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test with real catalogs, HDFS and Kafka skipped in -short mode")
	}
	python := pyicebergPython(t)
	k := infra.StartKafka(t, interopKafkaVersions[len(interopKafkaVersions)-1])
	h := infra.StartHDFS(t)
	catalogs := []struct {
		name  string
		start func(t *testing.T, warehouse string) map[string]string
	}{
		{"rest", func(t *testing.T, warehouse string) map[string]string {
			r := infra.StartREST(t, warehouse)
			return map[string]string{"type": "rest", "uri": r.URI}
		}},
		{"hive", func(t *testing.T, warehouse string) map[string]string {
			m := infra.StartHMS(t, warehouse)
			return map[string]string{"type": "hive", "uri": m.URI, "warehouse": warehouse}
		}},
	}
	for _, c := range catalogs {
		t.Run(c.name, func(t *testing.T) {
			props := c.start(t, h.URL("/warehouse-"+c.name))
			interopCatalog(t, k, h, "clicks-"+c.name, props, python)
		})
	}
}

// TestPyIcebergSQLCatalog: PyIceberg reads a table floe wrote through the
// default SQL catalog (SQLite, local warehouse) with the embedded broker,
// and check_table.py fails, naming each broken check, when the expectation
// does not hold.
func TestPyIcebergSQLCatalog(t *testing.T) {
	if testing.Short() {
		t.Skip("PyIceberg interop skipped in -short mode")
	}
	python := pyicebergPython(t)
	e := newEnv(t, 4, "")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 200, MalformedRate: 0.01, Seed: 11})
	if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 4000, 0); err != nil {
		t.Fatal(err)
	}
	end, err := e.cluster.EndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.start("catch-up", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	_, malformed := gen.Counts()
	rows, _ := e.check(end, malformed)
	props := map[string]string{"type": "sql", "uri": "sqlite:///" + e.dir + "/catalog.db", "warehouse": "file://" + e.dir + "/warehouse"}
	want := pyExpectation(t, props, rows, e.topic, end)
	report := checkWithPyIceberg(t, python, want)
	t.Logf("PyIceberg (sql catalog): %d rows, %d distinct ids, %d snapshots", report.Rows, report.DistinctIDs, report.Snapshots)

	// A wrong expectation must fail, naming what differs.
	want["rows"] = rows + 1
	want["offsets"] = map[string]any{e.topic: map[string]int64{"0": end[0] + 1}}
	want["partition"] = [][2]string{{"event_ts", "hour"}}
	in, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, python, filepath.Join(infra.Dir(), "interop", "check_table.py"))
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("check_table.py with a wrong expectation: %v, want exit status 1\n%s", err, out)
	}
	for _, msg := range []string{"row count: " + strconv.FormatInt(rows, 10), "partition spec:", "floe.offsets.floe-test:"} {
		if !bytes.Contains(out, []byte(msg)) {
			t.Errorf("check_table.py output lacks %q:\n%s", msg, out)
		}
	}
}

// interopCatalog: two members on 6 partitions of topic while it is produced
// to, one SIGKILLed (no flush, no leave) and another started; then the
// exactly-once check and PyIceberg's check of the same table.
func interopCatalog(t *testing.T, k *infra.Kafka, h *infra.HDFS, topic string, catalog map[string]string, python string) {
	began := time.Now()
	e := newKafkaEnv(t, k, topic, 6, k.Bootstrap, "")
	e.catalog = catalog
	e.config = writeConfigCatalog(t, e.dir, k.Bootstrap, "floe-test", "analytics.clicks", catalog,
		"  session_timeout: 6s\n  heartbeat_interval: 500ms\n  rebalance_timeout: 15s\n",
		"commit:\n  interval: 500ms\n  max_records: 3000\n  grace: 5s\n")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 500, MalformedRate: 0.01, Seed: 7})
	if err := produceKafka(ctx, e.brokers, e.topic, gen, 6000, 0); err != nil {
		t.Fatal(err)
	}
	produced := make(chan error, 1)
	go func() { produced <- produceKafka(ctx, e.brokers, e.topic, gen, 6000, 1500) }()

	a := e.floe("a", "run")
	b := e.floe("b", "run")
	e.waitProgress(3000, 90*time.Second)
	a.signal(t, syscall.SIGKILL)
	c := e.floe("c", "run")

	end := e.drain(t, produced, b, c)
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	if rows+dead != 12000 {
		t.Fatalf("produced 12000: %d rows + %d dead letters", rows, dead)
	}
	tbl, err := e.loadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(tbl.Location(), h.URL("/")) {
		t.Fatalf("table location %s is not on the HDFS at %s", tbl.Location(), h.NameNode)
	}
	t.Logf("%s catalog: %d rows, %d dead letters, exactly once through a member SIGKILL, in %s; table at %s",
		catalog["type"], rows, dead, time.Since(began).Round(time.Millisecond), tbl.Location())

	// PyIceberg reads the same table through the same catalog.
	pyProps := map[string]string{"hdfs.namenode": h.NameNode}
	for k, v := range catalog {
		pyProps[k] = v
	}
	report := checkWithPyIceberg(t, python, pyExpectation(t, pyProps, rows, topic, end))
	t.Logf("PyIceberg (%s catalog): %d rows, %d distinct ids, %d snapshots, offsets from snapshot %d",
		catalog["type"], report.Rows, report.DistinctIDs, report.Snapshots, report.OffsetsSnapshot)
}

// pyExpectation is check_table.py's input: what the table must hold, with
// the schema and partition spec of the built-in clickstream schema.
func pyExpectation(t *testing.T, catalog map[string]string, rows int64, topic string, end map[int32]int64) map[string]any {
	t.Helper()
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	var columns, partition [][2]string
	for _, f := range sc.Iceberg.Fields() {
		columns = append(columns, [2]string{f.Name, f.Type.String()})
	}
	for _, f := range sc.Spec.Fields() {
		src, ok := sc.Iceberg.FindColumnName(f.SourceIDs[0])
		if !ok {
			t.Fatalf("partition field %s: no source column %d", f.Name, f.SourceIDs[0])
		}
		partition = append(partition, [2]string{src, f.Transform.String()})
	}
	offsets := map[string]int64{}
	for p, o := range end {
		if o > 0 {
			offsets[strconv.Itoa(int(p))] = o
		}
	}
	return map[string]any{
		"catalog": catalog, "catalog_name": "floe", "table": "analytics.clicks", "rows": rows,
		"columns": columns, "partition": partition, "group": "floe-test",
		"offsets": map[string]any{topic: offsets},
	}
}

// pyReport is the part of check_table.py's report the test logs.
type pyReport struct {
	OK              bool  `json:"ok"`
	Rows            int64 `json:"rows"`
	DistinctIDs     int64 `json:"distinct_ids"`
	Snapshots       int   `json:"snapshots"`
	OffsetsSnapshot int64 `json:"offsets_snapshot"`
}

// checkWithPyIceberg runs deploy/interop/check_table.py with want on stdin
// and fails t with its report unless every check held.
func checkWithPyIceberg(t *testing.T, python string, want map[string]any) pyReport {
	t.Helper()
	in, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(t.Context(), python, filepath.Join(infra.Dir(), "interop", "check_table.py"))
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("PyIceberg check failed (%v):\n%s\n%s\ninput: %s", err, stderr.String(), out, in)
	}
	var r pyReport
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("PyIceberg check: report %q: %v", out, err)
	}
	if !r.OK {
		t.Fatalf("PyIceberg check exited 0 but reported failures:\n%s", out)
	}
	return r
}

// pyicebergPython runs deploy/setup-python.sh (a no-op once the venv exists)
// and returns the venv's python.
func pyicebergPython(t *testing.T) string {
	t.Helper()
	start := time.Now()
	cmd := exec.Command("bash", filepath.Join(infra.Dir(), "setup-python.sh"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("deploy/setup-python.sh: %v\n%s", err, stderr.String())
	}
	venv, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "VENV=")
	if !ok {
		t.Fatalf("deploy/setup-python.sh printed %q, want VENV=<dir>", out)
	}
	t.Logf("PyIceberg venv %s ready in %s", venv, time.Since(start).Round(time.Millisecond))
	return filepath.Join(venv, "bin", "python")
}
