package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

func TestCommittedSince(t *testing.T) {
	start := lakehouse.Offsets{"t": {0: 100}} // partition 1 has no watermark yet
	end := map[int32]int64{0: 300, 1: 50, 2: 0}
	if got := committedSince("t", start, end, nil); got != 250 {
		t.Fatalf("to commit = %d, want 200+50", got)
	}
	if got := committedSince("t", start, end, start); got != 0 {
		t.Fatalf("committed at start = %d, want 0", got)
	}
	at := lakehouse.Offsets{"t": {0: 400, 1: 20}} // past the end seen at start: capped
	if got := committedSince("t", start, end, at); got != 220 {
		t.Fatalf("committed = %d, want 200+20", got)
	}
}

func TestProgressLogLines(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var done atomic.Int64
	stop := progressTo(nil, false, 20*time.Millisecond, log, "catching up", 1000, done.Load)
	done.Store(400)
	time.Sleep(70 * time.Millisecond)
	done.Store(1000)
	stop()
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) < 2 {
		t.Fatalf("want periodic lines and a final one, got %q", logs.String())
	}
	if !strings.Contains(lines[0], "done=400") || !strings.Contains(lines[0], "percent=40") || !strings.Contains(lines[0], "eta=") {
		t.Errorf("first line %q lacks done, percent or eta", lines[0])
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, "done=1000") || !strings.Contains(last, "percent=100") || strings.Contains(last, "eta=") {
		t.Errorf("final line %q", last)
	}
}

// TestProgressETABeyondADuration: an ETA past what a Duration holds (292
// years: a run far behind and nearly stalled) is said so; the Duration
// overflowed and the line showed a negative one (eta=-2345628h14m26s).
func TestProgressETABeyondADuration(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	var done atomic.Int64
	done.Store(1)
	stop := progressTo(nil, false, 20*time.Millisecond, log, "catching up", 1<<62, done.Load)
	time.Sleep(30 * time.Millisecond)
	stop()
	first := strings.SplitN(logs.String(), "\n", 2)[0]
	if !strings.Contains(first, `eta="over 292 years"`) {
		t.Errorf("first line %q, want eta=\"over 292 years\"", first)
	}
}

func TestProgressBarOnTerminal(t *testing.T) {
	var out bytes.Buffer
	var done atomic.Int64
	stop := progressTo(&out, true, time.Hour, slog.New(slog.DiscardHandler), "catching up", 1000, done.Load)
	done.Store(1000)
	time.Sleep(300 * time.Millisecond)
	stop()
	if s := out.String(); !strings.Contains(s, "catching up") || !strings.Contains(s, "100%") || !strings.Contains(s, "1000/1000") {
		t.Fatalf("bar output %q", s)
	}
}

// TestProgressBase: a scheduled run's progress counts a partition the
// table has no watermark of from where the run reads it — the group's
// Kafka offset, else the log start (start_offset earliest) or the end
// (latest) — not from 0: a run over a log retention had trimmed ended its
// progress at a few percent.
func TestProgressBase(t *testing.T) {
	ctx := t.Context()
	cl, err := embedded.StartTopic(ctx, "t", 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if _, err := cl.ProduceRate(ctx, "t", clickgen.New(clickgen.Config{Sessions: 50, Seed: 1}), 600, 0); err != nil {
		t.Fatal(err)
	}
	end, err := cl.EndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	// Partition 0: the table's watermark; 1: retention deleted half; 2:
	// the group committed an offset.
	if err := cl.DeleteRecords(ctx, "t", map[int32]int64{1: end[1] / 2}); err != nil {
		t.Fatal(err)
	}
	kc, err := kgo.NewClient(kgo.SeedBrokers(cl.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	offs := kadm.Offsets{}
	offs.Add(kadm.Offset{Topic: "t", Partition: 2, At: end[2] - 10, LeaderEpoch: -1})
	if _, err := kadm.NewClient(kc).CommitOffsets(ctx, "g", offs); err != nil {
		t.Fatal(err)
	}
	k := pipeline.KafkaConfig{Brokers: cl.Addrs(), Topic: "t", Group: "g", StartOffset: "earliest"}
	start := lakehouse.Offsets{"t": {0: end[0] - 5}}
	base := progressBase(ctx, k, start, end)
	want := map[int32]int64{0: end[0] - 5, 1: end[1] / 2, 2: end[2] - 10}
	for p, w := range want {
		if got, ok := base.Get("t", p); !ok || got != w {
			t.Errorf("partition %d counted from %d (%v), want %d", p, got, ok, w)
		}
	}
	if got := committedSince("t", base, end, nil); got != 5+(end[1]-end[1]/2)+10 {
		t.Errorf("to commit %d, want %d", got, 5+(end[1]-end[1]/2)+10)
	}
	k.StartOffset, k.Group = "latest", "other"
	if got, _ := progressBase(ctx, k, lakehouse.Offsets{}, end).Get("t", 1); got != end[1] {
		t.Errorf("start_offset latest: partition 1 counted from %d, want its end %d", got, end[1])
	}
	// A partition without a watermark or a group offset beside others with
	// watermarks was added to the topic, and is read from its log start
	// whatever start_offset says; it was counted from its end.
	if got, _ := progressBase(ctx, k, start, end).Get("t", 1); got != end[1]/2 {
		t.Errorf("start_offset latest, partition 1 added: counted from %d, want its log start %d", got, end[1]/2)
	}
	// Before the table's first commit, the group's pins say how many
	// partitions the topic had when the job first started: 0 was pinned
	// at its end when the topic had 1 partition, so 1 and 2 were added
	// since and are read from their log start. They were counted from their
	// end, and the run's progress left their records out.
	pins := kadm.Offsets{}
	pins.Add(kadm.Offset{Topic: "t", Partition: 0, At: end[0], LeaderEpoch: -1, Metadata: "floe.start_partitions=1"})
	if _, err := kadm.NewClient(kc).CommitOffsets(ctx, "pinned", pins); err != nil {
		t.Fatal(err)
	}
	k.Group = "pinned"
	base = progressBase(ctx, k, lakehouse.Offsets{}, end)
	for p, w := range map[int32]int64{0: end[0], 1: end[1] / 2, 2: 0} {
		if got, ok := base.Get("t", p); !ok || got != w {
			t.Errorf("start_offset latest, pinned with 1 partition: partition %d counted from %d (%v), want %d", p, got, ok, w)
		}
	}
}
