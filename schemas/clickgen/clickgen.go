// Package clickgen generates a deterministic clickstream: the Kafka messages
// that `floe demo`, the tests and the benchmarks feed through the pipeline.
//
// The stream is shaped like the production topic the case studies describe:
// keyed by session id, JSON values of about 333 bytes in the built-in
// clickstream schema (DESIGN.md, "Table layout"), a realistic mix of event
// types, URLs, referrers and user agents, and an optional share of malformed
// messages that must end up in the dead-letter topic.
//
// Two properties make it useful for checking floe rather than just loading it:
//
//   - Determinism: the same Config yields byte-identical messages, so a
//     failing run can be replayed and two runs can be compared.
//   - Per-session order: the valid messages of a session carry seq 1, 2, 3, …
//     with no gaps (malformed messages do not consume a seq), so a consumer
//     or an analyst query can prove that order was kept without knowing
//     anything else about the run.
package clickgen

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"
)

// DefaultSessions is the number of distinct session ids when Config.Sessions
// is zero: enough that every one of 12 partitions gets many sessions, few
// enough that each session sees a long run of events in a short test.
const DefaultSessions = 10000

// BaseTimestamp is the event time of the first message, in epoch
// milliseconds (2024-11-29T06:00:00Z). It is fixed rather than taken from the
// clock so that the stream, and the day partitions it lands in, are
// reproducible.
const BaseTimestamp int64 = 1732860000000

// eventsPerMilli spaces event times as a 45,000 msg/s topic would (the
// case-study peak), so a generated backlog spans a believable time range.
const eventsPerMilli = 45

// Config chooses the stream. The zero value is valid: 10,000 sessions, no
// malformed messages, seed 0.
type Config struct {
	// Sessions is the number of distinct session ids (message keys).
	// Zero means DefaultSessions.
	Sessions int
	// MalformedRate is the share of messages, 0..1, that are deliberately
	// broken so the dead-letter path is exercised. Zero means none.
	MalformedRate float64
	// Seed selects the stream; equal configs produce equal streams.
	Seed int64
}

// Validate reports a setting New would reject, naming the key, so that a
// command line can turn a bad flag into an error rather than a panic.
func (c Config) Validate() error {
	var errs []error
	if c.Sessions < 0 {
		errs = append(errs, fmt.Errorf("clickgen: Sessions must be >= 0 (0 = %d), got %d", DefaultSessions, c.Sessions))
	}
	if math.IsNaN(c.MalformedRate) || c.MalformedRate < 0 || c.MalformedRate > 1 {
		errs = append(errs, fmt.Errorf("clickgen: MalformedRate must be within [0, 1], got %v", c.MalformedRate))
	}
	return errors.Join(errs...)
}

// Message is one Kafka record to produce. Key is the session id, also for
// malformed messages, so that every message of a session lands in the same
// partition whatever its value holds.
type Message struct {
	Key, Value []byte
}

// MalformedKind names the ways a malformed message is broken; each is a
// distinct dead-letter reason the decoder must report.
type MalformedKind uint8

// The malformed kinds, drawn at random with equal weight. Each breaks
// exactly one rule of the clickstream schema.
const (
	InvalidJSON    MalformedKind = iota // the value is cut short: not JSON at all
	MissingSession                      // no session_id field
	MissingTS                           // no ts field
	WrongTSType                         // ts is a boolean or an object
	SeqString                           // seq is a string instead of a number
	NotAnObject                         // the value is a JSON array, not an object

	// NumMalformedKinds sizes arrays indexed by MalformedKind.
	NumMalformedKinds = iota
)

