package schemas

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
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
// buffer until they are copied into the column buffers.
type row struct {
	strs     [numStringEventCols][]byte
	strValid [numStringEventCols]bool
	eventTS  int64 // microseconds since the epoch, UTC
	seq      int64
	hasSeq   bool
	strBytes int // sum of len(strs[i])
}

// Builder turns messages of one schema into Arrow record batches. It exists
// so that the per-record path allocates nothing: one reusable JSON parser,
// the stack for the row being validated, and column buffers sized from the
// previous batch. It is not safe for concurrent use; give each worker its
// own.
type Builder struct {
	arrow    *arrow.Schema
	mem      memory.Allocator
	maxBytes int
	parser   fastjson.Parser
	nums     NumberReader

	strs      [numStringEventCols]stringColumn
	eventTS   fixedColumn
	seq       fixedColumn
	topic     stringColumn
	partition fixedColumn
	offset    fixedColumn
	kafkaTS   fixedColumn
	ingested  fixedColumn
	status    stringColumn
	extra     []extraColumn
	// extraRows holds each row's extra Attrs (the first of len(extra)),
	// nil for a row of nulls, for NewRecord to fill the extra columns from;
	// extraStrBytes is the sum of their Extra.StrBytes, which bounded the
	// batch, for NewRecord to check.
	extraRows     []*Attr
	extraStrBytes int

	rows     int
	strBytes int
}

