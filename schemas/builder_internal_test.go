package schemas

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
)

// checkedBuilder returns a Builder of the built-in schema with extra
// columns, whose memory the test's end checks is all freed.
func checkedBuilder(t *testing.T, extra []Column) *Builder {
	s, err := Lookup(Clickstream)
	if err == nil {
		s, err = s.WithColumns(extra)
	}
	if err != nil {
		t.Fatal(err)
	}
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b := s.NewBuilder(mem, 0)
	t.Cleanup(func() {
		b.Release()
		mem.AssertSize(t, 0)
	})
	return b
}

// TestErrBuilderFull fakes a builder that already holds almost 2 GiB of
// strings (allocating that much in a test is not reasonable) and checks that
// the row that would overflow Arrow's int32 offsets is refused untouched and
// fits again after NewRecord.
func TestErrBuilderFull(t *testing.T) {
	b := checkedBuilder(t, nil)

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

// TestExtraAttrsAreReadAtNewRecord checks the Builder's late read of extra
// Attrs: a row's string bytes count toward the int32 bound when it is
// appended (a refused row leaves nothing behind for NewRecord), and each
// batch gets the Attrs of its own rows.
func TestExtraAttrsAreReadAtNewRecord(t *testing.T) {
	b := checkedBuilder(t, []Column{{Name: "segment", Type: iceberg.PrimitiveTypes.String}, {Name: "visits", Type: iceberg.PrimitiveTypes.Int64}})

	msg := []byte(`{"session_id":"s","event_type":"e","ts":1}`)
	m := Meta{Topic: "clicks"}
	gold := NewExtra([]Attr{StringAttr("gold"), LongAttr(7)})
	if gold.StrBytes != len("gold") {
		t.Fatalf("NewExtra counted %d string bytes, want %d", gold.StrBytes, len("gold"))
	}
	if err := b.AppendEnriched(msg, m, time.Time{}, "ok", gold); err != nil {
		t.Fatal(err)
	}
	if err := b.AppendEnriched(msg, m, time.Time{}, "miss", Extra{}); err != nil {
		t.Fatal(err)
	}
	// Room for the row without its attribute's string, not with it.
	b.strBytes = maxStringBytes - len("s") - len("e") - len("clicks") - len("ok") - len("silver") + 1
	silver := NewExtra([]Attr{StringAttr("silver")}) // short: visits is null
	if err := b.AppendEnriched(msg, m, time.Time{}, "ok", silver); !errors.Is(err, ErrBuilderFull) {
		t.Fatalf("AppendEnriched = %v, want ErrBuilderFull", err)
	}
	b.strBytes--
	if err := b.AppendEnriched(msg, m, time.Time{}, "ok", silver); err != nil {
		t.Fatalf("AppendEnriched at the limit = %v", err)
	}
	check := func(rec arrow.RecordBatch, want ...any) {
		t.Helper()
		defer rec.Release()
		seg := rec.Column(numCols).(*array.String)
		visits := rec.Column(numCols + 1).(*array.Int64)
		if int(rec.NumRows())*2 != len(want) {
			t.Fatalf("%d rows, want %d", rec.NumRows(), len(want)/2)
		}
		for i := range int(rec.NumRows()) {
			var got [2]any
			if seg.IsValid(i) {
				got[0] = seg.Value(i)
			}
			if visits.IsValid(i) {
				got[1] = visits.Value(i)
			}
			if got[0] != want[2*i] || got[1] != want[2*i+1] {
				t.Errorf("row %d: segment, visits = %v, want %v", i, got, want[2*i:2*i+2])
			}
		}
	}
	check(b.NewRecord(), "gold", int64(7), nil, nil, "silver", nil)
	if err := b.AppendEnriched(msg, m, time.Time{}, "ok", NewExtra([]Attr{StringAttr("tin"), LongAttr(1)})); err != nil {
		t.Fatal(err)
	}
	check(b.NewRecord(), "tin", int64(1))
}

// TestExtraMustCountItsStrings: an Extra whose StrBytes under-counts its
// strings (not made by NewExtra) is a programming error NewRecord reports,
// rather than a batch bounded by a wrong count.
func TestExtraMustCountItsStrings(t *testing.T) {
	b := checkedBuilder(t, []Column{{Name: "segment", Type: iceberg.PrimitiveTypes.String}})
	msg := []byte(`{"session_id":"s","event_type":"e","ts":1}`)
	if err := b.AppendEnriched(msg, Meta{Topic: "clicks"}, time.Time{}, "ok", Extra{Attrs: []Attr{StringAttr("gold")}}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "not made by NewExtra") {
			t.Fatalf("NewRecord with an uncounted Extra: recovered %v, want the programming error", r)
		}
	}()
	b.NewRecord().Release()
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
