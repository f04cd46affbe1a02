package enrich

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// takeBatch is how many records Take moves when its buf has no capacity,
// and Out's channel capacity.
const takeBatch = 256

// reportEvery bounds how far a lane's share of the stage's gauges and
// counters may lag: they are updated once per batch taken, or after this
// many records, not per record (atomics shared by every lane's goroutines
// cost more than the rest of a cached record's trip through the lane).
const reportEvery = 256

// reportIdle is how long what Direct answered may wait for a report while
// its lane is quiet (a consumer waiting in Take reports it).
const reportIdle = 500 * time.Millisecond

// DefaultMaxInFlightBytes is a lane's byte bound when
// Config.MaxInFlightBytes is 0.
const DefaultMaxInFlightBytes = 64 << 20

// DefaultMaxInFlightBytesTotal is the stage-wide byte bound when
// Config.MaxInFlightBytesTotal is 0.
const DefaultMaxInFlightBytesTotal = 128 << 20

// readyMax bounds the records a lane holds while none of them waits for a
// lookup: then the lane waits only for its consumer, and holding more would
// only cost memory (and the garbage collector's time) without hiding any
// latency. A lane grows beyond it, up to MaxInFlightRecords, only while a
// record in it waits for a lookup, so that the keys behind a cold one are
// looked up meanwhile.
const readyMax = 1024

// Completed is one record leaving a lane: the item given to Submit and its
// enrichment.
type Completed struct {
	Item   any
	Result Result
}

// Queue is one partition's ordered lane through the stage. Records leave it
// (Take) in Submit order although their lookups complete out of order (like
// Flink's orderedWait): a record whose key is cached still waits behind an
// earlier record whose lookup is in flight.
//
// Submit is meant to be called from one goroutine (the partition's fetcher)
// and Take from another (its consumer); concurrent Submits are safe, and
// ordered as they take the lane's lock. A lane has no goroutine of its own
// unless Out is used.
type Queue struct {
	s      *Stage
	notify chan struct{} // the head may be complete, or the lane closed
	abort  chan struct{} // closed by Abort

	mu       sync.Mutex
	pending  []*entry // FIFO from start
	start    int
	inflight int           // records from Submit until taken
	waiting  int           // records in pending whose lookup has not completed
	bytes    int64         // sizes (SubmitSized) of the inflight records
	maxBytes int64         // MaxInFlightBytes; < 0: no byte bound
	space    chan struct{} // closed when inflight drops; nil if nobody waits
	closed   bool          // Close or Abort called
	aborted  bool
	// gone is aborted, for Stage.lookup to read without mu: a Submit
	// registering its lookup after Abort forgot the lane's must not.
	gone atomic.Bool
	shut bool // the lane is done: nothing more is taken
	// Entries are handed out from slabs of entrySlab, in order, and taken
	// in the same order: a slab is free again once its last entry is
	// taken. slab is the rest of the current one; slabs are those with
	// entries not taken yet, oldest first; taken counts the oldest one's
	// taken entries; free are slabs to reuse.
	slab  []entry
	slabs []*[entrySlab]entry
	taken int
	free  []*[entrySlab]entry

	// held counts the records submitted and not yet Delivered: in the lane,
	// or taken and still being handed on. Direct needs it at zero.
	held atomic.Int64
	idle chan struct{} // closed when held drops to zero; nil if nobody waits

	// What the stage's metrics have not been told yet (see reportEvery).
	reported      int   // inflight as last added to the in-flight gauge
	reportedBytes int64 // bytes as last added to the in-flight bytes gauge
	// unbudgeted is what bytes has changed by since the lane last told
	// the stage-wide budget (see budgetBatch).
	unbudgeted   int64
	hits, misses int
	// direct counts Direct's results by statusIndex.
	direct     [len(metrics{}.results)]int
	unreported int // records submitted, taken or answered by Direct since the last report

	outOnce sync.Once
	out     chan Completed // Out's channel, once asked for
	viaOut  bool           // Out was asked for: nothing calls Delivered

	doomed func(item any) bool // see Doomed
}

// entrySlab is how many entries a lane allocates at once: one allocation
// per record would cost the garbage collector more than the few idle
// entries a slab keeps alive.
const entrySlab = 256

