package enrich_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/internal/bytesize"
)

// TestTakeBatchesInOrder: Take hands over the completed head of the lane in
// Submit order, at most cap(buf) records at a time, never a record behind
// one still waiting for its lookup, and reports the end of a closed lane.
func TestTakeBatchesInOrder(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: 50 * time.Millisecond, P99: 50 * time.Millisecond})
	h := startStage(t, testConfig(url))
	ctx := context.Background()

	// Warm the cache with keys 0..9, so that only key 10 below is looked up.
	warm := h.st.NewQueue()
	for i := range 10 {
		if err := warm.Submit(ctx, key(i), i); err != nil {
			t.Fatal(err)
		}
	}
	warm.Close()
	if got := collect(warm); len(got) != 10 {
		t.Fatalf("warm-up: %d records out", len(got))
	}

	q := h.st.NewQueue()
	const n = 25
	for i := range n { // 0..9 cached, 10 cold, then 11..24 with cached keys
		k := key(i % 10)
		if i == 10 {
			k = key(10)
		}
		if err := q.Submit(ctx, k, i); err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	buf := make([]enrich.Completed, 0, 4)
	var got []int
	var sizes []int
	for {
		batch, err := q.Take(ctx, buf)
		if errors.Is(err, enrich.ErrClosed) {
			break
		}
		if err != nil {
			t.Fatalf("Take: %v", err)
		}
		sizes = append(sizes, len(batch))
		for _, c := range batch {
			i := c.Item.(int)
			k := key(i % 10)
			if i == 10 {
				k = key(10)
			}
			checkResult(t, srv, k, c.Result)
			got = append(got, i)
		}
	}
	if len(got) != n {
		t.Fatalf("%d records taken, want %d", len(got), n)
	}
	for i, v := range got {
		if v != i {
			t.Fatalf("record %d taken at position %d: %v", v, i, got)
		}
	}
	// The first ten were ready at once and leave in batches of at most 4;
	// the cold record 10 ends a batch, since nothing behind it was ready.
	taken := 0
	for _, s := range sizes {
		if s < 1 || s > cap(buf) {
			t.Fatalf("batch sizes %v: want 1..%d", sizes, cap(buf))
		}
		if taken < 10 && taken+s > 10 {
			t.Fatalf("batch sizes %v: a batch crossed the cold record", sizes)
		}
		taken += s
	}
	if _, err := q.Take(ctx, buf); !errors.Is(err, enrich.ErrClosed) {
		t.Fatalf("Take after the end: %v", err)
	}
	if g := h.metric(t, "floe_enrich_in_flight_records"); g != 0 {
		t.Fatalf("in_flight_records = %v after every record was taken", g)
	}
	if hits := h.metric(t, "floe_enrich_cache_hits_total"); hits != n-1 {
		t.Fatalf("cache hits = %v, want %d", hits, n-1)
	}
}

// TestPassKeepsItsPlace: an item passed without a lookup leaves the lane
// in order — behind a record still waiting for its lookup — with the zero
// Result, and is counted in no result or cache metric.
func TestPassKeepsItsPlace(t *testing.T) {
	_, url := startServer(t, enrich.ServerConfig{P50: 50 * time.Millisecond, P99: 50 * time.Millisecond})
	h := startStage(t, testConfig(url))
	ctx := context.Background()
	q := h.st.NewQueue()
	if err := q.Submit(ctx, key(1), 0); err != nil {
		t.Fatal(err)
	}
	if err := q.Pass(ctx, 1, 10); err != nil {
		t.Fatal(err)
	}
	if err := q.Submit(ctx, key(1), 2); err != nil { // joins the lookup of 0
		t.Fatal(err)
	}
	q.Close()
	got := collect(q)
	if len(got) != 3 {
		t.Fatalf("%d items out, want 3", len(got))
	}
	for i, c := range got {
		if c.Item.(int) != i {
			t.Fatalf("item %d out at %d", c.Item.(int), i)
		}
		r := c.Result
		passed := r.Status == "" && r.Values == nil && r.Err == nil
		if (i == 1) != passed || (i != 1 && r.Status != enrich.StatusOK) {
			t.Fatalf("item %d: result %+v", i, c.Result)
		}
	}
	var results float64
	for _, st := range []enrich.Status{enrich.StatusOK, enrich.StatusMiss, enrich.StatusSkipped, enrich.StatusDead, enrich.StatusError} {
		results += h.metric(t, "floe_enrich_results_total", "status", string(st))
	}
	if ok := h.metric(t, "floe_enrich_results_total", "status", "ok"); ok != 2 || results != 2 {
		t.Fatalf("%v results, %v of them ok; want 2 and 2 (the passed item counts in none)", results, ok)
	}
	if n := h.metric(t, "floe_enrich_cache_misses_total") + h.metric(t, "floe_enrich_cache_hits_total"); n != 2 {
		t.Fatalf("%v cache reads, want 2", n)
	}
}

