package pipeline

import "github.com/segmentio/kafka-go"

// Topics written by transactional producers are read committed (see
// ReaderConfig): the reader skips aborted transactions' records and the
// transactions' markers, and returns each batch it skipped as one message
// with kafka.Message.Skipped set, which the member covers here. So it does
// batches the log cleaner emptied and offsets retention deleted before they
// were read (skippedByLog), so that a log ending in them is read to its end.

// pass covers msg, the end of a record batch the reader skipped
// (kafka.Message.Skipped: a transaction's marker, or records of an aborted
// transaction), and the offsets before it back to what the buffer covers:
// none of them holds a record. They are recorded as absent from the log, as
// offsets the log cleaner removed are, so that verify does not take them
// for gaps. Offsets the log skipped before the batch began (compacted
// away, deleted by retention) are reported as such (gap); the batch's own
// are no loss. It returns how many of the batch's offsets it covered as a
// transaction's: none for offsets skipped by the log (skippedByLog).
func (b *partitionBuffer) pass(msg kafka.Message) (int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.inOrder(msg); err != nil {
		return 0, err
	}
	expect := b.next
	if !b.started {
		expect = b.resume
	}
	// from is where the run starts, first where the batch's own offsets
	// do.
	from := max(expect, b.gapTo)
	if expect < 0 {
		// No watermark to count from (a new partition, whose first batch
		// this is): the batch starts the segment.
		from = msg.SkippedFrom
	}
	from = min(from, msg.Offset)
	first := min(max(msg.SkippedFrom, from), msg.Offset)
	if skippedByLog(msg) {
		first = msg.Offset + 1 // all of them
	}
	if first > from && b.gap != nil {
		b.gap(from, first)
	}
	b.absent = append(b.absent, [2]int64{from, msg.Offset + 1})
	b.gapTo = msg.Offset + 1
	b.stamp(from, recordNanos(msg.Time))
	b.next = msg.Offset + 1
	return msg.Offset + 1 - first, nil
}

// skippedByLog reports whether msg, a skipped batch, stands for offsets the
// log no longer holds (a batch the log cleaner emptied, offsets retention
// deleted before they were read), not a transaction's.
func skippedByLog(msg kafka.Message) bool {
	return msg.Skipped == kafka.SkippedEmptied || msg.Skipped == kafka.SkippedDeleted
}

// cover accounts for msg, which is no row of this member's: a batch the
// reader skipped (passed), or a record another route takes (filtered).
func (m *Member) cover(b *partitionBuffer, msg kafka.Message, end int64, reached func()) error {
	if msg.Skipped != "" {
		return m.passed(b, msg, end, reached)
	}
	return m.filtered(b, msg, end, reached)
}

// passed accounts for msg, a batch the reader skipped (see pass).
func (m *Member) passed(b *partitionBuffer, msg kafka.Message, end int64, reached func()) error {
	n, err := b.pass(msg)
	if err != nil {
		return err
	}
	m.stats.TransactionSkipped.Add(n)
	if b.lag != nil {
		b.lag.raise(msg.HighWaterMark)
	}
	if msg.Offset+1 == end {
		reached()
	}
	return nil
}
