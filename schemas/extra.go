package schemas

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
)

// Column is an optional column appended after a schema's own, such as an
// enrichment attribute. Its Type is one of Iceberg's string, long, double,
// boolean or timestamptz.
type Column struct {
	Name string
	Type iceberg.Type
}

// WithColumns returns a copy of s with cols appended as optional columns
// (field IDs continue after the last one), so the table and every batch
// carry them as typed columns. Builders of the result fill them from
// AppendEnriched. A column named like one of s (its own, a metadata or an
// extra column) or an earlier one of cols is refused, also where the names
// differ only in case: Spark resolves column names case-insensitively by
// default and Trino lower-cases them, so such a table cannot be read.
func (s *Schema) WithColumns(cols []Column) (*Schema, error) {
	if len(cols) == 0 {
		return s, nil
	}
	fields := s.Iceberg.Fields()
	own := map[string]bool{}
	for _, f := range fields {
		own[f.Name] = !isMetadataColumn(f.Name) && !isExtra(s.Extra, f.Name)
	}
	next := s.Iceberg.HighestFieldID() + 1
	for _, c := range cols {
		if c.Name == "" {
			return nil, fmt.Errorf("schema %s: an extra column has no name", s.Name)
		}
		if i := slices.IndexFunc(fields, func(f iceberg.NestedField) bool { return strings.EqualFold(f.Name, c.Name) }); i >= 0 {
			switch name := fields[i].Name; {
			case name != c.Name:
				return nil, fmt.Errorf("schema %s: column %q differs from column %q only in case, which Spark and Trino do not tell apart; rename it", s.Name, c.Name, name)
			case own[name]:
				return nil, fmt.Errorf("schema %s: column %q %s", s.Name, c.Name, enrichmentClash(c.Name))
			default:
				return nil, fmt.Errorf("schema %s: column %q already exists", s.Name, c.Name)
			}
		}
		if _, err := extraArrowType(c.Type); err != nil {
			return nil, fmt.Errorf("schema %s: column %q: %w", s.Name, c.Name, err)
		}
		fields = append(fields, iceberg.NestedField{ID: next, Name: c.Name, Type: c.Type})
		next++
	}
	sc := iceberg.NewSchemaWithIdentifiers(0, s.Iceberg.IdentifierFieldIDs, fields...)
	as, err := table.SchemaToArrowSchema(sc, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("converting schema %s to Arrow: %w", s.Name, err)
	}
	out := *s
	out.Iceberg, out.Arrow = sc, as
	out.Extra = append(append([]Column(nil), s.Extra...), cols...)
	return &out, nil
}

// AddedColumn says why column name of s holds no field of the record, or
// returns "" when it does (or s has no such column): a Kafka metadata
// column floe adds to every row (_kafka_topic … _enrich_status), or an
// enrichment column (Extra), whose value is the lookup's, shared by every
// record of one lookup key. Such a column is no business key, for one.
func (s *Schema) AddedColumn(name string) string {
	switch {
	case isMetadataColumn(name):
		return "a metadata column floe adds to every row"
	case isExtra(s.Extra, name):
		return "an enrichment column"
	}
	return ""
}

func extraArrowType(t iceberg.Type) (arrow.DataType, error) {
	switch t {
	case iceberg.PrimitiveTypes.String:
		return arrow.BinaryTypes.String, nil
	case iceberg.PrimitiveTypes.Int64:
		return arrow.PrimitiveTypes.Int64, nil
	case iceberg.PrimitiveTypes.Float64:
		return arrow.PrimitiveTypes.Float64, nil
	case iceberg.PrimitiveTypes.Bool:
		return arrow.FixedWidthTypes.Boolean, nil
	case iceberg.PrimitiveTypes.TimestampTz:
		return arrow.FixedWidthTypes.Timestamp_us, nil
	}
	return nil, fmt.Errorf("type %s is not supported for an extra column (string, long, double, boolean, timestamptz)", t)
}

// Attr is one extra-column value as AppendEnriched takes it: Str for a
// string column, Num for the others (a long; a double's IEEE 754 bits; a
// boolean as 0 or 1; a timestamp in microseconds since the epoch). Set is
// false for a null. Attributes are plain values, not boxed in interfaces,
// so that the attributes of one key lie together in memory: every enriched
// record reads them, and with tens of thousands of keys each separate
// allocation is a miss of the CPU cache.
type Attr struct {
	Str string
	Num int64
	Set bool
}

// Extra is a row's extra-column values as AppendEnriched takes them.
type Extra struct {
	// Attrs are the values in Schema.Extra order, each made for its
	// column's type; an unset Attr, or one beyond a short slice, stores
	// null. A builder may read Attrs as late as NewRecord: they must not
	// change until then.
	Attrs []Attr
	// StrBytes is the sum of len(Str) over Attrs, as NewExtra counts it. A
	// builder bounds its batch by it at once, while the clickstream Builder
	// reads Attrs only when it makes the batch, all rows together: with
	// tens of thousands of keys, reading one row's attributes is a miss of
	// the CPU cache, which the bulk read overlaps with the next ones.
	StrBytes int
}

