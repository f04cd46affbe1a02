package schemas

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/google/uuid"
	"github.com/hamba/avro/v2"
)

// ReasonMalformedValue: an Avro or Protobuf value (or its Confluent wire
// format framing) cannot be read: truncated, trailing bytes, a bad length
// or union index, invalid UTF-8.
const ReasonMalformedValue = "malformed_value"

// maxAvroDepth bounds nesting while reading a value, which a recursive
// writer schema could otherwise make as deep as the message is long.
const maxAvroDepth = 64

// avroDecoder reads Avro binary values written with schema writer into the
// columns of record (the schema file's tree). Fields are matched by name
// as in Avro schema resolution: writer fields the table lacks are skipped,
// table fields the writer lacks are null (an error if required), and the
// Avro promotions (int → long, float, double; long → float, double;
// float → double; string ↔ bytes) and logical-type units are applied.
type avroDecoder struct {
	writer avro.Schema
	record *node
}

func (d *avroDecoder) decode(value []byte, cols []array.Builder) (int, error) {
	r := avroReader{buf: value}
	if err := r.record(d.writer, d.record, nil, cols, 0); err != nil {
		return 0, err
	}
	if r.pos != len(r.buf) {
		return 0, &DecodeError{Reason: ReasonMalformedValue, Detail: strconv.Itoa(len(r.buf)-r.pos) + " bytes follow the Avro value"}
	}
	return r.grown, nil
}

// avroReader reads Avro's binary encoding from buf.
type avroReader struct {
	buf []byte
	pos int
	// items counts the array and map items of the message so far (see
	// blockCount).
	items int64
	// grown counts the bytes of the enum symbols read (stored as strings)
	// and the widths of the list and map elements (node.arrowWidth): an
	// item takes a byte of the message, or none, and its element many more
	// in Arrow, which SizeBytes must still count.
	grown int
}

// maxZeroSizeItems bounds the items of a message that take no bytes (of
// type null, an empty record, a fixed of size 0): with them, a message of a
// few hundred bytes could otherwise hold billions of items.
const maxZeroSizeItems = 1 << 16

// incompatible reports a writer schema whose field cannot be stored in the
// table's column (ReasonIncompatibleSchema).
func incompatible(detail string) *DecodeError {
	return &DecodeError{Reason: ReasonIncompatibleSchema, Detail: Truncate(detail, maxDetailBytes)}
}

func malformed(detail string) *DecodeError {
	return &DecodeError{Reason: ReasonMalformedValue, Detail: detail}
}

const errTruncated = "the Avro value ends early"

func (r *avroReader) long() (int64, *DecodeError) {
	u, n := binary.Uvarint(r.buf[r.pos:])
	if n <= 0 {
		if n == 0 {
			return 0, malformed(errTruncated)
		}
		return 0, malformed("an Avro varint is longer than 64 bits")
	}
	r.pos += n
	return int64(u>>1) ^ -int64(u&1), nil
}

func (r *avroReader) int() (int64, *DecodeError) {
	v, err := r.long()
	if err == nil && (v > math.MaxInt32 || v < math.MinInt32) {
		return 0, malformed("an Avro int is out of range")
	}
	return v, err
}

func (r *avroReader) fixed(n int) ([]byte, *DecodeError) {
	if n < 0 || len(r.buf)-r.pos < n {
		return nil, malformed(errTruncated)
	}
	b := r.buf[r.pos : r.pos+n]
	r.pos += n
	return b, nil
}

func (r *avroReader) bytes() ([]byte, *DecodeError) {
	n, err := r.long()
	if err != nil {
		return nil, err
	}
	if n < 0 || n > int64(len(r.buf)-r.pos) {
		return nil, malformed("an Avro length is negative or past the end")
	}
	return r.fixed(int(n))
}

