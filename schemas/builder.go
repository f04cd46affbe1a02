package schemas

import (
	"fmt"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/valyala/fastjson"
)

// DefaultMaxMessageBytes is the message size limit a Builder applies when
// NewBuilder is given none. It matches Kafka's default max.message.bytes, so
// anything larger was produced against a non-default topic config and is
// more likely a mistake than a clickstream event.
const DefaultMaxMessageBytes = 1 << 20

// maxStringBytes is how many string bytes a builder may hold: Arrow's String
// type addresses its data with int32 offsets. The bound is applied to the sum
// over all string columns, which is stricter than needed but costs one add.
const maxStringBytes = math.MaxInt32

// rowFixedBytes approximates the bytes a row costs besides its string data:
// nine 4-byte string offsets, five 8-byte values, one 4-byte value and the
// validity bits.
const rowFixedBytes = 9*4 + 5*8 + 4 + 2

// jsonNames are the message field names, by column, of the columns that come
// from the message.
var jsonNames = [numJSONFields]string{
	colEventID:   "event_id",
	colSessionID: "session_id",
	colUserID:    "user_id",
	colEventType: "event_type",
	colURL:       "url",
	colReferrer:  "referrer",
	colUserAgent: "user_agent",
	colEventTS:   "ts",
	colSeq:       "seq",
}

// jsonSlot maps a message field name to its column, or -1 for fields the
// schema ignores. A switch on string(key) compiles to comparisons that do not
// allocate.
func jsonSlot(key []byte) int {
	switch string(key) {
	case "event_id":
		return colEventID
	case "session_id":
		return colSessionID
	case "user_id":
		return colUserID
	case "event_type":
		return colEventType
	case "url":
		return colURL
	case "referrer":
		return colReferrer
	case "user_agent":
		return colUserAgent
	case "ts":
		return colEventTS
	case "seq":
		return colSeq
	}
	return -1
}

// row is one decoded, validated message, holding slices into the parser's
// buffer until they are copied into the Arrow builders.
type row struct {
	strs     [numStringEventCols][]byte
	strValid [numStringEventCols]bool
	eventTS  int64 // microseconds since the epoch, UTC
	seq      int64
	hasSeq   bool
	strBytes int // sum of len(strs[i])
}

// Builder turns messages of one schema into Arrow record batches. It exists
// so that the per-record path reuses everything it can: one JSON parser, one
// set of Arrow builders kept across batches, and scratch space for the row
// being validated. It is not safe for concurrent use; give each worker its own.
type Builder struct {
	schema   *Schema
	rb       *array.RecordBuilder
	maxBytes int
	parser   fastjson.Parser

	// Typed views of rb's field builders, resolved once.
	strs      [numStringEventCols]*array.StringBuilder
	eventTS   *array.TimestampBuilder
	seq       *array.Int64Builder
	topic     *array.StringBuilder
	partition *array.Int32Builder
	offset    *array.Int64Builder
	kafkaTS   *array.TimestampBuilder
	ingested  *array.TimestampBuilder
	status    *array.StringBuilder

	vals [numJSONFields]*fastjson.Value // the message's values by column; scratch
	row  row                            // the row being validated; scratch

	rows     int
	strBytes int
}

