package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/lakehouse/faultcat"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestStalledClearedWhenRetryGivesUp: a flush whose commit fails until its
// context ends (revocation, commit.grace) no longer holds the member
// unready: it kept answering /readyz 503 "commits are failing" with nothing
// to commit, the catalog healthy again.
func TestStalledClearedWhenRetryGivesUp(t *testing.T) {
	m := &Member{stats: newStats("clicks"), log: slog.New(slog.DiscardHandler)}
	m.stats.Assigned.Store(1)
	ctx, cancel := context.WithCancel(context.Background())
	failures := 0
	err := m.retry(ctx, "committing", func() error {
		if failures++; failures == 2 {
			if why := notReady(m.stats); why == "" {
				t.Error("ready while its commits were failing")
			}
			cancel() // the grace period is over
		}
		return errors.New("catalog down")
	})
	if err == nil {
		t.Fatal("retry succeeded")
	}
	if why := notReady(m.stats); why != "" {
		t.Fatalf("not ready after the failing flush was given up: %q", why)
	}
}

// TestIdleGenerationForgetsRevokedLag: a generation that leaves the member
// without partitions (more members than partitions) stops reporting the
// lag of those it had, which their new owners report.
func TestIdleGenerationForgetsRevokedLag(t *testing.T) {
	m := &Member{cfg: Config{Kafka: KafkaConfig{Topic: "clicks"}}, stats: newStats("clicks"), log: slog.New(slog.DiscardHandler)}
	lag := m.stats.assign(map[int32]int64{0: 10, 1: 20})
	lag[0].highWater.Store(110)
	lag[1].highWater.Store(120)
	if l := m.stats.Lag(); len(l) != 2 {
		t.Fatalf("lag %v, want partitions 0 and 1", l)
	}
	gen := &kafka.Generation{ID: 2, Assignments: map[string][]kafka.PartitionAssignment{}}
	genCtx, cancel := context.WithCancel(context.Background())
	cancel() // the generation is over at once
	if err := m.generation(context.Background(), genCtx, gen, nil); err != nil {
		t.Fatal(err)
	}
	if l := m.stats.Lag(); len(l) != 0 {
		t.Fatalf("an idle member still reports the lag of partitions it no longer owns: %v", l)
	}
}

// TestCommitConflictsNeverDecrease: floe_commit_conflicts_total is a
// counter; read while commits are recorded it never goes down (it was
// attempts minus commits, two counters updated one after the other, and
// dipped to -1: a counter reset to Prometheus).
func TestCommitConflictsNeverDecrease(t *testing.T) {
	s := newStats("t")
	reg := prometheus.NewRegistry()
	if err := s.Register(reg); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200_000 {
			s.recordCommit(lakehouse.Result{Attempts: 1 + i%2}, time.Millisecond, 1, 1, time.Time{})
		}
	}()
	last := 0.0
	for running := true; running; {
		select {
		case <-done:
			running = false
		default:
		}
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == "floe_commit_conflicts_total" {
				v := mf.GetMetric()[0].GetCounter().GetValue()
				if v < last {
					t.Fatalf("floe_commit_conflicts_total went from %v to %v", last, v)
				}
				last = v
			}
		}
	}
	if last != 100_000 {
		t.Fatalf("floe_commit_conflicts_total is %v after 100,000 retried commits", last)
	}
}

// TestStoppedPartitionCountedUntilItsRetryHolds: a stopped partition stays
// counted (floe_partitions_stopped, /readyz 503) while its retries fail,
// and is no longer counted once a retry has fetched for stoppedClearAfter
// without failing. It was uncounted at the start of every retry, so a
// partition failing on the same record looked healthy again and again.
func TestStoppedPartitionCountedUntilItsRetryHolds(t *testing.T) {
	defer func(d time.Duration) { stoppedClearAfter = d }(stoppedClearAfter)
	stoppedClearAfter = 300 * time.Millisecond
	m, b := workingPartition(t)
	ctx, cancel := context.WithCancel(t.Context())
	calls := 0
	err := m.work(ctx, b, 0, func(int64) error {
		calls++
		stopped := m.stats.StoppedPartitions.Load()
		switch calls {
		case 1:
			return errors.New("an incompatible record")
		case 2:
			if stopped != 1 {
				t.Errorf("retry 1 began with %d partitions stopped, want 1", stopped)
			}
			return errors.New("the same record again")
		}
		if stopped != 1 {
			t.Errorf("retry 2 began with %d partitions stopped, want 1", stopped)
		}
		time.Sleep(2 * stoppedClearAfter) // fetching without failing
		if n := m.stats.StoppedPartitions.Load(); n != 0 {
			t.Errorf("%d partitions stopped after the retry held for %s, want 0", n, 2*stoppedClearAfter)
		}
		cancel()
		return nil
	})
	if err != nil || calls != 3 {
		t.Fatalf("work: %v after %d fetches, want nil after 3", err, calls)
	}
}

