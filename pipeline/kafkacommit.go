package pipeline

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"
)

// offsetCommitter commits a generation's Kafka offsets in the background,
// one request at a time, each with the newest offset of every partition
// flushed since the last. They are advisory (the table holds the
// watermarks: they serve lag monitoring and other tools), and kafka-go's
// call takes no context: a coordinator that does not answer held the flush
// for up to its timeout (rebalance timeout + 5 s), and the final flush
// past commit.grace.
type offsetCommitter struct {
	// commit is Generation.CommitOffsetsMetadata.
	commit  func(offsets map[string]map[int]int64, metadata map[string]map[int]string) error
	topic   string
	failed  func(error) // counts and logs a failed commit
	mu      sync.Mutex
	pending map[int]int64  // partition → offset not yet sent
	meta    map[int]string // partition → metadata of its pending offset (a pin's)
	wake    chan struct{}  // a send is pending
	stopped chan struct{}  // closed when run returns
	lastErr error          // of the last failed commit
	sending int            // pins in the commit in flight
	// retryPins makes run send pins again at its stop (a scheduled run
	// caught up); else it sends once, as a revoked generation must end
	// without delay.
	retryPins atomic.Bool
}

func newOffsetCommitter(gen *kafka.Generation, topic string, failed func(error)) *offsetCommitter {
	return &offsetCommitter{commit: gen.CommitOffsetsMetadata, topic: topic, failed: failed,
		pending: map[int]int64{}, meta: map[int]string{}, wake: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// add queues offsets (partition → next offset to read) after a flush.
func (c *offsetCommitter) add(offsets map[int]int64) {
	c.addWith(offsets, "")
}

// addWith queues offsets with metadata, which goes with each of them
// (pins: see pinMetadata); a later add of a partition replaces both.
func (c *offsetCommitter) addWith(offsets map[int]int64, metadata string) {
	c.mu.Lock()
	for p, o := range offsets {
		c.pending[p] = o
		if metadata == "" {
			delete(c.meta, p)
		} else {
			c.meta[p] = metadata
		}
	}
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// run sends what add queued until stop ends, then what is left, and
// returns; offsets whose commit failed go with the next send. With
// retryPins, pins still not committed then are sent again, backing off,
// until giveUp ends: a scheduled run's pins have no later flush to carry
// them, and a pin lost made the next run resolve "latest" anew (see
// pinsLost). The caller waits for it no longer than it may (close).
func (c *offsetCommitter) run(stop, giveUp context.Context) {
	defer close(c.stopped)
	for {
		select {
		case <-c.wake:
			c.send()
		case <-stop.Done():
			c.send()
			for backoff := 100 * time.Millisecond; c.retryPins.Load() && c.pinsLost() != nil; backoff = min(2*backoff, 2*time.Second) {
				select {
				case <-giveUp.Done():
					return
				case <-time.After(backoff):
				}
				c.send()
			}
			return
		}
	}
}

// pinsLost returns, while pins (offsets with metadata) are not committed,
// queued or in a commit not answered yet (kafka-go's call outlasts
// commit.grace), why; else nil.
func (c *offsetCommitter) pinsLost() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.sending > 0:
		return errors.New("their commit was not answered")
	case len(c.meta) == 0:
		return nil
	case c.lastErr == nil:
		return errors.New("not sent")
	}
	return c.lastErr
}

func (c *offsetCommitter) send() {
	c.mu.Lock()
	offsets, meta := c.pending, c.meta
	c.pending, c.meta = map[int]int64{}, map[int]string{}
	c.sending = len(meta)
	c.mu.Unlock()
	if len(offsets) == 0 {
		return
	}
	err := c.commit(map[string]map[int]int64{c.topic: offsets}, map[string]map[int]string{c.topic: meta})
	c.mu.Lock()
	c.sending = 0
	c.mu.Unlock()
	if err != nil {
		c.failed(err)
		// Sent again with the next: a start_offset "latest" pinned at
		// the generation's start has no flush to carry it otherwise.
		c.mu.Lock()
		c.lastErr = err
		for p, o := range offsets {
			if _, newer := c.pending[p]; !newer {
				c.pending[p] = o
				if m, ok := meta[p]; ok {
					c.meta[p] = m
				}
			}
		}
		c.mu.Unlock()
	}
}

// close waits for run to send the last offsets, until ctx ends (commit.grace
// at shutdown): a commit still waiting then is left to fail with the
// generation's connection.
func (c *offsetCommitter) close(ctx context.Context) {
	select {
	case <-c.stopped:
	case <-ctx.Done():
	}
}
