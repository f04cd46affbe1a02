package main

import (
	"encoding/json"
	"net"
	"os/exec"
	"strings"
	"testing"
)

// TestLogJSONCoversLibrariesAndTheExitError: under --log-json every line
// floe writes is a JSON object: the MySQL driver's own logger, bun's
// standard-library log line and the error floe exits with. Before, they were
// "[mysql] 2026/12/01 06:47:10 packets.go:58 unexpected EOF", "2026/12/01
// 06:47:10 can't discover MySQL version: …" and "floe: loading sql
// catalog …", which a JSON log shipper rejects.
func TestLogJSONCoversLibrariesAndTheExitError(t *testing.T) {
	// A MySQL server that hangs up on every connection.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	dir := t.TempDir()
	cfg := writeConfigCatalog(t, dir, "127.0.0.1:1", "g", "db.events", map[string]string{
		"type": "sql", "sql.dialect": "mysql", "sql.driver": "mysql",
		"uri": "floe:s3cret@tcp(" + ln.Addr().String() + ")/db", "warehouse": "file://" + dir + "/warehouse",
	}, "", "")
	cmd := exec.Command(floeBinary(t), "maintain", "--log-json", "--log-level", "warn", "--config", cfg)
	out, err := cmd.Output() // stderr alone
	if err == nil {
		t.Fatalf("floe maintain against a server that hangs up succeeded: %s", out)
	}
	stderr := string(err.(*exec.ExitError).Stderr)
	var driver, exit bool
	for line := range strings.Lines(stderr) {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("not a JSON line: %q", line)
			continue
		}
		msg, _ := rec["msg"].(string)
		driver = driver || rec["from"] == "mysql driver" && strings.Contains(msg, "unexpected EOF")
		if strings.Contains(msg, "can't discover MySQL version") && rec["level"] != "WARN" {
			t.Errorf("bun's standard-library line at %v, want WARN (shown under --log-level warn)", rec["level"])
		}
		exit = exit || rec["level"] == "ERROR" && strings.HasPrefix(msg, "floe: loading sql catalog") && rec["exit_code"] == 2.0
	}
	if !driver || !exit || strings.Contains(stderr, "s3cret") {
		t.Errorf("want the driver's warning and the exit error as JSON, without the password:\n%s", stderr)
	}
}

// TestEmptyConfigFlagsRefused: a configuration flag given an empty value
// (--table "$ROUTE" with ROUTE unset) is refused naming it, status 2. An
// empty value read as "not given": the command worked on the config file's
// topic, group or table — with routes, --table "" ran every route.
func TestEmptyConfigFlagsRefused(t *testing.T) {
	for _, flag := range []string{"--config", "--brokers", "--topic", "--group", "--table"} {
		root := rootCmd()
		args := []string{"verify", "--config", "floe.yaml", flag, ""}
		root.SetArgs(args)
		err := root.ExecuteContext(t.Context())
		if want := flag + ": empty value"; err == nil || exitCode(err) != 2 || err.Error() != want {
			t.Errorf("floe %s: %v (status %d); want status 2, %q", strings.Join(args, " "), err, exitCode(err), want)
		}
	}
}
