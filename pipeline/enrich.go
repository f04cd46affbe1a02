package pipeline

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/segmentio/kafka-go"
	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/schemas"
)

// WithEnrichment returns sc extended by the configured enrichment columns, so
// the table and every batch carry them as typed Iceberg columns. Without an
// enrich section it returns sc.
func WithEnrichment(sc *schemas.Schema, cfg *enrich.Config) (*schemas.Schema, error) {
	if cfg == nil {
		return sc, nil
	}
	// One field at a time, so that a refused name (a column's, also in
	// another case, or an earlier field's) is named with its index.
	for i, f := range cfg.Fields {
		t, err := icebergType(f.Type)
		if err == nil {
			sc, err = sc.WithColumns([]schemas.Column{{Name: f.Name, Type: t}})
		}
		if err != nil {
			return nil, fmt.Errorf("enrich.fields[%d] %s: %w", i, f.Name, err)
		}
	}
	return sc, nil
}

func icebergType(t enrich.FieldType) (iceberg.Type, error) {
	switch t {
	case enrich.TypeString:
		return iceberg.PrimitiveTypes.String, nil
	case enrich.TypeLong:
		return iceberg.PrimitiveTypes.Int64, nil
	case enrich.TypeDouble:
		return iceberg.PrimitiveTypes.Float64, nil
	case enrich.TypeBoolean:
		return iceberg.PrimitiveTypes.Bool, nil
	case enrich.TypeTimestamp:
		return iceberg.PrimitiveTypes.TimestampTz, nil
	}
	return nil, fmt.Errorf("unknown type %q", t)
}

// keyExtractor pulls the lookup key out of a record value. It owns a parser
// for the rare values the scanner leaves to it, so each fetch worker has its
// own.
type keyExtractor struct {
	field string
	tail  []byte // field", without the opening quote (see indexQuoted)
	p     fastjson.Parser
}

func newKeyExtractor(field string) *keyExtractor {
	q := strconv.Quote(field)
	return &keyExtractor{field: field, tail: []byte(q[1:])}
}

// key returns the lookup key: a JSON string, or an integer written in
// decimal, of the top-level field (the last one, if repeated, as the
// decoder reads it). A record without one (or not a JSON object) gets an
// empty key, which the stage completes at once as a miss; the decoder then
// judges the record itself. A string key is a slice of value, not a copy:
// the stage copies a key only when it has to look it up, so a cached key
// costs no allocation.
//
// The record is parsed again when it is decoded, so the key is found by a
// scan that only walks the top-level object and copies nothing but the key:
// several times cheaper than a full parse. A value the scan does not settle
// (escapes in a name or in the key's string, a malformed object) goes to
// fastjson, whose answer it is. The scan checks the object's structure, not
// its scalars: a record it takes a key from may still fail to decode, and
// is then dead-lettered; only its lookup was wasted.
func (k *keyExtractor) key(value []byte) []byte {
	if key, ok := findKey(value, k.tail); ok {
		return key
	}
	if key, ok := scanKey(value, k.field); ok {
		return key
	}
	return []byte(k.parse(value))
}

