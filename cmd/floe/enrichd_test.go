package main

import (
	"bufio"
	"context"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestCommandsWithoutConfigRefuseItsFlags: demo, enrichd and doctor
// consumer, which read no configuration, refuse the root's configuration
// flags (status 2, naming the flag), and enrichd and demo a p99 below the
// p50. They accepted both and ignored them: `floe demo --config floe.yaml`
// ran the embedded demo, and --p99 below --p50 served a fixed latency.
func TestCommandsWithoutConfigRefuseItsFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"demo", "--config", "floe.yaml", "--no-enrich", "--records", "10", "--rate", "0", "--partitions", "1", "--dir", t.TempDir()}, "--config"},
		{[]string{"enrichd", "--listen", "127.0.0.1:0", "--brokers", "localhost:9092"}, "--brokers"},
		{[]string{"doctor", "consumer", "--per-record", "10ms", "--table", "analytics.clicks"}, "--table"},
		{[]string{"doctor", "consumer", "--per-record", "10ms", "-c", "floe.yaml"}, "--config"},
		{[]string{"enrichd", "--listen", "127.0.0.1:0", "--p50", "1s", "--p99", "500ms"}, "--p99 500ms"},
		{[]string{"demo", "--enrich-p99", "100ms", "--records", "10", "--rate", "0", "--partitions", "1", "--dir", t.TempDir()}, "--enrich-p99 100ms"},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		root := rootCmd()
		root.SetArgs(append(tc.args, "--log-level", "error"))
		err := root.ExecuteContext(ctx)
		cancel()
		if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("floe %v: %v (status %d), want status 2 naming %q", tc.args, err, exitCode(err), tc.want)
		}
	}
}

// TestEnrichdWithoutLatency: `floe enrichd --p50 0` answers at once. The
// server read 0 as its default, a 600ms median (2.8s p99), so ten lookups
// took seconds; the bound below leaves a loaded machine ample room.
func TestEnrichdWithoutLatency(t *testing.T) {
	cmd := exec.Command(floeBinary(t), "enrichd", "--listen", "127.0.0.1:0", "--p50", "0", "--log-level", "error")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("enrichd printed no address: %v", err)
	}
	_, rest, _ := strings.Cut(line, " at ")
	url, _, _ := strings.Cut(rest, ",")
	start := time.Now()
	for range 10 {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"keys":["u-1"]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("POST %s: %s", url, resp.Status)
		}
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Fatalf("ten lookups of enrichd --p50 0 took %s, want no added latency", took)
	}
}
