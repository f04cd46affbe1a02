package lakehouse

import (
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// TestSortByKeyAsArrowSorts: the rank sort of a string key orders rows as
// arrow-go's stable sort does (ascending, byte-wise, nulls last, ties in
// row order), over keys with duplicates, nulls, the empty string, prefixes
// of one another and multi-byte characters, and carries every column along.
func TestSortByKeyAsArrowSorts(t *testing.T) {
	values := []string{"", "a", "ab", "b", "s-10", "s-2", "s-2 ", "é", "e\u0301", "\xff", "Z"}
	for _, n := range []int{0, 1, 2, 17, 5000} {
		rng := rand.New(rand.NewPCG(uint64(n), 7))
		kb := array.NewStringBuilder(memory.DefaultAllocator)
		ob := array.NewInt64Builder(memory.DefaultAllocator)
		for i := range n {
			if rng.IntN(10) == 0 {
				kb.AppendNull()
			} else {
				kb.Append(values[rng.IntN(len(values))])
			}
			ob.Append(int64(i))
		}
		key, off := kb.NewArray(), ob.NewArray()
		schema := arrow.NewSchema([]arrow.Field{{Name: "k", Type: arrow.BinaryTypes.String, Nullable: true}, {Name: "o", Type: arrow.PrimitiveTypes.Int64}}, nil)
		rows := array.NewRecordBatch(schema, []arrow.Array{key, off}, int64(n))
		key.Release()
		off.Release()

		want, err := compute.SortRecordBatch(t.Context(), rows, []compute.SortKey{{ColumnIndex: 0, Order: compute.SortOrderAscending, NullPlacement: compute.SortNullsAtEnd}})
		if err != nil {
			t.Fatal(err)
		}
		got, err := sortByKey(t.Context(), rows, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !array.RecordEqual(got, want) {
			t.Fatalf("%d rows: the rank sort differs from arrow-go's:\n%v\n%v", n, got, want)
		}
		// Every row once: the offsets are a permutation.
		seen := make([]bool, n)
		for _, o := range got.Column(1).(*array.Int64).Int64Values() {
			if seen[o] {
				t.Fatalf("%d rows: row %d twice", n, o)
			}
			seen[o] = true
		}
		got.Release()
		want.Release()
		rows.Release()
	}
}