// findKey is the fast path of key for objects without escapes or nesting
// before the key, which clickstream records are: there every quote opens or
// closes a string, so in a well-formed object the quoted field name followed
// by a colon is the member, found with a few vectorized searches. tail is
// the quoted name without its opening quote. ok is false for any other
// value (an escape, a nested object or array before the name, the name
// twice), and for values that are not a well-formed object the answer is
// only a guess the decoder then overrules.
func findKey(v []byte, tail []byte) (key []byte, ok bool) {
	if len(tail) < 2 || len(v) < 2 || v[0] != '{' {
		return nil, false
	}
	at := indexQuoted(v, 1, tail)
	if at < 0 {
		return nil, false // absent, or not found this way: let the scan decide
	}
	end := at + 1 + len(tail)
	// Only what comes before the name can make it something else than a
	// top-level member name (a nested object's, or part of a string); the
	// name again anywhere after it, also escaped, defers to the scan, so
	// nothing else after it needs checking.
	if before := v[1:at]; bytes.IndexByte(before, '\\') >= 0 || bytes.IndexByte(before, '{') >= 0 ||
		bytes.IndexByte(before, '[') >= 0 || indexQuoted(v, end, tail) >= 0 || bytes.IndexByte(v[end:], '\\') >= 0 {
		return nil, false
	}
	i := skipSpace(v, end)
	if i >= len(v) || v[i] != ':' {
		return nil, false
	}
	i = skipSpace(v, i+1)
	if i >= len(v) {
		return nil, false
	}
	val, next, ok := scanKeyValue(v, i)
	if !ok {
		return nil, false
	}
	if next = skipSpace(v, next); next >= len(v) || (v[next] != ',' && v[next] != '}') {
		return nil, false
	}
	return val, true
}

// indexQuoted returns the index of the first "name" in v at or after from
// (the opening quote's), or -1; tail is name" without the opening quote. It
// searches for tail and checks the quote before it, because bytes.Index
// anchors on a pattern's first byte, and a JSON object is full of quotes:
// each would be a candidate to compare.
func indexQuoted(v []byte, from int, tail []byte) int {
	for from < len(v) {
		i := bytes.Index(v[from:], tail)
		if i < 0 {
			return -1
		}
		at := from + i
		if v[at-1] == '"' {
			return at - 1
		}
		from = at + 1
	}
	return -1
}

// parse is key with a full parse: the reference for scanKey. Of a repeated
// member it reads the last, as the decoder does (fastjson's Get would take
// the first).
func (k *keyExtractor) parse(value []byte) string {
	v, err := k.p.ParseBytes(value)
	if err != nil {
		return ""
	}
	f := lastMember(v, []string{k.field})
	if f == nil {
		return ""
	}
	switch f.Type() {
	case fastjson.TypeString:
		return string(f.GetStringBytes())
	case fastjson.TypeNumber:
		if n, err := f.Int64(); err == nil {
			return strconv.FormatInt(n, 10)
		}
	}
	return ""
}

// scanKey finds field's value among the members of the JSON object in v
// without parsing the values it skips. ok is false when the scan cannot
// decide: v is not a well-formed object as far as the scan checks, or a
// member name or the key's string holds an escape.
func scanKey(v []byte, field string) (key []byte, ok bool) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return nil, false
	}
	i = skipSpace(v, i+1)
	if i < len(v) && v[i] == '}' {
		return nil, skipSpace(v, i+1) == len(v)
	}
	var found []byte
	haveKey := false
	for {
		// A member name.
		if i >= len(v) || v[i] != '"' {
			return nil, false
		}
		end, escaped := scanString(v, i)
		if end < 0 || escaped {
			return nil, false
		}
		name := v[i+1 : end-1]
		i = skipSpace(v, end)
		if i >= len(v) || v[i] != ':' {
			return nil, false
		}
		i = skipSpace(v, i+1)
		if i >= len(v) {
			return nil, false
		}
		if string(name) == field { // no allocation
			val, next, ok := scanKeyValue(v, i)
			if !ok {
				return nil, false
			}
			found, haveKey, i = val, true, next
		} else {
			if i = skipValue(v, i); i < 0 {
				return nil, false
			}
		}
		i = skipSpace(v, i)
		if i >= len(v) {
			return nil, false
		}
		switch v[i] {
		case ',':
			i = skipSpace(v, i+1)
		case '}':
			if skipSpace(v, i+1) != len(v) {
				return nil, false
			}
			if !haveKey {
				return nil, true
			}
			return found, true
		default:
			return nil, false
		}
	}
}