// freeSlabs is how many taken slabs a lane keeps for reuse (22.5 KiB
// each): while new keys keep arriving a lane often holds more than
// readyMax records, so this is 8 times what a lane that keeps moving
// needs; one that grew far behind a cold key lets the rest go.
const freeSlabs = 8 * (readyMax/entrySlab + 1)

// newSlabLocked makes q.slab a fresh slab, reused if one is free.
func (q *Queue) newSlabLocked() {
	var sl *[entrySlab]entry
	if n := len(q.free); n > 0 {
		sl = q.free[n-1]
		q.free[n-1] = nil
		q.free = q.free[:n-1]
	} else {
		sl = new([entrySlab]entry)
	}
	q.slabs = append(q.slabs, sl)
	q.slab = sl[:]
}

// takenLocked counts one entry taken, freeing the oldest slab once all of
// its entries are.
func (q *Queue) takenLocked() {
	if q.taken++; q.taken < entrySlab {
		return
	}
	q.taken = 0
	sl := q.slabs[0]
	q.slabs[0] = nil
	q.slabs = q.slabs[1:]
	if len(q.slabs) == 0 {
		q.slabs = nil // let the backing array go with the lane's growth
	}
	if len(q.free) < freeSlabs {
		q.free = append(q.free, sl)
	}
}

// entry is one submitted record. res and done are guarded by the lane's lock.
type entry struct {
	item any
	res  Result
	size int64
	done bool
}

// NewQueue returns a new lane.
func (s *Stage) NewQueue() *Queue {
	maxBytes := s.cfg.MaxInFlightBytes
	if maxBytes == 0 {
		maxBytes = DefaultMaxInFlightBytes
	}
	return &Queue{
		s:        s,
		maxBytes: int64(maxBytes),
		notify:   make(chan struct{}, 1),
		abort:    make(chan struct{}),
	}
}

// Doomed sets fn to tell, of an item waiting for a key the service fails
// for its own fault (keysAtFault) under the pause policy, whether the item
// cannot be used whatever the answer: fn's items leave the lane at once as
// StatusDead, where they would wait, with every item behind them, for as
// long as the service fails their key. fn runs on the stage's goroutines,
// once per waiting item at most. Set it before the first Submit.
func (q *Queue) Doomed(fn func(item any) bool) { q.doomed = fn }

// Idle reports whether every record submitted to the lane has been
// Delivered: a record the caller hands on itself now keeps its place in
// the order. Idle, Direct and Delivered are for a consumer that calls
// Delivered; with Out, the lane is never idle once a record went through,
// and AwaitIdle and Direct decline at once.
func (q *Queue) Idle() bool { return q.held.Load() == 0 }

// AwaitIdle waits until the lane is Idle, unless a record in it waits for
// a lookup: the records it holds then all leave as soon as the consumer
// takes them, and rather than queue behind them the caller waits and then
// hands its record on itself. It returns false at once while a record
// waits for a lookup (the caller submits, so that its record keeps its
// place behind it), and when ctx ends or the lane is aborted or the stage
// stopped first.
func (q *Queue) AwaitIdle(ctx context.Context) bool {
	if q.Idle() {
		return true
	}
	q.mu.Lock()
	if q.waiting > 0 || q.aborted || q.viaOut {
		q.mu.Unlock()
		return false
	}
	if q.Idle() { // Delivered moves held before it takes the lock
		q.mu.Unlock()
		return true
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return true
	case <-ctx.Done():
	case <-q.abort:
	case <-q.s.done:
	}
	return false
}

// Direct is the lane's fast path. When key's outcome is cached (or key is
// empty: a miss) and no record in the lane waits for a lookup, it waits
// for the lane to be Idle (AwaitIdle) and returns the record's Result,
// counted in the stage's metrics like a record taken from the lane (within
// reportIdle while a consumer waits in Take); the caller then hands the
// record on itself instead of submitting it. ok is false otherwise, at
// once for a key that is not cached, and the caller submits the record.
// Only the goroutine that submits may call it: nothing may be submitted
// between the check and the hand-off.
//
// Once the cache is warm, most records of a steady stream take this path,
// which costs a cache read: no lane entry, no hand-off between goroutines.
func (q *Queue) Direct(ctx context.Context, key []byte) (res Result, ok bool) {
	if !q.Idle() && q.lookingUp() {
		return Result{}, false // behind a lookup: no need to read the cache
	}
	res, hit, ok := q.s.cachedOutcome(key)
	if !ok || !q.AwaitIdle(ctx) {
		return Result{}, false
	}
	return res, q.tookDirect(res, hit)
}

