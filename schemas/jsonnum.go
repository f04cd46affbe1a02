package schemas

import (
	"errors"
	"strconv"
	"unsafe"

	"github.com/valyala/fastjson"
)

// fastjson's parser takes number tokens loosely (leading zeros, NaN, Inf,
// "1.2.3e+-") and its Float64 multiplies by a power of ten, which can land
// one unit in the last place off (3e-05 became 3.0000000000000004e-05). A
// NumberReader reads numbers as RFC 8259 spells them, floats correctly
// rounded as strconv does. Its zero value is ready; it keeps one buffer, so
// one goroutine uses it at a time.
type NumberReader struct{ buf []byte }

var (
	errNotNumber = errors.New("not a JSON number")
	errNotInt    = errors.New("not an integer that fits in 64 bits")
)

// text returns v's text, when v is a number, and whether it is a number
// token of RFC 8259's grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (r *NumberReader) text(v *fastjson.Value) (string, bool) {
	if v == nil || v.Type() != fastjson.TypeNumber {
		return "", false
	}
	r.buf = v.MarshalTo(r.buf[:0]) // a number marshals as its text
	s := unsafe.String(unsafe.SliceData(r.buf), len(r.buf))
	return s, IsJSONNumber(s)
}

// IsJSONNumber reports whether s is a number token of RFC 8259's grammar.
// Enrichment reads numbers in strings with it, so that they are spelt as
// numbers are, not as strconv takes them ("+1", "0x1p-2", "1_000", "Inf").
func IsJSONNumber(s string) bool {
	i := 0
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i, n = i+1, n+1
		}
		return n
	}
	if i < len(s) && s[i] == '-' {
		i++
	}
	if i < len(s) && s[i] == '0' {
		i++
	} else if digits() == 0 {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// Int returns the integer v spells: a JSON number without fraction or
// exponent that fits in an int64.
func (r *NumberReader) Int(v *fastjson.Value) (int64, error) {
	s, ok := r.text(v)
	if !ok {
		return 0, errNotNumber
	}
	// The grammar holds: an optional minus, then digits unless a fraction
	// or an exponent follows.
	neg := s[0] == '-'
	digits := s
	if neg {
		digits = s[1:]
	}
	if len(digits) > 18 { // may not fit: strconv checks
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, errNotInt
		}
		return n, nil
	}
	var n int64
	for i := 0; i < len(digits); i++ {
		c := digits[i]
		if c < '0' || c > '9' {
			return 0, errNotInt
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, nil
}

// Float returns the number v spells, correctly rounded to a float of
// bitSize 32 or 64; a number beyond that float's range is an error
// (strconv.ErrRange).
func (r *NumberReader) Float(v *fastjson.Value, bitSize int) (float64, error) {
	s, ok := r.text(v)
	if !ok {
		return 0, errNotNumber
	}
	return strconv.ParseFloat(s, bitSize)
}

// malformed is the DecodeError of the number text read last (a number
// token the grammar refuses).
func (r *NumberReader) malformed() *DecodeError { return notNumber(string(r.buf)) }

// members sets vals[slot(key)] to the value of each member of obj whose
// slot is not -1, the last one where a key repeats, as encoding/json does.
// The values it does not keep have their numbers checked here (those kept
// are checked as they are read): the first that the grammar refuses is
// returned as malformed_json.
func (r *NumberReader) members(obj *fastjson.Object, slot func(key []byte) int, vals []*fastjson.Value) *DecodeError {
	var text string
	bad := false
	obj.Visit(func(key []byte, v *fastjson.Value) {
		if bad {
			return
		}
		i := slot(key)
		if i < 0 {
			text, bad = r.badNumber(v)
			return
		}
		if vals[i] != nil {
			text, bad = r.badNumber(vals[i])
		}
		vals[i] = v
	})
	if bad {
		return notNumber(text)
	}
	return nil
}

// notNumber is the dead-letter reason of a number token the JSON grammar
// refuses.
func notNumber(text string) *DecodeError {
	return &DecodeError{Reason: ReasonMalformedJSON, Detail: "not a JSON number: " + Truncate(text, 64)}
}

// badNumber reports the first number token in v, depth first, that RFC
// 8259's grammar refuses, with its text (a copy).
func (r *NumberReader) badNumber(v *fastjson.Value) (string, bool) {
	switch v.Type() {
	case fastjson.TypeNumber:
		if s, ok := r.text(v); !ok {
			return string(s), true
		}
	case fastjson.TypeObject:
		o, _ := v.Object()
		var text string
		bad := false
		o.Visit(func(_ []byte, e *fastjson.Value) {
			if !bad {
				text, bad = r.badNumber(e)
			}
		})
		return text, bad
	case fastjson.TypeArray:
		a, _ := v.Array()
		for _, e := range a {
			if text, bad := r.badNumber(e); bad {
				return text, true
			}
		}
	}
	return "", false
}
