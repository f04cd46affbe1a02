package enrich

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sony/gobreaker/v2"

	"github.com/floe-dev/floe/schemas"
)

// Status says how a record's enrichment ended; it becomes the
// _enrich_status column.
type Status string

// The statuses of a Result.
const (
	// StatusOK: the service knew the key; Values holds its attributes.
	StatusOK Status = "ok"
	// StatusMiss: the service does not know the key, or the record has no
	// key, or one a URL path cannot carry (see Stage.unaskable). Not an
	// error.
	StatusMiss Status = "miss"
	// StatusSkipped: the breaker was open under policy passthrough; the
	// record is written with null enrichment.
	StatusSkipped Status = "skipped"
	// StatusDead: policy dlq, and the breaker was open or the request
	// failed; or, under any policy, a lane's Doomed said the record cannot
	// be used and its key failed for its own fault. Err says why. The
	// record belongs in the dead-letter topic.
	StatusDead Status = "dead"
	// StatusError: policy passthrough, and the request failed for good; Err
	// says why. The record is written with null enrichment.
	StatusError Status = "error"
)

// Result is the enrichment of one record.
type Result struct {
	Status Status
	// Values is nil unless Status is StatusOK. Shared: do not modify.
	Values Values
	// Err is set for StatusDead and StatusError: ErrBreakerOpen or a
	// *RequestError.
	Err error
	// strBytes is schemas.NewExtra(Values).StrBytes, counted once per
	// lookup and kept in the key's cache entry (see newCached): reading
	// Values for it would be a miss of the CPU cache per record.
	strBytes int
}

// Extra is r's attributes as a table's builder takes them.
func (r Result) Extra() schemas.Extra { return schemas.Extra{Attrs: r.Values, StrBytes: r.strBytes} }

// Errors of the stage.
var (
	// ErrBreakerOpen is the Err of StatusDead results completed while the
	// circuit breaker was open.
	ErrBreakerOpen = errors.New("enrichment service unavailable: circuit breaker open")
	// ErrStopped is returned by Submit once the stage's Run has returned.
	ErrStopped = errors.New("enrich: stage stopped")
	// ErrClosed is returned by Submit after Close or Abort.
	ErrClosed = errors.New("enrich: queue closed")
)

// Outcomes reported to the breaker that its counts exclude: a request cut
// short by shutdown, and a failure of an isolated key (see resolve) with a
// status it may have caused. Neither says anything of the service.
var (
	errStopping = errors.New("stage stopping")
	errIsolated = errors.New("a key the service cannot answer failed again")
)

// Stage is the asynchronous, batched enrichment stage: one per member,
// shared by the lanes (Queues) of all its partitions.
//
// A key submitted to a lane is answered from the cache, or joins the lookup
// of the same key already in flight, or starts one. Run gathers the keys of
// new lookups from all lanes into requests of up to BatchSize keys (waiting
// at most Linger for a batch to fill) and runs at most MaxInFlightRequests of
// them at once, each behind the circuit breaker and with retries.
//
// Lock order: Stage.mu before a cache shard's lock; a Queue's lock is never
// held while taking Stage.mu, and Stage.mu is released before lanes are
// completed. The breaker's callback takes only Stage.bmu, so gobreaker's
// methods must never be called with bmu held.
type Stage struct {
	cfg    Config
	log    *slog.Logger
	m      *metrics
	client *client
	cache  *cache
	cb     *gobreaker.TwoStepCircuitBreaker[struct{}]
	batch  int           // keys per request: BatchSize, or 1 in single mode
	linger time.Duration // 0 in single mode
	// keySegment: single mode with {key} a whole segment of the URL's
	// path, which cannot carry the keys . and .. (see unaskable).
	keySegment bool
	dotKeyWarn sync.Once

	mu           sync.Mutex
	flights      map[string]*flight // keys being looked up
	pending      []string           // keys of flights not yet in a request
	pendingSince time.Time          // when pending became non-empty
	kick         chan struct{}      // wakes Run: pending became non-empty or full

	slots chan struct{} // request slots
	// halves run the halves of split batches (see resolve), off the
	// request slots: each of their requests holds one of splitSlots while
	// it asks. Run waits for them.
	halves     sync.WaitGroup
	splitSlots chan struct{}
	done       chan struct{} // closed once Run has returned
	started    atomic.Bool

	bmu      sync.Mutex
	bchanged chan struct{} // closed and replaced on every breaker transition
	openedAt time.Time
	// loggedAt (Unix ns) is when a failed request was last logged; zero
	// once the breaker closes. A failing service logs once per episode (and
	// again each minute it lasts), not per request or per probe.
	loggedAt atomic.Int64
	lastErr  atomic.Pointer[error]
	// answered counts the requests that succeeded: a batch that fails
	// while others succeed fails for its own keys (see resolve).
	answered atomic.Int64
	// probeWaiters counts the batches other than isolated keys that wait
	// for the breaker: an isolated key leaves its probe to them (see ask).
	probeWaiters atomic.Int64

	hedge hedger

	budget budget // MaxInFlightBytesTotal, shared by the lanes
}