// NewBuilder returns an empty Builder for s whose batches allocate from mem.
// maxMessageBytes bounds the size of a message that is parsed at all (larger
// ones are rejected as too_large, protecting the worker's memory and time);
// a value <= 0 selects DefaultMaxMessageBytes. It panics if s was not
// obtained from Lookup, since that is a programming error.
func (s *Schema) NewBuilder(mem memory.Allocator, maxMessageBytes int) *Builder {
	if maxMessageBytes <= 0 {
		maxMessageBytes = DefaultMaxMessageBytes
	}
	b := &Builder{
		schema:   s,
		rb:       array.NewRecordBuilder(mem, s.Arrow),
		maxBytes: maxMessageBytes,
	}
	defer func() {
		if r := recover(); r != nil {
			b.rb.Release()
			panic(fmt.Sprintf("schemas: schema %q does not have the %s column layout: %v", s.Name, Clickstream, r))
		}
	}()
	if n := s.Arrow.NumFields(); n != numCols {
		panic(fmt.Sprintf("%d columns, want %d", n, numCols))
	}
	for i := range b.strs {
		b.strs[i] = b.rb.Field(i).(*array.StringBuilder)
	}
	b.eventTS = b.rb.Field(colEventTS).(*array.TimestampBuilder)
	b.seq = b.rb.Field(colSeq).(*array.Int64Builder)
	b.topic = b.rb.Field(colKafkaTopic).(*array.StringBuilder)
	b.partition = b.rb.Field(colKafkaPartition).(*array.Int32Builder)
	b.offset = b.rb.Field(colKafkaOffset).(*array.Int64Builder)
	b.kafkaTS = b.rb.Field(colKafkaTimestamp).(*array.TimestampBuilder)
	b.ingested = b.rb.Field(colIngestedAt).(*array.TimestampBuilder)
	b.status = b.rb.Field(colEnrichStatus).(*array.StringBuilder)
	for _, c := range []int{colEventTS, colKafkaTimestamp, colIngestedAt} {
		if tt := s.Arrow.Field(c).Type.(*arrow.TimestampType); tt.Unit != arrow.Microsecond {
			panic(fmt.Sprintf("column %s has unit %s, want us", s.Arrow.Field(c).Name, tt.Unit))
		}
	}
	return b
}

// Append decodes value and appends it as one row, stamped with the Kafka
// coordinates m, the ingestion time ingestedAt and the enrichment outcome
// enrichStatus (the zero time and "" are stored as null).
//
// The whole message is validated before anything is appended, so on error
// no column changes. The error is a *DecodeError when the message cannot
// become a row (send it to the dead-letter topic), or ErrBuilderFull when the
// builder must be flushed first (then append the same message again).
func (b *Builder) Append(value []byte, m Meta, ingestedAt time.Time, enrichStatus string) error {
	if len(value) > b.maxBytes {
		return &DecodeError{
			Reason: ReasonTooLarge,
			Detail: "message is " + strconv.Itoa(len(value)) + " bytes; the limit is " + strconv.Itoa(b.maxBytes),
		}
	}
	if err := b.decode(value); err != nil {
		return err
	}
	r := &b.row
	add := r.strBytes + len(m.Topic) + len(enrichStatus)
	if b.strBytes+add > maxStringBytes {
		return ErrBuilderFull
	}

	for i, sb := range b.strs {
		if r.strValid[i] {
			sb.BinaryBuilder.Append(r.strs[i])
		} else {
			sb.AppendNull()
		}
	}
	b.eventTS.Append(arrow.Timestamp(r.eventTS))
	if r.hasSeq {
		b.seq.Append(r.seq)
	} else {
		b.seq.AppendNull()
	}
	b.topic.BinaryBuilder.Append(stringBytes(m.Topic))
	b.partition.Append(m.Partition)
	b.offset.Append(m.Offset)
	appendTime(b.kafkaTS, m.Timestamp)
	appendTime(b.ingested, ingestedAt)
	if enrichStatus == "" {
		b.status.AppendNull()
	} else {
		b.status.BinaryBuilder.Append(stringBytes(enrichStatus))
	}

	b.rows++
	b.strBytes += add
	return nil
}

// decode parses value into b.row, or explains why it cannot.
func (b *Builder) decode(value []byte) *DecodeError {
	if len(value) == 0 {
		return &DecodeError{Reason: ReasonMalformedJSON, Detail: "empty message"}
	}
	v, err := b.parser.ParseBytes(value)
	if err != nil {
		return &DecodeError{Reason: ReasonMalformedJSON, Detail: err.Error()}
	}
	if t := v.Type(); t != fastjson.TypeObject {
		return &DecodeError{Reason: ReasonMalformedJSON, Detail: "the message is a JSON " + t.String() + ", want an object"}
	}
	obj, _ := v.Object() // cannot fail: v is an object

	b.vals = [numJSONFields]*fastjson.Value{}
	obj.Visit(func(key []byte, v *fastjson.Value) {
		// A repeated key overwrites: the last value wins, as in encoding/json.
		if i := jsonSlot(key); i >= 0 {
			b.vals[i] = v
		}
	})

	r := &b.row
	r.strBytes = 0
	for i := range r.strs {
		r.strs[i], r.strValid[i] = nil, false
		v := b.vals[i]
		required := clickstreamFields[i].Required
		if isNull(v) {
			if required {
				return missing(i)
			}
			continue
		}
		if v.Type() != fastjson.TypeString {
			return wrongType(i, "a string", v)
		}
		s, _ := v.StringBytes() // cannot fail: v is a string
		if required && len(s) == 0 {
			return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[i], Detail: "must not be empty"}
		}
		if !utf8.Valid(s) {
			return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[i], Detail: "is not valid UTF-8"}
		}
		r.strs[i], r.strValid[i] = s, true
		r.strBytes += len(s)
	}

	ts, derr := decodeTS(b.vals[colEventTS])
	if derr != nil {
		return derr
	}
	r.eventTS = ts

	r.seq, r.hasSeq = 0, false
	if v := b.vals[colSeq]; !isNull(v) {
		if v.Type() != fastjson.TypeNumber {
			return wrongType(colSeq, "an integer", v)
		}
		n, err := v.Int64()
		if err != nil {
			return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colSeq], Detail: "must be an integer that fits in 64 bits"}
		}
		r.seq, r.hasSeq = n, true
	}
	return nil
}