// TestTakeEnds: Take returns promptly when the lane is aborted, when its
// context ends, and when the stage stops while the head waits for a lookup.
func TestTakeEnds(t *testing.T) {
	_, url := startServer(t, enrich.ServerConfig{P50: time.Hour, P99: time.Hour})
	cfg := testConfig(url)
	cfg.Timeout = enrich.Duration(time.Hour)
	h := startStage(t, cfg)
	ctx := context.Background()

	took := func(q *enrich.Queue, ctx context.Context) chan error {
		ch := make(chan error, 1)
		go func() {
			_, err := q.Take(ctx, nil)
			ch <- err
		}()
		return ch
	}
	wait := func(ch chan error, want error) {
		t.Helper()
		select {
		case err := <-ch:
			if !errors.Is(err, want) {
				t.Fatalf("Take returned %v, want %v", err, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("Take still waiting, want %v", want)
		}
	}

	q := h.st.NewQueue()
	if err := q.Submit(ctx, "u-slow", 1); err != nil {
		t.Fatal(err)
	}
	ch := took(q, ctx)
	q.Abort()
	wait(ch, enrich.ErrClosed)

	q = h.st.NewQueue()
	if err := q.Submit(ctx, "u-slow", 1); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	ch = took(q, cctx)
	cancel()
	wait(ch, context.Canceled)

	ch = took(q, ctx)
	h.stop()
	wait(ch, enrich.ErrStopped)
	if err := q.Submit(ctx, "u-1", 2); !errors.Is(err, enrich.ErrStopped) {
		t.Fatalf("Submit after stop: %v", err)
	}
}

// TestStageWideByteBound: a lane waiting on lookups grows past its first
// 1024 records only while the stage-wide byte bound has room; another lane
// still gets its first 1024, from the bound's reserve (so that it keeps
// moving); and lanes blocked by the bound move on once records are handed
// on.
func TestStageWideByteBound(t *testing.T) {
	const outage = 2 * time.Second
	const size, total, reserve = 1000, 2_500_000, 1024
	srv, h := stageBoundedBy(t, total, outage)

	const lanes, perLane = 2, 3000
	qs := make([]*enrich.Queue, lanes)
	recs := make([][]record, lanes)
	submitted := make([]atomic.Int64, lanes)
	var wg sync.WaitGroup
	start := func(i int) {
		recs[i] = distinctRecords(i, perLane)
		qs[i] = sizedLane(t, h.st, recs[i], size, &submitted[i], &wg)
	}
	// Nothing completes during the outage. The first lane grows to the
	// bound and stops there.
	start(0)
	waitFor(t, outage/4, "lane 0 to reach the bound", func() bool { return submitted[0].Load() == total/size })
	// The second lane still gets its first 1024 records, no more.
	start(1)
	waitFor(t, outage/4, "lane 1 to fill", func() bool { return submitted[1].Load() == reserve })
	time.Sleep(outage / 8)
	if a, b := submitted[0].Load(), submitted[1].Load(); a != total/size || b != reserve {
		t.Fatalf("during the outage: %d and %d records submitted; want %d (the bound) and %d", a, b, total/size, reserve)
	}
	if b := h.metric(t, "floe_enrich_in_flight_bytes"); b != total+reserve*size {
		t.Fatalf("in_flight_bytes = %v, want %d", b, total+reserve*size)
	}

	out := collectAll(qs)
	wg.Wait()
	checkLanes(t, srv, recs, out)
	if b := h.metric(t, "floe_enrich_in_flight_bytes"); b != 0 {
		t.Fatalf("in_flight_bytes = %v after every record was taken", b)
	}
}

// TestManyLanesStayWithinTwiceTheBound: with many lanes, each lane's first
// records draw on the stage-wide bound's reserve rather than each being
// allowed 1024 of them, so the lanes together hold at most twice the bound
// and no less (here 64 lanes would otherwise hold 1 GB against a bound of
// 40 MB; sizes are only accounted, not allocated); and every record still
// comes out once the service answers.
func TestManyLanesStayWithinTwiceTheBound(t *testing.T) {
	const outage = 4 * time.Second
	const size, total = 16_000, 40_000_000
	srv, h := stageBoundedBy(t, total, outage)

	const lanes, perLane = 64, 1024
	qs := make([]*enrich.Queue, lanes)
	recs := make([][]record, lanes)
	var submitted atomic.Int64
	var wg sync.WaitGroup
	for i := range lanes {
		recs[i] = distinctRecords(i, perLane)
		qs[i] = sizedLane(t, h.st, recs[i], size, &submitted, &wg)
	}
	// Nothing completes during the outage: the lanes fill the bound and
	// its reserve, and stop there. A lane always admits one record, and a
	// lane tells the bound its bytes in batches (64 KiB), so each may pass
	// it, or stop short of it, by that much.
	slack := float64(lanes * (size + 64<<10))
	low, high := 2*total-slack, 2*total+slack
	held := func() float64 { return h.metric(t, "floe_enrich_in_flight_bytes") }
	waitFor(t, outage*3/4, "the lanes to fill the bound and its reserve", func() bool { return held() >= low })
	time.Sleep(100 * time.Millisecond) // room to overshoot, were the bound not kept
	if b := held(); b > high {
		t.Fatalf("during the outage the lanes hold %v bytes (%d records); want at most twice the bound, %v", b, submitted.Load(), high)
	}
	t.Logf("during the outage: %d records, %v bytes held", submitted.Load(), held())

	drained := make(chan [][]enrich.Completed, 1)
	go func() { drained <- collectAll(qs) }()
	select {
	case out := <-drained:
		wg.Wait()
		checkLanes(t, srv, recs, out)
	case <-time.After(outage + time.Minute):
		t.Fatal("the lanes were not drained a minute after the outage: a lane waiting for room was not woken")
	}
}

// TestTakeGivesBackBeforeWaiting: records a lane has handed on stop counting
// against the stage-wide bound when its Take waits for the lookup at its
// head, not only once that lookup completes: another lane gets their room
// meanwhile.
func TestTakeGivesBackBeforeWaiting(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: time.Millisecond, P99: 5 * time.Millisecond, Seed: 4})
	cfg := testConfig(url)
	cfg.MaxInFlightRecords = 1 << 20
	cfg.MaxInFlightBytes = -1
	cfg.MaxInFlightBytesTotal = 50_000 // 100,000 with the reserve
	h := startStage(t, cfg)
	warm := h.st.NewQueue()
	if err := warm.Submit(context.Background(), key(1), 0); err != nil {
		t.Fatal(err)
	}
	warm.Close()
	collect(warm)

	// Lane a: a cached record, one waiting for a lookup through an outage,
	// another cached one; 80,001 bytes, which it tells the bound.
	srv.SetOutage(true)
	a := h.st.NewQueue()
	for _, r := range []struct {
		key  string
		size int
	}{{key(1), 40_000}, {key(2), 1}, {key(1), 40_000}} {
		if err := a.SubmitSized(context.Background(), []byte(r.key), r.key, r.size); err != nil {
			t.Fatal(err)
		}
	}
	a.Close()
	if got, err := a.Take(context.Background(), nil); err != nil || len(got) != 1 {
		t.Fatalf("Take: %d records, %v; want the first", len(got), err)
	}
	rest := make(chan []enrich.Completed, 1)
	go func() { rest <- collect(a) }() // waits for the lookup at the head

	// Lane b gets room for the 40,000 bytes lane a handed on: four records
	// of 14,000 beside lane a's 40,001 (one, if they still counted).
	b := h.st.NewQueue()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i := range 4 {
		if err := b.SubmitSized(ctx, []byte(key(10+i)), i, 14_000); err != nil {
			t.Fatalf("lane b's record %d: %v (lane a's handed-on bytes still count)", i, err)
		}
	}
	srv.SetOutage(false)
	b.Close()
	if got := collect(b); len(got) != 4 {
		t.Fatalf("lane b: %d records out, want 4", len(got))
	}
	if got := <-rest; len(got) != 2 {
		t.Fatalf("lane a: %d more records out, want 2", len(got))
	}
}

