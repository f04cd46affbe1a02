package schemas

import (
	"encoding/base64"
	"errors"
	"math"
	"math/big"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/decimal128"
	"github.com/google/uuid"
	"github.com/valyala/fastjson"
)

// jsonDecoder reads JSON objects for a schema file's field tree. Values
// follow the types' usual JSON spellings: numbers for int, long, float and
// double; true/false; decimals as a number or a string ("12.30"); dates as
// "2024-11-29" or days since the epoch; times as "13:45:00.123456" or an
// integer in the field's unit; timestamps as RFC 3339 strings (with a zone
// for timestamptz, without for timestamp) or integers in the field's unit
// (milliseconds for timestamp-millis); uuids as strings; bytes and fixed as
// base64; records as objects; arrays as arrays; maps as objects. Unknown
// fields are ignored; a required field that is absent or null is
// missing_field; a required string field that is empty is invalid_field, as
// in the built-in schema (a list's element or a map's value may be "").
type jsonDecoder struct {
	record *node // the message record
	parser fastjson.Parser
	nums   NumberReader
	// parsed is the message the parser holds: decode is called twice per
	// message, and the second call reuses the first parse.
	parsed []byte
	root   *fastjson.Value
	utf8   bool // the message has non-ASCII bytes: check strings
	// grown counts the widths of the list and map elements read
	// (node.arrowWidth): "{}" is 2 bytes of the message and, as an element
	// of a list of wide records, hundreds in Arrow.
	grown int
}

// decode stores no more string bytes than the message holds (escapes and
// base64 only shrink), so grown is only the list and map elements' widths.
func (d *jsonDecoder) decode(value []byte, cols []array.Builder) (int, error) {
	d.grown = 0
	if err := d.decodeJSON(value, cols); err != nil {
		return 0, err
	}
	return d.grown, nil
}

func (d *jsonDecoder) decodeJSON(value []byte, cols []array.Builder) *DecodeError {
	if cols == nil || d.root == nil || !sameBytes(d.parsed, value) {
		if len(value) == 0 {
			return &DecodeError{Reason: ReasonMalformedJSON, Detail: "empty message"}
		}
		d.root = nil
		v, ascii, derr := parseObject(&d.parser, value)
		if derr != nil {
			return derr
		}
		d.parsed, d.root, d.utf8 = value, v, !ascii
	}
	obj, _ := d.root.Object() // cannot fail: checked above
	var stack [16]*fastjson.Value
	vals, derr := d.lookupFields(obj, d.record, stack[:0])
	if derr != nil {
		return derr
	}
	for i, n := range d.record.fields {
		var b array.Builder
		if cols != nil {
			b = cols[i]
		}
		if err := d.value(n, vals[i], b); err != nil {
			return fieldErr(n.source, err)
		}
	}
	if cols != nil {
		d.root, d.parsed = nil, nil
	}
	return nil
}

// lookupFields returns the values of struct node n's fields in obj, by
// field, nil where absent. A repeated key overwrites: the last value wins,
// as in encoding/json and the built-in schema's decoder. vals is reused if
// it has room.
func (d *jsonDecoder) lookupFields(obj *fastjson.Object, n *node, vals []*fastjson.Value) ([]*fastjson.Value, *DecodeError) {
	if cap(vals) < len(n.fields) {
		vals = make([]*fastjson.Value, len(n.fields))
	}
	vals = vals[:len(n.fields)]
	clear(vals)
	if derr := d.nums.members(obj, n.fieldIndex, vals); derr != nil {
		return nil, derr
	}
	return vals, nil
}

// member is one key and value of a JSON object.
type member struct {
	key   []byte
	value *fastjson.Value
}

// lastOfEach returns obj's members in order, a repeated key only where it
// last occurs: a map keeps it with the value it counts by, as a field does
// (a map with a key twice is not a map to Iceberg). dropped are the
// others.
func lastOfEach(obj *fastjson.Object) (members, dropped []member) {
	var ms []member
	obj.Visit(func(key []byte, v *fastjson.Value) { ms = append(ms, member{key, v}) })
	if len(ms) < 2 {
		return ms, nil
	}
	seen := make(map[string]bool, len(ms))
	keep := ms[:0:0]
	for i := len(ms) - 1; i >= 0; i-- {
		if seen[string(ms[i].key)] {
			dropped = append(dropped, ms[i])
			continue
		}
		seen[string(ms[i].key)] = true
		keep = append(keep, ms[i])
	}
	slices.Reverse(keep)
	return keep, dropped
}

// sameBytes reports whether a and b are the same slice (not just equal).
func sameBytes(a, b []byte) bool {
	return len(a) == len(b) && (len(a) == 0 || unsafe.SliceData(a) == unsafe.SliceData(b))
}