// flight is one key being looked up, with the lane entries waiting for it.
// A refresh starts a flight without waiters.
type flight struct {
	waiters []waiter
}

type waiter struct {
	q *Queue
	e *entry
	// checked: the lane's Doomed said the entry's item can be used
	// (releaseDoomed asks once).
	checked bool
}

// CheckFiles checks the files NewStage reads or writes: the TLS files load,
// and the cache file's directory exists and can be written. A command
// calls it before it creates anything, so that a configuration NewStage
// would refuse creates nothing (NewStage runs once the table is open).
func (c *Config) CheckFiles() error {
	if _, err := tlsConfig(c.TLS); err != nil {
		return err
	}
	return checkCacheFile(c.CacheFile)
}

// NewStage builds a stage from cfg (Finish is applied to a copy), registering
// its metrics with reg (nil: not registered). It warns once about risky
// settings. Call Run to start looking keys up.
func NewStage(cfg Config, reg prometheus.Registerer, log *slog.Logger) (*Stage, error) {
	if err := cfg.Finish(); err != nil {
		return nil, err
	}
	if err := checkCacheFile(cfg.CacheFile); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	s := &Stage{
		cfg:        cfg,
		log:        log,
		m:          m,
		batch:      cfg.BatchSize,
		linger:     max(cfg.Linger.D(), 0),
		flights:    map[string]*flight{},
		kick:       make(chan struct{}, 1),
		slots:      make(chan struct{}, cfg.MaxInFlightRequests),
		splitSlots: make(chan struct{}, cfg.MaxInFlightRequests),
		done:       make(chan struct{}),
		bchanged:   make(chan struct{}),
	}
	if cfg.Mode == ModeSingle {
		s.batch, s.linger = 1, 0
		s.keySegment = keyIsSegment(cfg.URL)
	}
	s.budget.max = int64(cfg.MaxInFlightBytesTotal)
	if s.budget.max == 0 {
		s.budget.max = DefaultMaxInFlightBytesTotal
	}
	s.client, err = newClient(&s.cfg, func(field string) { m.attributeErrors.WithLabelValues(field).Inc() })
	if err != nil {
		return nil, err
	}
	// A refresh is given as long as a request may take before another hit
	// asks again.
	if cfg.CacheSize > 0 {
		maxBytes := int(cfg.CacheMaxBytes)
		if maxBytes == 0 {
			maxBytes = DefaultCacheMaxBytes
		}
		s.cache = newCache(cfg.CacheSize, maxBytes, cfg.RequestSpan())
		s.loadCacheFile()
	}
	ratio, minReq := cfg.Breaker.FailureRatio, cfg.Breaker.MinRequests
	s.cb = gobreaker.NewTwoStepCircuitBreaker[struct{}](gobreaker.Settings{
		Name:         "enrich",
		MaxRequests:  1, // one probe when half-open
		Interval:     cfg.Breaker.Interval.D(),
		BucketPeriod: cfg.Breaker.Interval.D() / 10,
		Timeout:      cfg.Breaker.OpenTimeout.D(),
		ReadyToTrip: func(c gobreaker.Counts) bool {
			// Judge finished requests only: Requests also counts those in
			// flight, which would dilute the ratio during an outage.
			finished := c.TotalSuccesses + c.TotalFailures
			return finished >= minReq && float64(c.TotalFailures) >= ratio*float64(finished)
		},
		OnStateChange: s.onBreakerChange,
		IsExcluded:    func(err error) bool { return errors.Is(err, errStopping) || errors.Is(err, errIsolated) },
	})
	s.warnRisky()
	return s, nil
}

