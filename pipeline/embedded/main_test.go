package embedded_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestMain checks for leaked goroutines after every test and benchmark, once
// the shared benchmark broker is closed: this package starts brokers, kgo
// clients and kafka-go readers, and all of them must stop with their owner.
func TestMain(m *testing.M) {
	code := m.Run()
	closeFixtures()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

var (
	fixturesMu sync.Mutex
	fixtures   []*embedded.Cluster
)

func closeFixtures() {
	fixturesMu.Lock()
	defer fixturesMu.Unlock()
	for _, c := range fixtures {
		c.Close()
	}
	fixtures = nil
}

// startCluster starts a broker that is closed when the test ends.
func startCluster(t testing.TB, brokers int) *embedded.Cluster {
	t.Helper()
	c, err := embedded.Start(brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func testContext(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// generate returns n messages of a stream with many sessions, so that every
// partition of a 12-partition topic gets some.
func generate(seed int64, n int) []clickgen.Message {
	g := clickgen.New(clickgen.Config{Seed: seed})
	out := make([]clickgen.Message, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}
