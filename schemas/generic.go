package schemas

import (
	"fmt"
	"strconv"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/apache/arrow-go/v18/arrow/extensions"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// RecordBuilder turns messages into Arrow record batches of one Schema. It
// is what the pipeline holds per partition: the built-in schema's hand-tuned
// [Builder] and the generic builder of a schema file both implement it.
//
// Append and AppendEnriched validate the whole message before appending
// anything: on error no column changes. The error is a *DecodeError when the
// message cannot become a row (send it to the dead-letter topic), or
// ErrBuilderFull when the builder must be flushed first. NewRecord hands the
// rows over as a batch the caller owns and must Release, leaving the builder
// empty; Release frees the builder, which must not be used afterwards. A
// RecordBuilder is not safe for concurrent use.
//
// Check validates a message as Append does and returns the same error
// (never ErrBuilderFull), appending nothing: a record that will not be
// appended anyway (its enrichment failed) is dead-lettered for its own
// fault rather than for the moment's.
type RecordBuilder interface {
	Append(value []byte, m Meta, ingestedAt time.Time, enrichStatus string) error
	AppendEnriched(value []byte, m Meta, ingestedAt time.Time, enrichStatus string, extra Extra) error
	Check(value []byte) error
	Len() int
	SizeBytes() int
	NewRecord() arrow.RecordBatch
	Release()
}

// NewRecordBuilder returns the builder for s's messages, allocating from
// mem (nil: memory.DefaultAllocator): the fast clickstream Builder for the
// built-in schema, and for a schema file a generic builder decoding the
// format chosen by WithFormat (JSON unless set). maxMessageBytes is as for
// NewBuilder.
func (s *Schema) NewRecordBuilder(mem memory.Allocator, maxMessageBytes int) RecordBuilder {
	if s.user == nil || (s.fast && (s.kind == "" || s.kind == FormatJSON)) {
		return s.NewBuilder(mem, maxMessageBytes)
	}
	if maxMessageBytes <= 0 {
		maxMessageBytes = DefaultMaxMessageBytes
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	return &genericBuilder{
		schema:   s,
		rb:       array.NewRecordBuilder(mem, s.Arrow),
		dec:      s.newDecoder(),
		maxBytes: maxMessageBytes,
		nUser:    len(s.user.record.fields),
	}
}

// valueDecoder reads one message format. decode validates value against the
// schema's field tree and, when cols is non-nil, appends the row's values to
// cols (one builder per top-level field). The generic builder calls it first
// with nil cols, and again with the builders only if that succeeded, which
// is how a failed message leaves every column unchanged. An error is a
// *DecodeError when the message is at fault; any other error (a schema
// registry that cannot be reached) is not the message's fault and stops
// the partition rather than dead-lettering. grown is how many more bytes
// the row holds than the message: an Avro or Protobuf enum is a number in
// the message and its symbol in the column, and every list or map item, in
// any format, is a list or map element of [node.arrowWidth] — an Avro item
// of a byte or of none, a JSON "{}" or an empty Protobuf sub-message is a
// record of as many values as it has fields. validate refuses a message
// whose row would be too large for a batch as too_large, and SizeBytes
// counts the rest, so commit.max_bytes bounds what a window holds.
type valueDecoder interface {
	decode(value []byte, cols []array.Builder) (grown int, err error)
}

// genericBuilder is the RecordBuilder of schemas parsed from files. It
// trades the clickstream Builder's speed for generality: arrow-go builders,
// and a message decoded twice (validate, then append).
type genericBuilder struct {
	schema   *Schema
	rb       *array.RecordBuilder
	dec      valueDecoder
	maxBytes int
	nUser    int
	cols     []array.Builder
	rows     int
	bytes    int // estimate of the Arrow bytes held
	// strBytes bounds the string bytes held and the list and map elements
	// (each a byte of its message at least, or counted in grown): both are
	// addressed with int32 offsets.
	strBytes int
}

// genericRowBytes is what a row costs besides the message's bytes: the
// metadata columns' values and offsets.
const genericRowBytes = 48

func (b *genericBuilder) Append(value []byte, m Meta, ingestedAt time.Time, enrichStatus string) error {
	return b.AppendEnriched(value, m, ingestedAt, enrichStatus, Extra{})
}

func (b *genericBuilder) AppendEnriched(value []byte, m Meta, ingestedAt time.Time, enrichStatus string, extra Extra) error {
	grown, err := b.validate(value)
	if err != nil {
		return err
	}
	// Every string a row stores comes from the message (enum symbols
	// counted in grown), the metadata or the extra values; every list or
	// map element is counted in grown.
	add := len(value) + grown + len(m.Topic) + len(enrichStatus) + extra.StrBytes
	if b.strBytes+add > maxStringBytes {
		return ErrBuilderFull
	}
	if b.cols == nil {
		b.cols = b.rb.Fields()
	}
	if _, err := b.dec.decode(value, b.cols[:b.nUser]); err != nil {
		// The first pass accepted the message, so this is a decoder bug;
		// the columns may now differ in length, which NewRecord would
		// report by panicking far from here.
		panic(fmt.Sprintf("schemas: %s decoded a message differently twice: %v", b.schema.Name, err))
	}
	meta := b.cols[b.nUser:]
	meta[0].(*array.StringBuilder).Append(m.Topic)
	meta[1].(*array.Int32Builder).Append(m.Partition)
	meta[2].(*array.Int64Builder).Append(m.Offset)
	putTime(meta[3], m.Timestamp)
	putTime(meta[4], ingestedAt)
	if enrichStatus == "" {
		meta[5].AppendNull()
	} else {
		meta[5].(*array.StringBuilder).Append(enrichStatus)
	}
	for i, c := range meta[numCols-colKafkaTopic:] {
		a := &unsetAttr
		if i < len(extra.Attrs) {
			a = &extra.Attrs[i]
		}
		putExtra(c, a)
	}
	b.rows++
	b.strBytes += add
	b.bytes += len(value) + grown + genericRowBytes + 9*len(extra.Attrs)
	return nil
}

func (b *genericBuilder) Check(value []byte) error {
	_, err := b.validate(value)
	return err
}

// validate is the first pass of AppendEnriched: the message's size and
// its decoding without columns.
func (b *genericBuilder) validate(value []byte) (grown int, err error) {
	if len(value) > b.maxBytes {
		return 0, &DecodeError{
			Reason: ReasonTooLarge,
			Detail: "message is " + strconv.Itoa(len(value)) + " bytes; the limit is " + strconv.Itoa(b.maxBytes),
		}
	}
	grown, err = b.dec.decode(value, nil)
	if err == nil && len(value)+grown > maxStringBytes {
		// Not even an empty builder could take it: ErrBuilderFull would
		// hold the partition for ever.
		return 0, &DecodeError{
			Reason: ReasonTooLarge,
			Detail: "message of " + strconv.Itoa(len(value)) + " bytes would take " + strconv.Itoa(len(value)+grown) + " bytes in a batch; a batch holds " + strconv.Itoa(maxStringBytes),
		}
	}
	return grown, err
}

func putTime(c array.Builder, t time.Time) {
	us, ok := recordTime(t)
	if !ok {
		c.AppendNull()
		return
	}
	c.(*array.TimestampBuilder).Append(arrow.Timestamp(us))
}

// putExtra appends an enrichment value, or null when it is not set, as the
// clickstream Builder does.
func putExtra(c array.Builder, a *Attr) {
	if !a.Set {
		c.AppendNull()
		return
	}
	switch cb := c.(type) {
	case *array.StringBuilder:
		cb.Append(a.Str)
	case *array.Int64Builder:
		cb.Append(a.Num)
	case *array.Float64Builder:
		cb.Append(a.Double())
	case *array.BooleanBuilder:
		cb.Append(a.Bool())
	case *array.TimestampBuilder:
		cb.Append(arrow.Timestamp(a.Num))
	default:
		c.AppendNull() // WithColumns admits no other type
	}
}

func (b *genericBuilder) Len() int { return b.rows }

func (b *genericBuilder) SizeBytes() int { return b.bytes }

func (b *genericBuilder) NewRecord() arrow.RecordBatch {
	rec := b.rb.NewRecordBatch()
	b.rows, b.bytes, b.strBytes = 0, 0, 0
	return rec
}

func (b *genericBuilder) Release() {
	b.rb.Release()
	b.rows, b.bytes, b.strBytes = 0, 0, 0
}

// scalar carries one primitive value from a format's decoder to put.
type scalar struct {
	i int64          // int, long, date (days), time and timestamps (micros), bool (0/1)
	f float64        // float, double
	b []byte         // string, binary, fixed, uuid (16 bytes)
	d decimal128.Num // decimal, unscaled
}

// put appends v to b as n's kind; b nil (the validating pass) does nothing.
func put(n *node, b array.Builder, v *scalar) {
	if b == nil {
		return
	}
	switch n.kind {
	case kString:
		b.(*array.StringBuilder).BinaryBuilder.Append(v.b)
	case kBinary:
		b.(*array.BinaryBuilder).Append(v.b)
	case kFixed:
		b.(*array.FixedSizeBinaryBuilder).Append(v.b)
	case kUUID:
		b.(*extensions.UUIDBuilder).AppendBytes([16]byte(v.b))
	case kInt:
		b.(*array.Int32Builder).Append(int32(v.i))
	case kLong:
		b.(*array.Int64Builder).Append(v.i)
	case kFloat:
		b.(*array.Float32Builder).Append(float32(v.f))
	case kDouble:
		b.(*array.Float64Builder).Append(v.f)
	case kBool:
		b.(*array.BooleanBuilder).Append(v.i != 0)
	case kDecimal:
		b.(*array.Decimal128Builder).Append(v.d)
	case kDate:
		b.(*array.Date32Builder).Append(arrow.Date32(v.i))
	case kTime:
		b.(*array.Time64Builder).Append(arrow.Time64(v.i))
	case kTimestamp, kTimestampTz:
		b.(*array.TimestampBuilder).Append(arrow.Timestamp(v.i))
	default:
		panic(fmt.Sprintf("schemas: put called for nested kind %d", n.kind))
	}
}

func putNull(b array.Builder) {
	if b != nil {
		b.AppendNull()
	}
}

// arrowWidth is what one value of n costs in Arrow besides the bytes of its
// strings and the elements of its lists and maps (each counted where it is
// read): its fixed-width value or 32-bit offset, and its validity.
func (n *node) arrowWidth() int {
	w := 1 // validity, rounded up
	switch n.kind {
	case kBool:
	case kInt, kFloat, kDate, kString, kBinary, kList, kMap:
		w += 4
	case kLong, kDouble, kTime, kTimestamp, kTimestampTz:
		w += 8
	case kDecimal, kUUID:
		w += 16
	case kFixed:
		w += n.size
	case kStruct:
		for _, f := range n.fields {
			w += f.arrowWidth()
		}
	}
	return w
}

// rowTooLarge is the error of a message whose list and map elements
// (grown, so far) take more than a batch holds. The decoders check grown
// as they count each list or map, before reading its items: a message of
// a few hundred thousand "{}" in a list of wide records is refused without
// visiting every field of every item, which takes minutes.
func rowTooLarge(grown int) *DecodeError {
	return &DecodeError{
		Reason: ReasonTooLarge,
		Detail: "its lists and maps would take more than " + strconv.Itoa(grown) + " bytes in a batch; a batch holds " + strconv.Itoa(maxStringBytes),
	}
}

// Helpers that open a nested value on b and return its child builders;
// all return nil builders in the validating pass.

func openStruct(b array.Builder) *array.StructBuilder {
	if b == nil {
		return nil
	}
	sb := b.(*array.StructBuilder)
	sb.Append(true)
	return sb
}

func structField(sb *array.StructBuilder, i int) array.Builder {
	if sb == nil {
		return nil
	}
	return sb.FieldBuilder(i)
}

func openList(b array.Builder) array.Builder {
	if b == nil {
		return nil
	}
	lb := b.(*array.ListBuilder)
	lb.Append(true)
	return lb.ValueBuilder()
}

func openMap(b array.Builder) (keys, vals array.Builder) {
	if b == nil {
		return nil, nil
	}
	mb := b.(*array.MapBuilder)
	mb.Append(true)
	return mb.KeyBuilder(), mb.ItemBuilder()
}

// fieldErr prefixes a nested error's field path with name.
func fieldErr(name string, err *DecodeError) *DecodeError {
	if err.Field == "" {
		err.Field = name
	} else if err.Field[0] == '[' {
		err.Field = name + err.Field
	} else {
		err.Field = name + "." + err.Field
	}
	return err
}

func invalid(detail string) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidField, Detail: Truncate(detail, maxDetailBytes)}
}

