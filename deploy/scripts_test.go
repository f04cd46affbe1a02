package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

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