// NewBuilder returns an empty Builder for s whose batches allocate from mem
// (nil means memory.DefaultAllocator). maxMessageBytes bounds the size of a
// message that is parsed at all (larger ones are rejected as too_large,
// protecting the worker's memory and time); a value <= 0 selects
// DefaultMaxMessageBytes. It panics if s does not have the layout of the
// built-in schema, since that is a programming error; NewRecordBuilder
// chooses the right builder for any schema.
func (s *Schema) NewBuilder(mem memory.Allocator, maxMessageBytes int) *Builder {
	if err := checkLayout(s.Arrow, s.Extra); err != nil {
		panic(fmt.Sprintf("schemas: NewBuilder: schema %q: %v", s.Name, err))
	}
	if maxMessageBytes <= 0 {
		maxMessageBytes = DefaultMaxMessageBytes
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	b := &Builder{
		arrow:     s.Arrow,
		mem:       mem,
		maxBytes:  maxMessageBytes,
		eventTS:   newFixedColumn(mem, 8),
		seq:       newFixedColumn(mem, 8),
		topic:     newStringColumn(mem),
		partition: newFixedColumn(mem, 4),
		offset:    newFixedColumn(mem, 8),
		kafkaTS:   newFixedColumn(mem, 8),
		ingested:  newFixedColumn(mem, 8),
		status:    newStringColumn(mem),
	}
	for i := range b.strs {
		b.strs[i] = newStringColumn(mem)
	}
	for _, c := range s.Extra {
		b.extra = append(b.extra, newExtraColumn(mem, c.Type))
	}
	return b
}

// checkLayout verifies that as has the column types the Builder writes: the
// clickstream columns, then extra.
func checkLayout(as *arrow.Schema, extra []Column) error {
	if as == nil || as.NumFields() != numCols+len(extra) {
		return fmt.Errorf("want the %d columns of the %s schema and %d extra", numCols, Clickstream, len(extra))
	}
	for i, f := range as.Fields() {
		want := clickstreamArrowType(i)
		if i >= numCols {
			var err error
			if want, err = extraArrowType(extra[i-numCols].Type); err != nil {
				return err
			}
		}
		if !arrow.TypeEqual(f.Type, want) {
			return fmt.Errorf("column %d (%s) is %s, want %s", i, f.Name, f.Type, want)
		}
	}
	return nil
}

// clickstreamArrowType is the Arrow type of built-in column i.
func clickstreamArrowType(i int) arrow.DataType {
	switch i {
	case colEventTS, colKafkaTimestamp, colIngestedAt:
		return arrow.FixedWidthTypes.Timestamp_us
	case colSeq, colKafkaOffset:
		return arrow.PrimitiveTypes.Int64
	case colKafkaPartition:
		return arrow.PrimitiveTypes.Int32
	}
	return arrow.BinaryTypes.String
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
	return b.AppendEnriched(value, m, ingestedAt, enrichStatus, Extra{})
}

// AppendEnriched is Append that also fills the schema's extra columns from
// extra. It keeps extra.Attrs until NewRecord, which fills the columns for
// all rows at once (see Extra).
func (b *Builder) AppendEnriched(value []byte, m Meta, ingestedAt time.Time, enrichStatus string, extra Extra) error {
	// The row lives on the stack: it holds pointers, and storing them into
	// the heap-allocated Builder would cost a GC write barrier each.
	var r row
	if err := b.decodeRow(value, &r); err != nil {
		return err
	}
	return b.appendRow(&r, m, ingestedAt, enrichStatus, extra)
}

// Check decodes value as Append would, appending nothing (see
// RecordBuilder).
func (b *Builder) Check(value []byte) error {
	var r row // on the stack, as in AppendEnriched
	return b.decodeRow(value, &r)
}

// decodeRow is decode for a message within the size limit.
func (b *Builder) decodeRow(value []byte, r *row) error {
	if len(value) > b.maxBytes {
		return &DecodeError{
			Reason: ReasonTooLarge,
			Detail: "message is " + strconv.Itoa(len(value)) + " bytes; the limit is " + strconv.Itoa(b.maxBytes),
		}
	}
	if err := b.decode(value, r); err != nil { // a nil *DecodeError must not become a non-nil error
		return err
	}
	return nil
}

// AppendResolved is AppendEnriched for a row whose enrichment depends on
// the value of its top-level string field keyField (nil when null or
// absent): it decodes value, asks res for the row's status and extra
// values, and appends the row if res resolves it. The message is parsed
// once, where reading the key first and then appending would parse it
// twice. It returns ErrUnresolved, having appended nothing, when res does
// not resolve the key, and at once, before decoding, when keyField is not
// one of the message's string fields; a message that cannot be decoded
// fails as with Append, before res is asked.
func (b *Builder) AppendResolved(value []byte, m Meta, ingestedAt time.Time, keyField string, res Resolver) error {
	slot := stringSlot(keyField)
	if slot < 0 {
		return ErrUnresolved
	}
	var r row // on the stack, as in AppendEnriched
	if err := b.decodeRow(value, &r); err != nil {
		return err
	}
	var key []byte
	if r.strValid[slot] {
		key = r.strs[slot]
	}
	status, extra, ok := res.Resolve(key)
	if !ok {
		return ErrUnresolved
	}
	return b.appendRow(&r, m, ingestedAt, status, extra)
}

// stringSlot is the string column of the message field named field, or -1.
func stringSlot(field string) int {
	if i := jsonSlot([]byte(field)); i < numStringEventCols {
		return i
	}
	return -1
}

// appendRow appends a decoded row.
func (b *Builder) appendRow(r *row, m Meta, ingestedAt time.Time, enrichStatus string, extra Extra) error {
	add := r.strBytes + len(m.Topic) + len(enrichStatus) + extra.StrBytes
	if b.strBytes+add > maxStringBytes {
		return ErrBuilderFull
	}

	n := b.rows
	for i := range b.strs {
		if r.strValid[i] {
			b.strs[i].append(n, r.strs[i])
		} else {
			b.strs[i].appendNull(n)
		}
	}
	b.eventTS.append64(n, r.eventTS)
	if r.hasSeq {
		b.seq.append64(n, r.seq)
	} else {
		b.seq.appendNull(n)
	}
	b.topic.append(n, stringBytes(m.Topic))
	b.partition.append32(n, m.Partition)
	b.offset.append64(n, m.Offset)
	appendTime(&b.kafkaTS, n, m.Timestamp)
	appendTime(&b.ingested, n, ingestedAt)
	if enrichStatus == "" {
		b.status.appendNull(n)
	} else {
		b.status.append(n, stringBytes(enrichStatus))
	}
	if len(b.extra) > 0 {
		b.extraRows = append(b.extraRows, b.fullAttrs(extra.Attrs))
		b.extraStrBytes += extra.StrBytes
	}

	b.rows++
	b.strBytes += add
	return nil
}

// fullAttrs returns where the len(b.extra) Attrs of a row start: attrs
// itself, or for a short slice a copy padded with nulls; nil for none.
func (b *Builder) fullAttrs(attrs []Attr) *Attr {
	switch {
	case len(attrs) == 0:
		return nil
	case len(attrs) < len(b.extra):
		padded := make([]Attr, len(b.extra))
		copy(padded, attrs)
		attrs = padded
	}
	return &attrs[0]
}

// fillExtra appends every row's extra Attrs to the extra columns. Rows
// that share a key share Attrs, and the reads of different rows overlap in
// the CPU, which one row's reads on the per-record path cannot. It panics
// if the rows' strings outgrow the Extra.StrBytes they declared, since
// that is a programming error (an Extra not made by NewExtra) that could
// have let the batch outgrow Arrow's int32 offsets unnoticed.
func (b *Builder) fillExtra() {
	k := len(b.extra)
	for n, p := range b.extraRows {
		if p == nil {
			for i := range b.extra {
				b.extra[i].append(n, &unsetAttr)
			}
			continue
		}
		attrs := unsafe.Slice(p, k)
		for i := range b.extra {
			b.extra[i].append(n, &attrs[i])
		}
	}
	used := 0
	for i := range b.extra {
		used += b.extra[i].str.data.n
	}
	if used > b.extraStrBytes {
		panic(fmt.Sprintf("schemas: the extra columns hold %d string bytes, their rows declared %d: an Extra not made by NewExtra", used, b.extraStrBytes))
	}
	clear(b.extraRows) // let go of the Attrs
	b.extraRows, b.extraStrBytes = b.extraRows[:0], 0
}

// decode parses value into r, which must be zero, or explains why it cannot.
func (b *Builder) decode(value []byte, r *row) *DecodeError {
	if len(value) == 0 {
		return &DecodeError{Reason: ReasonMalformedJSON, Detail: "empty message"}
	}
	v, ascii, derr := parseObject(&b.parser, value)
	if derr != nil {
		return derr
	}
	obj, _ := v.Object() // cannot fail: v is an object

	var vals [numJSONFields]*fastjson.Value // on the stack, like r
	if derr := b.nums.members(obj, jsonSlot, vals[:]); derr != nil {
		return derr
	}

	// JSON escapes always decode to valid UTF-8, so only a message with
	// non-ASCII bytes can hold an invalid string; most hold none, and one
	// pass over the message is cheaper than checking each string.
	checkUTF8 := !ascii

	for i := range r.strs {
		v := vals[i]
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
		if checkUTF8 && !utf8.Valid(s) {
			return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[i], Detail: "is not valid UTF-8"}
		}
		r.strs[i], r.strValid[i] = s, true
		r.strBytes += len(s)
	}

	ts, derr := decodeTS(vals[colEventTS], &b.nums)
	if derr != nil {
		return derr
	}
	r.eventTS = ts

	if v := vals[colSeq]; !isNull(v) {
		if v.Type() != fastjson.TypeNumber {
			return wrongType(colSeq, "an integer", v)
		}
		n, err := b.nums.Int(v)
		if err == errNotNumber {
			return b.nums.malformed()
		}
		if err != nil {
			return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colSeq], Detail: "must be an integer that fits in 64 bits"}
		}
		r.seq, r.hasSeq = n, true
	}
	return nil
}