func (s *Stage) warnRisky() {
	c := s.cfg
	if c.TLS.InsecureSkipVerify {
		s.log.Warn("enrich.tls.insecure_skip_verify is on: the enrichment service's certificate is not checked")
	}
	// validate accepted the URL; its scheme is compared parsed, as net/http
	// reads it ("HTTP://" is plain http too), and user info is sent as
	// Basic credentials.
	if u, err := url.Parse(strings.ReplaceAll(c.URL, "{key}", "k")); err == nil && u.Scheme == "http" {
		if c.AuthHeader != "" || u.User != nil {
			s.log.Warn("enrich credentials (auth_header or the url's user info) are sent over plain http; use https:// outside a trusted network")
		}
	}
	if c.Breaker.Policy == PolicyPause && c.Retries < 0 {
		s.log.Warn("enrich.retries is none (0 or -1) under policy pause: every transient error holds the lanes until the breaker cycles")
	}
}

// Run gathers submitted keys into requests and runs them until ctx ends,
// then waits for its requests to stop and returns nil. Lanes still holding
// records then close their Out without them: the caller redoes them from
// Kafka. Run may be called once.
func (s *Stage) Run(ctx context.Context) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("enrich: Stage.Run called twice")
	}
	var wg sync.WaitGroup
	defer func() {
		wg.Wait()       // the batches: none is split after this
		s.halves.Wait() // the halves they split, which end with ctx too
		s.client.closeIdle()
		s.saveCacheFile()
		close(s.done)
	}()
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for {
		s.mu.Lock()
		n, since := len(s.pending), s.pendingSince
		s.mu.Unlock()
		if n == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-s.kick:
			}
			continue
		}
		if n < s.batch {
			if wait := s.linger - time.Since(since); wait > 0 {
				linger.Reset(wait)
				select {
				case <-ctx.Done():
					linger.Stop()
					return nil
				case <-s.kick:
					linger.Stop()
					continue // recount: the batch may be full now
				case <-linger.C:
				}
			}
		}
		// Take the keys only once a slot is free: while every slot is busy
		// the batch keeps growing, up to BatchSize.
		select {
		case <-ctx.Done():
			return nil
		case s.slots <- struct{}{}:
		}
		s.mu.Lock()
		var keys []string
		if len(s.pending) <= s.batch {
			keys, s.pending = s.pending, nil
		} else {
			keys = append([]string(nil), s.pending[:s.batch]...)
			s.pending = s.pending[s.batch:]
		}
		s.mu.Unlock()
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.slots }()
			s.resolve(ctx, keys, false, false)
		}()
	}
}

// lookup makes entry e of lane q wait for key: it joins the key's flight or
// starts one.
func (s *Stage) lookup(key string, q *Queue, e *entry) {
	s.mu.Lock()
	if q.gone.Load() {
		// Aborted since Submit let go of the lane: Abort's forget ran
		// before this (it sets gone first), so a waiter added now would
		// stay, keeping the lane's records, and under pause its key's
		// retries, alive.
		s.mu.Unlock()
		return
	}
	if f := s.flights[key]; f != nil {
		f.waiters = append(f.waiters, waiter{q: q, e: e})
		s.mu.Unlock()
		s.m.coalesced.Inc()
		return
	}
	// The key's flight may have completed since Submit read the cache: it
	// caches before it leaves the flight map.
	if v, fr := s.cache.get([]byte(key), monoNow()); fr != absent {
		s.mu.Unlock()
		q.finish(e, cachedResult(v))
		return
	}
	s.flights[key] = &flight{waiters: []waiter{{q: q, e: e}}}
	s.enqueueLocked(key)
	s.mu.Unlock()
}

