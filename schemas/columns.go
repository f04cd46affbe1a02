package schemas

import (
	"encoding/binary"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// The column buffers below build a batch directly in Arrow's memory layout,
// in memory from the Builder's allocator, and hand that memory to the record
// batch whole. They replace arrow-go's array builders on the per-record
// path: a builder append goes through closures and several capacity checks
// per value, which cost about as much as parsing the JSON (see
// BenchmarkAppendArrowBuilders), while an append here is one capacity check
// and a store. Taking a batch copies nothing; the next batch allocates
// lazily, at the size the previous one reached, so a steady stream grows no
// buffer and an idle Builder holds almost nothing.

// minRegion is the smallest allocation a region makes.
const minRegion = 64

// region is a growable buffer allocated from mem whose whole allocation is
// handed to a batch by take.
type region struct {
	mem  memory.Allocator
	b    []byte // the allocation; len(b) is what mem accounts for
	n    int    // bytes in use
	hint int    // bytes the previous batch used: the first allocation's size
}

// grow makes room for need more bytes. Growing by half (not doubling) keeps
// the slack a batch carries small; the hint makes growing rare anyway.
func (r *region) grow(need int) {
	size := max(r.n+need, r.hint, len(r.b)+len(r.b)/2, minRegion)
	if r.b == nil {
		r.b = r.mem.Allocate(size)
	} else {
		r.b = r.mem.Reallocate(size, r.b)
	}
}

func (r *region) putBytes(p []byte) {
	if r.n+len(p) > len(r.b) {
		r.grow(len(p))
	}
	r.n += copy(r.b[r.n:], p)
}

func (r *region) putInt32(v int32) {
	if r.n+4 > len(r.b) {
		r.grow(4)
	}
	binary.LittleEndian.PutUint32(r.b[r.n:], uint32(v))
	r.n += 4
}

func (r *region) putInt64(v int64) {
	if r.n+8 > len(r.b) {
		r.grow(8)
	}
	binary.LittleEndian.PutUint64(r.b[r.n:], uint64(v))
	r.n += 8
}

// take hands the bytes in use over as a buffer, which frees the whole
// allocation when released, and leaves r empty with no allocation.
func (r *region) take() *memory.Buffer {
	if r.b == nil {
		r.grow(0) // an empty batch still gets a (tiny) buffer
	}
	buf := memory.NewBufferWithAllocator(r.b, r.mem)
	buf.ResizeNoShrink(r.n) // the length the array sees; the allocation stays whole
	r.hint, r.b, r.n = r.n, nil, 0
	return buf
}

func (r *region) release() {
	if r.b != nil {
		r.mem.Free(r.b)
	}
	*r = region{mem: r.mem}
}

// validity is a column's validity bitmap, least significant bit first.
type validity struct {
	bits  region
	nulls int
}

// add records whether row n (the row count before this append) is valid.
func (v *validity) add(n int, valid bool) {
	if n&7 == 0 {
		v.bits.putBytes(zeroByte[:])
	}
	if valid {
		v.bits.b[n>>3] |= 1 << (n & 7)
	} else {
		v.nulls++
	}
}

var zeroByte [1]byte

// take returns the bitmap for a batch, or nil when no row is null: Arrow's
// "all valid" form, which readers and the Parquet writer short-cut. An
// unused bitmap is kept for the next batch.
func (v *validity) take() (*memory.Buffer, int) {
	nulls := v.nulls
	v.nulls = 0
	if nulls == 0 {
		v.bits.n = 0
		return nil, 0
	}
	return v.bits.take(), nulls
}

// stringColumn builds a String column: validity, int32 offsets, data.
type stringColumn struct {
	valid   validity
	offsets region // rows+1 offsets once a row is appended
	data    region
}

func newStringColumn(mem memory.Allocator) stringColumn {
	return stringColumn{valid: validity{bits: region{mem: mem}}, offsets: region{mem: mem}, data: region{mem: mem}}
}

func (c *stringColumn) append(n int, s []byte) {
	if n == 0 {
		c.offsets.putInt32(0)
	}
	c.data.putBytes(s)
	c.offsets.putInt32(int32(c.data.n))
	c.valid.add(n, true)
}

func (c *stringColumn) appendNull(n int) {
	if n == 0 {
		c.offsets.putInt32(0)
	}
	c.offsets.putInt32(int32(c.data.n))
	c.valid.add(n, false)
}

func (c *stringColumn) take(dt arrow.DataType, n int) arrow.Array {
	if n == 0 {
		c.offsets.putInt32(0)
	}
	bits, nulls := c.valid.take()
	return newArray(dt, n, nulls, bits, c.offsets.take(), c.data.take())
}

func (c *stringColumn) release() {
	c.valid.bits.release()
	c.offsets.release()
	c.data.release()
}

// fixedColumn builds an Int32, Int64 or Timestamp column.
type fixedColumn struct {
	valid  validity
	values region
	width  int // bytes per value: 4 or 8
}

func newFixedColumn(mem memory.Allocator, width int) fixedColumn {
	return fixedColumn{valid: validity{bits: region{mem: mem}}, values: region{mem: mem}, width: width}
}

func (c *fixedColumn) append64(n int, v int64) {
	c.values.putInt64(v)
	c.valid.add(n, true)
}

func (c *fixedColumn) append32(n int, v int32) {
	c.values.putInt32(v)
	c.valid.add(n, true)
}

func (c *fixedColumn) appendNull(n int) {
	if c.width == 8 {
		c.values.putInt64(0)
	} else {
		c.values.putInt32(0)
	}
	c.valid.add(n, false)
}

func (c *fixedColumn) take(dt arrow.DataType, n int) arrow.Array {
	bits, nulls := c.valid.take()
	return newArray(dt, n, nulls, bits, c.values.take())
}

func (c *fixedColumn) release() {
	c.valid.bits.release()
	c.values.release()
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