func (d *jsonDecoder) value(n *node, v *fastjson.Value, b array.Builder) *DecodeError {
	if v == nil || v.Type() == fastjson.TypeNull {
		if n.required {
			return missingValue()
		}
		putNull(b)
		return nil
	}
	var s scalar
	switch n.kind {
	case kStruct:
		obj, err := v.Object()
		if err != nil {
			return jsonWant("an object", v)
		}
		var stack [16]*fastjson.Value
		vals, derr := d.lookupFields(obj, n, stack[:0])
		if derr != nil {
			return derr
		}
		sb := openStruct(b)
		for i, c := range n.fields {
			if err := d.value(c, vals[i], structField(sb, i)); err != nil {
				return fieldErr(c.source, err)
			}
		}
		return nil
	case kList:
		arr, err := v.Array()
		if err != nil {
			return jsonWant("an array", v)
		}
		if len(arr) > 0 {
			if d.grown += len(arr) * n.elem.arrowWidth(); d.grown > maxStringBytes {
				return rowTooLarge(d.grown)
			}
		}
		eb := openList(b)
		for i, e := range arr {
			if err := d.value(n.elem, e, eb); err != nil {
				return fieldErr("["+strconv.Itoa(i)+"]", err)
			}
		}
		return nil
	case kMap:
		obj, err := v.Object()
		if err != nil {
			return jsonWant("an object", v)
		}
		members, dropped := lastOfEach(obj)
		for _, m := range dropped {
			if text, bad := d.nums.badNumber(m.value); bad {
				return notNumber(text)
			}
		}
		if len(members) > 0 {
			if d.grown += len(members) * (n.key.arrowWidth() + n.val.arrowWidth()); d.grown > maxStringBytes {
				return rowTooLarge(d.grown)
			}
		}
		kb, vb := openMap(b)
		for _, m := range members {
			if d.utf8 && !utf8.Valid(m.key) {
				return invalid("a key is not valid UTF-8")
			}
			put(n.key, kb, &scalar{b: m.key})
			if err := d.value(n.val, m.value, vb); err != nil {
				return fieldErr("["+strconv.Quote(Truncate(string(m.key), 32))+"]", err)
			}
		}
		return nil
	case kString:
		str, err := v.StringBytes()
		if err != nil {
			return jsonWant("a string", v)
		}
		if n.required && !n.element && len(str) == 0 {
			return invalid("must not be empty")
		}
		if d.utf8 && !utf8.Valid(str) {
			return invalid("is not valid UTF-8")
		}
		if n.symbols != nil && !isSymbol(n.symbols, str) {
			return invalid("is not one of the enum's symbols")
		}
		s.b = str
	case kBinary, kFixed:
		str, err := v.StringBytes()
		if err != nil {
			return jsonWant("a base64 string", v)
		}
		raw, err := base64.StdEncoding.DecodeString(string(str))
		if err != nil {
			return invalid("is not valid base64")
		}
		if n.kind == kFixed && len(raw) != n.size {
			return invalid("must be " + strconv.Itoa(n.size) + " bytes, got " + strconv.Itoa(len(raw)))
		}
		s.b = raw
	case kUUID:
		str, err := v.StringBytes()
		if err != nil {
			return jsonWant("a UUID string", v)
		}
		u, err := uuid.ParseBytes(str)
		if err != nil {
			return invalid("is not a UUID")
		}
		s.b = u[:]
	case kInt, kLong:
		if v.Type() != fastjson.TypeNumber {
			return jsonWant("an integer", v)
		}
		x, err := d.nums.Int(v)
		if err == errNotNumber {
			return d.nums.malformed()
		}
		if err != nil || (n.kind == kInt && (x > math.MaxInt32 || x < math.MinInt32)) {
			if n.kind == kInt {
				return invalid("must be an integer that fits in 32 bits")
			}
			return invalid("must be an integer that fits in 64 bits")
		}
		s.i = x
	case kFloat, kDouble:
		if v.Type() != fastjson.TypeNumber {
			return jsonWant("a number", v)
		}
		bits := 64
		if n.kind == kFloat {
			bits = 32
		}
		f, err := d.nums.Float(v, bits)
		switch {
		case err == errNotNumber:
			return d.nums.malformed()
		case errors.Is(err, strconv.ErrRange) && bits == 32:
			return invalid("is out of range for a float")
		case errors.Is(err, strconv.ErrRange):
			return invalid("is out of range for a double")
		case err != nil:
			return invalid("is not a number")
		}
		s.f = f
	case kBool:
		switch v.Type() {
		case fastjson.TypeTrue:
			s.i = 1
		case fastjson.TypeFalse:
		default:
			return jsonWant("true or false", v)
		}
	case kDecimal:
		var text []byte
		switch v.Type() {
		case fastjson.TypeNumber:
			s, ok := d.nums.text(v)
			if !ok {
				return d.nums.malformed()
			}
			text = []byte(s)
		case fastjson.TypeString:
			text, _ = v.StringBytes()
		default:
			return jsonWant("a decimal number or string", v)
		}
		num, err := parseDecimal(string(text), n.prec, n.scale)
		if err != nil {
			return err
		}
		s.d = num
	case kDate:
		switch v.Type() {
		case fastjson.TypeString:
			str, _ := v.StringBytes()
			t, err := time.Parse(time.DateOnly, string(str))
			if err != nil {
				return invalid("a string date must look like 2024-11-29")
			}
			s.i = t.Unix() / 86400 // exact: a date is midnight UTC
		case fastjson.TypeNumber:
			x, err := d.nums.Int(v)
			if err == errNotNumber {
				return d.nums.malformed()
			}
			if err != nil {
				return invalid("a numeric date must be integer days since 1970-01-01")
			}
			s.i = x
		default:
			return jsonWant("a date string or days since the epoch", v)
		}
		if err := dateDays(s.i); err != nil {
			return err
		}
	case kTime:
		switch v.Type() {
		case fastjson.TypeString:
			str, _ := v.StringBytes()
			t, err := time.Parse("15:04:05.999999", string(str))
			if err != nil {
				return invalid("a string time must look like 13:45:00 or 13:45:00.123456")
			}
			s.i = int64(t.Hour())*3_600_000_000 + int64(t.Minute())*60_000_000 + int64(t.Second())*1_000_000 + int64(t.Nanosecond()/1000)
		case fastjson.TypeNumber:
			x, err := d.nums.Int(v)
			if err == errNotNumber {
				return d.nums.malformed()
			}
			if err != nil {
				return invalid("a numeric time must be an integer")
			}
			if n.noUnit {
				return unitUnknown()
			}
			day := int64(microsPerDay)
			if n.millis {
				day /= 1000 // checked before scaling, which could wrap
			}
			if x < 0 || x >= day {
				return invalid("a time must be within one day")
			}
			if n.millis {
				x *= 1000
			}
			s.i = x
		default:
			return jsonWant("a time string or an integer", v)
		}
	case kTimestamp, kTimestampTz:
		switch v.Type() {
		case fastjson.TypeString:
			str, _ := v.StringBytes()
			layout, want := time.RFC3339Nano, "an RFC 3339 date-time with a zone, like 2024-11-29T06:00:00Z"
			if n.kind == kTimestamp {
				layout, want = "2006-01-02T15:04:05.999999999", "a date-time without a zone, like 2024-11-29T06:00:00"
			}
			t, err := ParseDateTime(layout, string(str))
			if err != nil {
				return invalid("a string timestamp must be " + want)
			}
			// 0000-01-01 or 9999-12-31T23:00:00-01:00 is outside the
			// years in UTC.
			us, derr := timeMicros(t.UnixMicro(), false)
			if derr != nil {
				return derr
			}
			s.i = us
		case fastjson.TypeNumber:
			x, err := d.nums.Int(v)
			if err == errNotNumber {
				return d.nums.malformed()
			}
			if err != nil {
				return invalid("a numeric timestamp must be an integer")
			}
			if n.noUnit {
				return unitUnknown()
			}
			us, derr := timeMicros(x, n.millis)
			if derr != nil {
				return derr
			}
			s.i = us
		default:
			return jsonWant("a timestamp string or an integer", v)
		}
	}
	put(n, b, &s)
	return nil
}

