package pipeline

import (
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/schemas"
)

// TestGapReportedOnce: offsets the log skipped are reported once, also when
// the record after them comes again because its append failed for a reason
// not its own (the offset stays uncovered and the worker retries it), and
// the record after an unbroken run reports none.
func TestGapReportedOnce(t *testing.T) {
	sc, err := schemas.Lookup(schemas.Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	type gap struct{ from, to int64 }
	var gaps []gap
	b := newPartitionBuffer(sc, "clicks", 0, 0, 1<<20, func(from, to int64) { gaps = append(gaps, gap{from, to}) })
	t.Cleanup(b.release)
	rec := func(off int64) kafka.Message {
		return kafka.Message{Offset: off, Time: time.Now(), Value: []byte(`{"event_id":"e","session_id":"s","user_id":"u","event_type":"click","ts":1700000000000,"seq":1}`)}
	}
	for _, off := range []int64{0, 1} {
		if _, _, dead, err := b.appendEnriched(rec(off), time.Now(), offResult); err != nil || dead {
			t.Fatalf("offset %d: dead %v, %v", off, dead, err)
		}
	}
	// Offsets 2–4 are gone from the log; offset 5's append fails after
	// extend (as it does when the builder refuses it), and 5 comes again.
	b.mu.Lock()
	err1, err2 := b.extend(rec(5)), b.extend(rec(5))
	b.mu.Unlock()
	if err1 != nil || err2 != nil {
		t.Fatalf("extend: %v, %v", err1, err2)
	}
	if _, _, dead, err := b.appendEnriched(rec(5), time.Now(), offResult); err != nil || dead {
		t.Fatalf("offset 5: dead %v, %v", dead, err)
	}
	if _, _, dead, err := b.appendEnriched(rec(6), time.Now(), offResult); err != nil || dead {
		t.Fatalf("offset 6: dead %v, %v", dead, err)
	}
	if len(gaps) != 1 || gaps[0] != (gap{2, 5}) {
		t.Fatalf("gaps reported %v, want [{2 5}] once", gaps)
	}
}
