package enrich

import (
	"context"
	"sync"
)

// outBuffer is the capacity of a lane's Out channel. A lane holds at most
// MaxInFlightRecords records between Submit and Out, plus this many in Out.
const outBuffer = 256

// emitBatch bounds the records the emitter moves out of the lane per lock.
const emitBatch = 256

// DefaultMaxInFlightBytes is a lane's byte bound when
// Config.MaxInFlightBytes is 0.
const DefaultMaxInFlightBytes = 16 << 20

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

// Queue is one partition's ordered lane through the stage. Records leave Out
// in Submit order although their lookups complete out of order (like Flink's
// orderedWait): a record whose key is cached still waits behind an earlier
// record whose lookup is in flight. One goroutine per Queue moves completed
// records to Out.
//
// Submit is meant to be called from one goroutine (the partition's fetcher);
// concurrent Submits are safe, and ordered as they take the lane's lock.
type Queue struct {
	s      *Stage
	out    chan Completed
	notify chan struct{} // the head may be complete, or the lane closed
	abort  chan struct{} // closed by Abort

	mu       sync.Mutex
	pending  []*entry // FIFO from start
	start    int
	inflight int           // records from Submit until sent to out
	waiting  int           // records in pending whose lookup has not completed
	bytes    int64         // sizes (SubmitSized) of the inflight records
	maxBytes int64         // MaxInFlightBytes; < 0: no byte bound
	space    chan struct{} // closed when inflight drops; nil if nobody waits
	emitting bool          // the emitter holds records it has not sent yet
	closed   bool          // Close or Abort called
	aborted  bool
	outDone  bool // out is closed
}

// entry is one submitted record. res and done are guarded by the lane's lock.
type entry struct {
	item any
	res  Result
	size int64
	done bool
}

// NewQueue returns a new lane. Its goroutine ends once the lane is closed
// and drained, aborted, or the stage's Run has returned.
func (s *Stage) NewQueue() *Queue {
	maxBytes := s.cfg.MaxInFlightBytes
	if maxBytes == 0 {
		maxBytes = DefaultMaxInFlightBytes
	}
	q := &Queue{
		s:        s,
		maxBytes: maxBytes,
		out:      make(chan Completed, outBuffer),
		notify:   make(chan struct{}, 1),
		abort:    make(chan struct{}),
	}
	go q.emit()
	return q
}

// Out delivers the lane's records in Submit order. It is closed after Close
// once every submitted record has been delivered, promptly after Abort, or
// when the stage's Run returns (records still pending are then dropped; the
// caller redoes them from Kafka). Records already buffered in Out can still
// be received after it is closed.
func (q *Queue) Out() <-chan Completed { return q.out }

// Submit enqueues item, to be enriched with the lookup of key. It blocks
// while the lane holds MaxInFlightRecords records (backpressure: the caller
// stops fetching), and returns ctx.Err() if ctx ends meanwhile, ErrClosed
// after Close or Abort, ErrStopped once the stage's Run has returned. A
// record without a key ("") completes at once with StatusMiss.
func (q *Queue) Submit(ctx context.Context, key string, item any) error {
	return q.SubmitSized(ctx, key, item, 0)
}

