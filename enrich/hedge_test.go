package enrich_test

import (
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
)

// hedgeRecords is 4 lanes × 600 records over 600 keys: with batches of 4,
// about 150 requests.
func hedgeRecords() [][]record {
	recs := make([][]record, 4)
	for i := range recs {
		for j := range 600 {
			recs[i] = append(recs[i], record{lane: i, seq: j, key: key((j*7 + i*131) % 600)})
		}
	}
	return recs
}

// TestHedgedRequests: against a service with a long tail (p50 5 ms, p99
// 1.5 s), requests slower than twice the median are sent again; every
// record still leaves its lane in order with the service's answer, and the
// hedges are a minority of the requests.
func TestHedgedRequests(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 1500 * time.Millisecond, Seed: 11})
	cfg := testConfig(url)
	cfg.BatchSize = 4
	cfg.Linger = enrich.Duration(time.Millisecond)
	cfg.MaxInFlightRequests = 8
	h := startStage(t, cfg)
	recs := hedgeRecords()
	checkLanes(t, srv, recs, runLanes(t, h.st, recs))

	hedges := h.metric(t, "floe_enrich_hedged_requests_total")
	batches := h.metric(t, "floe_enrich_batch_size")
	t.Logf("%v batches, %v hedged, %d requests served", batches, hedges, srv.Requests())
	if hedges == 0 {
		t.Fatal("no request was hedged although the service has a long tail")
	}
	if hedges > batches/2 {
		t.Fatalf("%v of %v requests hedged: the delay should be twice the median latency", hedges, batches)
	}
	if got := float64(srv.Requests()); got > batches+hedges {
		t.Fatalf("server saw %v requests, more than %v batches + %v hedges", got, batches, hedges)
	}
}

// TestHedgeOff: a negative hedge_after never sends a request twice.
func TestHedgeOff(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 500 * time.Millisecond, Seed: 11})
	cfg := testConfig(url)
	cfg.BatchSize = 4
	cfg.Linger = enrich.Duration(time.Millisecond)
	cfg.MaxInFlightRequests = 8
	cfg.HedgeAfter = -1
	h := startStage(t, cfg)
	recs := hedgeRecords()
	checkLanes(t, srv, recs, runLanes(t, h.st, recs))
	if got := h.metric(t, "floe_enrich_hedged_requests_total"); got != 0 {
		t.Fatalf("%v requests hedged with hedge_after < 0", got)
	}
	if got, batches := float64(srv.Requests()), h.metric(t, "floe_enrich_batch_size"); got != batches {
		t.Fatalf("server saw %v requests for %v batches", got, batches)
	}
}

// TestHedgeFixedDelay: with hedge_after set, requests are hedged after that
// long from the first one on — the adaptive delay would wait for 8 answers —
// and each record gets one answer, in order.
func TestHedgeFixedDelay(t *testing.T) {
	// Every request draws its own latency: most are fast, a few take
	// seconds. 30 requests of one key each, hedged after 100 ms.
	srv, url := startServer(t, enrich.ServerConfig{P50: 5 * time.Millisecond, P99: 4 * time.Second, Seed: 5})
	cfg := testConfig(url)
	cfg.Timeout = enrich.Duration(10 * time.Second)
	cfg.BatchSize = 1
	cfg.HedgeAfter = enrich.Duration(100 * time.Millisecond)
	h := startStage(t, cfg)
	recs := make([][]record, 1)
	for j := range 30 {
		recs[0] = append(recs[0], record{seq: j, key: key(j)})
	}
	started := time.Now()
	checkLanes(t, srv, recs, runLanes(t, h.st, recs))
	took := time.Since(started)
	hedges := h.metric(t, "floe_enrich_hedged_requests_total")
	t.Logf("30 lookups in %s, %v hedged", took.Round(time.Millisecond), hedges)
	if hedges == 0 {
		t.Fatal("no request hedged")
	}
}

// TestHedgeBudget: when every request is slower than the hedge delay (the
// whole service slowed down), only a budgeted share is hedged — not all of
// them, which would double the load on a struggling service.
func TestHedgeBudget(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 150 * time.Millisecond, P99: 200 * time.Millisecond, Seed: 3})
	cfg := testConfig(url)
	cfg.BatchSize = 4
	cfg.Linger = enrich.Duration(time.Millisecond)
	cfg.MaxInFlightRequests = 8
	cfg.HedgeAfter = enrich.Duration(time.Millisecond)
	h := startStage(t, cfg)
	recs := hedgeRecords()
	checkLanes(t, srv, recs, runLanes(t, h.st, recs))
	hedges := h.metric(t, "floe_enrich_hedged_requests_total")
	batches := h.metric(t, "floe_enrich_batch_size")
	t.Logf("%v batches, %v hedged", batches, hedges)
	if hedges == 0 {
		t.Fatal("nothing hedged although every request outlasts the delay")
	}
	if limit := 10 + 0.2*batches; hedges > limit {
		t.Fatalf("%v of %v requests hedged, more than the budget's %v", hedges, batches, limit)
	}
}

// TestHedgeAfterIsHonoured: hedge_after 5ms against a service answering in
// 40 ms hedges requests; the delay was only checked every 50 ms, so none
// answered sooner was ever hedged.
func TestHedgeAfterIsHonoured(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 40 * time.Millisecond, P99: time.Millisecond, Seed: 1})
	cfg := testConfig(url)
	cfg.BatchSize, cfg.MaxInFlightRequests = 1, 1
	cfg.HedgeAfter = enrich.Duration(5 * time.Millisecond)
	h := startStage(t, cfg)
	recs := [][]record{distinctRecords(0, 10)}
	checkLanes(t, srv, recs, runLanes(t, h.st, recs))
	if n := h.metric(t, "floe_enrich_hedged_requests_total"); n == 0 {
		t.Fatalf("no request hedged: 10 requests of 40 ms with hedge_after 5ms (the server saw %d)", srv.Requests())
	}
}
