package pipeline_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/pipeline"
)

// TestReplayHalfPresent replays a range whose first half is already in the
// table: the half is skipped, the rest inserted, no watermark moves, and a
// live member started afterwards commits each offset exactly once.
func TestReplayHalfPresent(t *testing.T) {
	j := newJob(t, 2000, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, nil)
	log := slog.New(slog.DiscardHandler)
	half := j.end[0] / 2
	first, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, pipeline.ReplayRange{Partition: 0, From: 0, To: half}, log)
	if err != nil {
		t.Fatal(err)
	}
	if first.Inserted != half || first.Skipped != 0 {
		t.Fatalf("first replay: %+v, want %d inserted", first, half)
	}
	second, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, pipeline.ReplayRange{Partition: 0, From: 0, To: j.end[0]}, log)
	if err != nil {
		t.Fatal(err)
	}
	if second.Skipped != half || second.Inserted != j.end[0]-half || second.Read != j.end[0] {
		t.Fatalf("second replay: %+v, want %d skipped and %d inserted", second, half, j.end[0]-half)
	}
	if wm, _ := j.tbl.Watermarks(t.Context()); len(wm) != 0 {
		t.Fatalf("replays moved watermarks: %v", wm)
	}

	// The live job then starts from no watermark: the MERGE skips what the
	// replays inserted, and every offset is in the table once.
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- m.Run(ctx) }()
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := m.Stats().Skipped.Load(); got != j.end[0] {
		t.Fatalf("live job skipped %d rows, want the %d replayed", got, j.end[0])
	}
	var total int64
	for _, o := range j.end {
		total += o
	}
	if n := distinctIDs(t, j.tbl); int64(n) != total {
		t.Fatalf("%d distinct ids, want %d", n, total)
	}
}

func TestReplayRejectsBadRanges(t *testing.T) {
	j := newJob(t, 100, pipeline.CommitConfig{}, nil)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		r    pipeline.ReplayRange
		want string
	}{
		{pipeline.ReplayRange{Partition: 0, From: 5, To: 5}, "--from < --to"},
		{pipeline.ReplayRange{Partition: 9, From: 0, To: 1}, "no partition 9"},
		{pipeline.ReplayRange{Partition: 0, From: 0, To: 1 << 40}, "beyond the end"},
	} {
		if _, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, tc.r, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Replay(%+v) = %v, want an error with %q", tc.r, err, tc.want)
		}
	}
}