// blockCount reads an array or map block header: the item count, 0 at the
// end. A count can never exceed the bytes left, except for items of type
// null, which take none; and all the blocks of a message together hold at
// most one item a byte, plus maxZeroSizeItems (items of an empty record or
// a fixed of size 0 take no bytes either, block after block).
func (r *avroReader) blockCount(zeroSize bool) (int, *DecodeError) {
	n, err := r.long()
	if err != nil {
		return 0, err
	}
	if n < 0 {
		if n == math.MinInt64 {
			return 0, malformed("an Avro block count is out of range")
		}
		n = -n
		if _, err := r.long(); err != nil { // the block's size in bytes
			return 0, err
		}
	}
	limit := int64(len(r.buf) - r.pos)
	if zeroSize {
		limit = maxZeroSizeItems
	}
	if n > limit {
		return 0, malformed("an Avro block count exceeds the bytes left")
	}
	if r.items += n; r.items > int64(len(r.buf))+maxZeroSizeItems {
		return 0, malformed("an Avro message holds more array or map items than its size allows")
	}
	return int(n), nil
}

// record reads a record written as w into the struct node t: into cols
// (top level) or into the children of sb; both nil in the validating pass.
func (r *avroReader) record(w avro.Schema, t *node, sb *array.StructBuilder, cols []array.Builder, depth int) *DecodeError {
	rec, ok := deref(w).(*avro.RecordSchema)
	if !ok {
		return incompatible("the writer's " + string(w.Type()) + " cannot be stored as a record")
	}
	var seenSmall uint64
	var seenBig []bool
	if len(t.fields) > 64 {
		seenBig = make([]bool, len(t.fields))
	}
	for _, wf := range rec.Fields() {
		i := t.fieldIndexName(wf.Name())
		if i < 0 {
			if err := r.skip(wf.Type(), depth+1); err != nil {
				return fieldErr(wf.Name(), err)
			}
			continue
		}
		var b array.Builder
		if cols != nil {
			b = cols[i]
		} else if sb != nil {
			b = sb.FieldBuilder(i)
		}
		if err := r.value(wf.Type(), t.fields[i], b, depth+1); err != nil {
			return fieldErr(wf.Name(), err)
		}
		if seenBig != nil {
			seenBig[i] = true
		} else {
			seenSmall |= 1 << i
		}
	}
	for i, f := range t.fields {
		if seenBig != nil && seenBig[i] || seenBig == nil && seenSmall&(1<<i) != 0 {
			continue
		}
		if f.required {
			return fieldErr(f.source, incompatible("is required, and the writer's schema lacks it"))
		}
		var b array.Builder
		if cols != nil {
			b = cols[i]
		} else if sb != nil {
			b = sb.FieldBuilder(i)
		}
		putNull(b)
	}
	return nil
}

func deref(s avro.Schema) avro.Schema {
	if ref, ok := s.(*avro.RefSchema); ok {
		return ref.Schema()
	}
	return s
}

func logicalOf(s avro.Schema) avro.LogicalSchema {
	if l, ok := s.(avro.LogicalTypeSchema); ok {
		return l.Logical()
	}
	return nil
}