// String returns the kind's name as used in test failure messages.
func (k MalformedKind) String() string {
	switch k {
	case InvalidJSON:
		return "invalid-json"
	case MissingSession:
		return "missing-session_id"
	case MissingTS:
		return "missing-ts"
	case WrongTSType:
		return "wrong-ts-type"
	case SeqString:
		return "seq-string"
	case NotAnObject:
		return "not-an-object"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Generator produces the stream. It is not safe for concurrent use: the
// stream's order is part of its determinism, so callers that fan out must
// draw from one goroutine.
type Generator struct {
	rng       *rand.Rand
	seed      uint64
	sessions  int
	malformed float64
	seq       []uint32 // seq of the last valid event per session
	buf       []byte   // reused while building a value
	key       []byte   // reused while building a key
	total     int64
	bad       int64
	byKind    [NumMalformedKinds]int64
}

// New returns a generator for cfg. It panics if cfg.Validate fails, as the
// config is fixed by the program, not by data; call Validate first to turn
// user input into an error.
func New(cfg Config) *Generator {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	if cfg.Sessions == 0 {
		cfg.Sessions = DefaultSessions
	}
	seed := uint64(cfg.Seed)
	return &Generator{
		rng:       rand.New(rand.NewPCG(seed, 0x9e3779b97f4a7c15)),
		seed:      seed,
		sessions:  cfg.Sessions,
		malformed: cfg.MalformedRate,
		seq:       make([]uint32, cfg.Sessions),
		buf:       make([]byte, 0, 512),
		key:       make([]byte, 0, 16),
	}
}

// Counts reports how many messages Next has returned and how many of those
// were malformed, so a demo or test can tell how many records the table and
// the dead-letter topic should end up with.
func (g *Generator) Counts() (total, malformed int64) { return g.total, g.bad }

// MalformedCounts reports how many malformed messages of each kind Next has
// returned, indexed by MalformedKind.
func (g *Generator) MalformedCounts() [NumMalformedKinds]int64 { return g.byKind }

// Next returns the next message. The returned Key and Value share one fresh
// allocation that the caller owns outright: they may be retained, handed to a
// producer that holds them until acknowledged, or modified, without affecting
// later calls.
func (g *Generator) Next() Message {
	g.total++
	s := g.rng.IntN(g.sessions)
	g.key = append(g.key[:0], "s-"...)
	g.key = strconv.AppendInt(g.key, int64(s), 10)

	f := fields{seq: g.seq[s] + 1}
	if g.malformed > 0 && g.rng.Float64() < g.malformed {
		g.bad++
		kind := MalformedKind(g.rng.IntN(int(NumMalformedKinds)))
		g.byKind[kind]++
		switch kind {
		case MissingSession:
			f.noSession = true
		case MissingTS:
			f.noTS = true
		case WrongTSType:
			f.tsKind = tsBool + uint8(g.rng.IntN(2))
		case SeqString:
			f.seqString = true
		}
		b := g.build(s, f)
		switch kind {
		case InvalidJSON:
			// Any proper prefix of an object lacks its closing brace.
			b = b[:len(b)/3+g.rng.IntN(len(b)-1-len(b)/3)]
		case NotAnObject:
			b = append(b, 0, 0)
			copy(b[1:], b[:len(b)-2])
			b[0], b[len(b)-1] = '[', ']'
		}
		g.buf = b
		return g.out()
	}
	g.seq[s] = f.seq
	g.buf = g.build(s, f)
	return g.out()
}

// out copies the current key and value into one allocation owned by the
// caller.
func (g *Generator) out() Message {
	k := len(g.key)
	m := make([]byte, k+len(g.buf))
	copy(m, g.key)
	copy(m[k:], g.buf)
	return Message{Key: m[:k:k], Value: m[k:]}
}

const (
	tsEpoch uint8 = iota
	tsRFC3339
	tsBool
	tsObject
)

// fields says how to render one event, including the deliberate breakage of
// a malformed one.
type fields struct {
	seq       uint32
	tsKind    uint8
	noSession bool
	noTS      bool
	seqString bool
}

// build renders the event for session s into g.buf, reusing its capacity.
func (g *Generator) build(s int, f fields) []byte {
	r := g.rng
	b := g.buf[:0]
	b = append(b, `{"event_id":"`...)
	b = appendUUID(b, r.Uint64(), r.Uint64())
	if !f.noSession {
		b = append(b, `","session_id":"`...)
		b = append(b, g.key...)
	}
	// The user and the device are properties of the session, so they are
	// derived from it rather than drawn per event.
	h := mix(g.seed ^ uint64(s)*0x9e3779b97f4a7c15)
	b = append(b, `","user_id":"u-`...)
	b = strconv.AppendUint(b, h%uint64(g.sessions/2+1), 10)
	et := &eventTypes[eventTable[r.IntN(len(eventTable))]]
	b = append(b, `","event_type":"`...)
	b = append(b, et.name...)
	b = append(b, `","url":"`...)
	b = g.appendURL(b, et.page)
	b = append(b, `","referrer":"`...)
	if r.IntN(20) < 9 {
		b = g.appendURL(b, pageAny)
	} else {
		b = append(b, externalReferrers[r.IntN(len(externalReferrers))]...)
	}
	b = append(b, `","user_agent":"`...)
	b = append(b, userAgents[uaTable[(h>>32)%uint64(len(uaTable))]]...)
	b = append(b, '"')
	if !f.noTS {
		ts := BaseTimestamp + g.total/eventsPerMilli + int64(r.IntN(20))
		if f.tsKind == tsEpoch && r.IntN(20) == 0 {
			f.tsKind = tsRFC3339
		}
		b = append(b, `,"ts":`...)
		switch f.tsKind {
		case tsEpoch:
			b = strconv.AppendInt(b, ts, 10)
		case tsRFC3339:
			b = append(b, '"')
			b = time.UnixMilli(ts).UTC().AppendFormat(b, "2006-01-02T15:04:05.000Z07:00")
			b = append(b, '"')
		case tsBool:
			b = append(b, "true"...)
		case tsObject:
			b = append(b, `{"ms":`...)
			b = strconv.AppendInt(b, ts, 10)
			b = append(b, '}')
		}
	}
	b = append(b, `,"seq":`...)
	if f.seqString {
		b = append(b, '"')
		b = strconv.AppendUint(b, uint64(f.seq), 10)
		b = append(b, '"')
	} else {
		b = strconv.AppendUint(b, uint64(f.seq), 10)
	}
	return append(b, '}')
}

// mix is splitmix64's finalizer: a cheap, well-spread hash for deriving
// per-session attributes without storing them.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

const hexDigits = "0123456789abcdef"

// appendUUID renders a version 4 UUID from 128 random bits.
func appendUUID(b []byte, hi, lo uint64) []byte {
	hi = hi&^(0xf<<12) | 0x4<<12 // version 4
	lo = lo&^(0x3<<62) | 0x2<<62 // RFC 4122 variant
	var u [36]byte
	j := 0
	for i := 0; i < 32; i++ {
		if i == 8 || i == 12 || i == 16 || i == 20 {
			u[j] = '-'
			j++
		}
		var nib uint64
		if i < 16 {
			nib = hi >> (60 - 4*i) & 0xf
		} else {
			nib = lo >> (60 - 4*(i-16)) & 0xf
		}
		u[j] = hexDigits[nib]
		j++
	}
	return append(b, u[:]...)
}