// TestFetchBackoffStartsOverAfterFetchingFine: a partition whose fetch
// fails now and then, each time after fetching fine for stoppedClearAfter,
// waits the first backoff (1 s) after each error. The backoff grew with
// every error a generation ever saw, up to 5 minutes of a partition held
// for one passing error.
func TestFetchBackoffStartsOverAfterFetchingFine(t *testing.T) {
	defer func(d time.Duration) { stoppedClearAfter = d }(stoppedClearAfter)
	stoppedClearAfter = 100 * time.Millisecond
	m, b := workingPartition(t)
	ctx, cancel := context.WithCancel(t.Context())
	var failed time.Time
	var waits []time.Duration
	err := m.work(ctx, b, 0, func(int64) error {
		if !failed.IsZero() {
			waits = append(waits, time.Since(failed))
		}
		if len(waits) == 3 {
			cancel()
			return nil
		}
		time.Sleep(2 * stoppedClearAfter) // fetching fine
		failed = time.Now()
		return errors.New("a passing fetch error")
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, w := range waits {
		if w > 1500*time.Millisecond {
			t.Errorf("error %d held the partition %s, want 1s; waits %v", i+1, w.Round(100*time.Millisecond), waits)
		}
	}
}

// workingPartition is a member and a clickstream partition buffer for
// Member.work, released when the test ends.
func workingPartition(t *testing.T) (*Member, *partitionBuffer) {
	t.Helper()
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	b := newPartitionBuffer(sc, "clicks", 0, lakehouse.NoWatermark, 1<<20, func(int64, int64) {})
	t.Cleanup(b.release)
	return &Member{stats: newStats("clicks"), log: slog.New(slog.DiscardHandler)}, b
}

// TestRetriedReadErrorIsLogged: a read error kafka-go's reader retries
// without end (here its refusal of a fetch size above int32) is logged at
// WARN once, the retries after it at DEBUG; it went nowhere, and run,
// replay and verify waited without a word. A reader that reads to the end
// of its partition and is closed logs nothing.
func TestRetriedReadErrorIsLogged(t *testing.T) {
	cl, err := embedded.StartTopic(t.Context(), "clicks", 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	gen := clickgen.New(clickgen.Config{Seed: 1})
	msgs := []clickgen.Message{gen.Next(), gen.Next(), gen.Next()}
	if _, err := cl.Produce(t.Context(), "clicks", msgs); err != nil {
		t.Fatal(err)
	}
	k := KafkaConfig{Brokers: cl.Addrs(), Topic: "clicks", FetchMaxBytes: 1 << 20}
	// read returns what the reader logged while read, and once closed.
	read := func(k KafkaConfig, records int) (reading, closed []slog.Record) {
		log := &recorded{}
		r, err := openReader(k, 0, &kafka.Dialer{Timeout: 10 * time.Second}, kafka.FirstOffset, readErrorLogger(slog.New(log), k.Topic, 0))
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		for range records {
			if _, err := r.FetchMessage(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := r.FetchMessage(ctx); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("reading past the end: %v", err)
		}
		reading = log.taken()
		r.Close()
		return reading, log.taken()
	}

	if _, logged := read(k, len(msgs)); len(logged) != 0 {
		t.Errorf("reading a partition to its end logged %d lines, the first %q", len(logged), logged[0].Message)
	}
	// Closing it may cut a retried dial short, which kafka-go logs too.
	k.FetchMaxBytes = 3 << 30
	logged, _ := read(k, 0)
	if len(logged) < 2 {
		t.Fatalf("%d lines logged by 2 s of failing reads, want a WARN and DEBUG lines", len(logged))
	}
	for i, r := range logged {
		want := slog.LevelDebug
		if i == 0 {
			want = slog.LevelWarn
		}
		var msg string
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "err" {
				msg = a.Value.String()
			}
			return true
		})
		if r.Level != want || !strings.Contains(msg, "maxBytes") {
			t.Fatalf("line %d at %s: %s err=%q; want %s naming maxBytes", i, r.Level, r.Message, msg, want)
		}
	}
}

// recorded is a slog.Handler that keeps the records it is given.
type recorded struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *recorded) Enabled(context.Context, slog.Level) bool { return true }
func (h *recorded) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *recorded) WithGroup(string) slog.Handler            { return h }

func (h *recorded) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

func (h *recorded) taken() []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.records)
}

// TestIdleScheduledTickEndsWithItsGeneration: a scheduled member assigned
// nothing asks the catalog at each tick whether the owners have caught up;
// a rebalance ends its generation while a catalog call hangs, and the
// generation returns at once. The call ran under Run's context alone, and
// kafka-go rejoins only once the generation function returns: a catalog
// that took minutes to answer held up the whole group's rebalance.
func TestIdleScheduledTickEndsWithItsGeneration(t *testing.T) {
	dir := t.TempDir()
	props := map[string]string{"type": "sql", "uri": "file:" + dir + "/c.db", "sql.dialect": "sqlite",
		"sql.driver": "sqlite", "warehouse": "file://" + dir + "/wh"}
	cat, err := lakehouse.OpenCatalog(t.Context(), props)
	if err != nil {
		t.Fatal(err)
	}
	fc := faultcat.Wrap(cat)
	sc, _ := schemas.Lookup(schemas.Clickstream)
	tbl, err := lakehouse.OpenIn(t.Context(), fc, lakehouse.Config{Table: "t.clicks", Group: "g"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	fc.InjectLoads(faultcat.Stall)

	m := &Member{cfg: Config{Kafka: KafkaConfig{Topic: "clicks"}, Commit: CommitConfig{Interval: Duration(50 * time.Millisecond)}},
		table: tbl, until: map[int32]int64{0: 10}, stats: newStats("clicks"), log: slog.New(slog.DiscardHandler)}
	gen := &kafka.Generation{ID: 2, Assignments: map[string][]kafka.PartitionAssignment{}}
	genCtx, endGen := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.generation(t.Context(), genCtx, gen, nil) }()
	// The first tick's load stalls; the rebalance comes meanwhile.
	time.Sleep(300 * time.Millisecond)
	endGen()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the idle generation still waits on the catalog 5 s after the rebalance ended it")
	}
}