// value reads one value written as w into node t.
func (r *avroReader) value(w avro.Schema, t *node, b array.Builder, depth int) *DecodeError {
	if depth > maxAvroDepth {
		return malformed("the value nests deeper than " + strconv.Itoa(maxAvroDepth) + " levels")
	}
	w = deref(w)
	if u, ok := w.(*avro.UnionSchema); ok {
		i, err := r.long()
		if err != nil {
			return err
		}
		types := u.Types()
		if i < 0 || i >= int64(len(types)) {
			return malformed("union branch " + strconv.FormatInt(i, 10) + " does not exist")
		}
		return r.value(types[i], t, b, depth)
	}
	if w.Type() == avro.Null {
		if t.required {
			return missingValue()
		}
		putNull(b)
		return nil
	}
	var s scalar
	lt := avro.LogicalType("")
	if l := logicalOf(w); l != nil {
		lt = l.Type()
	}
	cannot := func() *DecodeError { return avroCannot(w, lt, t) }
	switch w.Type() {
	case avro.Record:
		if t.kind != kStruct {
			return cannot()
		}
		sb := openStruct(b)
		return r.record(w, t, sb, nil, depth)
	case avro.Array:
		if t.kind != kList {
			return cannot()
		}
		items := w.(*avro.ArraySchema).Items()
		eb := openList(b)
		width := t.elem.arrowWidth()
		for k := 0; ; {
			n, err := r.blockCount(deref(items).Type() == avro.Null)
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			if r.grown += n * width; r.grown > maxStringBytes {
				return rowTooLarge(r.grown)
			}
			for range n {
				if err := r.value(items, t.elem, eb, depth+1); err != nil {
					return fieldErr("["+strconv.Itoa(k)+"]", err)
				}
				k++
			}
		}
	case avro.Map:
		if t.kind != kMap {
			return cannot()
		}
		vals := w.(*avro.MapSchema).Values()
		var later map[string]int
		if b != nil {
			later = r.repeatedKeys(vals, depth)
		}
		kb, vb := openMap(b)
		width := t.key.arrowWidth() + t.val.arrowWidth()
		for {
			n, err := r.blockCount(false)
			if err != nil {
				return err
			}
			if n == 0 {
				return nil
			}
			if r.grown += n * width; r.grown > maxStringBytes {
				return rowTooLarge(r.grown)
			}
			for range n {
				key, err := r.bytes()
				if err != nil {
					return err
				}
				if !utf8.Valid(key) {
					return malformed("a map key is not valid UTF-8")
				}
				// A repeated key is kept where it last occurs, as in JSON
				// (and Java's Avro reader): a map with a key twice is not
				// a map to Iceberg. The values it drops are still checked.
				kb, vb := kb, vb
				if later[string(key)] > 0 {
					later[string(key)]--
					kb, vb = nil, nil
				}
				put(t.key, kb, &scalar{b: key})
				if err := r.value(vals, t.val, vb, depth+1); err != nil {
					return fieldErr("["+strconv.Quote(Truncate(string(key), 32))+"]", err)
				}
			}
		}
	case avro.Boolean:
		if t.kind != kBool {
			return cannot()
		}
		v, err := r.fixed(1)
		if err != nil {
			return err
		}
		if v[0] > 1 {
			return malformed("a boolean byte is neither 0 nor 1")
		}
		s.i = int64(v[0])
	case avro.Int, avro.Long:
		var v int64
		var err *DecodeError
		if w.Type() == avro.Int {
			v, err = r.int()
		} else {
			v, err = r.long()
		}
		if err != nil {
			return err
		}
		if err := avroInteger(w.Type(), lt, v, t, &s); err != nil {
			if err.Detail == "" {
				return cannot()
			}
			return err
		}
	case avro.Float, avro.Double:
		var f float64
		if w.Type() == avro.Float {
			v, err := r.fixed(4)
			if err != nil {
				return err
			}
			f = float64(math.Float32frombits(binary.LittleEndian.Uint32(v)))
		} else {
			v, err := r.fixed(8)
			if err != nil {
				return err
			}
			f = math.Float64frombits(binary.LittleEndian.Uint64(v))
		}
		switch {
		case t.kind == kDouble, t.kind == kFloat && w.Type() == avro.Float:
			s.f = f
		default:
			return cannot()
		}
	case avro.String, avro.Bytes, avro.Fixed, avro.Enum:
		var v []byte
		var err *DecodeError
		switch w.Type() {
		case avro.Fixed:
			v, err = r.fixed(w.(*avro.FixedSchema).Size())
		case avro.Enum:
			var i int64
			if i, err = r.int(); err == nil {
				syms := w.(*avro.EnumSchema).Symbols()
				if i < 0 || i >= int64(len(syms)) {
					return malformed("enum symbol " + strconv.FormatInt(i, 10) + " does not exist")
				}
				v = stringBytes(syms[i]) // only read
				r.grown += len(v)
			}
		default:
			v, err = r.bytes()
		}
		if err != nil {
			return err
		}
		if lt == avro.Decimal {
			if t.kind != kDecimal {
				return cannot()
			}
			d := logicalOf(w).(*avro.DecimalLogicalSchema)
			if d.Scale() != t.scale {
				return incompatible("the writer's decimal scale " + strconv.Itoa(d.Scale()) + " differs from the column's " + strconv.Itoa(t.scale))
			}
			num, derr := decimalFromTwos(v, t.prec)
			if derr != nil {
				return derr
			}
			s.d = num
			break
		}
		isText := w.Type() == avro.String || w.Type() == avro.Enum
		switch t.kind {
		case kString:
			if w.Type() == avro.Fixed {
				return cannot()
			}
			if !utf8.Valid(v) {
				return invalid("is not valid UTF-8")
			}
			if t.symbols != nil && !isSymbol(t.symbols, v) {
				return invalid("is not one of the enum's symbols")
			}
			s.b = v
		case kBinary:
			if w.Type() == avro.Enum {
				return cannot()
			}
			s.b = v
		case kFixed, kUUID:
			size := t.size
			if t.kind == kUUID {
				if isText {
					u, err := uuid.ParseBytes(v)
					if err != nil {
						return invalid("is not a UUID")
					}
					s.b = u[:]
					break
				}
				size = 16
			}
			switch {
			case isText || (w.Type() == avro.Fixed && len(v) != size):
				return cannot() // every value of the writer's type
			case len(v) != size:
				return wrongLength(len(v), size) // one bytes value: the record's fault
			}
			s.b = v
		default:
			return cannot()
		}
	default:
		return cannot()
	}
	put(t, b, &s)
	return nil
}

