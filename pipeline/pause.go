package pipeline

import (
	"context"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"
)

// pauseAfter is how long a partition's worker may go without asking for a
// record before its reader is closed, give or take as much again (a
// variable for tests).
var pauseAfter = 5 * time.Second

// readAheadRecords and readAheadBytes bound what kafka-go's reader of a
// partition fetches ahead into its queue: readAheadRecords records, and
// readAheadBytes of those over 4 KiB (the patched reader's QueueBytes; a
// record larger than that alone), so at most twice readAheadBytes.
// kafka-go's queue counts records whatever their size:
// at 900 KB a record a queue of 1000 held the whole backlog, far beyond
// commit.max_bytes.
const (
	readAheadRecords = 1000
	readAheadBytes   = 4 << 20
)

// pausingReader reads one partition through a kafka-go Reader that it
// closes when nobody has asked it for a record for pauseAfter — the window
// or the enrichment lanes full: a stall — and opens again at the next
// offset when asked. kafka-go's reader keeps fetching into its queue
// whatever floe holds: a stalled member held that much beyond its window in
// every partition, 200 MB a partition at 200 KB a record.
// Until a first record is read the seek may be symbolic (kafka.FirstOffset),
// which could resolve elsewhere the next time, so the reader stays open
// until then. A reader waiting for new records is not closed.
type pausingReader struct {
	open func(seek int64) (*kafka.Reader, error)

	mu      sync.Mutex
	r       *kafka.Reader // nil while paused
	next    int64         // where a new reader starts
	reading bool
	closed  bool
	// calls counts FetchMessage calls; seen is the count at the
	// watchdog's last look.
	calls, seen uint64
	watch       *time.Timer // from the first record on
}

// newPausingReader opens a reader at seek with open.
func newPausingReader(seek int64, open func(seek int64) (*kafka.Reader, error)) (*pausingReader, error) {
	r, err := open(seek)
	if err != nil {
		return nil, err
	}
	return &pausingReader{open: open, r: r, next: seek}, nil
}

// FetchMessage returns the partition's next record, opening a reader if
// the last one was closed.
func (p *pausingReader) FetchMessage(ctx context.Context) (kafka.Message, error) {
	p.mu.Lock()
	if p.r == nil {
		r, err := p.open(p.next)
		if err != nil {
			p.mu.Unlock()
			return kafka.Message{}, err
		}
		p.r = r
		p.watch.Reset(pauseAfter)
	}
	r := p.r
	p.reading = true
	p.calls++
	p.mu.Unlock()

	msg, err := r.FetchMessage(ctx)

	p.mu.Lock()
	defer p.mu.Unlock()
	p.reading = false
	if err == nil {
		p.next = msg.Offset + 1
		if p.watch == nil {
			p.watch = time.AfterFunc(pauseAfter, p.check)
		}
	}
	return msg, err
}

// check closes the reader, dropping what it fetched ahead, when it was not
// asked for a record since the last check; else it looks again later.
func (p *pausingReader) check() {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed || p.r == nil:
	case p.reading || p.calls != p.seen:
		p.seen = p.calls
		p.watch.Reset(pauseAfter)
	default:
		p.r.Close()
		p.r = nil
	}
}

// Close closes the reader.
func (p *pausingReader) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	if p.watch != nil {
		p.watch.Stop()
	}
	if p.r == nil {
		return nil
	}
	err := p.r.Close()
	p.r = nil
	return err
}

// readPast reports whether every record of the partition below offset
// has been returned: the open reader fetches at or past offset (past what
// it queued, and past batches the log cleaner emptied, which return no
// record) and its queue is empty. A closed reader cannot tell.
func (p *pausingReader) readPast(offset int64) bool {
	p.mu.Lock() // the watchdog cannot close the reader meanwhile
	defer p.mu.Unlock()
	if p.r == nil || p.reading {
		return false
	}
	// In this order: kafka-go's reader queues a record before it moves
	// its offset past it.
	return p.r.Stats().Offset >= offset && p.r.Stats().QueueLength == 0
}