// Cached is Direct for a lane that is Idle already: it never waits, and
// declines (ok false) unless the lane is Idle and key's outcome cached (or
// key empty). It is meant for a caller that reads the key while it hands
// the record on (schemas.Resolver), with the same rule: only the goroutine
// that submits may call it.
func (q *Queue) Cached(key []byte) (res Result, ok bool) {
	if !q.Idle() {
		return Result{}, false
	}
	res, hit, ok := q.s.cachedOutcome(key)
	if !ok {
		return Result{}, false
	}
	return res, q.tookDirect(res, hit)
}

// cachedOutcome is key's cached Result (an empty or unaskable key is a miss); ok is
// false when none is cached. A stale entry is refreshed in the background.
func (s *Stage) cachedOutcome(key []byte) (res Result, hit, ok bool) {
	if len(key) == 0 || s.unaskable(key) {
		return Result{Status: StatusMiss}, false, true
	}
	v, fr := s.cache.get(key, monoNow())
	switch fr {
	case absent:
		return Result{}, false, false
	case stale:
		s.refresh(string(key))
	}
	return cachedResult(v), true, true
}

// tookDirect counts a record handed on by Direct or Cached in the stage's
// metrics, like one taken from the lane (within reportIdle while a consumer
// waits in Take). It returns false, counting nothing, once the lane is
// closed.
func (q *Queue) tookDirect(res Result, hit bool) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return false
	}
	if hit {
		q.hits++
	}
	q.direct[statusIndex(res.Status)]++
	switch q.unreported++; q.unreported {
	case 1:
		q.wake() // a consumer asleep in Take arms its reportIdle timer
	case reportEvery:
		q.reportLocked()
	}
	return true
}

// lookingUp reports whether a record in the lane waits for a lookup.
func (q *Queue) lookingUp() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.waiting > 0
}

// Delivered tells the lane that n records taken from it have been handed
// on (see Idle).
func (q *Queue) Delivered(n int) {
	if q.held.Add(-int64(n)) != 0 {
		return
	}
	q.mu.Lock()
	if q.idle != nil {
		close(q.idle)
		q.idle = nil
	}
	q.mu.Unlock()
}

// Submit is SubmitSized for an item of no size, with a string key.
func (q *Queue) Submit(ctx context.Context, key string, item any) error {
	return q.SubmitSized(ctx, []byte(key), item, 0)
}

// Pass enqueues item, of size bytes, for no enrichment: it leaves the lane
// in order like any record, with the zero Result, and counts in no result
// or cache metric. It is for records the caller does not enrich (another
// route's, say) whose place in the order still matters. It blocks and fails
// like SubmitSized.
func (q *Queue) Pass(ctx context.Context, item any, size int) error {
	return q.submit(ctx, nil, item, size, true)
}

// SubmitSized enqueues item, of size bytes, to be enriched with the lookup of
// key. The lane keeps key only while the call lasts: it may be a slice of
// the record. It blocks while the lane holds MaxInFlightRecords records or
// MaxInFlightBytes bytes (backpressure: the caller stops fetching); a lane
// always admits a record when it holds none, however large. It returns
// ctx.Err() if ctx ends meanwhile, ErrClosed after Close or Abort,
// ErrStopped once the stage's Run has returned. A record without a key
// (empty), or with one that cannot be looked up (Stage.unaskable), completes
// at once with StatusMiss.
func (q *Queue) SubmitSized(ctx context.Context, key []byte, item any, size int) error {
	return q.submit(ctx, key, item, size, false)
}