// stageBoundedBy starts a stage whose only bound is total bytes for all
// lanes, on a reference server that answers nothing for outage, then at
// once.
func stageBoundedBy(t *testing.T, total int64, outage time.Duration) (*enrich.Server, *harness) {
	srv, url := startServer(t, enrich.ServerConfig{
		P50: time.Millisecond, P99: 5 * time.Millisecond, Seed: 3,
		Outages: []enrich.Outage{{Start: 0, End: outage}},
	})
	cfg := testConfig(url)
	cfg.MaxInFlightRecords = 1 << 20
	cfg.MaxInFlightBytes = -1
	cfg.MaxInFlightBytesTotal = bytesize.Bound(total)
	return srv, startStage(t, cfg)
}

// distinctRecords is n records for lane, each with a key of its own.
func distinctRecords(lane, n int) []record {
	recs := make([]record, n)
	for j := range recs {
		recs[j] = record{lane: lane, seq: j, key: key(lane*n + j)}
	}
	return recs
}

// sizedLane submits recs, sized size bytes each, to a new lane of st from a
// goroutine of its own, counting each in submitted, and closes the lane
// after the last; wg is done once it has.
func sizedLane(t *testing.T, st *enrich.Stage, recs []record, size int, submitted *atomic.Int64, wg *sync.WaitGroup) *enrich.Queue {
	q := st.NewQueue()
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer q.Close()
		for _, r := range recs {
			if err := q.SubmitSized(context.Background(), []byte(r.key), r, size); err != nil {
				t.Errorf("Submit: %v", err)
				return
			}
			submitted.Add(1)
		}
	}()
	return q
}