// maxEpochMillis is the largest magnitude of an epoch-millisecond ts whose
// microsecond value still fits in an int64.
const maxEpochMillis = math.MaxInt64 / 1000

// decodeTS converts the message's ts, epoch milliseconds or an RFC 3339
// string, into microseconds since the epoch.
func decodeTS(v *fastjson.Value) (int64, *DecodeError) {
	if isNull(v) {
		return 0, missing(colEventTS)
	}
	switch v.Type() {
	case fastjson.TypeNumber:
		ms, err := v.Int64()
		if err != nil || ms > maxEpochMillis || ms < -maxEpochMillis {
			return 0, &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colEventTS],
				Detail: "a numeric ts must be integer epoch milliseconds within ±292,000 years"}
		}
		return ms * 1000, nil
	case fastjson.TypeString:
		s, _ := v.StringBytes() // cannot fail: v is a string
		if len(s) == 0 {
			return 0, &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colEventTS], Detail: "must not be empty"}
		}
		// The string is only read during the call; on success nothing keeps it.
		t, err := time.Parse(time.RFC3339, unsafe.String(unsafe.SliceData(s), len(s)))
		if err != nil {
			return 0, &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colEventTS],
				Detail: "a string ts must be RFC 3339: " + err.Error()}
		}
		return t.UnixMicro(), nil
	default:
		return 0, wrongType(colEventTS, "epoch milliseconds or an RFC 3339 string", v)
	}
}

func isNull(v *fastjson.Value) bool { return v == nil || v.Type() == fastjson.TypeNull }

func missing(col int) *DecodeError {
	return &DecodeError{Reason: ReasonMissingField, Field: jsonNames[col], Detail: "is required"}
}

func wrongType(col int, want string, v *fastjson.Value) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[col],
		Detail: "must be " + want + ", got a JSON " + v.Type().String()}
}

func appendTime(tb *array.TimestampBuilder, t time.Time) {
	if t.IsZero() {
		tb.AppendNull()
		return
	}
	tb.Append(arrow.Timestamp(t.UnixMicro()))
}

// stringBytes views s as bytes without copying, for builder calls that only
// read their argument; it saves the allocation []byte(s) would make.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Len returns the number of rows buffered since the last NewRecord.
func (b *Builder) Len() int { return b.rows }

// SizeBytes returns an estimate of the Arrow bytes buffered since the last
// NewRecord (string data plus the fixed width of each row, not the builders'
// spare capacity), so the caller can flush by size without walking buffers.
func (b *Builder) SizeBytes() int { return b.rows*rowFixedBytes + b.strBytes }

// NewRecord hands the buffered rows over as a record batch whose schema is
// s.Arrow, and leaves the Builder empty and ready for the next batch. The
// caller owns the batch and must Release it; it stays valid after further
// Appends and after the Builder is released.
func (b *Builder) NewRecord() arrow.RecordBatch {
	rec := b.rb.NewRecordBatch()
	b.rows, b.strBytes = 0, 0
	return rec
}

// Release frees the Builder's buffers, including any rows not yet taken by
// NewRecord. The Builder must not be used afterwards.
func (b *Builder) Release() {
	if b.rb != nil {
		b.rb.Release()
		b.rb = nil
	}
}