// SubmitSized is Submit for an item of size bytes, counted against
// MaxInFlightBytes while the item is in the lane. A lane always admits a
// record when it holds none, however large.
func (q *Queue) SubmitSized(ctx context.Context, key string, item any, size int) error {
	s := q.s
	var res Result
	immediate := true
	switch {
	case key == "":
		res = Result{Status: StatusMiss}
	default:
		v, fr := s.cache.get(key, monoNow())
		switch fr {
		case absent:
			s.m.cacheMisses.Inc()
			immediate = false
		case stale:
			s.refresh(key)
			fallthrough
		default:
			s.m.cacheHits.Inc()
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
		// Fast path: nothing ahead of this record, so it may go straight to
		// Out if there is room. The emitter closes out under q.mu, so the
		// send cannot race with the close.
		if immediate && q.start == len(q.pending) && !q.emitting && !q.outDone {
			select {
			case q.out <- Completed{Item: item, Result: res}:
				q.mu.Unlock()
				s.m.result(res.Status)
				return nil
			default:
			}
		}
		if q.roomLocked(int64(size)) {
			break
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
		case <-space:
		}
		q.mu.Lock()
	}
	e := &entry{item: item, size: int64(size)}
	q.inflight++
	q.bytes += int64(size)
	s.m.inFlightRecords.Inc()
	q.pending = append(q.pending, e)
	if immediate {
		e.res, e.done = res, true
		if q.start == len(q.pending)-1 {
			q.wake()
		}
	} else {
		q.waiting++
	}
	q.mu.Unlock()
	if !immediate {
		s.lookup(key, q, e)
	}
	return nil
}

// roomLocked reports whether the lane may take one more record of size
// bytes: it holds fewer than MaxInFlightRecords records and, unless it is
// empty, fewer than MaxInFlightBytes bytes with this one; and beyond
// readyMax records only while one of them waits for a lookup.
func (q *Queue) roomLocked(size int64) bool {
	if q.inflight == 0 {
		return true
	}
	if q.inflight >= q.s.cfg.MaxInFlightRecords {
		return false
	}
	if q.maxBytes >= 0 && q.bytes+size > q.maxBytes {
		return false
	}
	return q.waiting > 0 || q.inflight < readyMax
}

// Close ends Submits. Out closes once the records already submitted have
// been delivered (or when the stage stops).
func (q *Queue) Close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

// Abort ends Submits and drops the records still pending: Out closes
// promptly. Use it when the partition is revoked, so that a lane waiting on
// a slow or paused service does not hold up the rebalance. Lookups already
// in flight still complete and fill the cache.
func (q *Queue) Abort() {
	q.mu.Lock()
	if q.aborted {
		q.mu.Unlock()
		return
	}
	q.closed, q.aborted = true, true
	close(q.abort)
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

// finish records e's result and wakes the emitter if e heads the lane.
func (q *Queue) finish(e *entry, r Result) {
	q.mu.Lock()
	if q.aborted || q.outDone {
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

// emit is the lane's goroutine: it moves completed records from the head of
// the lane to Out, in order.
func (q *Queue) emit() {
	s := q.s
	batch := make([]Completed, 0, emitBatch)
	sizes := make([]int64, 0, emitBatch)
	for {
		q.mu.Lock()
		batch, sizes = batch[:0], sizes[:0]
		for q.start < len(q.pending) && len(batch) < emitBatch {
			e := q.pending[q.start]
			if !e.done {
				break
			}
			batch = append(batch, Completed{Item: e.item, Result: e.res})
			sizes = append(sizes, e.size)
			q.pending[q.start] = nil
			q.start++
		}
		q.compactLocked()
		if len(batch) == 0 {
			q.emitting = false
			if q.closed && q.start == len(q.pending) {
				q.shutLocked()
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			select {
			case <-q.notify:
				continue
			case <-q.abort:
			case <-s.done:
			}
			q.shut()
			return
		}
		q.emitting = true
		q.mu.Unlock()
		sent, sentBytes := 0, int64(0)
		for i, c := range batch {
			select {
			case q.out <- c:
			default:
				// Out is full: release the records already sent before
				// blocking, so the lane's bound stays exact.
				q.settle(sent, sentBytes)
				sent, sentBytes = 0, 0
				select {
				case q.out <- c:
				case <-q.abort:
					q.shut()
					return
				case <-s.done:
					q.shut()
					return
				}
			}
			sent++
			sentBytes += sizes[i]
			s.m.result(c.Result.Status)
		}
		q.settle(sent, sentBytes)
	}
}

// shut closes the lane for good (see shutLocked).
func (q *Queue) shut() {
	q.mu.Lock()
	q.shutLocked()
	q.mu.Unlock()
}

// settle accounts for n records of size bytes sent to Out.
func (q *Queue) settle(n int, size int64) {
	if n == 0 {
		return
	}
	q.mu.Lock()
	q.inflight -= n
	q.bytes -= size
	q.s.m.inFlightRecords.Sub(float64(n))
	q.releaseLocked()
	q.mu.Unlock()
}

// shutLocked drops what is pending, closes out and releases blocked Submits.
func (q *Queue) shutLocked() {
	q.s.m.inFlightRecords.Sub(float64(q.inflight))
	q.inflight, q.waiting, q.bytes = 0, 0, 0
	clear(q.pending)
	q.pending, q.start = nil, 0
	q.outDone = true
	close(q.out)
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