// forget removes an aborted lane's entries from the flights they wait for.
// The flights themselves go on: their results still fill the cache.
func (s *Stage) forget(q *Queue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.flights {
		kept := f.waiters[:0]
		for _, w := range f.waiters {
			if w.q != q {
				kept = append(kept, w)
			}
		}
		clear(f.waiters[len(kept):])
		f.waiters = kept
	}
}

// refresh looks key up in the background, unless a lookup is in flight, so
// that a hot key is renewed before it expires instead of stalling a lane.
func (s *Stage) refresh(key string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.flights[key] != nil {
		return
	}
	s.flights[key] = &flight{}
	s.enqueueLocked(key)
	s.m.refreshes.Inc()
}

func (s *Stage) enqueueLocked(key string) {
	s.pending = append(s.pending, key)
	if n := len(s.pending); n == 1 || n == s.batch {
		if n == 1 {
			s.pendingSince = time.Now()
		}
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// unaskable reports whether key cannot be looked up: a key . or .. where
// {key} is a segment of the URL's path, which servers resolve away (even
// percent-encoded, RFC 3986 §6.2.2.2): the request would ask for another
// resource. Such a key is a miss, as an empty one is, and the first is
// logged. It is never sent: retried under pause, its failures would open
// the breaker against a healthy service.
func (s *Stage) unaskable(key []byte) bool {
	if !s.keySegment || (string(key) != "." && string(key) != "..") {
		return false
	}
	s.dotKeyWarn.Do(func() {
		s.log.Warn("a key cannot be looked up in a URL path: servers resolve it away; its records get _enrich_status miss. "+
			"To look such keys up, put {key} in the query string of enrich.url (…?key={key})", "key", string(key))
	})
	return true
}

// keyIsSegment reports whether {key} is a whole segment of url's path.
func keyIsSegment(url string) bool {
	at := strings.Index(url, "{key}")
	query := strings.IndexAny(url, "?#")
	if at < 0 || (query >= 0 && at > query) || at == 0 || url[at-1] != '/' {
		return false
	}
	rest := url[at+len("{key}"):]
	return rest == "" || strings.ContainsRune("/?#", rune(rest[0]))
}

func cachedResult(v cached) Result {
	if v.miss {
		return Result{Status: StatusMiss}
	}
	return Result{Status: StatusOK, Values: v.vals, strBytes: v.strBytes}
}

// resolve looks keys up behind the breaker until they have a result, or ctx
// ends (then the keys are abandoned with their lanes).
//
// Under the pause policy a failed batch is tried again after a backoff,
// less the keys nobody waits for any more (their lanes were aborted). One
// that fails for its own keys is split in halves instead, each resolved
// the same way: a key the service cannot answer then holds only its own
// records, not those of the batch's other keys (nearly every lane's). A
// batch fails for its own keys when, the breaker staying closed, other
// requests succeeded meanwhile or it has failed splitRounds times, or when
// it failed as the half-open breaker's probe (see splitRounds). A 429 or
// 503 splits nothing: the service asks for fewer requests. The
// halves run off the request slots (half is true for them), so that a
// split batch frees its slot, and each of their requests holds one of
// splitSlots, so that a batch whose every key fails cannot become
// hundreds of requests at once. A batch of one such key moves off its
// slot in the same way.
//
// A key alone that fails while other requests succeed is isolated: its
// failures with a status it may have caused no longer count for the
// breaker, and it leaves the half-open breaker's probe to the other
// batches waiting for it (see ask). Retried for as long as it fails, it
// would otherwise open the breaker against a service that answers
// everything else (with a warm cache, few other requests dilute its
// failures), and then take the probes meant to find the service
// answering. Others' answers isolate a key, and so does a probe it failed
// alone (else, counted as waiting for the probe, it would take every probe,
// fail it, and keep isolated keys the service answers from asking again);
// failed rounds alone do not: they also find a service answering 500 to
// everyone, which must open the breaker however few keys it is asked for
// (a failed probe has opened it already, and an isolated key's probes
// still count). An isolated key's other failures (transport errors,
// timeouts, 502–504, 401…) still count.
func (s *Stage) resolve(ctx context.Context, keys []string, half, isolated bool) {
	s.m.inFlightRequests.Inc()
	defer s.m.inFlightRequests.Dec()
	s.m.batchSize.Observe(float64(len(keys)))
	policy := s.cfg.Breaker.Policy
	failures := 0    // of requests let through the breaker
	waiting := false // counted in probeWaiters
	defer func() {
		if waiting {
			s.probeWaiters.Add(-1)
		}
	}()
	for round := 0; ; round++ {
		if half {
			select {
			case s.splitSlots <- struct{}{}:
			case <-ctx.Done():
				return
			}
		}
		since := s.answered.Load()
		res, probe, err := s.ask(ctx, keys, isolated)
		if half {
			<-s.splitSlots
		}
		if waiting && !errors.Is(err, errBreakerBusy) {
			waiting = false
			s.probeWaiters.Add(-1)
		}
		switch {
		case ctx.Err() != nil:
			return
		case errors.Is(err, errBreakerBusy):
			switch policy {
			case PolicyPassthrough:
				s.completeAll(keys, Result{Status: StatusSkipped})
				return
			case PolicyDLQ:
				s.completeAll(keys, Result{Status: StatusDead, Err: ErrBreakerOpen})
				return
			}
			if !isolated && !waiting {
				waiting = true
				s.probeWaiters.Add(1)
			}
			if !s.waitBreaker(ctx) {
				return
			}
			continue
		}
		if err == nil {
			s.answered.Add(1)
			s.completeFound(keys, res)
			return
		}
		failures++
		s.lastErr.Store(&err)
		if last := s.loggedAt.Load(); (last == 0 || time.Since(time.Unix(0, last)) > time.Minute) &&
			s.loggedAt.CompareAndSwap(last, time.Now().UnixNano()) {
			s.log.Warn("enrichment request failed", "err", err, "keys", len(keys), "policy", policy,
				"breaker", s.cb.State().String())
		}
		if policy != PolicyPause && s.askAgain(err, failures) {
			// The service asked for a longer wait than a request may
			// hold (attempts): waited here, between the breaker's
			// requests, while retries remain. Should the breaker open
			// meanwhile, the next ask finds it open.
			if !s.sleep(ctx, s.retryWait(round, err), s.breakerChanged()) {
				return
			}
			continue
		}
		switch policy {
		case PolicyPassthrough:
			s.completeAll(keys, Result{Status: StatusError, Err: err})
			return
		case PolicyDLQ:
			s.completeAll(keys, Result{Status: StatusDead, Err: err})
			return
		}
		// Pause: after a backoff (or the Retry-After asked for, which
		// attempts leaves to this wait when it exceeds backoff_max), or as
		// soon as the breaker changes state, split a batch failing for its
		// own keys, or try it again.
		if keysAtFault(err) {
			s.releaseDoomed(keys, err)
		}
		if !s.sleep(ctx, s.retryWait(round, err), s.breakerChanged()) {
			return
		}
		if keys = s.awaited(keys); len(keys) == 0 {
			return
		}
		closed := s.cb.State() == gobreaker.StateClosed
		othersAnswered := closed && s.answered.Load() > since
		failedProbe := probe && keysAtFault(err)
		if !splits(err) || !(failedProbe || othersAnswered || closed && failures >= splitRounds && keysAtFault(err)) {
			continue
		}
		// A key alone is isolated once others were answered while it
		// failed, or once it failed a probe: a key that took every probe
		// and failed it would otherwise count as waiting for the probe
		// for good, and keep an isolated key the service answers again
		// from ever asking.
		isolate := len(keys) == 1 && (othersAnswered || failedProbe)
		switch {
		case len(keys) > 1:
			s.split(ctx, keys)
			return
		case !half: // one key alone: off its request slot, as a half
			s.halves.Go(func() { s.resolve(ctx, keys, true, isolated || isolate) })
			return
		}
		isolated = isolated || isolate
	}
}

// askAgain reports whether a request that failed, the failures-th of its
// batch, ended for a 429 or 503 whose Retry-After was longer than a request
// may wait (attempts), with retries left: passthrough and dlq then ask
// again after that wait rather than fail the batch's keys for one
// throttled answer.
func (s *Stage) askAgain(err error, failures int) bool {
	var re *RequestError
	return errors.As(err, &re) && re.Retryable && re.RetryAfter > s.cfg.BackoffMax.D() && failures <= int(s.cfg.Retries)
}

// splitRounds is how many of a batch's requests fail with a status its
// keys may have caused (keysAtFault), the breaker staying closed, before it
// is split even though no other request succeeded meanwhile (when every
// request slot holds such a batch, none can). A service that cannot be
// reached, or times out, with too few requests to open the breaker, splits
// nothing this way.
//
// A batch whose request was the half-open breaker's probe is split after
// one failure whose status its keys may have caused (keysAtFault): when
// every batch holds a key the service cannot answer, every request fails,
// the breaker opens, and only its probes go out, so a probe is the only
// request that can find the batch's other keys answerable. A half that
// succeeds as a later probe closes the breaker, and the batches failing
// for their own keys then split as above. A service that answers every
// request with a 500 through an outage has one batch split per
// open_timeout (a few hundred in an hour, sent as smaller requests once it
// recovers); bounding that would need probes taken in turn among the
// waiting batches, since a batch whose probe failed is the first to ask
// again, and a bound reached with such batches left would hold their
// other keys for good.
const splitRounds = 3

// splits reports whether a failed request may be split: not when the
// service asked for fewer requests (429, 503).
func splits(err error) bool {
	var re *RequestError
	return !errors.As(err, &re) || (re.StatusCode != http.StatusTooManyRequests && re.StatusCode != http.StatusServiceUnavailable)
}

// keysAtFault reports whether a failed request's status may come from the
// keys it asked for: 400, 413, 414 or 431 (in single mode the key is in the
// URL: too long for the service's request line), 422 or 500, or a 200
// whose answer could not be used (larger than a response may be, with more
// JSON values than floe parses, or not JSON: the keys' answers together, or
// one key's, are at fault). Not a
// transport error or a
// timeout, nor a status of a service or gateway that is down (502, 503,
// 504), of credentials or a wrong URL (401, 403, 404), or of overload
// (429).
func keysAtFault(err error) bool {
	var re *RequestError
	if !errors.As(err, &re) {
		return false
	}
	switch re.StatusCode {
	case http.StatusOK, http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusRequestURITooLong,
		http.StatusRequestHeaderFieldsTooLarge, http.StatusUnprocessableEntity, http.StatusInternalServerError:
		return true
	}
	return false
}

// awaited returns the keys of keys that a lane still waits for, and drops
// the flights of the others: a later lookup of one starts afresh.
func (s *Stage) awaited(keys []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := keys[:0:0] // a new array: the halves of a batch share theirs
	for _, k := range keys {
		if f := s.flights[k]; f != nil && len(f.waiters) > 0 {
			kept = append(kept, k)
		} else {
			delete(s.flights, k)
		}
	}
	return kept
}

// errBreakerBusy is ask's error when the breaker lets no request through:
// it is open, or half-open with its probe out.
var errBreakerBusy = errors.New("the breaker lets no request through")

// ask makes one request for keys behind the breaker (retrying retryable
// failures, see attempts) and reports its outcome to the breaker; a request
// cut short by ctx counts for nothing. probe reports whether the request
// was the half-open breaker's probe (the only request it lets through).
//
// For an isolated key (see resolve), a failure with a status it may have
// caused counts for nothing either, and while the breaker is not closed it
// does not ask as long as other batches wait: its probe would fail and
// open the breaker again for them all. With none waiting it may take the
// probe, whose failure then counts as any probe's: were that excluded, a
// service answering 500 to everyone would hold the breaker half-open,
// probed by isolated keys one after another, once they were all that was
// left.
func (s *Stage) ask(ctx context.Context, keys []string, isolated bool) (res map[string]Values, probe bool, err error) {
	if isolated && s.probeWaiters.Load() > 0 && s.cb.State() != gobreaker.StateClosed {
		return nil, false, errBreakerBusy
	}
	done, err := s.cb.Allow()
	if err != nil {
		return nil, false, errBreakerBusy
	}
	// Until done, the state stays half-open: it leaves half-open only on
	// the outcome of its probe.
	probe = s.cb.State() == gobreaker.StateHalfOpen
	res, err = s.attempts(ctx, keys)
	switch {
	case ctx.Err() != nil:
		done(errStopping)
		return nil, probe, ctx.Err()
	case isolated && !probe && keysAtFault(err):
		done(errIsolated)
	default:
		done(err)
	}
	return res, probe, err
}

// split resolves the two halves of keys, each in a goroutine of its own.
func (s *Stage) split(ctx context.Context, keys []string) {
	s.m.splits.Inc()
	half := len(keys) / 2
	for _, part := range [][]string{keys[:half], keys[half:]} {
		s.halves.Go(func() { s.resolve(ctx, part, true, false) })
	}
}

// attempts makes one request for keys, retrying retryable failures with
// jittered backoff, and stops retrying once the breaker has opened.
//
// A 429 or 503 asking for a longer wait than backoff_max (Retry-After) ends
// the request at once with that failure: waited out within the request, it
// could outlast RequestSpan and so the breaker's interval, and a failure
// counts only in the window its request began in (see
// BreakerConfig.Interval), so a service in maintenance would never open the
// breaker. resolve waits it out before asking again (under passthrough and
// dlq, while retries remain: askAgain).
func (s *Stage) attempts(ctx context.Context, keys []string) (map[string]Values, error) {
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, s.cfg.Timeout.D())
		start := time.Now()
		res, err := s.hedged(actx, keys)
		cancel()
		s.m.requestDuration.Observe(time.Since(start).Seconds())
		if err == nil || ctx.Err() != nil {
			return res, err
		}
		var re *RequestError
		if !errors.As(err, &re) {
			return nil, err
		}
		re.Attempts = attempt + 1
		if !re.Retryable || attempt >= int(s.cfg.Retries) || re.RetryAfter > s.cfg.BackoffMax.D() ||
			s.cb.State() == gobreaker.StateOpen {
			return nil, err
		}
		s.m.retries.Inc()
		if !s.sleep(ctx, s.retryWait(attempt, err), nil) {
			return nil, ctx.Err()
		}
	}
}

