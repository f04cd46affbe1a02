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
// cancelled.

// hedgeWindow is how many recent request latencies the adaptive delay is
// the median of, and hedgeMinSamples how many it needs before hedging.
const (
	hedgeWindow     = 64
	hedgeMinSamples = 8
	// hedgeRecheck is how often a waiting attempt re-reads the adaptive
	// delay, which is unknown until the first answers arrive (all the
	// requests of a cold start are sent before any is answered).
	hedgeRecheck = 50 * time.Millisecond
)

// hedger keeps the recent latencies of first requests.
type hedger struct {
	mu   sync.Mutex
	lat  [hedgeWindow]time.Duration
	n    int // samples in lat, up to hedgeWindow
	next int
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
		return c, true
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
// first success wins (or the last failure, if both fail). ctx bounds both.
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
	go send()
	tick := time.NewTicker(hedgeRecheck)
	defer tick.Stop()
	for {
		select {
		case a := <-answers:
			if a.err == nil { // fast failures say nothing about the tail
				s.hedge.observe(time.Since(start))
			}
			return a.vals, a.err
		case <-tick.C:
		}
		// A failing service (breaker not closed) is not sent more.
		if d, ok := s.hedgeDelay(); ok && time.Since(start) >= d && s.cb.State() == gobreaker.StateClosed {
			s.hedge.observe(d)
			break
		}
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
