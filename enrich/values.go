package enrich

import (
	"math"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/valyala/fastjson"

	"github.com/floe-dev/floe/schemas"
)

// Values holds the typed enrichment attributes of one key, in the order of
// Config.Fields, each as its table column takes it (see schemas.Attr); an
// unset one is a null. Values are shared through the cache: callers must
// not modify them.
type Values []schemas.Attr

// Get returns the value of the named field as a Go value of its type
// (string, int64, float64, bool, or time.Time in UTC), or nil. It is meant
// for tests and tools; the pipeline hands Values to the builder as they are.
func (v Values) Get(fields []Field, name string) any {
	for i, f := range fields {
		if f.Name != name || i >= len(v) || !v[i].Set {
			continue
		}
		a := v[i]
		switch f.Type {
		case TypeString:
			return a.Str
		case TypeLong:
			return a.Num
		case TypeDouble:
			return a.Double()
		case TypeBoolean:
			return a.Bool()
		case TypeTimestamp:
			return a.Time()
		}
	}
	return nil
}

// decoder converts the service's attribute objects to Values. Attribute
// strings are mostly low-cardinality (segments, countries), so short ones
// are interned: a cached key then costs no allocation for them.
type decoder struct {
	fields  []Field
	bad     func(field string)
	interns []*interner // per field; nil unless TypeString
}

func newDecoder(fields []Field, bad func(string)) *decoder {
	d := &decoder{fields: fields, bad: bad, interns: make([]*interner, len(fields))}
	for i, f := range fields {
		if f.Type == TypeString {
			d.interns[i] = &interner{m: map[string]string{}}
		}
	}
	return d
}

// interner maps a string to one shared copy, up to a bound.
type interner struct {
	mu sync.Mutex
	m  map[string]string
}

const (
	internMax    = 4096 // distinct values per field
	internMaxLen = 64   // longer strings are rarely repeated
)

func (in *interner) get(b []byte) string {
	if len(b) > internMaxLen {
		return string(b)
	}
	in.mu.Lock()
	v, ok := in.m[string(b)] // no allocation for the lookup
	in.mu.Unlock()
	if ok {
		return v
	}
	return in.share(string(b))
}

