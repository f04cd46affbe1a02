package enrich_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/goleak"

	"github.com/floe-dev/floe/enrich"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testFields maps every attribute of the reference server, one of each type.
var testFields = []enrich.Field{
	{Name: "segment", Type: enrich.TypeString},
	{Name: "score", Type: enrich.TypeDouble},
	{Name: "country", Type: enrich.TypeString},
	{Name: "signup_ts", Type: enrich.TypeTimestamp},
	{Name: "vip", Type: enrich.TypeBoolean},
	{Name: "visits", Type: enrich.TypeLong},
}

// startServer runs a reference server on loopback until the test ends.
func startServer(t testing.TB, cfg enrich.ServerConfig) (*enrich.Server, string) {
	t.Helper()
	srv := enrich.NewServer(cfg)
	url, err := srv.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv, url
}

// testConfig is a batch-mode configuration with short timings for tests.
func testConfig(baseURL string) enrich.Config {
	return enrich.Config{
		URL:        baseURL + "/lookup",
		Key:        "user_id",
		Fields:     testFields,
		Timeout:    enrich.Duration(2 * time.Second),
		BackoffMin: enrich.Duration(5 * time.Millisecond),
		BackoffMax: enrich.Duration(50 * time.Millisecond),
		Breaker: enrich.BreakerConfig{
			OpenTimeout: enrich.Duration(200 * time.Millisecond),
			MinRequests: 3,
		},
	}
}

// syncBuffer is a log sink shared by the stage's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

type harness struct {
	st   *enrich.Stage
	reg  *prometheus.Registry
	logs *syncBuffer
	stop func() // cancels Run and waits for it
}

// startStage builds a stage and runs it until the test ends (or stop).
func startStage(t testing.TB, cfg enrich.Config) *harness {
	t.Helper()
	h := &harness{reg: prometheus.NewRegistry(), logs: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	st, err := enrich.NewStage(cfg, h.reg, log)
	if err != nil {
		t.Fatal(err)
	}
	h.st = st
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- st.Run(ctx) }()
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(h.stop)
	return h
}

// metric reads a counter, gauge or histogram (its sample count) by name and
// label pairs.
func (h *harness) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if labelValue(m, labels[i]) != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// record is what the tests submit: its lane and position, and its key.
type record struct {
	lane, seq int
	key       string
}

// collect reads a lane's Out until it closes.
func collect(q *enrich.Queue) []enrich.Completed {
	var out []enrich.Completed
	for c := range q.Out() {
		out = append(out, c)
	}
	return out
}

// checkResult compares a result with what the reference server answers.
func checkResult(t testing.TB, srv *enrich.Server, key string, r enrich.Result) {
	t.Helper()
	if key == "" || !srv.Knows(key) {
		if r.Status != enrich.StatusMiss || r.Values != nil {
			t.Fatalf("key %q: got %s %v, want a miss", key, r.Status, r.Values)
		}
		return
	}
	if r.Status != enrich.StatusOK {
		t.Fatalf("key %q: status %s (%v), want ok", key, r.Status, r.Err)
	}
	want := enrich.Attributes(key)
	for _, f := range testFields {
		got := r.Values.Get(testFields, f.Name)
		if w, ok := want[f.Name].(time.Time); ok {
			if g, ok := got.(time.Time); !ok || !g.Equal(w) {
				t.Fatalf("key %q field %s: got %v (%T), want %v", key, f.Name, got, got, w)
			}
			continue
		}
		if got != want[f.Name] {
			t.Fatalf("key %q field %s: got %v (%T), want %v (%T)", key, f.Name, got, got, want[f.Name], want[f.Name])
		}
	}
}

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func key(i int) string { return fmt.Sprintf("u-%d", i) }