// retryWait is how long a batch whose request failed with err waits before
// its round n+1: the backoff, or longer when the service said how long
// (Retry-After).
func (s *Stage) retryWait(n int, err error) time.Duration {
	var re *RequestError
	if errors.As(err, &re) {
		return max(s.backoff(n), re.RetryAfter)
	}
	return s.backoff(n)
}

// backoff is full jitter: uniform in [0, min(BackoffMax, BackoffMin·2^n)).
func (s *Stage) backoff(n int) time.Duration {
	d := s.cfg.BackoffMax.D()
	if n < 30 {
		d = min(d, s.cfg.BackoffMin.D()<<n)
	}
	if d <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(d)))
}

// sleep waits d, or until wake is closed; false if ctx ended first.
func (s *Stage) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-wake:
	}
	return true
}

// waitBreaker waits until the open breaker may let a probe through, or until
// the half-open breaker's probe has decided; false if ctx ended first.
func (s *Stage) waitBreaker(ctx context.Context) bool {
	st := s.cb.State() // may move open → half-open; never under bmu
	s.bmu.Lock()
	wake, reopen := s.bchanged, s.openedAt.Add(s.cfg.Breaker.OpenTimeout.D())
	s.bmu.Unlock()
	var d time.Duration
	switch st {
	case gobreaker.StateOpen:
		// Up to 10ms of jitter so the waiters do not all call Allow at once.
		d = time.Until(reopen) + time.Duration(rand.Int64N(int64(10*time.Millisecond)))
	case gobreaker.StateHalfOpen:
		d = s.cfg.Timeout.D() // the probe's outcome normally wakes us first
	}
	return s.sleep(ctx, max(d, time.Millisecond), wake)
}