// wrongLength is a bytes value of n bytes for a column of fixed size.
func wrongLength(n, size int) *DecodeError {
	return invalid("is " + strconv.Itoa(n) + " bytes; the column holds " + strconv.Itoa(size))
}

func missingValue() *DecodeError {
	return &DecodeError{Reason: ReasonMissingField, Detail: "is required"}
}

// Timestamps and dates are kept within the years 0001 to 9999 (UTC), the
// years an RFC 3339 date-time spells. Integers in a field's unit reached
// ±292,000 years, past what iceberg-go's hour() partition transform holds
// (an int32 of hours since 1970: ±245,000 years), which wrapped and put a
// row in the partition of another time, where a scan pruning by it never
// looks; readers such as PyIceberg (Python's datetime) and Spark do not
// take years outside 1 to 9999 either.
const (
	minTimeMicros = -62_135_596_800_000_000 // 0001-01-01T00:00:00Z
	maxTimeMicros = 253_402_300_799_999_999 // 9999-12-31T23:59:59.999999Z
	minDateDays   = -719_162                // 0001-01-01
	maxDateDays   = 2_932_896               // 9999-12-31
)

// recordTime returns a record's time (its Kafka timestamp, its ingestion
// time) in microseconds since the epoch, and false when it has none or one
// outside the years 0001 to 9999, which is stored null: a producer sets
// CreateTime, and one of year 296,675 wrapped UnixMicro to 290,000 BC.
func recordTime(t time.Time) (int64, bool) {
	if t.IsZero() || t.Before(minRecordTime) || t.After(maxRecordTime) {
		return 0, false
	}
	return t.UnixMicro(), true
}