// decodeTS converts the message's ts, epoch milliseconds or an RFC 3339
// string, into microseconds since the epoch, within the years 0001 to 9999
// as in the generic decoders (see timeMicros).
func decodeTS(v *fastjson.Value, nums *NumberReader) (int64, *DecodeError) {
	if isNull(v) {
		return 0, missing(colEventTS)
	}
	switch v.Type() {
	case fastjson.TypeNumber:
		ms, err := nums.Int(v)
		if err == errNotNumber {
			return 0, nums.malformed()
		}
		if err != nil {
			return 0, &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colEventTS],
				Detail: "a numeric ts must be integer epoch milliseconds"}
		}
		us, derr := timeMicros(ms, true)
		if derr != nil {
			derr.Field = jsonNames[colEventTS]
			return 0, derr
		}
		return us, nil
	case fastjson.TypeString:
		s, _ := v.StringBytes() // cannot fail: v is a string
		if len(s) == 0 {
			return 0, &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colEventTS], Detail: "must not be empty"}
		}
		// The string is only read during the call, and the error (which
		// would quote all of it) is dropped, so nothing keeps it.
		t, err := ParseDateTime(time.RFC3339, unsafe.String(unsafe.SliceData(s), len(s)))
		if err != nil {
			return 0, &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[colEventTS],
				Detail: "a string ts must be an RFC 3339 date-time with a zone, like 2024-11-29T06:00:00Z"}
		}
		us, derr := timeMicros(t.UnixMicro(), false)
		if derr != nil {
			derr.Field = jsonNames[colEventTS]
			return 0, derr
		}
		return us, nil
	default:
		return 0, wrongType(colEventTS, "epoch milliseconds or an RFC 3339 string", v)
	}
}

