package schemas

import (
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestErrBuilderFull fakes a builder that already holds almost 2 GiB of
// strings (allocating that much in a test is not reasonable) and checks that
// the row that would overflow Arrow's int32 offsets is refused untouched and
// fits again after NewRecord.
func TestErrBuilderFull(t *testing.T) {
	s, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := s.NewBuilder(mem, 0)
	defer b.Release()

	msg := []byte(`{"session_id":"s","event_type":"e","ts":1}`)
	m := Meta{Topic: "clicks", Offset: 1}
	if err := b.Append(msg, m, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	b.strBytes = maxStringBytes - len("s") - len("e") - len("clicks") - len("ok") + 1
	before := b.SizeBytes()
	if err := b.Append(msg, m, time.Time{}, "ok"); !errors.Is(err, ErrBuilderFull) {
		t.Fatalf("Append = %v, want ErrBuilderFull", err)
	}
	if b.Len() != 1 || b.SizeBytes() != before {
		t.Fatalf("refused Append changed the builder: Len %d, SizeBytes %d (was %d)", b.Len(), b.SizeBytes(), before)
	}
	b.strBytes-- // exactly at the limit is still addressable
	if err := b.Append(msg, m, time.Time{}, "ok"); err != nil {
		t.Fatalf("Append at the limit = %v", err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if rec.NumRows() != 2 {
		t.Fatalf("record has %d rows, want 2", rec.NumRows())
	}
	if err := b.Append(msg, m, time.Time{}, "ok"); err != nil {
		t.Fatalf("Append after NewRecord = %v", err)
	}
}
