package pipeline

import (
	"strconv"
	"strings"
	"sync"

	"github.com/segmentio/kafka-go"
	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/schemas"
)

// routeFilter decides which records of its topic a field route takes. It is
// safe for concurrent use by the partition workers (parsers are pooled).
type routeFilter struct {
	path []string
	strs map[string]struct{}
	nums map[float64]struct{}
	// isDefault inverts the match: strs and nums then hold the values the
	// topic's field routes take, and the default route takes the rest.
	isDefault bool
	parsers   sync.Pool // of *filterParser
}

// filterParser parses one record at a time for a routeFilter.
type filterParser struct {
	fastjson.Parser
	nums schemas.NumberReader
}

// newRouteFilter builds the filter of a route's where. A default route
// leaves its topic's field routes their values: siblingField is the field
// they route by ("" when there are none) and siblings their In values.
func newRouteFilter(w WhereConfig, siblingField string, siblings []string) *routeFilter {
	f := &routeFilter{strs: map[string]struct{}{}, nums: map[float64]struct{}{}, isDefault: w.Default}
	field, values := w.Field, w.In
	if w.Default {
		field, values = siblingField, siblings
	}
	if field != "" {
		f.path = strings.Split(field, ".")
	}
	for _, v := range values {
		f.strs[v] = struct{}{}
		if n, err := strconv.ParseFloat(v, 64); err == nil {
			f.nums[n] = struct{}{}
		}
	}
	return f
}

// takes reports whether the route takes the record with this value: for a
// field route, whether the field is a string or number among its values; for
// the default route, whether it is not (a missing field, another type, or a
// value that is not JSON included).
func (f *routeFilter) takes(value []byte) bool {
	p, _ := f.parsers.Get().(*filterParser)
	if p == nil {
		p = new(filterParser)
	}
	defer f.parsers.Put(p)
	matched := false
	if v, err := p.ParseBytes(value); err == nil && len(f.path) > 0 {
		if fv := lastMember(v, f.path); fv != nil {
			switch fv.Type() {
			case fastjson.TypeString:
				_, matched = f.strs[string(fv.GetStringBytes())]
			case fastjson.TypeNumber:
				// Parsed as strconv parses the route's values.
				if n, err := p.nums.Float(fv, 64); err == nil {
					_, matched = f.nums[n]
				}
			}
		}
	}
	return matched != f.isDefault
}

// lastMember returns the value at path in v, taking of a repeated member
// the last, as the decoders do (fastjson's Get takes the first): a record
// is routed by the value its row stores.
func lastMember(v *fastjson.Value, path []string) *fastjson.Value {
	for _, name := range path {
		o, err := v.Object()
		if err != nil {
			return nil
		}
		var found *fastjson.Value
		o.Visit(func(k []byte, m *fastjson.Value) {
			if string(k) == name {
				found = m
			}
		})
		if found == nil {
			return nil
		}
		v = found
	}
	return v
}

// skip covers msg's offset without a row or a dead letter: a record another
// route of the topic takes. Like a compacted-away offset it is part of the
// segment [from, next), so the watermark advances past it.
func (b *partitionBuffer) skip(msg kafka.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.extend(msg); err != nil {
		return err
	}
	b.next = msg.Offset + 1
	return nil
}

// filtered accounts for a record the member's route does not take (another
// route's: a covered offset, no row), and for whether the partition reached
// its scheduled end.
func (m *Member) filtered(b *partitionBuffer, msg kafka.Message, end int64, reached func()) error {
	if err := b.skip(msg); err != nil {
		return err
	}
	m.stats.Filtered.Add(1)
	if b.lag != nil {
		b.lag.raise(msg.HighWaterMark)
	}
	if msg.Offset+1 == end {
		reached()
	}
	return nil
}
