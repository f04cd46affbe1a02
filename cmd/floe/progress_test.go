package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floe-dev/floe/lakehouse"
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
