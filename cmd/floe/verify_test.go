package main

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestVerifyWithoutItsDeadLetterTopic: `floe verify` whose dead-letter
// topic cannot be read exits 2 naming it, as for any unreachable service;
// with --no-dlq it verifies without it. It warned and counted the dead
// letters as gaps: status 1, a table that does not reconcile, for a broker
// that was down.
func TestVerifyWithoutItsDeadLetterTopic(t *testing.T) {
	e := newEnv(t, 1, "")
	if _, err := e.cluster.ProduceRate(t.Context(), e.topic, clickgen.New(clickgen.Config{Seed: 1}), 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	p := e.start("verify", "verify", "--brokers", "127.0.0.1:1")
	var exit *exec.ExitError
	if err := p.wait(t, 60*time.Second); !errors.As(err, &exit) || exit.ExitCode() != 2 ||
		!strings.Contains(p.output(), "dead-letter topic clicks.dlq not read") {
		t.Fatalf("verify with the broker down: %v, want status 2 naming the dead-letter topic\n%s", err, p.output())
	}
	if p := e.start("verify offline", "verify", "--brokers", "127.0.0.1:1", "--no-dlq"); p.wait(t, 60*time.Second) != nil {
		t.Fatalf("verify --no-dlq with the broker down failed:\n%s", p.output())
	}
}