// NewExtra returns the Extra of attrs.
func NewExtra(attrs []Attr) Extra {
	n := 0
	for i := range attrs {
		n += len(attrs[i].Str)
	}
	return Extra{Attrs: attrs, StrBytes: n}
}

// StringAttr, LongAttr, DoubleAttr, BoolAttr and TimeAttr make the Attr of
// a value for a column of that type; TimeAttr of the zero time is null.
func StringAttr(s string) Attr { return Attr{Str: s, Set: true} }

// LongAttr: see StringAttr.
func LongAttr(n int64) Attr { return Attr{Num: n, Set: true} }

// DoubleAttr: see StringAttr.
func DoubleAttr(f float64) Attr { return Attr{Num: int64(math.Float64bits(f)), Set: true} }

// BoolAttr: see StringAttr.
func BoolAttr(b bool) Attr {
	if b {
		return Attr{Num: 1, Set: true}
	}
	return Attr{Set: true}
}

// TimeAttr: see StringAttr.
func TimeAttr(t time.Time) Attr {
	if t.IsZero() {
		return Attr{}
	}
	return Attr{Num: t.UnixMicro(), Set: true}
}

// unsetAttr is the null every extra column gets beyond a short slice.
var unsetAttr Attr

// Double, Bool and Time read an Attr made by DoubleAttr, BoolAttr and
// TimeAttr (in UTC).
func (a Attr) Double() float64 { return math.Float64frombits(uint64(a.Num)) }

// Bool: see Double.
func (a Attr) Bool() bool { return a.Num != 0 }

// Time: see Double.
func (a Attr) Time() time.Time { return time.UnixMicro(a.Num).UTC() }

// extraColumn buffers one extra column; exactly one of its buffers is used,
// by kind.
type extraColumn struct {
	// kind is the column's iceberg.Type, decided once: comparing
	// iceberg.Types for every value is slow.
	kind  extraKind
	str   stringColumn
	fixed fixedColumn
	bools boolColumn
}

// extraKind is an extra column's type, as the per-row switch uses it.
type extraKind uint8

const (
	kindString extraKind = iota
	kindInt64
	kindFloat64
	kindBool
	kindTimestamp
	kindOther // rejected by WithColumns; never appended
)

func kindOf(t iceberg.Type) extraKind {
	switch t {
	case iceberg.PrimitiveTypes.String:
		return kindString
	case iceberg.PrimitiveTypes.Int64:
		return kindInt64
	case iceberg.PrimitiveTypes.Float64:
		return kindFloat64
	case iceberg.PrimitiveTypes.Bool:
		return kindBool
	case iceberg.PrimitiveTypes.TimestampTz:
		return kindTimestamp
	}
	return kindOther
}

func newExtraColumn(mem memory.Allocator, t iceberg.Type) extraColumn {
	return extraColumn{kind: kindOf(t), str: newStringColumn(mem), fixed: newFixedColumn(mem, 8), bools: newBoolColumn(mem)}
}

// append stores a, or a null when it is not set.
func (c *extraColumn) append(n int, a *Attr) {
	switch c.kind {
	case kindString:
		if a.Set {
			c.str.append(n, stringBytes(a.Str))
		} else {
			c.str.appendNull(n)
		}
	case kindInt64, kindFloat64, kindTimestamp:
		if a.Set {
			c.fixed.append64(n, a.Num)
		} else {
			c.fixed.appendNull(n)
		}
	case kindBool:
		if a.Set {
			c.bools.append(n, a.Num != 0)
		} else {
			c.bools.appendNull(n)
		}
	}
}

func (c *extraColumn) take(dt arrow.DataType, n int) arrow.Array {
	switch c.kind {
	case kindString:
		return c.str.take(dt, n)
	case kindBool:
		return c.bools.take(dt, n)
	}
	return c.fixed.take(dt, n)
}

func (c *extraColumn) release() {
	c.str.release()
	c.fixed.release()
	c.bools.release()
}

// boolColumn buffers a Boolean column: a value bitmap and validity.
type boolColumn struct {
	valid  validity
	values region
}

func newBoolColumn(mem memory.Allocator) boolColumn {
	return boolColumn{valid: validity{bits: region{mem: mem}}, values: region{mem: mem}}
}

func (c *boolColumn) append(n int, v bool) {
	if n&7 == 0 {
		c.values.putBytes(zeroByte[:])
	}
	if v {
		c.values.b[n>>3] |= 1 << (n & 7)
	}
	c.valid.add(n, true)
}

func (c *boolColumn) appendNull(n int) {
	if n&7 == 0 {
		c.values.putBytes(zeroByte[:])
	}
	c.valid.add(n, false)
}

func (c *boolColumn) take(dt arrow.DataType, n int) arrow.Array {
	bits, nulls := c.valid.take()
	return newArray(dt, n, nulls, bits, c.values.take())
}

func (c *boolColumn) release() {
	c.valid.bits.release()
	c.values.release()
}

// Resolver gives a row its enrichment from its key (Builder.AppendResolved).
type Resolver interface {
	// Resolve returns the row's enrichment status and extra values, or ok
	// false to leave the row out. key is only valid during the call.
	Resolve(key []byte) (status string, extra Extra, ok bool)
}
