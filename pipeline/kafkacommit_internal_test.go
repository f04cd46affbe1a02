package pipeline

import (
	"context"
	"errors"
	"maps"
	"testing"
	"time"
)

// TestOffsetCommitterRetriesFailedOffsets: offsets whose commit failed go
// out with the next send, unless a newer offset of their partition is
// queued. They were dropped: a start_offset "latest" pinned at a
// generation's start, which no flush of a quiet partition carries again,
// was lost to one failed commit, and the partition started from the log's
// start at the next generation.
func TestOffsetCommitterRetriesFailedOffsets(t *testing.T) {
	var sent []map[int]int64
	var sentMeta []map[int]string
	fail := true
	c := &offsetCommitter{topic: "t", failed: func(error) {}, pending: map[int]int64{}, meta: map[int]string{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.commit = func(o map[string]map[int]int64, meta map[string]map[int]string) error {
		sent = append(sent, maps.Clone(o["t"]))
		sentMeta = append(sentMeta, maps.Clone(meta["t"]))
		if fail {
			fail = false
			return errors.New("coordinator moved")
		}
		return nil
	}
	c.addWith(map[int]int64{0: 100, 1: 5}, "pin") // the pins
	c.send()
	c.add(map[int]int64{1: 9}) // a flush of partition 1
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	c.run(stop, context.Background())
	want := []map[int]int64{{0: 100, 1: 5}, {0: 100, 1: 9}}
	if len(sent) != len(want) || !maps.Equal(sent[0], want[0]) || !maps.Equal(sent[1], want[1]) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
	// The pins' metadata goes with them, again when retried; not with the
	// flush that replaced one.
	wantMeta := []map[int]string{{0: "pin", 1: "pin"}, {0: "pin"}}
	if !maps.Equal(sentMeta[0], wantMeta[0]) || !maps.Equal(sentMeta[1], wantMeta[1]) {
		t.Fatalf("sent metadata %v, want %v", sentMeta, wantMeta)
	}
}

// TestOffsetCommitterRetriesPinsAtStop: pins still not committed when run
// stops are sent again with retryPins (a scheduled run caught up), backing
// off, until committed or giveUp ends; the
// last error is kept for pinsLost. They were sent once at stop: a
// scheduled run whose final commit failed lost its pin.
func TestOffsetCommitterRetriesPinsAtStop(t *testing.T) {
	for _, tc := range []struct {
		failures int
		lost     bool
	}{{3, false}, {1 << 30, true}} {
		sends := 0
		c := &offsetCommitter{topic: "t", failed: func(error) {}, pending: map[int]int64{}, meta: map[int]string{},
			wake: make(chan struct{}, 1), stopped: make(chan struct{})}
		c.commit = func(map[string]map[int]int64, map[string]map[int]string) error {
			if sends++; sends <= tc.failures {
				return errors.New("coordinator loading")
			}
			return nil
		}
		c.addWith(map[int]int64{0: 100}, "pin")
		c.retryPins.Store(true)
		stop, cancel := context.WithCancel(context.Background())
		cancel()
		giveUp, cancelGiveUp := context.WithTimeout(context.Background(), 2*time.Second)
		c.run(stop, giveUp)
		cancelGiveUp()
		if lost := c.pinsLost(); (lost != nil) != tc.lost || (!tc.lost && sends != tc.failures+1) {
			t.Errorf("%d failures: %d sends, pins lost %v", tc.failures, sends, lost)
		}
	}
}

// TestOffsetCommitterPinsInFlightAreNotCommitted: pins whose commit is
// still unanswered when commit.grace ends (kafka-go's call takes no
// context and outlasts it) are not committed: pinsLost says so. They were
// out of the queue, so the run ended caught up, status 0, without its pin.
func TestOffsetCommitterPinsInFlightAreNotCommitted(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	c := &offsetCommitter{topic: "t", failed: func(error) {}, pending: map[int]int64{}, meta: map[int]string{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.commit = func(map[string]map[int]int64, map[string]map[int]string) error {
		<-release // no answer before the grace ends
		return nil
	}
	c.addWith(map[int]int64{0: 100}, "pin")
	c.retryPins.Store(true)
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	grace, cancelGrace := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancelGrace()
	go c.run(stop, grace)
	c.close(grace) // as generation's caughtUp does
	if lost := c.pinsLost(); lost == nil {
		t.Fatal("pinsLost is nil while the only commit of the pins is still unanswered: the run ends caught up (exit 0) without its pin")
	}
}
