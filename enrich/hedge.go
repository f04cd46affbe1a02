package enrich

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"
)

// Hedging (Config.HedgeAfter): an attempt not answered within the hedge
// delay is sent once more and the first answer wins; the other request is
// cancelled. At most a fifth of the requests are hedged (after a burst).

// hedgeWindow is how many recent request latencies the adaptive delay is
// the median of, and hedgeMinSamples how many it needs before hedging.
const (
	hedgeWindow     = 64
	hedgeMinSamples = 8
	// hedgeRecheck is how often a waiting attempt re-reads the adaptive
	// delay, which is unknown until the first answers arrive (all the
	// requests of a cold start are sent before any is answered).
	hedgeRecheck = 50 * time.Millisecond
	// hedgeShare is the share of requests that may be hedged, beyond a
	// burst of hedgeBurst: when the whole service slows down, every request
	// would pass the delay, and hedging all of them would double the load
	// on a struggling service.
	hedgeShare = 0.2
	hedgeBurst = 10
)

// hedger keeps the recent latencies of first requests.
type hedger struct {
	mu   sync.Mutex
	lat  [hedgeWindow]time.Duration
	n    int // samples in lat, up to hedgeWindow
	next int
	// tokens is the hedging budget: each first request earns hedgeShare,
	// each hedge spends one; at most hedgeBurst are saved.
	tokens float64
}

// earn adds a first request's share to the hedging budget.
func (h *hedger) earn() {
	h.mu.Lock()
	h.tokens = min(h.tokens+hedgeShare, hedgeBurst)
	h.mu.Unlock()
}

// spend takes one hedge from the budget, if there is one.
func (h *hedger) spend() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.tokens < 1 {
		return false
	}
	h.tokens--
	return true
}

// observe records the latency of a first request: its answer time, or,
// when it was hedged before answering, the hedge delay — a lower bound,
// which leaves the median right while fewer than half are hedged.
func (h *hedger) observe(d time.Duration) {
	h.mu.Lock()
	h.lat[h.next] = d
	h.next = (h.next + 1) % hedgeWindow
	h.n = min(h.n+1, hedgeWindow)
	h.mu.Unlock()
}

// hedgeDelay is how long an attempt waits before hedging; ok is false while
// hedging is off or the delay not yet known.
func (s *Stage) hedgeDelay() (time.Duration, bool) {
	switch c := s.cfg.HedgeAfter; {
	case c < 0:
		return 0, false
	case c > 0:
		return c.D(), true
	}
	h := &s.hedge
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n < hedgeMinSamples {
		return 0, false
	}
	var buf [hedgeWindow]time.Duration
	lat := buf[:h.n]
	copy(lat, h.lat[:h.n])
	slices.Sort(lat)
	return 2 * lat[len(lat)/2], true
}

// hedged is client.lookup with a hedge: if the answer takes longer than the
// hedge delay and the breaker is closed, the request is sent again and the
// first success wins (or the first failure, if both fail). ctx bounds both.
func (s *Stage) hedged(ctx context.Context, keys []string) (map[string]Values, error) {
	if s.cfg.HedgeAfter < 0 {
		return s.client.lookup(ctx, keys)
	}
	type answer struct {
		vals map[string]Values
		err  error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // the losing request
	answers := make(chan answer, 2)
	send := func() {
		vals, err := s.client.lookup(ctx, keys)
		answers <- answer{vals, err}
	}
	start := time.Now()
	s.hedge.earn()
	go send()
	// Checked when the delay is due, and every hedgeRecheck (the adaptive
	// delay moves).
	next := func() time.Duration {
		if d, ok := s.hedgeDelay(); ok {
			if due := d - time.Since(start); due > 0 && due < hedgeRecheck {
				return due
			}
		}
		return hedgeRecheck
	}
	check := time.NewTimer(next())
	defer check.Stop()
	for {
		select {
		case a := <-answers:
			if a.err == nil { // fast failures say nothing about the tail
				s.hedge.observe(time.Since(start))
			}
			return a.vals, a.err
		case <-check.C:
		}
		// A failing service (breaker not closed) is not sent more, nor
		// more than the budget allows.
		if d, ok := s.hedgeDelay(); ok && time.Since(start) >= d && s.cb.State() == gobreaker.StateClosed && s.hedge.spend() {
			s.hedge.observe(d)
			break
		}
		check.Reset(next())
	}
	s.m.hedges.Inc()
	go send()
	a := <-answers
	if a.err != nil && ctx.Err() == nil {
		if b := <-answers; b.err == nil {
			return b.vals, nil
		}
	}
	return a.vals, a.err
}