// scanKeyValue reads the key field's value at v[i:]: a string without
// escapes is the key, an integer its decimal form, anything else no key.
// next is the index after the value; ok is false when the scan cannot
// decide.
func scanKeyValue(v []byte, i int) (key []byte, next int, ok bool) {
	switch c := v[i]; {
	case c == '"':
		end, escaped := scanString(v, i)
		if end < 0 || escaped {
			return nil, 0, false
		}
		return v[i+1 : end-1], end, true
	case c == '-' || (c >= '0' && c <= '9'):
		end := skipValue(v, i)
		if end < 0 {
			return nil, 0, false
		}
		n, err := strconv.ParseInt(string(v[i:end]), 10, 64)
		if err != nil {
			return nil, 0, false // a fraction, an exponent, or too large: fastjson decides
		}
		return strconv.AppendInt(nil, n, 10), end, true
	}
	end := skipValue(v, i)
	return nil, end, end >= 0
}

// scanString returns the index after the JSON string starting at v[i] (a
// quote), or -1 if it does not end, and whether it holds an escape.
func scanString(v []byte, i int) (end int, escaped bool) {
	// Most strings hold no escape: find the closing quote with IndexByte.
	q := bytes.IndexByte(v[i+1:], '"')
	if q < 0 {
		return -1, false
	}
	if bytes.IndexByte(v[i+1:i+1+q], '\\') < 0 {
		return i + q + 2, false
	}
	for j := i + 1; j < len(v); j++ {
		switch v[j] {
		case '"':
			return j + 1, true
		case '\\':
			j++
		}
	}
	return -1, true
}