// avroCannot is the error of a writer's type w (of logical type lt) whose
// values column t cannot hold.
func avroCannot(w avro.Schema, lt avro.LogicalType, t *node) *DecodeError {
	wt := string(w.Type())
	if lt != "" {
		wt += " (" + string(lt) + ")"
	}
	return incompatible("the writer's " + wt + " cannot be stored in a column of type " + t.typ.String())
}

// avroRecordFits checks the Avro writer record rec against the columns of
// t without a message, as protoFits does a Protobuf message type: each
// field a column holds must have a type the column can take (through
// nested records, array items and map values; a union fits when one of its
// branches does), and each required column must have its field. It follows
// the type checks of avroReader.value, which makes them per value; what
// depends on a value (a null in a required column, a string that is not
// UUID, a decimal past the column's precision) is left to it.
func avroRecordFits(rec *avro.RecordSchema, t *node) *DecodeError {
	for _, wf := range rec.Fields() {
		if i := t.fieldIndexName(wf.Name()); i >= 0 {
			if err := avroFits(wf.Type(), t.fields[i]); err != nil {
				return fieldErr(wf.Name(), err)
			}
		}
	}
	for _, f := range t.fields {
		if f.required && !slices.ContainsFunc(rec.Fields(), func(wf *avro.Field) bool { return wf.Name() == f.source }) {
			return fieldErr(f.source, incompatible("is required, and the writer's schema lacks it"))
		}
	}
	return nil
}

