package enrich

import (
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/valyala/fastjson"
)

// Values holds the typed enrichment attributes of one key, in the order of
// Config.Fields; a nil entry is a null. The Go types are string, int64,
// float64, bool and time.Time (UTC), by FieldType. Values are shared through
// the cache: callers must not modify them.
type Values []any

// Get returns the value of the named field, or nil. It is meant for tests
// and tools; the pipeline indexes by field position.
func (v Values) Get(fields []Field, name string) any {
	for i, f := range fields {
		if f.Name == name && i < len(v) {
			return v[i]
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
			d.interns[i] = &interner{m: map[string]any{}}
		}
	}
	return d
}

// interner maps a string to one shared boxed copy, up to a bound.
type interner struct {
	mu sync.Mutex
	m  map[string]any
}

const (
	internMax    = 4096 // distinct values per field
	internMaxLen = 64   // longer strings are rarely repeated
)

func (in *interner) get(b []byte) any {
	if len(b) > internMaxLen {
		return string(b)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if v, ok := in.m[string(b)]; ok { // no allocation for the lookup
		return v
	}
	s := string(b)
	var v any = s
	if len(in.m) < internMax {
		in.m[s] = v
	}
	return v
}

var errNotObject = errors.New("attributes are not a JSON object")

// attrs converts one key's attribute object. Values that do not convert are
// left null and reported to bad.
func (d *decoder) attrs(v *fastjson.Value) (Values, error) {
	o, err := v.Object()
	if err != nil {
		return nil, errNotObject
	}
	vals := make(Values, len(d.fields))
	for i, f := range d.fields {
		a := o.Get(f.Attribute)
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
	return vals, nil
}

// convert converts one JSON value to field i's type. A JSON null is (nil,
// true); a value of the wrong shape is (nil, false).
func (d *decoder) convert(i int, v *fastjson.Value) (any, bool) {
	kind := v.Type()
	switch kind {
	case fastjson.TypeNull:
		return nil, true
	case fastjson.TypeObject, fastjson.TypeArray:
		return nil, false
	}
	var str []byte // the content of a JSON string
	if kind == fastjson.TypeString {
		str, _ = v.StringBytes()
	}
	switch d.fields[i].Type {
	case TypeString:
		switch kind {
		case fastjson.TypeString:
			if in := d.interns[i]; in != nil {
				return in.get(str), true
			}
			return string(str), true
		case fastjson.TypeTrue:
			return "true", true
		case fastjson.TypeFalse:
			return "false", true
		default: // a number: keep its text
			return string(v.MarshalTo(nil)), true
		}
	case TypeLong:
		switch kind {
		case fastjson.TypeNumber:
			if n, err := v.Int64(); err == nil {
				return n, true
			}
			f, err := v.Float64()
			return integral(f, err)
		case fastjson.TypeString:
			if n, err := strconv.ParseInt(string(str), 10, 64); err == nil {
				return n, true
			}
			return integral(strconv.ParseFloat(string(str), 64))
		}
	case TypeDouble:
		switch kind {
		case fastjson.TypeNumber:
			if f, err := v.Float64(); err == nil {
				return f, true
			}
		case fastjson.TypeString:
			if f, err := strconv.ParseFloat(string(str), 64); err == nil {
				return f, true
			}
		}
	case TypeBoolean:
		switch kind {
		case fastjson.TypeTrue:
			return true, true
		case fastjson.TypeFalse:
			return false, true
		case fastjson.TypeString:
			if b, err := strconv.ParseBool(string(str)); err == nil {
				return b, true
			}
		}
	case TypeTimestamp:
		switch kind {
		case fastjson.TypeString:
			if ts, err := time.Parse(time.RFC3339Nano, string(str)); err == nil {
				return ts.UTC(), true
			}
		case fastjson.TypeNumber: // epoch milliseconds
			if ms, err := v.Int64(); err == nil {
				return time.UnixMilli(ms).UTC(), true
			}
			if f, err := v.Float64(); err == nil && !math.IsNaN(f) && math.Abs(f) < 1e15 {
				return time.UnixMicro(int64(math.Round(f * 1000))).UTC(), true
			}
		}
	}
	return nil, false
}

func integral(f float64, err error) (any, bool) {
	if err != nil || f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
		return nil, false
	}
	return int64(f), true
}