// TestStartPartitions: how many partitions the topic had when the job
// first started, as the group's offsets tell: the least count its pins
// recorded (a pin committed after partitions were added records the count
// it found), else one past the highest partition with an offset (pins of
// an earlier floe, without the count), else nothing (the first start).
func TestStartPartitions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		commits map[int32]groupCommit
		want    int
		ok      bool
	}{
		{"no offsets", map[int32]groupCommit{}, 0, false},
		{"pins", map[int32]groupCommit{0: {5, pinMetadata(4, time.Unix(1, 0))}, 1: {7, pinMetadata(4, time.Unix(1, 0))}}, 4, true},
		{"a later pin", map[int32]groupCommit{0: {5, pinMetadata(4, time.Unix(1, 0))}, 2: {7, pinMetadata(6, time.Unix(1, 0))}}, 4, true},
		{"without the count", map[int32]groupCommit{0: {5, ""}, 2: {7, "other"}}, 3, true},
		{"a bad count", map[int32]groupCommit{1: {5, pinPrefix + "x"}}, 2, true},
	} {
		if got, ok := startPartitions(tc.commits); got != tc.want || ok != tc.ok {
			t.Errorf("%s: startPartitions = %d, %v; want %d, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

// TestParsePin: a pin's metadata gives its partition count and when it was
// committed; a pin committed before the time was recorded, or metadata of
// another kind, gives a zero time, which counts as old (see started).
func TestParsePin(t *testing.T) {
	at := time.UnixMilli(1764672000123)
	for _, tc := range []struct {
		metadata string
		n        int
		at       time.Time
	}{
		{pinMetadata(12, at), 12, at},
		{pinPrefix + "12", 12, time.Time{}}, // before the time was recorded
		{pinPrefix + "12" + pinStamp + "x", 12, time.Time{}},
		{pinPrefix + "x" + pinStamp + "1764672000123", 0, at},
		{"", 0, time.Time{}},
		{"other", 0, time.Time{}},
	} {
		if n, got := parsePin(tc.metadata); n != tc.n || !got.Equal(tc.at) {
			t.Errorf("parsePin(%q) = %d, %v; want %d, %v", tc.metadata, n, got, tc.n, tc.at)
		}
	}
	commits := map[int32]groupCommit{0: {5, pinMetadata(4, at)}, 1: {7, pinMetadata(4, at.Add(time.Hour))}, 2: {9, ""}}
	if got := lastPinned(commits); !got.Equal(at.Add(time.Hour)) {
		t.Errorf("lastPinned = %v, want the newer pin's %v", got, at.Add(time.Hour))
	}
	if got := lastPinned(map[int32]groupCommit{0: {5, pinPrefix + "4"}}); !got.IsZero() {
		t.Errorf("lastPinned of a pin without its time = %v, want zero", got)
	}
}

// TestOffsetsRetention: the pins' refresh age is half the broker's
// offsets.retention.minutes, read from the broker: Kafka's default, and one
// the broker was started with.
func TestOffsetsRetention(t *testing.T) {
	for _, tc := range []struct {
		configs map[string]string
		want    time.Duration
	}{
		{nil, 7 * 24 * time.Hour},
		{map[string]string{"offsets.retention.minutes": "90"}, 90 * time.Minute},
	} {
		cl, err := embedded.Start(1, kfake.BrokerConfigs(tc.configs))
		if err != nil {
			t.Fatal(err)
		}
		k := KafkaConfig{Brokers: cl.Addrs()}
		got, err := offsetsRetention(t.Context(), k)
		if err != nil || got != tc.want {
			t.Errorf("broker configs %v: offsetsRetention = %v, %v; want %v", tc.configs, got, err, tc.want)
		}
		if got := pinRefreshAfter(t.Context(), k); got != tc.want/2 {
			t.Errorf("broker configs %v: pinRefreshAfter = %v, want %v", tc.configs, got, tc.want/2)
		}
		cl.Close()
	}
	// Brokers that do not answer: the default.
	if got := pinRefreshAfter(t.Context(), KafkaConfig{Brokers: []string{"127.0.0.1:1"}}); got != 12*time.Hour {
		t.Errorf("pinRefreshAfter without brokers = %v, want 12h", got)
	}
}