// avroFits checks writer type w against column t (see avroRecordFits).
// Every call descends t, which is finite, so a recursive writer type ends.
func avroFits(w avro.Schema, t *node) *DecodeError {
	w = deref(w)
	if u, ok := w.(*avro.UnionSchema); ok {
		var first *DecodeError
		for _, b := range u.Types() {
			if deref(b).Type() == avro.Null && len(u.Types()) > 1 {
				continue // a null fits an optional column, by value
			}
			err := avroFits(b, t)
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
		return first
	}
	lt := avro.LogicalType("")
	if l := logicalOf(w); l != nil {
		lt = l.Type()
	}
	fits := false
	switch w.Type() {
	case avro.Null:
		fits = !t.required
	case avro.Record:
		if t.kind == kStruct {
			return avroRecordFits(w.(*avro.RecordSchema), t)
		}
	case avro.Array:
		if t.kind == kList {
			if err := avroFits(w.(*avro.ArraySchema).Items(), t.elem); err != nil {
				return fieldErr("[]", err)
			}
			return nil
		}
	case avro.Map:
		if t.kind == kMap {
			if err := avroFits(w.(*avro.MapSchema).Values(), t.val); err != nil {
				return fieldErr("[]", err)
			}
			return nil
		}
	case avro.Boolean:
		fits = t.kind == kBool
	case avro.Int, avro.Long:
		var s scalar
		err := avroInteger(w.Type(), lt, 0, t, &s)
		fits = err == nil || err.Detail != ""
	case avro.Float, avro.Double:
		fits = t.kind == kDouble || t.kind == kFloat && w.Type() == avro.Float
	case avro.String, avro.Bytes, avro.Fixed, avro.Enum:
		isText := w.Type() == avro.String || w.Type() == avro.Enum
		switch {
		case lt == avro.Decimal:
			if t.kind != kDecimal {
				break
			}
			if d := logicalOf(w).(*avro.DecimalLogicalSchema); d.Scale() != t.scale {
				return incompatible("the writer's decimal scale " + strconv.Itoa(d.Scale()) + " differs from the column's " + strconv.Itoa(t.scale))
			}
			fits = true
		case t.kind == kString:
			fits = w.Type() != avro.Fixed
		case t.kind == kBinary:
			fits = w.Type() != avro.Enum
		case t.kind == kUUID && isText:
			fits = true
		case t.kind == kFixed || t.kind == kUUID:
			size := t.size
			if t.kind == kUUID {
				size = 16
			}
			fits = !isText && (w.Type() != avro.Fixed || w.(*avro.FixedSchema).Size() == size)
		}
	}
	if !fits {
		return avroCannot(w, lt, t)
	}
	return nil
}

// avroInteger converts an Avro int or long (with its logical type) into
// the column t's representation. An error with an empty Detail means the
// types do not fit at all.
func avroInteger(wt avro.Type, lt avro.LogicalType, v int64, t *node, s *scalar) *DecodeError {
	no := &DecodeError{Reason: ReasonInvalidField}
	switch t.kind {
	case kInt:
		if wt != avro.Int || lt != "" {
			return no
		}
		s.i = v
	case kLong:
		if lt != "" {
			return no
		}
		s.i = v
	case kFloat, kDouble:
		if lt != "" {
			return no
		}
		s.f = float64(v)
	case kDate:
		if lt != avro.Date {
			return no
		}
		if err := dateDays(v); err != nil {
			return err
		}
		s.i = v
	case kTime:
		switch lt {
		case avro.TimeMillis:
			s.i = v * 1000
		case avro.TimeMicros:
			s.i = v
		default:
			return no
		}
		if s.i < 0 || s.i >= microsPerDay {
			return invalid("a time must be within one day")
		}
	case kTimestamp, kTimestampTz:
		millis := false
		switch lt {
		case avro.TimestampMillis, avro.TimestampMicros:
			if t.kind != kTimestampTz {
				return no
			}
			millis = lt == avro.TimestampMillis
		case avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			if t.kind != kTimestamp {
				return no
			}
			millis = lt == avro.LocalTimestampMillis
		default:
			return no
		}
		us, err := timeMicros(v, millis)
		if err != nil {
			return err
		}
		s.i = us
	default:
		return no
	}
	return nil
}

// decimalFromTwos converts a big-endian two's-complement unscaled value.
// Bytes that only extend the sign (a fixed wider than its precision needs)
// are dropped first.
func decimalFromTwos(v []byte, prec int) (decimal128.Num, *DecodeError) {
	for len(v) > 1 && (v[0] == 0 && v[1]&0x80 == 0 || v[0] == 0xff && v[1]&0x80 != 0) {
		v = v[1:]
	}
	if len(v) == 0 || len(v) > 17 {
		return decimal128.Num{}, invalid("a decimal of " + strconv.Itoa(len(v)) + " bytes does not fit 38 digits")
	}
	n := new(big.Int).SetBytes(v)
	if v[0]&0x80 != 0 {
		n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(v))))
	}
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(prec)), nil)
	if new(big.Int).Abs(n).Cmp(limit) >= 0 {
		return decimal128.Num{}, invalid("has more than " + strconv.Itoa(prec) + " digits")
	}
	return decimal128.FromBigInt(n), nil
}

