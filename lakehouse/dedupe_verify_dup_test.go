package lakehouse_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// TestVerifyDuplicateIDIsNoDuplicateKey: one row committed twice at the
// same offset (behind floe's back) is a duplicate id, and not also a
// duplicate business key: it was reported as both, "(same id, other
// offset)" naming the one offset twice.
func TestVerifyDuplicateIDIsNoDuplicateKey(t *testing.T) {
	tbl, sc := payTable(t, `{"type": "record", "name": "Pay", "floe.key": "id", "floe.dedupe-key": "id",
	  "fields": [{"name": "id", "type": "string"}]}`)
	build := func(from, to int64) arrow.RecordBatch {
		b := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
		defer b.Release()
		for i := from; i < to; i++ {
			if err := b.Append(fmt.Appendf(nil, `{"id":"p-%d"}`, i), schemas.Meta{Topic: "pay", Partition: 0, Offset: i}, time.Now(), ""); err != nil {
				t.Fatal(err)
			}
		}
		return b.NewRecord()
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{{Range: lakehouse.Range{Topic: "pay", Partition: 0, From: 0, To: 4},
		Resume: lakehouse.NoWatermark, Rows: build(0, 4)}}); err != nil {
		t.Fatal(err)
	}
	// Offset 1 appended again behind floe's back.
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rec := build(1, 2)
	defer rec.Release()
	rdr, _ := array.NewRecordReader(rec.Schema(), []arrow.RecordBatch{rec})
	defer rdr.Release()
	tx := it.NewTransaction()
	if err := tx.Append(t.Context(), rdr, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Commit(t.Context()); err != nil {
		t.Fatal(err)
	}
	r, err := tbl.Verify(t.Context(), "pay", lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	r.WriteText(&out)
	if r.DuplicateIDs != 1 || r.DuplicateKeys != 0 {
		t.Fatalf("duplicate ids %d, duplicate business keys %d; want 1 and 0 (the copy is at the same offset):\n%s", r.DuplicateIDs, r.DuplicateKeys, out.String())
	}
}