var minRecordTime, maxRecordTime = time.UnixMicro(minTimeMicros), time.UnixMicro(maxTimeMicros)

// timeMicros returns the timestamp x, in milliseconds if millis or else
// microseconds since the epoch, in microseconds, or the error of one
// outside the years 0001 to 9999.
func timeMicros(x int64, millis bool) (int64, *DecodeError) {
	if millis {
		if x > maxTimeMicros/1000 || x < minTimeMicros/1000 {
			return 0, timeOutOfYears()
		}
		x *= 1000
	}
	if x > maxTimeMicros || x < minTimeMicros {
		return 0, timeOutOfYears()
	}
	return x, nil
}

// unitUnknown is the error of an integer time or timestamp for a column
// no schema file declares: whether it counts milliseconds or microseconds
// nothing records (a timestamp-millis field dropped from the file stored
// its values 1000 times too small).
func unitUnknown() *DecodeError {
	return invalid("the schema file does not declare this column, so the unit of an integer time (milliseconds or microseconds) is unknown: send an RFC 3339 string, or declare the field again")
}

func timeOutOfYears() *DecodeError {
	return invalid("a timestamp must be within the years 0001 to 9999 (0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999999Z)")
}

// dateDays returns the error of a date (days since the epoch) outside the
// years 0001 to 9999, or nil.
func dateDays(days int64) *DecodeError {
	if days > maxDateDays || days < minDateDays {
		return invalid("a date must be within the years 0001 to 9999 (0001-01-01 to 9999-12-31)")
	}
	return nil
}

// microsPerDay bounds a time of day.
const microsPerDay = 24 * 60 * 60 * 1_000_000