func jsonWant(want string, v *fastjson.Value) *DecodeError {
	return invalid("must be " + want + ", got a JSON " + v.Type().String())
}

func isSymbol(symbols []string, s []byte) bool {
	for _, sym := range symbols {
		if sym == string(s) {
			return true
		}
	}
	return false
}

// plainDecimal is the text of a decimal number: digits, an optional point
// and exponent.
var plainDecimal = regexp.MustCompile(`^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?$`)

// parseDecimal parses a plain decimal number ("-12.30", "7", "1.5e2") into
// the unscaled value at scale. A value that needs more fractional digits
// than scale, or more digits than precision, is rejected: rounding would
// store a silently different amount.
func parseDecimal(text string, prec, scale int) (decimal128.Num, *DecodeError) {
	// A long text or a large exponent ("1e999999999") would make big.Rat
	// compute a huge power of ten; no such value fits 38 digits anyway.
	if len(text) > 100 {
		return decimal128.Num{}, invalid("is not a decimal number of at most 38 digits")
	}
	if i := strings.IndexAny(text, "eE"); i >= 0 {
		if e, err := strconv.Atoi(text[i+1:]); err != nil || e > 2*maxDecimalDigits || e < -2*maxDecimalDigits {
			return decimal128.Num{}, invalid("is not a decimal number of at most 38 digits")
		}
	}
	// big.Rat also reads "0x10", "10/4", "1p4" and "0b101".
	if !plainDecimal.MatchString(text) {
		return decimal128.Num{}, invalid("is not a decimal number")
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok {
		return decimal128.Num{}, invalid("is not a decimal number")
	}
	r.Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(scale)), nil)))
	if !r.IsInt() {
		return decimal128.Num{}, invalid("has more than " + strconv.Itoa(scale) + " digits after the point")
	}
	unscaled := r.Num()
	limit := new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(prec)), nil)
	if new(big.Int).Abs(unscaled).Cmp(limit) >= 0 {
		return decimal128.Num{}, invalid("has more than " + strconv.Itoa(prec) + " digits (decimal(" + strconv.Itoa(prec) + ", " + strconv.Itoa(scale) + "))")
	}
	return decimal128.FromBigInt(unscaled), nil
}
