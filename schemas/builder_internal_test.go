package schemas

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
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

// TestBatchesOwnTheirMemory checks the hand-over in columns.go: batches of
// very different sizes come out right, each batch's memory is freed with
// it, and a Builder between batches holds almost nothing.
func TestBatchesOwnTheirMemory(t *testing.T) {
	s, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := s.NewBuilder(mem, 0)
	defer b.Release()

	long := strings.Repeat("u", 1000)
	appendN := func(n int, url string, nullEvery int) {
		for i := range n {
			msg := `{"session_id":"s","event_type":"e","ts":1,"url":"` + url + `"}`
			if nullEvery > 0 && i%nullEvery == 0 {
				msg = `{"session_id":"s","event_type":"e","ts":1,"url":null}`
			}
			if err := b.Append([]byte(msg), Meta{Topic: "t", Offset: int64(i)}, time.Time{}, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(n int, url string, nullEvery int) {
		t.Helper()
		rec := b.NewRecord()
		if rec.NumRows() != int64(n) {
			t.Fatalf("record has %d rows, want %d", rec.NumRows(), n)
		}
		for c, col := range rec.Columns() {
			if err := array.ValidateFull(col); err != nil {
				t.Fatalf("column %d: %v", c, err)
			}
		}
		urls := rec.Column(colURL).(*array.String)
		offsets := rec.Column(colKafkaOffset).(*array.Int64)
		for i := range n {
			null := nullEvery > 0 && i%nullEvery == 0
			if urls.IsNull(i) != null || (!null && urls.Value(i) != url) || offsets.Value(i) != int64(i) {
				t.Fatalf("row %d: url null=%v len=%d offset=%d", i, urls.IsNull(i), len(urls.Value(i)), offsets.Value(i))
			}
		}
		rec.Release()
		// Between batches the Builder keeps only the bitmaps of columns
		// that had no nulls: a few bytes per column for these batches.
		if held := mem.CurrentAlloc(); held > 16<<10 {
			t.Fatalf("idle builder holds %d bytes", held)
		}
	}

	appendN(2000, long, 0) // 2 MB of URLs
	check(2000, long, 0)
	appendN(10, "short", 3)
	check(10, "short", 3)
	appendN(3000, long, 7) // grows well past the small batch's size
	check(3000, long, 7)
	check(0, "", 0)
	appendN(1, long, 0)
	check(1, long, 0)
}
