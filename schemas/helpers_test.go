package schemas_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/floe-dev/floe/schemas"
)

// clickstream returns the built-in schema or fails the test.
func clickstream(tb testing.TB) *schemas.Schema {
	tb.Helper()
	s, err := schemas.Lookup("clickstream")
	if err != nil {
		tb.Fatalf("Lookup(clickstream): %v", err)
	}
	return s
}

// newBuilder returns a Builder on a checked allocator; cleanup releases it and
// then asserts that every byte it (or any batch it returned) allocated was freed.
func newBuilder(tb testing.TB, maxMessageBytes int) (*schemas.Schema, *schemas.Builder, *memory.CheckedAllocator) {
	tb.Helper()
	s := clickstream(tb)
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	tb.Cleanup(func() { mem.AssertSize(tb, 0) })
	b := s.NewBuilder(mem, maxMessageBytes)
	tb.Cleanup(b.Release)
	return s, b, mem
}

// testMeta is the Kafka coordinates the tests stamp rows with.
var (
	testIngested = time.Date(2024, 11, 29, 7, 0, 0, 123456000, time.UTC)
	testKafkaTS  = time.Date(2024, 11, 29, 6, 59, 59, 999000000, time.UTC)
)

func testMeta(offset int64) schemas.Meta {
	return schemas.Meta{Topic: "clicks", Partition: 7, Offset: offset, Timestamp: testKafkaTS}
}

// message returns a realistic clickstream message of exactly size bytes (size
// must be at least ~300): its URL is padded to the length.
func message(i, size int) []byte {
	const tmpl = `{"event_id":"%08x-7a4d-4c1e-9a53-0c6b1d2e3f40","session_id":"s-%07d","user_id":"u-%07d",` +
		`"event_type":"%s","url":"https://shop.example.com/p/%06d?q=%s","referrer":"https://www.google.com/",` +
		`"user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0",` +
		`"ts":%d,"seq":%d}`
	types := []string{"page_view", "click", "add_to_cart", "search"}
	ts := int64(1732860000000) + int64(i)*37
	m := fmt.Sprintf(tmpl, i, i/8, i/16, types[i%4], i, "", ts, i%8)
	pad := size - len(m)
	if pad < 0 {
		panic(fmt.Sprintf("message %d is %d bytes, over %d", i, len(m), size))
	}
	return []byte(fmt.Sprintf(tmpl, i, i/8, i/16, types[i%4], i, strings.Repeat("x", pad), ts, i%8))
}

// rowValues returns row i of rec as plain Go values, nil for null: strings,
// int64 for longs and timestamps (microseconds), int32 for ints.
func rowValues(tb testing.TB, rec arrow.RecordBatch, i int) []any {
	tb.Helper()
	out := make([]any, rec.NumCols())
	for c, col := range rec.Columns() {
		if col.IsNull(i) {
			continue
		}
		switch a := col.(type) {
		case *array.String:
			out[c] = a.Value(i)
		case *array.Int64:
			out[c] = a.Value(i)
		case *array.Int32:
			out[c] = a.Value(i)
		case *array.Timestamp:
			out[c] = int64(a.Value(i))
		default:
			tb.Fatalf("column %d has unexpected array type %T", c, col)
		}
	}
	return out
}

// checkColumns asserts that every column of rec has NumRows values.
func checkColumns(tb testing.TB, rec arrow.RecordBatch) {
	tb.Helper()
	for c, col := range rec.Columns() {
		if int64(col.Len()) != rec.NumRows() {
			tb.Fatalf("column %s has %d values, record has %d rows", rec.ColumnName(c), col.Len(), rec.NumRows())
		}
	}
}

func micros(t time.Time) int64 { return t.UnixMicro() }
