package schemas

import (
	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The column buffers below hold a batch in Arrow's memory layout in plain Go
// slices. They replace arrow-go's array builders on the per-record path: a
// builder append is a handful of calls through closures and capacity checks
// per value, which measured about as much as parsing the JSON itself, while
// appending to a slice is a bounds check and a store. The slices keep their
// capacity from batch to batch, so a steady stream of batches appends
// without allocating; NewRecord copies each column once into an exact-size
// buffer from the caller's allocator, which is what memory accounting and
// leak checks see.

// shrinkAbove is the capacity, in elements, above which a column drops a
// buffer that its last batch used less than a quarter of, so one unusually
// large batch does not pin its memory for the life of the Builder.
const shrinkAbove = 1 << 20

// recycle empties s for the next batch, keeping its capacity unless the
// batch just taken used little of a large buffer.
func recycle[T any](s []T) []T {
	if cap(s) > shrinkAbove && len(s) < cap(s)/4 {
		return nil
	}
	return s[:0]
}

// validity is a column's validity bitmap, least significant bit first.
type validity struct {
	bits  []byte
	nulls int
}

// add records whether row n (the row count before this append) is valid.
func (v *validity) add(n int, valid bool) {
	if n&7 == 0 {
		v.bits = append(v.bits, 0)
	}
	if valid {
		v.bits[n>>3] |= 1 << (n & 7)
	} else {
		v.nulls++
	}
}

// buffer copies the bitmap to mem, or returns nil when no row is null:
// Arrow's "all valid" form, which readers and the Parquet writer
// short-cut.
func (v *validity) buffer(mem memory.Allocator) *memory.Buffer {
	if v.nulls == 0 {
		return nil
	}
	return copyToBuffer(mem, v.bits)
}

func (v *validity) reset() {
	v.bits = recycle(v.bits)
	v.nulls = 0
}

// stringColumn buffers a String column: int32 offsets, data, validity.
type stringColumn struct {
	offsets []int32 // rows+1 entries; offsets[0] == 0
	data    []byte
	valid   validity
}

func (c *stringColumn) append(n int, s []byte) {
	c.data = append(c.data, s...)
	c.offsets = append(c.offsets, int32(len(c.data)))
	c.valid.add(n, true)
}

func (c *stringColumn) appendNull(n int) {
	c.offsets = append(c.offsets, int32(len(c.data)))
	c.valid.add(n, false)
}

func (c *stringColumn) reset() {
	c.offsets = append(recycle(c.offsets), 0)
	c.data = recycle(c.data)
	c.valid.reset()
}

func (c *stringColumn) newArray(mem memory.Allocator, dt arrow.DataType, n int) arrow.Array {
	if c.offsets == nil { // never appended to, never reset
		c.offsets = []int32{0}
	}
	return newArray(dt, n, c.valid.nulls,
		c.valid.buffer(mem),
		copyToBuffer(mem, arrow.Int32Traits.CastToBytes(c.offsets)),
		copyToBuffer(mem, c.data))
}

// fixedColumn buffers a fixed-width column: Int32, Int64 or Timestamp.
type fixedColumn[T int32 | int64] struct {
	vals  []T
	valid validity
}

func (c *fixedColumn[T]) append(n int, v T) {
	c.vals = append(c.vals, v)
	c.valid.add(n, true)
}

func (c *fixedColumn[T]) appendNull(n int) {
	c.vals = append(c.vals, 0)
	c.valid.add(n, false)
}

func (c *fixedColumn[T]) reset() {
	c.vals = recycle(c.vals)
	c.valid.reset()
}

func (c *fixedColumn[T]) newArray(mem memory.Allocator, dt arrow.DataType, n int) arrow.Array {
	return newArray(dt, n, c.valid.nulls, c.valid.buffer(mem), copyToBuffer(mem, fixedBytes(c.vals)))
}

func fixedBytes[T int32 | int64](vals []T) []byte {
	switch v := any(vals).(type) {
	case []int32:
		return arrow.Int32Traits.CastToBytes(v)
	case []int64:
		return arrow.Int64Traits.CastToBytes(v)
	}
	panic("unreachable")
}

// copyToBuffer returns a buffer from mem holding a copy of p.
func copyToBuffer(mem memory.Allocator, p []byte) *memory.Buffer {
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(len(p))
	copy(buf.Bytes(), p)
	return buf
}

// newArray wraps buffers (taking over the caller's references) as an array.
func newArray(dt arrow.DataType, n, nulls int, buffers ...*memory.Buffer) arrow.Array {
	data := array.NewData(dt, n, buffers, nil, nulls, 0)
	for _, b := range buffers {
		if b != nil {
			b.Release()
		}
	}
	defer data.Release()
	return array.MakeFromData(data)
}