// skipValue returns the index after the JSON value starting at v[i], or -1
// if it does not end. Nested objects and arrays are skipped by counting
// brackets outside strings; their contents are left to the decoder.
func skipValue(v []byte, i int) int {
	switch v[i] {
	case '"':
		end, _ := scanString(v, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(v); j++ {
			switch v[j] {
			case '"':
				end, _ := scanString(v, j)
				if end < 0 {
					return -1
				}
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return -1
	}
	// A number, true, false or null: up to the next delimiter.
	j := i
	for j < len(v) {
		switch v[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			if j == i {
				return -1
			}
			return j
		}
		j++
	}
	return -1 // a top-level object cannot end inside a scalar
}

func skipSpace(v []byte, i int) int {
	for i < len(v) {
		switch v[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}

// laneSlab is how many lane records are allocated at once. A slab is
// reused once its last record has been buffered (records leave the lane in
// the order they were put in their slabs).
const laneSlab = 256

// freeLaneSlabs is how many buffered slabs (24 KiB each) a partition keeps
// for reuse; see enrich's freeSlabs.
const freeLaneSlabs = 40

// laneOverhead is what a record costs in a lane beyond its key, value and
// headers: its laneRecord (128 bytes) and the lane's entry (96).
const laneOverhead = 224

// takeBatch is how many records the drainer takes from its lane at once.
const takeBatch = 256

// laneRecord is what a lane holds of a fetched message: only what buffering
// it needs. A kafka.Message is twice its size and holds twice the pointers,
// and a lane behind a cold key holds a hundred thousand of them for the
// garbage collector to trace.
type laneRecord struct {
	key, value []byte
	headers    []kafka.Header // for the record's dead letter
	time       time.Time
	offset     int64
	highWater  int64
	// slab is set in a slab's last record: once it is buffered, the slab
	// is free.
	slab *[laneSlab]laneRecord
	// other is set for another route's record; skipped and skippedFrom
	// for the end of a batch the reader skipped (kafka.Message.Skipped,
	// SkippedFrom): either passes the lane without a lookup, and without a
	// key or value.
	other       bool
	skipped     string
	skippedFrom int64
}

func newLaneRecord(m *kafka.Message) laneRecord {
	return laneRecord{key: m.Key, value: m.Value, headers: m.Headers, time: m.Time, offset: m.Offset, highWater: m.HighWaterMark}
}

// message is the record as buffering takes it.
func (r *laneRecord) message(topic string, partition int32) kafka.Message {
	return kafka.Message{Topic: topic, Partition: int(partition), Offset: r.offset, HighWaterMark: r.highWater,
		Key: r.key, Value: r.value, Headers: r.headers, Time: r.time, Skipped: r.skipped, SkippedFrom: r.skippedFrom}
}

// fetchEnriched is fetch with the enrichment stage between fetching and
// buffering: the fetcher submits records to the partition's lane (blocking
// when the lane is full, which stops fetching), and the drainer buffers them
// in offset order as their lookups complete, a batch of them at a time.
// While no record in the lane waits for a lookup, the fetcher itself
// buffers a record whose key is cached, once the drainer has buffered what
// the lane holds: with a warm cache, nearly every record. Records the
// member's route does not take are not looked up: they pass the lane for
// their place in the order only, or skip it like a cached one.
func (m *Member) fetchEnriched(ctx context.Context, b *partitionBuffer, seek int64, win *window, end int64, reached func()) error {
	k := m.cfg.Kafka
	r, err := m.partitionReader(b.partition, seek)
	if err != nil {
		return err
	}
	defer r.Close()
	lane := m.stage.NewQueue()
	defer lane.Abort() // records still in the lane are redone by the next owner
	// A record that cannot become a row leaves as a dead letter with its
	// own reason rather than wait for a key the service keeps failing.
	lane.Doomed(func(item any) bool { return b.unbuildable(item.(*laneRecord).value) })

	outer := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	drained := make(chan error, 1)
	free := make(chan *[laneSlab]laneRecord, freeLaneSlabs)
	go func() {
		err := m.drain(ctx, b, lane, free, win, end, reached)
		cancel() // a failed drainer stops the fetcher
		drained <- err
	}()
	ex := newKeyExtractor(m.cfg.Enrich.Key)
	direct := &cachedResolver{lane: lane}
	// The lane holds *laneRecord: boxing a laneRecord in an any would
	// allocate a copy of it per record, so they are kept in slabs instead,
	// which the drainer hands back once buffered.
	var slab *[laneSlab]laneRecord
	used := laneSlab
	// stop ends the drainer and returns its error, if it failed.
	stop := func() error {
		lane.Abort()
		cancel()
		return <-drained
	}
	for first := true; ; first = false {
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			if derr := stop(); derr != nil || outer.Err() != nil {
				return derr
			}
			return fmt.Errorf("fetching %s/%d: %w", k.Topic, b.partition, err)
		}
		if first {
			b.fetched(msg.Offset) // the lane may hold it a while
		}
		if b.lag != nil {
			b.lag.fetched(msg) // lag while the lane holds it
		}
		takes := msg.Skipped == "" && m.takes(msg.Value)
		var key []byte
		if takes {
			if done, err := m.appendCached(b, msg, direct, win, end, reached); err != nil {
				stop()
				return err
			} else if done {
				continue
			}
			key = ex.key(msg.Value)
		}
		// Unless a record in the lane waits for a lookup, a record whose key
		// is cached, or another route's, skips the lane (enrich.Queue.Direct):
		// once the drainer has buffered what the lane holds, the fetcher
		// buffers it itself, as without enrichment.
		if takes {
			if res, ok := lane.Direct(ctx, key); ok {
				if err := win.wait(ctx); err != nil {
					return stop() // stopped, or the drainer failed
				}
				if err := m.append(b, msg, res, win, end, reached); err != nil {
					stop()
					return err
				}
				continue
			}
		} else if lane.AwaitIdle(ctx) {
			if err := m.cover(b, msg, end, reached); err != nil {
				stop()
				return err
			}
			continue
		}
		if used == laneSlab {
			select {
			case slab = <-free:
			default:
				slab = new([laneSlab]laneRecord)
			}
			used = 0
		}
		rec := &slab[used]
		*rec = newLaneRecord(&msg)
		if used++; used == laneSlab {
			rec.slab = slab
		}
		if takes {
			err = lane.SubmitSized(ctx, key, rec, recordBytes(&msg)+laneOverhead)
		} else {
			// Another route's record, or a skipped batch, is not looked
			// up; it keeps its place in the lane, which covers its
			// offset in order.
			rec.key, rec.value, rec.headers = nil, nil, nil
			rec.other, rec.skipped, rec.skippedFrom = msg.Skipped == "", msg.Skipped, msg.SkippedFrom
			err = lane.Pass(ctx, rec, laneOverhead)
		}
		if err != nil {
			if derr := stop(); derr != nil || outer.Err() != nil {
				return derr
			}
			return fmt.Errorf("fetching %s/%d: %w", k.Topic, b.partition, err)
		}
	}
}

// appendCached buffers msg at once, as Direct's fast path does, when its
// lane is Idle, the window has room, and the builder, reading the key as it
// decodes the record, finds its outcome cached (enrich.Queue.Cached): the
// record is parsed once, where reading its key first (keyExtractor) and
// then decoding it parses it twice. done is false when the record must
// take the usual way: a key not cached, a lane or window not ready, a
// builder that cannot read keys (schemas other than the built-in one), or
// a record that cannot be decoded. A key not cached wastes the record's
// decoding, at most once each time the lane falls idle: the record then
// waits in the lane, and the records behind it take the usual way.
func (m *Member) appendCached(b *partitionBuffer, msg kafka.Message, r *cachedResolver, win *window, end int64, reached func()) (done bool, err error) {
	if !r.lane.Idle() || !win.hasRoom() {
		return false, nil
	}
	rows, bytes, ok, err := b.appendResolved(msg, time.Now(), m.cfg.Enrich.Key, r)
	if !ok || err != nil {
		return false, err
	}
	m.appended(b, msg, rows, bytes, false, win, end, reached)
	return true, nil
}

// cachedResolver resolves a record's key from its lane's cache
// (enrich.Queue.Cached).
type cachedResolver struct {
	lane *enrich.Queue
}

func (r *cachedResolver) Resolve(key []byte) (status string, extra schemas.Extra, ok bool) {
	res, ok := r.lane.Cached(key)
	if !ok {
		return "", schemas.Extra{}, false
	}
	return string(res.Status), res.Extra(), true
}

// drain buffers a lane's completed records in offset order until the lane
// closes or ctx ends, handing their slabs back to the fetcher through free.
func (m *Member) drain(ctx context.Context, b *partitionBuffer, lane *enrich.Queue, free chan<- *[laneSlab]laneRecord, win *window, end int64, reached func()) error {
	topic := m.cfg.Kafka.Topic
	buf := make([]enrich.Completed, 0, takeBatch)
	for {
		batch, err := lane.Take(ctx, buf)
		if err != nil {
			return nil // closed, aborted or stopped: the fetcher reports why
		}
		for i := range batch {
			if err := win.wait(ctx); err != nil {
				return nil
			}
			c := &batch[i]
			rec := c.Item.(*laneRecord)
			msg, other := rec.message(topic, b.partition), rec.other
			// The slab outlives this record: let go of its bytes, which
			// the window counts from now on.
			rec.key, rec.value, rec.headers = nil, nil, nil
			if sl := rec.slab; sl != nil {
				*sl = [laneSlab]laneRecord{} // every record of it is taken
				select {
				case free <- sl:
				default:
				}
			}
			if msg.Skipped != "" {
				if err := m.passed(b, msg, end, reached); err != nil {
					return err
				}
				continue
			}
			if other {
				if err := m.filtered(b, msg, end, reached); err != nil {
					return err
				}
				continue
			}
			if err := m.append(b, msg, c.Result, win, end, reached); err != nil {
				return err
			}
		}
		lane.Delivered(len(batch)) // the fetcher may buffer records itself again
	}
}
