package deploy

import (
	"crypto/sha1"
	"encoding/hex"
	"encoding/xml"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeTool writes an executable shell script NAME into DIR: a stand-in for
// a tool that a test puts first on PATH.
func writeTool(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// pomKey is how the scripts key a jar cache by a POM: the first 8 hex
// digits of its sha1.
func pomKey(t *testing.T, pom string) string {
	t.Helper()
	b, err := os.ReadFile(pom)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])[:8]
}

// fakeFetched makes $cache/NAME look fetched to lib.sh's fetch_jars (its
// .done marker and an empty lib), so a script under test fetches nothing,
// and creates FILES (relative to $cache/NAME) empty.
func fakeFetched(t *testing.T, cache, name string, files ...string) {
	t.Helper()
	for _, f := range append([]string{".done", "lib/.keep"}, files...) {
		p := filepath.Join(cache, name, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// lookTools skips the test unless every tool is on PATH.
func lookTools(t *testing.T, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
	}
}

// kafkaSASLTLSStart runs kafka/start.sh DIR 3.6.2 --sasl-tls with the tools
// in BIN first on PATH (a stand-in java) and a jar cache that looks fetched,
// and returns its output; the run is expected to fail.
func kafkaSASLTLSStart(t *testing.T, bin, cache, dir string) string {
	t.Helper()
	cmd := exec.Command("bash", "kafka/start.sh", dir, "3.6.2", "--sasl-tls")
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FLOE_CACHE="+cache)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("kafka/start.sh succeeded with a stand-in java:\n%s", out)
	}
	return string(out)
}

// TestKafkaSASLTLSRetriesFailedFirstStart: a first start of
// kafka/start.sh --sasl-tls that failed after making the certificates (here
// the storage format; equally a Ctrl-C during keytool, or a Kafka without
// format --add-scram) left DIR/tls behind without state.env. The next run
// drew a new keystore password, keytool failed on the old ca.p12 ("keystore
// password was incorrect"), hiding the first error, and DIR stayed unusable
// until deleted by hand. It must start over and get back to the same step.
func TestKafkaSASLTLSRetriesFailedFirstStart(t *testing.T) {
	lookTools(t, "keytool", "openssl", "python3", "flock")
	bin, cache := t.TempDir(), t.TempDir()
	// The JVM that formats the storage fails: the first start fails half-way.
	writeTool(t, bin, "java", "#!/bin/sh\necho simulated java failure >&2\nexit 1\n")
	fakeFetched(t, cache, "kafka-3.6.2-"+pomKey(t, "kafka/pom.xml"), "ready/Ready.class")
	dir := filepath.Join(t.TempDir(), "k dir")
	for run := 1; run <= 2; run++ {
		out := kafkaSASLTLSStart(t, bin, cache, dir)
		if !strings.Contains(out, "formatting storage failed") || !strings.Contains(out, "simulated java failure") {
			t.Fatalf("run %d on the same DIR did not fail at the format step; it ended with:\n%s",
				run, out[max(0, len(out)-600):])
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "state.env")); err == nil {
		t.Error("a first start that failed wrote state.env")
	}
}

// TestKafkaSASLTLSKeepsCompletedFirstStart: once a first start has
// completed (state.env written), a run after a failed broker start reuses
// its credentials and certificates instead of starting over.
func TestKafkaSASLTLSKeepsCompletedFirstStart(t *testing.T) {
	lookTools(t, "keytool", "openssl", "python3", "flock")
	bin, cache := t.TempDir(), t.TempDir()
	// The format succeeds, the broker's JVM exits at once.
	writeTool(t, bin, "java", `#!/bin/sh
for a; do [ "$a" = kafka.tools.StorageTool ] && exit 0; done
echo simulated broker failure >&2
exit 1
`)
	fakeFetched(t, cache, "kafka-3.6.2-"+pomKey(t, "kafka/pom.xml"), "ready/Ready.class")
	dir := filepath.Join(t.TempDir(), "k dir")
	read := func(f string) string {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	var state, ca string
	for run := 1; run <= 2; run++ {
		out := kafkaSASLTLSStart(t, bin, cache, dir)
		if !strings.Contains(out, "exited during start-up") || !strings.Contains(out, "simulated broker failure") {
			t.Fatalf("run %d did not fail at the broker's start:\n%s", run, out)
		}
		if run == 1 {
			state, ca = read("state.env"), read("tls/ca.p12")
			continue
		}
		if strings.Contains(out, "making a CA") {
			t.Errorf("run 2 made new certificates:\n%s", out)
		}
	}
	if read("state.env") != state || read("tls/ca.p12") != ca {
		t.Error("a run after a completed first start changed state.env or tls/ca.p12")
	}
}

// TestKafkaStopWithoutProcps: deploy/kafka/stop.sh stops the broker on a
// machine without procps (slim Debian images): it read the process state
// with ps, found none, removed the pidfile and exited 0, and every Kafka
// test left its broker's JVM running.
func TestKafkaStopWithoutProcps(t *testing.T) {
	bin := t.TempDir()
	for _, tool := range []string{"bash", "cat", "dirname", "rm", "seq", "sleep"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not found: %v", tool, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	broker := exec.Command("sleep", "300") // stands in for the broker's JVM
	if err := broker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { broker.Wait(); close(exited) }()
	defer broker.Process.Kill()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "kafka.pid"), []byte(strconv.Itoa(broker.Process.Pid)), 0o644); err != nil {
		t.Fatal(err)
	}
	stop := exec.Command(filepath.Join(bin, "bash"), "kafka/stop.sh", dir)
	stop.Env = []string{"PATH=" + bin, "HOME=" + t.TempDir()}
	if out, err := stop.CombinedOutput(); err != nil {
		t.Fatalf("stop.sh: %v\n%s", err, out)
	}
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("stop.sh returned, and the broker still runs")
	}
}

