package pipeline

import (
	"context"
	"errors"
	"maps"
	"testing"
)

// TestOffsetCommitterRetriesFailedOffsets: offsets whose commit failed go
// out with the next send, unless a newer offset of their partition is
// queued. They were dropped: a start_offset "latest" pinned at a
// generation's start, which no flush of a quiet partition carries again,
// was lost to one failed commit, and the partition started from the log's
// start at the next generation.
func TestOffsetCommitterRetriesFailedOffsets(t *testing.T) {
	var sent []map[int]int64
	fail := true
	c := &offsetCommitter{topic: "t", failed: func(error) {}, pending: map[int]int64{},
		wake: make(chan struct{}, 1), stopped: make(chan struct{})}
	c.commit = func(o map[string]map[int]int64) error {
		sent = append(sent, maps.Clone(o["t"]))
		if fail {
			fail = false
			return errors.New("coordinator moved")
		}
		return nil
	}
	c.add(map[int]int64{0: 100, 1: 5}) // the pins
	c.send()
	c.add(map[int]int64{1: 9}) // a flush of partition 1
	stop, cancel := context.WithCancel(context.Background())
	cancel()
	c.run(stop)
	want := []map[int]int64{{0: 100, 1: 5}, {0: 100, 1: 9}}
	if len(sent) != len(want) || !maps.Equal(sent[0], want[0]) || !maps.Equal(sent[1], want[1]) {
		t.Fatalf("sent %v, want %v", sent, want)
	}
}