func (s *Stage) breakerChanged() <-chan struct{} {
	s.bmu.Lock()
	defer s.bmu.Unlock()
	return s.bchanged
}

// onBreakerChange runs under gobreaker's lock: it must not call the breaker.
func (s *Stage) onBreakerChange(_ string, from, to gobreaker.State) {
	s.m.breakerState.Set(float64(to))
	s.m.transitions.WithLabelValues(to.String()).Inc()
	s.bmu.Lock()
	if to == gobreaker.StateOpen {
		s.openedAt = time.Now()
	}
	close(s.bchanged)
	s.bchanged = make(chan struct{})
	s.bmu.Unlock()
	var last error
	if p := s.lastErr.Load(); p != nil {
		last = *p
	}
	// A long outage cycles open → half-open → open every OpenTimeout: log
	// the episode's start and end, and its probes only at debug level.
	if from == gobreaker.StateHalfOpen && to == gobreaker.StateOpen {
		s.log.Debug("enrichment circuit breaker probe failed; open again", "last_err", last)
		return
	}
	if to == gobreaker.StateHalfOpen {
		s.log.Debug("enrichment circuit breaker half-open: probing the service")
		return
	}
	switch to {
	case gobreaker.StateOpen:
		var what string
		switch s.cfg.Breaker.Policy {
		case PolicyPause:
			what = "holding lookups: lanes fill and fetching stops until the service answers again"
		case PolicyPassthrough:
			what = "records pass through unenriched (status skipped)"
		case PolicyDLQ:
			what = "records go to the dead-letter topic"
		}
		s.log.Warn("enrichment circuit breaker open: "+what, "from", from.String(), "last_err", last,
			"retry_in", s.cfg.Breaker.OpenTimeout)
	case gobreaker.StateClosed:
		s.loggedAt.Store(0)
		s.log.Info("enrichment circuit breaker closed: service answering again")
	}
}

