package lakehouse

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// sortByKey returns rows sorted by their column idx, ascending with nulls
// last, and stable: a session's rows stay in offset order. The caller
// releases the result.
//
// A string key (a session id) is sorted by ranking its distinct values:
// a flush's rows hold a few thousand sessions, tens of rows each, so
// sorting the distinct values and placing each row by its value's rank (a
// counting sort) costs a tenth of arrow-go's comparison sort of every row
// (≈ 90 against ≈ 840 ns a row for 42,000 rows of 4,000 sessions). Other
// key types take arrow-go's sort.
func sortByKey(ctx context.Context, rows arrow.RecordBatch, idx int) (arrow.RecordBatch, error) {
	key, ok := rows.Column(idx).(*array.String)
	if !ok {
		return compute.SortRecordBatch(ctx, rows, []compute.SortKey{{
			ColumnIndex: idx, Order: compute.SortOrderAscending, NullPlacement: compute.SortNullsAtEnd,
		}})
	}
	order := rankOrder(key)
	indices := array.NewData(arrow.PrimitiveTypes.Int64, len(order),
		[]*memory.Buffer{nil, memory.NewBufferBytes(arrow.Int64Traits.CastToBytes(order))}, nil, 0, 0)
	defer indices.Release()
	out, err := compute.Take(ctx, *compute.DefaultTakeOptions(), compute.NewDatumWithoutOwning(rows),
		&compute.ArrayDatum{Value: indices})
	if err != nil {
		return nil, err
	}
	rec, ok := out.(*compute.RecordDatum)
	if !ok {
		out.Release()
		return nil, fmt.Errorf("sorting rows: take returned %s, want a record batch", out.Kind())
	}
	return rec.Value, nil
}

// rankOrder returns the row indices of key in the order that sorts it by
// value (byte-wise, as arrow-go compares strings), nulls last, rows of one
// value in their original order.
func rankOrder(key *array.String) []int64 {
	n := key.Len()
	ordinal := make(map[string]int32)
	var distinct []string
	// Each row's value as an ordinal of distinct (first seen first), then
	// as its rank among them; nulls rank after every value.
	rank := make([]int32, n)
	for i := range n {
		if key.IsNull(i) {
			rank[i] = -1
			continue
		}
		v := key.Value(i)
		o, seen := ordinal[v]
		if !seen {
			o = int32(len(distinct))
			ordinal[v] = o
			distinct = append(distinct, v)
		}
		rank[i] = o
	}
	byValue := make([]int32, len(distinct))
	for i := range byValue {
		byValue[i] = int32(i)
	}
	slices.SortFunc(byValue, func(a, b int32) int { return strings.Compare(distinct[a], distinct[b]) })
	rankOf := make([]int32, len(distinct))
	for r, o := range byValue {
		rankOf[o] = int32(r)
	}
	nulls := int32(len(distinct))
	// start[r] is where the rows of rank r begin.
	start := make([]int, len(distinct)+2)
	for i, o := range rank {
		if o < 0 {
			rank[i] = nulls
		} else {
			rank[i] = rankOf[o]
		}
		start[rank[i]+1]++
	}
	for r := 1; r < len(start); r++ {
		start[r] += start[r-1]
	}
	order := make([]int64, n)
	for i, r := range rank {
		order[start[r]] = int64(i)
		start[r]++
	}
	return order
}
