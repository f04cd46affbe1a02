// Package infra starts the real services of deploy/ (Apache Kafka, HDFS, an
// Iceberg REST catalog, a Hive Metastore, a schema registry) for tests. Each
// service is a start script that fetches its jars from Maven Central (cached
// under $FLOE_CACHE, default ~/.cache/floe), runs the service as a plain
// background process on 127.0.0.1 with its data in a directory of the test's,
// waits until it answers, and prints KEY=VALUE lines describing it; the
// matching stop script takes the same directory.
package infra

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Dir is the absolute path of deploy/.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(filepath.Dir(file))
}

// Start runs deploy/<service>/start.sh with a fresh temporary directory
// and args, fails tb with the script's output if it fails, registers
// deploy/<service>/stop.sh dir as a cleanup, and returns the directory and
// the KEY=VALUE lines the script printed. The cleanup is registered first: a
// start that fails half-way (a NameNode up, its DataNode not answering)
// leaves daemons that must be stopped too.
//
// The ports a start script draws are free when drawn and bound only once
// its service starts, seconds later: a service started meanwhile beside it
// (another test's) may take one. Such a start is made again, in a new
// directory with new ports, up to three times in all.
func Start(tb testing.TB, service string, args ...string) (dir string, kv map[string]string) {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		dir = tb.TempDir()
		kv, out, err := tryStart(tb, service, dir, args...)
		if err == nil {
			return dir, kv
		}
		if attempt == 3 || !portTaken(out) {
			tb.Fatalf("starting %s: %v\n%s", service, err, out)
		}
		Stop(tb, service, dir) // what did start of it must not hold its ports or memory meanwhile
		tb.Logf("%s: a port was taken before it started; starting again with new ports", service)
	}
}

// portTaken reports whether a failed start's output says a listener's port
// was in use: Kafka's acceptor, or a java.net.BindException of the JDK,
// Hadoop's daemons or Jetty.
func portTaken(out []byte) bool {
	for _, s := range []string{"Unable to start acceptor", "Address already in use", "BindException", "Port in use"} {
		if bytes.Contains(out, []byte(s)) {
			return true
		}
	}
	return false
}

// tryStart is Start, returning a failure with the script's output.
func tryStart(tb testing.TB, service, dir string, args ...string) (map[string]string, []byte, error) {
	tb.Helper()
	tb.Cleanup(func() { Stop(tb, service, dir) })
	start := time.Now()
	out, err := run(filepath.Join(Dir(), service, "start.sh"), append([]string{dir}, args...)...)
	if err != nil {
		return nil, out, err
	}
	tb.Logf("%s started in %s", service, time.Since(start).Round(time.Millisecond))
	return parse(out), out, nil
}

// Stop runs deploy/<service>/stop.sh dir; a failure is reported, not fatal.
func Stop(tb testing.TB, service, dir string) {
	tb.Helper()
	if out, err := run(filepath.Join(Dir(), service, "stop.sh"), dir); err != nil {
		tb.Errorf("stopping %s: %v\n%s", service, err, out)
	}
}

func run(script string, args ...string) ([]byte, error) {
	cmd := exec.Command("bash", append([]string{script}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return append(out, stderr.Bytes()...), err
	}
	return out, nil
}

func parse(out []byte) map[string]string {
	kv := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && k != "" && !strings.ContainsAny(k, " \t") {
			kv[k] = v
		}
	}
	return kv
}