// collectAll reads every lane to its end, all at once.
func collectAll(qs []*enrich.Queue) [][]enrich.Completed {
	out := make([][]enrich.Completed, len(qs))
	var wg sync.WaitGroup
	for i := range qs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = collect(qs[i])
		}()
	}
	wg.Wait()
	return out
}

// warmStage starts a reference server answering after latency, a stage on
// it, and caches key(1) through a lane of its own (one ok result).
func warmStage(t *testing.T, latency time.Duration) (*enrich.Server, *harness) {
	t.Helper()
	srv, url := startServer(t, enrich.ServerConfig{P50: latency, P99: latency})
	h := startStage(t, testConfig(url))
	warm := h.st.NewQueue()
	if err := warm.Submit(context.Background(), key(1), 0); err != nil {
		t.Fatal(err)
	}
	warm.Close()
	collect(warm)
	return srv, h
}

// TestDirectOnlyWhenIdle: Direct answers a cached key, or a record without
// one, at once while the lane is idle, and declines while a submitted
// record is in the lane or taken but not yet Delivered; AwaitIdle declines
// at once while a record waits for a lookup, and otherwise waits for
// Delivered. Direct's answers count in the results and cache metrics.
func TestDirectOnlyWhenIdle(t *testing.T) {
	srv, h := warmStage(t, 100*time.Millisecond)
	ctx := context.Background()

	q := h.st.NewQueue()
	if !q.Idle() || !q.AwaitIdle(ctx) {
		t.Fatal("a new lane is not idle")
	}
	r, ok := q.Direct(ctx, []byte(key(1)))
	if !ok {
		t.Fatal("Direct declined a cached key on an idle lane")
	}
	checkResult(t, srv, key(1), r)
	if r, ok := q.Direct(ctx, nil); !ok || r.Status != enrich.StatusMiss {
		t.Fatalf("Direct without a key: %+v, %v; want a miss", r, ok)
	}
	if _, ok := q.Direct(ctx, []byte(key(2))); ok {
		t.Fatal("Direct answered a key that is not cached")
	}

	// A record waiting for its lookup: nothing goes around it.
	if err := q.Submit(ctx, key(2), 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.Direct(ctx, []byte(key(1))); ok {
		t.Fatal("Direct answered while a record waits in the lane")
	}
	if q.AwaitIdle(ctx) {
		t.Fatal("AwaitIdle waited while a record waits for a lookup")
	}
	batch, err := q.Take(ctx, nil)
	if err != nil || len(batch) != 1 {
		t.Fatalf("Take: %d records, %v", len(batch), err)
	}
	// Taken, not yet handed on: Direct waits for the lane to be idle.
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	_, ok = q.Direct(short, []byte(key(1)))
	cancelShort()
	if ok {
		t.Fatal("Direct answered before the taken record was Delivered")
	}
	direct := make(chan bool, 1)
	go func() {
		_, ok := q.Direct(ctx, []byte(key(1)))
		direct <- ok
	}()
	select {
	case <-direct:
		t.Fatal("Direct returned before Delivered")
	case <-time.After(100 * time.Millisecond):
	}
	q.Delivered(len(batch))
	select {
	case ok := <-direct:
		if !ok {
			t.Fatal("Direct declined once the lane was idle")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Direct still waiting after Delivered")
	}
	if _, ok := q.Direct(ctx, []byte(key(2))); !ok {
		t.Fatal("Direct declined a key cached by the lane's own lookup")
	}

	// A waiting AwaitIdle ends with its context.
	if err := q.Submit(ctx, key(1), 2); err != nil { // cached: ready at once
		t.Fatal(err)
	}
	idle := make(chan bool, 1)
	cctx, cancel := context.WithCancel(ctx)
	go func() { idle <- q.AwaitIdle(cctx) }()
	cancel()
	select {
	case ok := <-idle:
		if ok {
			t.Fatal("AwaitIdle: true after its context ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("AwaitIdle still waiting after its context ended")
	}
	q.Abort()
	if _, ok := q.Direct(ctx, []byte(key(1))); ok {
		t.Fatal("Direct answered on an aborted lane")
	}

	// A lane read through Out is never Delivered: Direct declines at once
	// rather than wait for it to be idle.
	out := h.st.NewQueue()
	if err := out.Submit(ctx, key(1), 3); err != nil {
		t.Fatal(err)
	}
	<-out.Out()
	if _, ok := out.Direct(ctx, []byte(key(1))); ok || out.AwaitIdle(ctx) {
		t.Fatal("Direct or AwaitIdle answered on a lane read through Out")
	}
	out.Abort()

	// Four answered by Direct (three ok, one miss without a key), three
	// taken (the warm-up's, key 2's and the Out lane's), none for the
	// aborted record: all in the results. Direct's three cache reads and
	// the two Submits' of key 1 are hits.
	if ok, miss := h.metric(t, "floe_enrich_results_total", "status", "ok"), h.metric(t, "floe_enrich_results_total", "status", "miss"); ok != 6 || miss != 1 {
		t.Fatalf("results: %v ok, %v miss; want 6 and 1", ok, miss)
	}
	if hits := h.metric(t, "floe_enrich_cache_hits_total"); hits != 5 {
		t.Fatalf("%v cache hits, want 5", hits)
	}
}

// TestCachedNeverWaits: Cached answers like Direct on an idle lane (a
// cached key, a record without one, counted in the metrics), but declines
// at once, without waiting, while a record is in the lane, even one whose
// result is ready, or taken and not yet Delivered, and on an aborted lane,
// counting nothing then.
func TestCachedNeverWaits(t *testing.T) {
	srv, h := warmStage(t, 100*time.Millisecond)
	ctx := context.Background()

	q := h.st.NewQueue()
	r, ok := q.Cached([]byte(key(1)))
	if !ok {
		t.Fatal("Cached declined a cached key on an idle lane")
	}
	checkResult(t, srv, key(1), r)
	if r, ok := q.Cached(nil); !ok || r.Status != enrich.StatusMiss {
		t.Fatalf("Cached without a key: %+v, %v; want a miss", r, ok)
	}
	if _, ok := q.Cached([]byte(key(2))); ok {
		t.Fatal("Cached answered a key that is not cached")
	}

	// A record with a ready result in the lane: Direct would wait for it
	// to be Delivered, Cached declines.
	if err := q.Submit(ctx, key(1), 1); err != nil {
		t.Fatal(err)
	}
	if _, ok := q.Cached([]byte(key(1))); ok {
		t.Fatal("Cached answered while a record is in the lane")
	}
	batch, err := q.Take(ctx, nil)
	if err != nil || len(batch) != 1 {
		t.Fatalf("Take: %d records, %v", len(batch), err)
	}
	if _, ok := q.Cached([]byte(key(1))); ok {
		t.Fatal("Cached answered before the taken record was Delivered")
	}
	q.Delivered(len(batch))
	if _, ok := q.Cached([]byte(key(1))); !ok {
		t.Fatal("Cached declined once the lane was idle")
	}
	q.Abort() // reports what the lane has not yet
	if _, ok := q.Cached([]byte(key(1))); ok {
		t.Fatal("Cached answered on an aborted lane")
	}

	// The warm-up's result, two answered by Cached with key 1 and the
	// taken record's are ok, the keyless one a miss; the hits are the
	// three cache reads of key 1 that answered and the Submit's.
	if ok, miss := h.metric(t, "floe_enrich_results_total", "status", "ok"), h.metric(t, "floe_enrich_results_total", "status", "miss"); ok != 4 || miss != 1 {
		t.Fatalf("results: %v ok, %v miss; want 4 and 1", ok, miss)
	}
	if hits := h.metric(t, "floe_enrich_cache_hits_total"); hits != 3 {
		t.Fatalf("%v cache hits, want 3", hits)
	}
}

// TestDirectReportsWhileQuiet: what Direct answers reaches the metrics
// while the lane's consumer sleeps in Take and nothing else happens on the
// lane, within reportIdle.
func TestDirectReportsWhileQuiet(t *testing.T) {
	_, h := warmStage(t, 10*time.Millisecond)
	ctx := context.Background()

	q := h.st.NewQueue()
	defer q.Abort()
	go q.Take(ctx, nil) // the consumer, asleep until the Abort
	time.Sleep(50 * time.Millisecond)
	const n = 10
	for range n {
		if _, ok := q.Direct(ctx, []byte(key(1))); !ok {
			t.Fatal("Direct declined a cached key on an idle lane")
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, hits := h.metric(t, "floe_enrich_results_total", "status", "ok"), h.metric(t, "floe_enrich_cache_hits_total")
		if ok == 1+n && hits == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v ok results and %v cache hits, want %d and %d", ok, hits, 1+n, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestAwaitIdleEnds: a waiting AwaitIdle returns false when its lane is
// aborted and when the stage stops.
func TestAwaitIdleEnds(t *testing.T) {
	_, h := warmStage(t, 10*time.Millisecond)
	ctx := context.Background()

	// A lane holding a record that is ready but not taken: AwaitIdle waits.
	busy := func() *enrich.Queue {
		q := h.st.NewQueue()
		if err := q.Submit(ctx, key(1), 0); err != nil {
			t.Fatal(err)
		}
		return q
	}
	await := func(q *enrich.Queue) chan bool {
		ch := make(chan bool, 1)
		go func() { ch <- q.AwaitIdle(ctx) }()
		select {
		case <-ch:
			t.Fatal("AwaitIdle returned on a busy lane")
		case <-time.After(50 * time.Millisecond):
		}
		return ch
	}
	ended := func(ch chan bool, why string) {
		t.Helper()
		select {
		case ok := <-ch:
			if ok {
				t.Fatalf("AwaitIdle: true after %s", why)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("AwaitIdle still waiting after %s", why)
		}
	}

	q := busy()
	ch := await(q)
	q.Abort()
	ended(ch, "Abort")

	ch = await(busy())
	h.stop()
	ended(ch, "the stage stopped")
}