// repeatedKeys reads ahead through the map whose values are written as
// vals and returns, for each key it holds more than once, how many of its
// occurrences come before the last; nil when its keys are distinct, or when
// the map cannot be read (the decoding that follows reports why, with the
// key's path). The reader is left where it was.
func (r *avroReader) repeatedKeys(vals avro.Schema, depth int) map[string]int {
	pos, items := r.pos, r.items
	defer func() { r.pos, r.items = pos, items }()
	var small [8][]byte
	keys := small[:0]
	for {
		n, err := r.blockCount(false)
		if err != nil || n == 0 {
			break
		}
		for range n {
			key, err := r.bytes()
			if err != nil || r.skip(vals, depth+1) != nil {
				return nil
			}
			keys = append(keys, key)
		}
	}
	if len(keys) < 2 {
		return nil
	}
	var seen map[string]bool // a few keys are compared pairwise
	if len(keys) > 16 {
		seen = make(map[string]bool, len(keys))
	}
	var later map[string]int
	for i, k := range keys {
		if seen != nil && !seen[string(k)] {
			seen[string(k)] = true
			continue
		}
		if seen == nil && !slices.ContainsFunc(keys[:i], func(e []byte) bool { return bytes.Equal(e, k) }) {
			continue
		}
		if later == nil {
			later = map[string]int{}
		}
		later[string(k)]++
	}
	return later
}

// skip reads past a value of writer type w that the table does not keep.
func (r *avroReader) skip(w avro.Schema, depth int) *DecodeError {
	if depth > maxAvroDepth {
		return malformed("the value nests deeper than " + strconv.Itoa(maxAvroDepth) + " levels")
	}
	w = deref(w)
	var err *DecodeError
	switch w.Type() {
	case avro.Null:
	case avro.Boolean:
		_, err = r.fixed(1)
	case avro.Int, avro.Long, avro.Enum:
		_, err = r.long()
	case avro.Float:
		_, err = r.fixed(4)
	case avro.Double:
		_, err = r.fixed(8)
	case avro.String, avro.Bytes:
		_, err = r.bytes()
	case avro.Fixed:
		_, err = r.fixed(w.(*avro.FixedSchema).Size())
	case avro.Record:
		for _, f := range w.(*avro.RecordSchema).Fields() {
			if err = r.skip(f.Type(), depth+1); err != nil {
				return err
			}
		}
	case avro.Union:
		var i int64
		if i, err = r.long(); err == nil {
			types := w.(*avro.UnionSchema).Types()
			if i < 0 || i >= int64(len(types)) {
				return malformed("union branch " + strconv.FormatInt(i, 10) + " does not exist")
			}
			err = r.skip(types[i], depth+1)
		}
	case avro.Array, avro.Map:
		var items avro.Schema
		if a, ok := w.(*avro.ArraySchema); ok {
			items = a.Items()
		} else {
			items = w.(*avro.MapSchema).Values()
		}
		for {
			n, cerr := r.blockCount(w.Type() == avro.Array && deref(items).Type() == avro.Null)
			if cerr != nil || n == 0 {
				return cerr
			}
			for range n {
				if w.Type() == avro.Map {
					if _, err = r.bytes(); err != nil {
						return err
					}
				}
				if err = r.skip(items, depth+1); err != nil {
					return err
				}
			}
		}
	default:
		return malformed("cannot skip Avro type " + string(w.Type()))
	}
	return err
}