// maxDetailBytes bounds DecodeError.Detail, which travels in dead-letter
// headers and log lines.
const maxDetailBytes = 256

// Truncate shortens s to at most n bytes without splitting a UTF-8
// sequence, marking the cut.
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const more = "…"
	cut := n - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "") + more
}

// ParseDateTime is time.Parse of an RFC 3339 layout, which also takes
// the "t" and "z" RFC 3339 allows in lower case (section 5.6). Enrichment reads
// its attributes' timestamps with it too, so that they take what records do.
func ParseDateTime(layout, s string) (time.Time, error) {
	t, err := time.Parse(layout, s)
	if err != nil && strings.ContainsAny(s, "tz") {
		if u, uerr := time.Parse(layout, strings.ToUpper(s)); uerr == nil {
			return u, nil
		}
	}
	return t, err
}

// parseObject parses value, a JSON object, with p. fastjson's parser lets
// through invalid escapes ("\q", "\u00zz", kept as written) and raw
// control characters in strings, which the JSON grammar refuses: a message
// with a backslash is also validated, one more pass that most messages
// skip, by fastjson's validator, or with a control character (whitespace
// between tokens included) by encoding/json's (fastjson's misses one before
// an escape in the same string).
// It takes number tokens loosely too (007, NaN, 1.2.3): a decoder checks
// the numbers it reads with a NumberReader, and those of the members it
// does not read with badNumber. ascii reports that value has no byte above
// 0x7F.
func parseObject(p *fastjson.Parser, value []byte) (v *fastjson.Value, ascii bool, derr *DecodeError) {
	ascii, escapes, controls := scanText(value)
	// Parsed first: the parser refuses nesting deeper than 300 levels,
	// fastjson's validator has no bound and wraps its error once per level
	// (20 KB of '[' took 11 s, a 1 MiB message hours).
	v, err := p.ParseBytes(value)
	if err != nil {
		// fastjson's messages can quote the whole rest of the input.
		return nil, false, &DecodeError{Reason: ReasonMalformedJSON, Detail: Truncate(err.Error(), maxDetailBytes)}
	}
	switch {
	case controls:
		if !json.Valid(value) {
			var x any
			err := json.Unmarshal(value, &x) // for the reason, rarely
			return nil, false, &DecodeError{Reason: ReasonMalformedJSON, Detail: Truncate(err.Error(), maxDetailBytes)}
		}
	case escapes:
		if err := fastjson.ValidateBytes(value); err != nil {
			return nil, false, &DecodeError{Reason: ReasonMalformedJSON, Detail: Truncate(err.Error(), maxDetailBytes)}
		}
	}
	if escapes {
		if esc, lone := loneSurrogate(value); lone {
			return nil, false, &DecodeError{Reason: ReasonMalformedJSON,
				Detail: "a string holds a lone UTF-16 surrogate escape (" + esc + "): no character"}
		}
	}
	if t := v.Type(); t != fastjson.TypeObject {
		return nil, false, &DecodeError{Reason: ReasonMalformedJSON, Detail: "the message is a JSON " + t.String() + ", want an object"}
	}
	return v, ascii, nil
}

// loneSurrogate finds in p, valid JSON, a \u escape of a UTF-16 surrogate
// that is not half of a pair: fastjson would store it as its six
// characters (and encoding/json as U+FFFD), neither the text the producer
// meant. A backslash in valid JSON is in a string and starts an escape.
func loneSurrogate(p []byte) (string, bool) {
	hex4 := func(i int) rune {
		if i+4 > len(p) {
			return -1
		}
		n, err := strconv.ParseUint(string(p[i:i+4]), 16, 16)
		if err != nil {
			return -1
		}
		return rune(n)
	}
	for i := 0; i < len(p)-1; i++ {
		if p[i] != '\\' {
			continue
		}
		i++ // the escaped character
		if p[i] != 'u' {
			continue
		}
		c := hex4(i + 1)
		switch {
		case utf16.IsSurrogate(c) && c < 0xDC00: // high: a low one must follow
			if i+10 < len(p) && p[i+5] == '\\' && p[i+6] == 'u' {
				if lo := hex4(i + 7); lo >= 0xDC00 && lo < 0xE000 {
					i += 10
					continue
				}
			}
			return string(p[i-1 : i+5]), true
		case utf16.IsSurrogate(c):
			return string(p[i-1 : i+5]), true
		}
		i += 4
	}
	return "", false
}