// releaseDoomed completes, as StatusDead, the entries waiting for keys
// whose lane's Doomed says their item cannot be used whatever the lookup
// answers (a record that cannot become a row: too large, malformed): under
// pause, a key the service keeps failing would hold them, and every record
// behind them, for an answer they could not use. Each entry is asked about
// once; Doomed runs without the stage's lock.
func (s *Stage) releaseDoomed(keys []string, err error) {
	type asked struct {
		key  string
		q    *Queue
		e    *entry
		item any
	}
	var ask []asked
	s.mu.Lock()
	for _, k := range keys {
		if f := s.flights[k]; f != nil {
			for i := range f.waiters {
				if w := &f.waiters[i]; !w.checked && w.q.doomed != nil {
					w.checked = true
					ask = append(ask, asked{k, w.q, w.e, w.e.item})
				}
			}
		}
	}
	s.mu.Unlock()
	doomed := ask[:0]
	for _, a := range ask {
		if a.q.doomed(a.item) {
			doomed = append(doomed, a)
		}
	}
	if len(doomed) == 0 {
		return
	}
	var release []waiter
	s.mu.Lock()
	for _, a := range doomed {
		f := s.flights[a.key]
		if f == nil {
			continue
		}
		// Still waiting: not forgotten by an aborted lane meanwhile.
		if i := slices.IndexFunc(f.waiters, func(w waiter) bool { return w.e == a.e }); i >= 0 {
			release = append(release, f.waiters[i])
			f.waiters = slices.Delete(f.waiters, i, i+1)
		}
	}
	s.mu.Unlock()
	for _, w := range release {
		w.q.finish(w.e, Result{Status: StatusDead, Err: err})
	}
}

// completeFound completes the keys of a successful request and caches them.
func (s *Stage) completeFound(keys []string, found map[string]Values) {
	now := monoNow()
	for _, k := range keys {
		vals, ok := found[k]
		ttl := s.cfg.CacheTTL.D()
		if !ok {
			ttl = s.cfg.NegativeCacheTTL.D()
		}
		s.complete(k, cachedResult(s.cache.put(k, vals, !ok, ttl, now)))
	}
}

// completeAll completes keys with one uncached result.
func (s *Stage) completeAll(keys []string, r Result) {
	for _, k := range keys {
		s.complete(k, r)
	}
}

// complete ends key's flight and hands r to its waiters. Callers cache
// first, so a Submit that misses the flight finds the cache filled.
func (s *Stage) complete(key string, r Result) {
	s.mu.Lock()
	f := s.flights[key]
	delete(s.flights, key)
	s.mu.Unlock()
	if f == nil {
		return
	}
	for _, w := range f.waiters {
		w.q.finish(w.e, r)
	}
}

// stopped reports whether Run has returned.
func (s *Stage) stopped() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}