// submit is SubmitSized, or Pass when pass is set.
func (q *Queue) submit(ctx context.Context, key []byte, item any, size int, pass bool) error {
	s := q.s
	var res Result
	immediate, hit := true, false
	switch {
	case pass:
	case len(key) == 0 || s.unaskable(key):
		res = Result{Status: StatusMiss}
	default:
		v, fr := s.cache.get(key, monoNow())
		switch fr {
		case absent:
			immediate = false
		case stale:
			s.refresh(string(key))
			fallthrough
		default:
			hit = true
			res = cachedResult(v)
		}
	}

	q.mu.Lock()
	for {
		if q.closed {
			q.mu.Unlock()
			return ErrClosed
		}
		if s.stopped() {
			q.mu.Unlock()
			return ErrStopped
		}
		room, shared := q.roomLocked(int64(size))
		if room {
			break
		}
		var stageSpace <-chan struct{}
		if shared {
			// Only the stage-wide bound is in the way: wait for any lane to
			// hand records on. The channel is taken before looking again,
			// so a release in between is not missed.
			stageSpace = s.budget.space()
			if room, _ = q.roomLocked(int64(size)); room {
				break
			}
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		q.reportLocked() // a full lane shows in the gauges while it waits
		space := q.space
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
		case <-space:
		case <-stageSpace:
		}
		q.mu.Lock()
	}
	if len(q.slab) == 0 {
		q.newSlabLocked()
	}
	e := &q.slab[0]
	q.slab = q.slab[1:]
	e.item, e.size = item, int64(size)
	q.inflight++
	q.held.Add(1)
	q.bytes += int64(size)
	if q.unbudgeted += int64(size); q.unbudgeted >= budgetBatch {
		q.budgetLocked()
	}
	q.pending = append(q.pending, e)
	if immediate {
		e.res, e.done = res, true
		if q.start == len(q.pending)-1 {
			q.wake()
		}
	} else {
		q.waiting++
	}
	switch {
	case hit:
		q.hits++
	case !immediate:
		q.misses++
	}
	switch q.unreported++; q.unreported {
	case 1:
		q.wake() // a consumer asleep in Take arms its reportIdle timer
	case reportEvery:
		q.reportLocked()
	}
	q.mu.Unlock()
	if !immediate {
		s.lookup(string(key), q, e)
	}
	return nil
}

// roomLocked reports whether the lane may take one more record of size
// bytes: it holds fewer than MaxInFlightRecords records and, unless it is
// empty, fewer than MaxInFlightBytes bytes with this one; and beyond
// readyMax records only while one of them waits for a lookup, and the
// stage-wide MaxInFlightBytesTotal has room for it. Its first readyMax
// records may also use the budget's reserve, as much again: lanes running
// ahead of cold keys fill the budget itself, and the other lanes must still
// keep moving. shared is true when only the stage-wide bound is in the way.
func (q *Queue) roomLocked(size int64) (room, shared bool) {
	if q.inflight == 0 {
		return true, false
	}
	if q.inflight >= q.s.cfg.MaxInFlightRecords {
		return false, false
	}
	if q.maxBytes >= 0 && q.bytes+size > q.maxBytes {
		return false, false
	}
	if q.inflight < readyMax {
		// The lane's unbudgeted bytes count without being told to the
		// budget, which would move its cache line for every record; only
		// a refusal tells it first.
		if q.s.budget.fitsReserve(q.unbudgeted + size) {
			return true, false
		}
		q.budgetLocked()
		if q.s.budget.fitsReserve(size) {
			return true, false
		}
		return false, true
	}
	if q.waiting == 0 {
		return false, false
	}
	q.budgetLocked()
	if !q.s.budget.fits(size) {
		return false, true
	}
	return true, false
}

// budgetBatch is how far a lane's bytes may move before it tells the
// stage-wide budget: a shared atomic updated per record would move its
// cache line between the cores for every record. A lane tells it at once
// before judging room against the bound itself, before refusing a record
// for want of the reserve, when a lane is waiting for it, when it has
// handed on every record it held (an idle lane would otherwise keep up to
// budgetBatch charged for good), and what it handed on when Take waits.
const budgetBatch = 64 << 10

// budgetLocked tells the stage-wide budget what the lane's bytes changed
// by since it last did.
func (q *Queue) budgetLocked() {
	switch d := q.unbudgeted; {
	case d > 0:
		q.s.budget.add(d)
	case d < 0:
		q.s.budget.release(-d)
	}
	q.unbudgeted = 0
}