// TestHDFSStorageDirsWithSpace: hdfs/start.sh wrote dfs.namenode.name.dir
// as file://DIR/name. With a space in DIR that is no URI: Hadoop logged a
// syntax error and took the whole string for a relative file name, so the
// NameNode kept its metadata under $CWD/file:/..., start.sh's check for
// DIR/name/current never found it, every start formatted the NameNode again
// (a new cluster id) and a restart failed on the DataNode's old data. The
// NameNode's directory must be the (percent-encoded) file URI of DIR/name;
// the DataNode's, which Hadoop reads as a Path and encodes itself, DIR/data
// not encoded (an encoded one names a directory with a literal %20); and
// (when the Hadoop jars are cached) Hadoop must resolve them to those
// directories. DIR also holds the characters that broke the sed script
// start.sh used to fill its templates with ('|' and '&') and those XML
// escapes.
func TestHDFSStorageDirsWithSpace(t *testing.T) {
	lookTools(t, "curl", "python3", "flock")
	pom, err := os.ReadFile("hdfs/pom.xml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`<hadoop.version>(.*)</hadoop.version>`).FindSubmatch(pom)
	if m == nil {
		t.Fatal("hdfs/pom.xml: no hadoop.version")
	}
	name := "hadoop-" + string(m[1]) + "-" + pomKey(t, "hdfs/pom.xml")
	realJava, javaErr := exec.LookPath("java")
	bin, cache := t.TempDir(), t.TempDir()
	// The NameNode format fails: start.sh stops after writing DIR/conf.
	writeTool(t, bin, "java", "#!/bin/sh\necho simulated java failure >&2\nexit 1\n")
	fakeFetched(t, cache, name)
	// Not a ',': Hadoop reads the storage directories as lists (start.sh
	// refuses it, checked below).
	comma := filepath.Join(t.TempDir(), "a,b")
	if out, err := exec.Command("bash", "hdfs/start.sh", comma).CombinedOutput(); err == nil || !strings.Contains(string(out), "want a DIR without ','") {
		t.Errorf("hdfs/start.sh %s: %v, want it refused naming the ','\n%s", comma, err, out)
	}
	dir := filepath.Join(t.TempDir(), "with space a|b & <c>")
	cmd := exec.Command("bash", "hdfs/start.sh", dir)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FLOE_CACHE="+cache)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "simulated java failure") {
		t.Fatalf("hdfs/start.sh did not fail at the format step (%v):\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "conf", "hdfs-site.xml"))
	if err != nil {
		t.Fatal(err)
	}
	var conf struct {
		Property []struct {
			Name  string `xml:"name"`
			Value string `xml:"value"`
		} `xml:"property"`
	}
	if err := xml.Unmarshal(b, &conf); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"dfs.namenode.name.dir": filepath.Join(dir, "name"),
		"dfs.datanode.data.dir": filepath.Join(dir, "data"),
	}
	values := map[string]string{}
	for _, p := range conf.Property {
		if _, ok := want[p.Name]; ok {
			values[p.Name] = p.Value
		}
	}
	nameDir := values["dfs.namenode.name.dir"]
	if u, err := url.Parse(nameDir); strings.ContainsAny(nameDir, " \t") || err != nil || u.Scheme != "file" || u.Host != "" ||
		u.Path != want["dfs.namenode.name.dir"] {
		t.Errorf("dfs.namenode.name.dir = %q, want the file URI of %q", nameDir, want["dfs.namenode.name.dir"])
	}
	if got, dataDir := values["dfs.datanode.data.dir"], want["dfs.datanode.data.dir"]; got != dataDir && got != "file://"+dataDir {
		t.Errorf("dfs.datanode.data.dir = %q, want %q (not percent-encoded)", got, dataDir)
	}

	// What Hadoop itself makes of them, when its jars are cached.
	realCache := os.Getenv("FLOE_CACHE")
	if realCache == "" {
		realCache = filepath.Join(os.Getenv("HOME"), ".cache", "floe")
	}
	lib := filepath.Join(realCache, name, "lib")
	if _, err := os.Stat(filepath.Join(realCache, name, ".done")); err != nil || javaErr != nil {
		t.Logf("not checked with Hadoop: no %s jars in %s or no java", name, realCache)
		return
	}
	javac, err := exec.LookPath("javac")
	if err != nil {
		t.Logf("not checked with Hadoop: %v", err)
		return
	}
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "StorageDirs.java"), []byte(`
import java.io.File;
import java.net.URI;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.hdfs.server.datanode.DataNode;
import org.apache.hadoop.hdfs.server.datanode.StorageLocation;
import org.apache.hadoop.hdfs.server.namenode.FSNamesystem;

public class StorageDirs {
  public static void main(String[] a) throws Exception {
    Configuration c = new Configuration(false);
    c.addResource(new File(a[0]).toURI().toURL());
    for (URI u : FSNamesystem.getNamespaceDirs(c)) System.out.println("name " + new File(u).getPath());
    for (StorageLocation l : DataNode.getStorageLocations(c)) System.out.println("data " + new File(l.getUri()).getPath());
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(javac, "-nowarn", "-cp", lib+"/*", "-d", src, filepath.Join(src, "StorageDirs.java")).CombinedOutput(); err != nil {
		t.Fatalf("javac: %v\n%s", err, out)
	}
	check := exec.Command(realJava, "-XX:TieredStopAtLevel=1", "-cp", src+string(os.PathListSeparator)+lib+"/*",
		"StorageDirs", filepath.Join(dir, "conf", "hdfs-site.xml"))
	check.Dir = t.TempDir() // a relative path would resolve here
	out, err := check.Output()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got, want := strings.TrimSpace(string(out)), "name "+want["dfs.namenode.name.dir"]+"\ndata "+want["dfs.datanode.data.dir"]; got != want {
		t.Errorf("Hadoop resolves the storage directories of DIR %q to\n%s\nwant\n%s", dir, got, want)
	}
}

// TestRenderAnyValue: lib.sh's render fills a site file's placeholders with
// values holding the characters sed's replacement and XML give a meaning
// to, and the file parses back to those values.
func TestRenderAnyValue(t *testing.T) {
	tmpl := filepath.Join(t.TempDir(), "site.xml.in")
	if err := os.WriteFile(tmpl, []byte("<configuration>\n"+
		"  <property><name>a</name><value>@A@/x</value></property>\n"+
		"  <property><name>b</name><value>jdbc:@B@;create=true</value></property>\n"+
		"</configuration>\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, b := `/tmp/a|b & c\1 <d> "e" 'f'`, "x&amp;y @A@ \\&"
	out, err := exec.Command("bash", "-c", `. ./lib.sh && render "$1" A="$2" B="$3"`, "render", tmpl, a, b).Output()
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var conf struct {
		Property []struct {
			Name  string `xml:"name"`
			Value string `xml:"value"`
		} `xml:"property"`
	}
	if err := xml.Unmarshal(out, &conf); err != nil {
		t.Fatalf("render's output is no XML: %v\n%s", err, out)
	}
	want := map[string]string{"a": a + "/x", "b": "jdbc:" + b + ";create=true"}
	if len(conf.Property) != len(want) {
		t.Fatalf("render wrote %d properties, want %d:\n%s", len(conf.Property), len(want), out)
	}
	for _, p := range conf.Property {
		if p.Value != want[p.Name] {
			t.Errorf("property %s = %q, want %q", p.Name, p.Value, want[p.Name])
		}
	}
}

// TestSparkJarsCacheFollowsPOM: spark/run.sh cached its jars as
// $FLOE_CACHE/spark-jars whatever spark/pom.xml said, so after the POM moved
// to a new Iceberg Spark runtime Spark still ran the old one; every other
// script keys its jar cache by its POM's sha1. Runs a copy of run.sh next to
// a POM that changes, with stand-ins for mvn, go, floe and pyspark.
func TestSparkJarsCacheFollowsPOM(t *testing.T) {
	lookTools(t, "java", "python3", "flock")
	tree := t.TempDir()
	for _, f := range []string{"lib.sh", "spark/run.sh"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(tree, "deploy", f)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin, cache := t.TempDir(), t.TempDir()
	// mvn "copies" one jar, named after the POM's last <version>.
	writeTool(t, bin, "mvn", `#!/bin/bash
pom= out=
while [ $# -gt 0 ]; do case $1 in -f) pom=$2; shift ;; -DoutputDirectory=*) out=${1#*=} ;; esac; shift; done
v=$(sed -n 's:.*<version>\(.*\)</version>.*:\1:p' "$pom" | tail -1)
mkdir -p "$out" && touch "$out/iceberg-spark-runtime-$v.jar"
`)
	// go build -o FLOE: a floe whose demo writes nothing.
	writeTool(t, bin, "go", `#!/bin/bash
while [ $# -gt 0 ]; do [ "$1" = -o ] && printf '#!/bin/sh\n' >"$2" && chmod +x "$2"; shift; done
`)
	// pyspark's virtual environment: its python imports pyspark and runs the queries.
	venv := filepath.Join(cache, "spark-venv-3.5.8", "bin")
	if err := os.MkdirAll(venv, 0o755); err != nil {
		t.Fatal(err)
	}
	writeTool(t, venv, "python", "#!/bin/sh\nexit 0\n")
	pom := filepath.Join(tree, "deploy", "spark", "pom.xml")
	run := func(version string) string {
		if err := os.WriteFile(pom, []byte("<project><version>"+version+"</version></project>\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", filepath.Join(tree, "deploy", "spark", "run.sh"), "10")
		cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FLOE_CACHE="+cache)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("run.sh with the POM at %s: %v\n%s", version, err, out)
		}
		return string(out)
	}
	for _, version := range []string{"1.10.0", "1.10.1"} {
		if out, jar := run(version), "iceberg-spark-runtime-"+version+".jar"; !strings.Contains(out, "with "+jar+" reads") {
			t.Errorf("with the POM at %s, run.sh did not run Spark with %s:\n%s", version, jar, out)
		}
	}
}

// TestFetchJarsStrictChecksums: lib.sh's fetch_jars runs mvn with
// --strict-checksums, so a jar whose checksum does not match what Maven
// Central publishes fails the fetch instead of being cached with a warning.
func TestFetchJarsStrictChecksums(t *testing.T) {
	lookTools(t, "flock")
	bin, cache := t.TempDir(), t.TempDir()
	args := filepath.Join(t.TempDir(), "args")
	writeTool(t, bin, "mvn", `#!/bin/bash
printf '%s\n' "$@" >"`+args+`"
for a; do case $a in -DoutputDirectory=*) mkdir -p "${a#*=}" ;; esac; done
`)
	cmd := exec.Command("bash", "-c", `. ./lib.sh && fetch_jars t kafka/pom.xml -Pkafka3`)
	cmd.Env = append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), "FLOE_CACHE="+cache)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("fetch_jars: %v\n%s", err, out)
	}
	b, err := os.ReadFile(args)
	if err != nil {
		t.Fatal(err)
	}
	mvnArgs := strings.Fields(string(b))
	if !slices.Contains(mvnArgs, "--strict-checksums") && !slices.Contains(mvnArgs, "-C") {
		t.Errorf("fetch_jars ran mvn %s: no --strict-checksums", strings.Join(mvnArgs, " "))
	}
}

// TestPythonVenvFullyPinned: setup-python.sh pins every package its venv
// holds, not only the three it asks for, so a new release of a dependency
// cannot change what the interop tests run on. It makes the venv (make test
// has, before this test) and compares pip freeze with the script's pins.
func TestPythonVenvFullyPinned(t *testing.T) {
	lookTools(t, "python3", "flock")
	out, err := exec.Command("bash", "setup-python.sh").Output()
	if err != nil {
		t.Fatalf("setup-python.sh: %v", err)
	}
	venv, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "VENV=")
	if !ok {
		t.Fatalf("setup-python.sh printed %q, want VENV=<dir>", out)
	}
	script, err := os.ReadFile("setup-python.sh")
	if err != nil {
		t.Fatal(err)
	}
	pins := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(?:[A-Z]+=)?'?([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s']+)'?$`).FindAllStringSubmatch(string(script), -1) {
		pins[normalizePackage(m[1])] = m[2]
	}
	freeze, err := exec.Command(filepath.Join(venv, "bin", "pip"), "freeze", "--all", "--exclude", "pip", "--exclude", "setuptools").Output()
	if err != nil {
		t.Fatalf("pip freeze: %v", err)
	}
	n := 0
	for _, line := range strings.Fields(string(freeze)) {
		name, version, ok := strings.Cut(line, "==")
		if !ok {
			t.Errorf("pip freeze: %q is not name==version", line)
			continue
		}
		n++
		if want, ok := pins[normalizePackage(name)]; !ok {
			t.Errorf("the venv holds %s, which setup-python.sh does not pin", line)
		} else if version != want {
			t.Errorf("the venv holds %s, setup-python.sh pins %s", line, want)
		}
	}
	if n < len(pins) {
		t.Errorf("the venv holds %d packages, setup-python.sh pins %d:\n%s", n, len(pins), freeze)
	}
}

// normalizePackage is a Python package name as PyPI compares them (PEP 503).
func normalizePackage(name string) string {
	return strings.ToLower(regexp.MustCompile(`[-_.]+`).ReplaceAllString(name, "-"))
}