// scanText reports whether p has no byte above 0x7F, whether it has a
// backslash, and whether it has a byte below 0x20.
func scanText(p []byte) (ascii, escapes, controls bool) {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	escapes = bytes.IndexByte(p, '\\') >= 0
	var acc, ctl uint64
	for len(p) >= 8 {
		x := binary.LittleEndian.Uint64(p)
		acc |= x
		// A byte below 0x20 sets its high bit here (or a higher byte's,
		// past a true one).
		ctl |= (x - ones*0x20) &^ x
		p = p[8:]
	}
	for _, c := range p {
		acc |= uint64(c)
		if c < 0x20 {
			ctl |= highs
		}
	}
	return acc&highs == 0, escapes, ctl&highs != 0
}

func isNull(v *fastjson.Value) bool { return v == nil || v.Type() == fastjson.TypeNull }

func missing(col int) *DecodeError {
	return &DecodeError{Reason: ReasonMissingField, Field: jsonNames[col], Detail: "is required"}
}

func wrongType(col int, want string, v *fastjson.Value) *DecodeError {
	return &DecodeError{Reason: ReasonInvalidField, Field: jsonNames[col],
		Detail: "must be " + want + ", got a JSON " + v.Type().String()}
}

func appendTime(c *fixedColumn, n int, t time.Time) {
	us, ok := recordTime(t)
	if !ok {
		c.appendNull(n)
		return
	}
	c.append64(n, us)
}

// stringBytes views s as bytes without copying, for appends that only read
// their argument; it saves the allocation []byte(s) would make.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// Len returns the number of rows buffered since the last NewRecord.
func (b *Builder) Len() int { return b.rows }

// SizeBytes returns an estimate of the Arrow bytes buffered since the last
// NewRecord, so the caller can flush by size without walking buffers. It
// counts what the rows use (string data plus each row's fixed width); the
// allocation behind them can be up to half as much again while a batch
// outgrows the previous one, or the previous batch's size when it is
// smaller.
func (b *Builder) SizeBytes() int { return b.rows*(rowFixedBytes+9*len(b.extra)) + b.strBytes }

// NewRecord hands the buffered rows over as a record batch whose schema is
// s.Arrow, and leaves the Builder empty and ready for the next batch. The
// caller owns the batch and must Release it; the batch owns its memory (the
// Builder's buffers, taken over without copying), so it stays valid after
// further Appends and after the Builder is released.
func (b *Builder) NewRecord() arrow.RecordBatch {
	b.fillExtra() // first: its panic leaves every buffer to Release
	n, as := b.rows, b.arrow
	cols := make([]arrow.Array, numCols+len(b.extra))
	for i := range b.strs {
		cols[i] = b.strs[i].take(as.Field(i).Type, n)
	}
	cols[colEventTS] = b.eventTS.take(as.Field(colEventTS).Type, n)
	cols[colSeq] = b.seq.take(as.Field(colSeq).Type, n)
	cols[colKafkaTopic] = b.topic.take(as.Field(colKafkaTopic).Type, n)
	cols[colKafkaPartition] = b.partition.take(as.Field(colKafkaPartition).Type, n)
	cols[colKafkaOffset] = b.offset.take(as.Field(colKafkaOffset).Type, n)
	cols[colKafkaTimestamp] = b.kafkaTS.take(as.Field(colKafkaTimestamp).Type, n)
	cols[colIngestedAt] = b.ingested.take(as.Field(colIngestedAt).Type, n)
	cols[colEnrichStatus] = b.status.take(as.Field(colEnrichStatus).Type, n)
	for i := range b.extra {
		cols[numCols+i] = b.extra[i].take(as.Field(numCols+i).Type, n)
	}
	rec := array.NewRecordBatch(as, cols, int64(n))
	for _, c := range cols {
		c.Release()
	}
	b.rows, b.strBytes = 0, 0
	return rec
}

// Release frees the Builder's buffers, including any rows not yet taken by
// NewRecord, back to its allocator. The Builder must not be used
// afterwards; batches already returned by NewRecord are unaffected.
func (b *Builder) Release() {
	for i := range b.strs {
		b.strs[i].release()
	}
	b.eventTS.release()
	b.seq.release()
	b.topic.release()
	b.partition.release()
	b.offset.release()
	b.kafkaTS.release()
	b.ingested.release()
	b.status.release()
	for i := range b.extra {
		b.extra[i].release()
	}
	b.extraRows, b.extraStrBytes = nil, 0
	b.rows, b.strBytes = 0, 0
}