// Take waits until the record at the head of the lane has its result, then
// moves the completed records from the head, in Submit order, into buf[:0]
// (up to cap(buf), or takeBatch if buf has no capacity) and returns them;
// they no longer count against the lane's bounds. It returns ErrClosed once
// the lane is closed and every record taken, or promptly after Abort;
// ErrStopped when the stage's Run has returned and no record is ready (the
// records still pending are dropped: the caller redoes them from Kafka);
// ctx.Err() if ctx ends first. Take is meant for one goroutine at a time.
func (q *Queue) Take(ctx context.Context, buf []Completed) ([]Completed, error) {
	if cap(buf) == 0 {
		buf = make([]Completed, 0, takeBatch)
	}
	s := q.s
	var quiet *time.Timer
	for {
		q.mu.Lock()
		if q.aborted {
			q.mu.Unlock()
			return nil, ErrClosed
		}
		out := buf[:0]
		var size int64
		for q.start < len(q.pending) && len(out) < cap(out) {
			e := q.pending[q.start]
			if !e.done {
				break
			}
			out = append(out, Completed{Item: e.item, Result: e.res})
			size += e.size
			*e = entry{} // its slab may outlive it, or be reused
			q.pending[q.start] = nil
			q.start++
			q.takenLocked()
		}
		q.compactLocked()
		if len(out) > 0 {
			q.inflight -= len(out)
			q.bytes -= size
			if q.unbudgeted -= size; q.unbudgeted <= -budgetBatch || q.inflight == 0 || s.budget.waiters.Load() {
				q.budgetLocked()
			}
			q.unreported += len(out)
			q.reportLocked()
			q.releaseLocked()
			q.mu.Unlock()
			var counts [len(s.m.results)]int
			for i := range out {
				if st := out[i].Result.Status; st != "" { // "": passed (Pass)
					counts[statusIndex(st)]++
				}
			}
			for i, n := range counts {
				if n > 0 {
					s.m.results[i].Add(float64(n))
				}
			}
			return out, nil
		}
		if q.closed && q.start == len(q.pending) {
			q.shutLocked()
			q.mu.Unlock()
			return nil, ErrClosed
		}
		// Records handed on may still be charged to the stage-wide budget
		// (up to budgetBatch): give them back before waiting, which may last
		// as long as the lookup at the head, or other lanes stay short.
		if q.unbudgeted < 0 {
			q.budgetLocked()
		}
		// What Direct answered since the last report reaches the metrics
		// after reportIdle at the latest, however quiet the lane.
		var report <-chan time.Time
		if q.unreported > 0 {
			if quiet == nil {
				quiet = time.NewTimer(reportIdle)
				defer quiet.Stop()
			} else {
				quiet.Reset(reportIdle)
			}
			report = quiet.C
		}
		q.mu.Unlock()
		select {
		case <-report:
			q.mu.Lock()
			q.reportLocked()
			q.mu.Unlock()
		case <-q.notify:
		case <-q.abort:
		case <-s.done:
			q.mu.Lock()
			ready := q.start < len(q.pending) && q.pending[q.start].done
			if !ready {
				q.shutLocked()
				q.mu.Unlock()
				return nil, ErrStopped
			}
			q.mu.Unlock()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Out is Take for callers that want a channel: a goroutine, started by the
// first call, takes the lane's records and sends them to the returned
// channel in Submit order. It takes only what the channel has room for (one
// record when it is full, held until it can be sent), so the lane and Out
// together hold at most MaxInFlightRecords + cap(Out()) + 1 records. The
// channel is closed once Take reports the lane closed, aborted or the stage
// stopped; records it already holds can still be received after that.
func (q *Queue) Out() <-chan Completed {
	q.outOnce.Do(func() {
		q.mu.Lock()
		q.viaOut = true
		q.mu.Unlock()
		q.out = make(chan Completed, takeBatch)
		go func() {
			defer close(q.out)
			buf := make([]Completed, 0, takeBatch)
			for {
				room := max(cap(q.out)-len(q.out), 1)
				batch, err := q.Take(context.Background(), buf[:0:room])
				if err != nil {
					return
				}
				for _, c := range batch {
					select {
					case q.out <- c:
					case <-q.abort:
						return
					case <-q.s.done:
						return
					}
				}
			}
		}()
	})
	return q.out
}

// Close ends Submits, also those waiting for room, which return
// ErrClosed. Take reports ErrClosed once the records already submitted
// have been taken.
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.releaseLocked()
	q.mu.Unlock()
	q.wake()
}

// Abort ends Submits and drops the records still pending: Take returns
// ErrClosed at once. Use it when the partition is revoked, so that a lane
// waiting on a slow or paused service does not hold up the rebalance.
// Lookups already in flight still complete and fill the cache.
func (q *Queue) Abort() {
	q.mu.Lock()
	if q.aborted {
		q.mu.Unlock()
		return
	}
	q.closed, q.aborted = true, true
	q.gone.Store(true) // before forget: see Stage.lookup
	close(q.abort)
	q.shutLocked()
	q.mu.Unlock()
	// Let go of the records: during a long outage under policy pause, each
	// rebalance would otherwise leave a lane's worth of them in the flights.
	q.s.forget(q)
}

func (q *Queue) wake() {
	select {
	case q.notify <- struct{}{}:
	default:
	}
}

// finish records e's result and wakes the consumer if e heads the lane.
func (q *Queue) finish(e *entry, r Result) {
	q.mu.Lock()
	if q.shut {
		q.mu.Unlock()
		return
	}
	if !e.done {
		q.waiting--
	}
	e.res, e.done = r, true
	head := q.start < len(q.pending) && q.pending[q.start] == e
	q.mu.Unlock()
	if head {
		q.wake()
	}
}

// reportLocked brings the stage's metrics up to date with the lane.
func (q *Queue) reportLocked() {
	m := q.s.m
	if d := q.inflight - q.reported; d != 0 {
		m.inFlightRecords.Add(float64(d))
		q.reported = q.inflight
	}
	if d := q.bytes - q.reportedBytes; d != 0 {
		m.inFlightBytes.Add(float64(d))
		q.reportedBytes = q.bytes
	}
	if q.hits > 0 {
		m.cacheHits.Add(float64(q.hits))
		q.hits = 0
	}
	if q.misses > 0 {
		m.cacheMisses.Add(float64(q.misses))
		q.misses = 0
	}
	for i, n := range q.direct {
		if n > 0 {
			m.results[i].Add(float64(n))
			q.direct[i] = 0
		}
	}
	q.unreported = 0
}

// shutLocked drops what is pending and releases blocked Submits: the lane
// is done.
func (q *Queue) shutLocked() {
	if q.shut {
		return
	}
	q.s.budget.release(q.bytes - q.unbudgeted) // what the budget holds of this lane
	q.inflight, q.waiting, q.bytes, q.unbudgeted = 0, 0, 0, 0
	q.reportLocked()
	clear(q.pending)
	q.pending, q.start = nil, 0
	q.shut = true
	q.releaseLocked()
}

func (q *Queue) releaseLocked() {
	if q.space != nil {
		close(q.space)
		q.space = nil
	}
}

// compactLocked reclaims the consumed front of the FIFO.
func (q *Queue) compactLocked() {
	switch {
	case q.start == len(q.pending):
		q.pending, q.start = q.pending[:0], 0
	case q.start >= 1024 && q.start >= len(q.pending)/2:
		n := copy(q.pending, q.pending[q.start:])
		clear(q.pending[n:])
		q.pending, q.start = q.pending[:n], 0
	}
}

// budget is the stage-wide bound on the bytes the lanes hold
// (MaxInFlightBytesTotal). Lanes add to it and release it under their own
// locks; a lane blocked only by it waits on space, which is closed when any
// lane releases bytes.
type budget struct {
	max  int64 // < 0: no bound
	used atomic.Int64

	mu      sync.Mutex
	waiting chan struct{} // closed by release; nil if nobody waits
	waiters atomic.Bool   // waiting != nil, read without mu
}

func (b *budget) add(n int64) { b.used.Add(n) }

// fits reports whether n more bytes stay within the bound.
func (b *budget) fits(n int64) bool {
	return b.max < 0 || b.used.Load()+n <= b.max
}

// fitsReserve reports whether n more bytes stay within the bound and its
// reserve, as much again, which only a lane's first readyMax records use.
// (Not 2*max, which would overflow for a bound near the largest int64.)
func (b *budget) fitsReserve(n int64) bool {
	return b.max < 0 || b.used.Load()+n-b.max <= b.max
}

// space returns a channel closed at the next release.
func (b *budget) space() <-chan struct{} {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting == nil {
		b.waiting = make(chan struct{})
		b.waiters.Store(true)
	}
	return b.waiting
}

// release gives n bytes back and wakes the lanes waiting for room.
func (b *budget) release(n int64) {
	if n == 0 {
		return
	}
	b.used.Add(-n)
	if !b.waiters.Load() {
		return
	}
	b.mu.Lock()
	if b.waiting != nil {
		close(b.waiting)
		b.waiting = nil
		b.waiters.Store(false)
	}
	b.mu.Unlock()
}