// share is get for a string already made (one loaded from a cache file).
func (in *interner) share(s string) string {
	if len(s) > internMaxLen {
		return s
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[s]; ok {
		return v
	}
	if len(in.m) < internMax {
		in.m[s] = s
	}
	return s
}

// attrs converts one key's attribute object, where a repeated member counts
// by its last value. Values that do not convert are left null and reported
// to bad; so is every field of an answer that is no object: the key's own
// fault, which must not fail the others answered with it.
func (d *decoder) attrs(v *fastjson.Value) Values {
	vals := make(Values, len(d.fields))
	o, err := v.Object()
	if err != nil {
		for _, f := range d.fields {
			d.bad(f.Name)
		}
		return vals
	}
	for i, f := range d.fields {
		a := lastMember(o, f.Attribute)
		if a == nil {
			continue
		}
		x, ok := d.convert(i, a)
		if !ok {
			d.bad(f.Name)
			continue
		}
		vals[i] = x
	}
	return vals
}

// lastMember returns the value of o's last member named name, or nil: a
// repeated member counts by its last value, as in records (o.Get finds the
// first).
func lastMember(o *fastjson.Object, name string) *fastjson.Value {
	var last *fastjson.Value
	o.Visit(func(k []byte, v *fastjson.Value) {
		if string(k) == name {
			last = v
		}
	})
	return last
}

// convert converts one JSON value to field i's type. A JSON null is an
// unset Attr and true; a value of the wrong shape is false.
func (d *decoder) convert(i int, v *fastjson.Value) (schemas.Attr, bool) {
	kind := v.Type()
	switch kind {
	case fastjson.TypeNull:
		return schemas.Attr{}, true
	case fastjson.TypeObject, fastjson.TypeArray:
		return schemas.Attr{}, false
	}
	var str []byte // the content of a JSON string
	if kind == fastjson.TypeString {
		str, _ = v.StringBytes()
	}
	switch d.fields[i].Type {
	case TypeString:
		switch kind {
		case fastjson.TypeString:
			// A string column holds UTF-8 (Parquet's and Iceberg's string
			// type), as a record's string must.
			if !utf8.Valid(str) {
				return schemas.Attr{}, false
			}
			if in := d.interns[i]; in != nil {
				return schemas.StringAttr(in.get(str)), true
			}
			return schemas.StringAttr(string(str)), true
		case fastjson.TypeTrue:
			return schemas.StringAttr("true"), true
		case fastjson.TypeFalse:
			return schemas.StringAttr("false"), true
		default: // a number: keep its text
			return schemas.StringAttr(string(v.MarshalTo(nil))), true
		}
	case TypeLong, TypeDouble:
		// A JSON number, or a string holding one as JSON spells it.
		var text string
		switch kind {
		case fastjson.TypeNumber:
			// Declared here: MarshalTo moves it to the heap, which a
			// string need not pay for. A number marshals as its text.
			var buf [32]byte
			b := v.MarshalTo(buf[:0])
			text = unsafe.String(unsafe.SliceData(b), len(b))
		case fastjson.TypeString:
			text = unsafe.String(unsafe.SliceData(str), len(str))
		}
		if !schemas.IsJSONNumber(text) {
			break
		}
		if d.fields[i].Type == TypeLong {
			if n, ok := wholeNumber(text); ok {
				return schemas.LongAttr(n), true
			}
		} else if f, err := strconv.ParseFloat(text, 64); err == nil { // not beyond a double's range
			return schemas.DoubleAttr(f), true
		}
	case TypeBoolean:
		switch kind {
		case fastjson.TypeTrue:
			return schemas.BoolAttr(true), true
		case fastjson.TypeFalse:
			return schemas.BoolAttr(false), true
		case fastjson.TypeString: // "true" or "false" only, not "1" or "T"
			switch string(str) {
			case "true":
				return schemas.BoolAttr(true), true
			case "false":
				return schemas.BoolAttr(false), true
			}
		}
	case TypeTimestamp:
		switch kind {
		case fastjson.TypeString:
			if ts, err := schemas.ParseDateTime(time.RFC3339Nano, string(str)); err == nil {
				return schemas.TimeAttr(ts), true
			}
		case fastjson.TypeNumber: // epoch milliseconds
			var r schemas.NumberReader
			// Within 1e15 ms (31,700 years) either way: stored in
			// microseconds, Java's Long.MAX_VALUE ("never") wrapped round
			// to 1969.
			if ms, err := r.Int(v); err == nil && ms < 1e15 && ms > -1e15 {
				return schemas.TimeAttr(time.UnixMilli(ms)), true
			}
			if f, err := r.Float(v, 64); err == nil && math.Abs(f) < 1e15 {
				return schemas.TimeAttr(time.UnixMicro(int64(math.Round(f * 1000)))), true
			}
		}
	}
	return schemas.Attr{}, false
}

// wholeNumber returns the integer text spells, a JSON number token, when
// it is one that fits in an int64, fraction and exponent included (4.20e1
// is 42). It reads the digits exactly: through a float64, 9007199254740993.0
// became ...992, and 42.000000000000001 became 42.
func wholeNumber(text string) (int64, bool) {
	neg := text[0] == '-'
	if neg {
		text = text[1:]
	}
	expText := ""
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		text, expText = text[:i], text[i+1:]
	}
	digits, frac := text, ""
	if i := strings.IndexByte(text, '.'); i >= 0 {
		digits, frac = text[:i], text[i+1:]
	}
	if strings.Trim(digits, "0") == "" && strings.Trim(frac, "0") == "" {
		return 0, true // zero, whatever its exponent (Java writes 0E-10)
	}
	exp := int64(0)
	if expText != "" {
		// Bounded so that exp-len(frac) cannot wrap.
		e, err := strconv.ParseInt(expText, 10, 32)
		if err != nil {
			return 0, false
		}
		exp = e
	}
	// The value is digits and frac written together, times 10^exp. Without
	// its trailing zeros that number ends in a digit other than 0, so it
	// is whole only when exp is not negative.
	frac = strings.TrimRight(frac, "0")
	exp -= int64(len(frac))
	if frac == "" {
		trimmed := strings.TrimRight(digits, "0")
		exp += int64(len(digits) - len(trimmed))
		digits = trimmed
	}
	if exp < 0 {
		return 0, false
	}
	const limit = 1 << 63 // -limit is the smallest int64, limit-1 the largest
	var n uint64
	for _, part := range [2]string{digits, frac} {
		for j := 0; j < len(part); j++ {
			if n > limit/10 {
				return 0, false
			}
			n = n*10 + uint64(part[j]-'0')
		}
	}
	for ; exp > 0 && n != 0; exp-- {
		if n > limit/10 {
			return 0, false
		}
		n *= 10
	}
	if n > limit || n == limit && !neg {
		return 0, false
	}
	if neg {
		return -int64(n), true // limit wraps to the smallest int64, as it should
	}
	return int64(n), true
}
