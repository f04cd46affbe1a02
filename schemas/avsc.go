package schemas

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/hamba/avro/v2"
)

// clickstreamAvsc is the built-in schema, written as a schema file like any
// user's. Lookup parses it; a test proves the result equal to a schema built
// column by column from clickstreamFields, the layout the fast Builder is
// written for.
//
//go:embed clickstream.avsc
var clickstreamAvsc []byte

// The floe properties of a schema file's top-level record. Each names table
// columns (after any floe.column rename).
const (
	propKey            = "floe.key"              // string: the ordering unit
	propEventTime      = "floe.event-time"       // string: a timestamp column
	propDedupeKey      = "floe.dedupe-key"       // string: the business key
	propPartition      = "floe.partition"        // ["day(ts)", "bucket(16, id)", ...]
	propSort           = "floe.sort"             // ["col", "day(ts) desc nulls first", ...]
	propHighCard       = "floe.high-cardinality" // ["id", ...]: no Parquet dictionary
	propColumn         = "floe.column"           // on a field: the column name, if not the field's
	maxDecimalDigits   = 38
	firstPartitionID   = dayPartitionFieldID
	defaultSortOrderID = 1
)

// kind is how a value of a user-schema node is decoded and stored.
type kind uint8

const (
	kString kind = iota
	kInt
	kLong
	kFloat
	kDouble
	kBool
	kDecimal
	kDate
	kTime
	kTimestamp   // without zone
	kTimestampTz // UTC-adjusted
	kUUID
	kBinary
	kFixed
	kStruct
	kList
	kMap
)

// node is one field (or list element, map key or value) of a user schema:
// where its value comes from in a message and what it becomes in the table.
// The tree is built once per schema and shared, read-only, by Builders.
type node struct {
	name     string // the column (or nested field) name in the table
	source   string // the field name in messages
	kind     kind
	required bool
	// element is set for a list's elements and a map's values: they are
	// not fields, and a required string among them may be "".
	element bool
	millis  bool // integer times and timestamps are milliseconds (else micros)
	// noUnit: a time or timestamp column no schema file declares (nodeOf),
	// whose unit for integers nothing records: only strings fill it.
	noUnit   bool
	size     int // kFixed: bytes
	prec     int // kDecimal
	scale    int // kDecimal
	symbols  []string
	fields   []*node        // kStruct
	index    map[string]int // kStruct with many fields: source name → position
	elem     *node          // kList
	key, val *node          // kMap
	typ      iceberg.Type
}

// manyFields is the field count from which a struct node looks fields up
// by map rather than by comparing names in turn.
const manyFields = 12

// fieldIndex returns the position of the field named source in messages,
// or -1.
func (n *node) fieldIndex(source []byte) int {
	if n.index != nil {
		if i, ok := n.index[string(source)]; ok {
			return i
		}
		return -1
	}
	for i, f := range n.fields {
		if f.source == string(source) {
			return i
		}
	}
	return -1
}

// fieldIndexName is fieldIndex for a name held as a string.
func (n *node) fieldIndexName(source string) int {
	return n.fieldIndex(unsafe.Slice(unsafe.StringData(source), len(source)))
}

// indexFields builds n.index when n has many fields.
func (n *node) indexFields() {
	if len(n.fields) < manyFields {
		return
	}
	n.index = make(map[string]int, len(n.fields))
	for i, f := range n.fields {
		// The first of the fields a message field fills wins, as in
		// fieldIndex's scan of fewer fields: a column renamed by
		// floe.column and the table's column of its old name both read
		// it, and past manyFields the old one took it, the new required
		// one missing in every record.
		if _, dup := n.index[f.source]; !dup {
			n.index[f.source] = i
		}
	}
}

// jsonPosition returns the line and column, from 1, of the byte at which a
// json.SyntaxError stopped; its offset counts the bytes read, that one
// included (at the end of the input, the last byte).
func jsonPosition(data []byte, offset int64) (line, col int) {
	before := data[:max(offset-1, 0)]
	return 1 + bytes.Count(before, []byte("\n")), len(before) - bytes.LastIndexByte(before, '\n')
}

// userSchema is what a Schema parsed from a file carries beyond the Iceberg
// and Arrow forms: the field tree the generic decoders walk, and the Avro
// schema that plain Avro values are written with.
type userSchema struct {
	record *node // the message: a kStruct whose fields are the top-level columns
	// table is record with the table's optionality where the table holds
	// optional a column the file declares required (nil when it holds none
	// so): Iceberg adds columns optional to a table with rows, and a
	// registry's writer schema may have made a column optional. A
	// registry's writer schemas are decoded against it; without a registry
	// the file is the contract, and record keeps its required fields.
	table *node
	avro  avro.Schema
}

// LoadFile reads an Avro schema file (.avsc) with floe properties and
// returns the Schema it declares; see ParseAvsc.
func LoadFile(path string) (*Schema, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("schema %q: %w", path, err)
	}
	sc, err := ParseAvsc(path, data)
	if err != nil {
		return nil, err
	}
	return sc, nil
}

// ParseAvsc builds a Schema from an Avro record schema with floe
// properties, named name in errors and table properties. Avro types map to
// Iceberg types as Iceberg's own Avro conversion does (int, long, float,
// double, boolean, string, bytes, fixed; enum → string; record → struct;
// array → list; map → map<string, V>; a union of null and one type makes
// the field optional, any other field is required; logicalType decimal,
// date, time-millis/micros, timestamp-millis/micros (timestamptz),
// local-timestamp-millis/micros (timestamp) and uuid). The Kafka metadata
// columns follow the schema's own, exactly as in the built-in schema. Every
// error names the field and the problem.
func ParseAvsc(name string, data []byte) (*Schema, error) {
	// hamba/avro reads text that is not JSON as a type name, so a missing
	// comma came back as "unknown type: " followed by the whole file.
	var syntax *json.SyntaxError
	if errors.As(json.Unmarshal(data, new(json.RawMessage)), &syntax) {
		line, col := jsonPosition(data, syntax.Offset)
		return nil, fmt.Errorf("schema %s: not valid JSON: line %d, column %d: %v", name, line, col, syntax)
	}
	as, err := avro.ParseBytesWithCache(data, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("schema %s: not a valid Avro schema: %w", name, err)
	}
	rec, ok := as.(*avro.RecordSchema)
	if !ok {
		return nil, fmt.Errorf("schema %s: the top-level type is %s; want a record", name, as.Type())
	}
	p := &avscParser{name: name, nextID: 1}
	us := &userSchema{avro: rec, record: &node{kind: kStruct, required: true}}
	var fields []iceberg.NestedField
	seen := map[string]bool{}
	for _, af := range rec.Fields() {
		p.nodes = 0
		n, err := p.field(af, "")
		if err != nil {
			return nil, err
		}
		if seen[n.name] {
			return nil, fmt.Errorf("schema %s: field %q: column %q is declared twice", name, af.Name(), n.name)
		}
		if isMetadataColumn(n.name) {
			return nil, fmt.Errorf("schema %s: field %q: column %q is reserved for the Kafka metadata floe adds", name, af.Name(), n.name)
		}
		seen[n.name] = true
		us.record.fields = append(us.record.fields, n)
		fields = append(fields, iceberg.NestedField{ID: p.id(), Name: n.name, Type: n.typ, Required: n.required, Doc: af.Doc()})
	}
	if len(fields) == 0 {
		return nil, fmt.Errorf("schema %s: the record has no fields", name)
	}
	us.record.indexFields()
	var identifiers []int
	for _, f := range clickstreamFields[colKafkaTopic:] {
		f.ID = p.id()
		if f.Required {
			identifiers = append(identifiers, f.ID)
		}
		fields = append(fields, f)
	}
	sc, err := iceberg.AssignFreshSchemaIDs(iceberg.NewSchemaWithIdentifiers(0, identifiers, fields...), nil)
	if err != nil {
		return nil, fmt.Errorf("schema %s: assigning field ids: %w", name, err)
	}
	// A floe.column name with a dot can spell the path of a nested field
	// ("a.b" beside struct a with field b); iceberg-go then cannot index
	// the schema by name, and every lookup of a column by name fails.
	if _, err := iceberg.IndexByName(sc); err != nil {
		return nil, fmt.Errorf("schema %s: a floe.column name with a dot spells the path of another field: %w", name, err)
	}
	out := &Schema{Name: name, Iceberg: sc, user: us}
	// The key is the ordering unit, like the Kafka message key: verify
	// counts its distinct values as strings.
	if out.KeyField, err = p.column(rec, propKey, sc, func(t iceberg.Type) bool {
		return t.Equals(iceberg.PrimitiveTypes.String)
	}); err != nil {
		return nil, err
	}
	if out.EventTime, err = p.column(rec, propEventTime, sc, func(t iceberg.Type) bool {
		return t.Equals(iceberg.PrimitiveTypes.TimestampTz) || t.Equals(iceberg.PrimitiveTypes.Timestamp)
	}); err != nil {
		return nil, err
	}
	if out.DedupeKey, err = p.column(rec, propDedupeKey, sc, nil); err != nil {
		return nil, err
	}
	if out.HighCardinality, err = p.columns(rec, propHighCard, sc); err != nil {
		return nil, err
	}
	if out.Spec, err = p.partitionSpec(rec, sc); err != nil {
		return nil, err
	}
	if out.SortOrder, err = p.sortOrder(rec, sc); err != nil {
		return nil, err
	}
	if out.Arrow, err = table.SchemaToArrowSchema(sc, nil, true, false); err != nil {
		return nil, fmt.Errorf("schema %s: converting to Arrow: %w", name, err)
	}
	return out, nil
}

// avscParser carries what the recursive descent needs.
type avscParser struct {
	name   string
	nextID int
	// open holds the records being mapped, innermost last: a reference to
	// one of them is a recursive type, which no column can hold.
	open []string
	// depth is the nesting of the type being mapped, counted as the Avro
	// decoder counts it (1: a top-level column); nodes counts the types
	// mapped for the current column. See maxColumnNodes.
	depth, nodes int
}

// maxColumnNodes bounds the types (struct fields, list elements, map
// values) of one column. A named type used again is mapped again in full,
// so a schema of a few kilobytes that uses a record twice at each level
// describes a column of 2^levels fields: mapping it would hang, and
// evolution would commit it to the table for good. Nesting is bounded by
// maxAvroDepth, past which the decoders refuse values.
const maxColumnNodes = 1000

func (p *avscParser) id() int {
	p.nextID++
	return p.nextID - 1
}

func (p *avscParser) errf(field, format string, args ...any) error {
	return fmt.Errorf("schema %s: field %q: %s", p.name, field, fmt.Sprintf(format, args...))
}

// field maps an Avro record field; path is its parent's dotted path.
func (p *avscParser) field(af *avro.Field, path string) (*node, error) {
	fp := af.Name()
	if path != "" {
		fp = path + "." + fp
	}
	col := af.Name()
	if v := af.Prop(propColumn); v != nil {
		s, ok := v.(string)
		if !ok || s == "" {
			return nil, p.errf(fp, "%s must be a non-empty string", propColumn)
		}
		col = s
	}
	n, err := p.typ(af.Type(), fp)
	if err != nil {
		return nil, err
	}
	n.name, n.source = col, af.Name()
	return n, nil
}

// typ maps an Avro type at field path fp to a node (name and source unset).
func (p *avscParser) typ(s avro.Schema, fp string) (*node, error) {
	if u, ok := s.(*avro.UnionSchema); ok {
		types := u.Types()
		if len(types) != 2 || !u.Nullable() {
			return nil, p.errf(fp, "a union must be [\"null\", T] (an optional T); other unions are not supported")
		}
		nullAt, _ := u.Indices()
		n, err := p.typ(types[1-nullAt], fp)
		if err != nil {
			return nil, err
		}
		n.required = false
		return n, nil
	}
	if r, ok := s.(*avro.RefSchema); ok {
		// A named type used again after its declaration is a reference:
		// its column is the declared type's, with ids of its own.
		name := r.Schema().FullName()
		if slices.Contains(p.open, name) {
			return nil, p.errf(fp, "the recursive reference to %s is not supported: a column cannot contain itself", name)
		}
		return p.typ(r.Schema(), fp)
	}
	p.depth++
	defer func() { p.depth-- }()
	if p.depth > maxAvroDepth {
		return nil, p.errf(fp, "the column nests deeper than %d levels", maxAvroDepth)
	}
	if p.nodes++; p.nodes > maxColumnNodes {
		return nil, p.errf(fp, "the column has more than %d nested fields (a named type used again counts again)", maxColumnNodes)
	}
	n := &node{required: true}
	var logical avro.LogicalSchema
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		logical = l.Logical()
	}
	lt := avro.LogicalType("")
	if logical != nil {
		lt = logical.Type()
	}
	switch s.Type() {
	case avro.Null:
		return nil, p.errf(fp, "type null alone holds no data; use [\"null\", T] for an optional field")
	case avro.Boolean:
		n.kind, n.typ = kBool, iceberg.PrimitiveTypes.Bool
	case avro.Int:
		switch lt {
		case avro.Date:
			n.kind, n.typ = kDate, iceberg.PrimitiveTypes.Date
		case avro.TimeMillis:
			n.kind, n.typ, n.millis = kTime, iceberg.PrimitiveTypes.Time, true
		default:
			n.kind, n.typ = kInt, iceberg.PrimitiveTypes.Int32
		}
	case avro.Long:
		switch lt {
		case avro.TimeMicros:
			n.kind, n.typ = kTime, iceberg.PrimitiveTypes.Time
		case avro.TimestampMillis, avro.TimestampMicros:
			n.kind, n.typ, n.millis = kTimestampTz, iceberg.PrimitiveTypes.TimestampTz, lt == avro.TimestampMillis
		case avro.LocalTimestampMillis, avro.LocalTimestampMicros:
			n.kind, n.typ, n.millis = kTimestamp, iceberg.PrimitiveTypes.Timestamp, lt == avro.LocalTimestampMillis
		default:
			n.kind, n.typ = kLong, iceberg.PrimitiveTypes.Int64
		}
	case avro.Float:
		n.kind, n.typ = kFloat, iceberg.PrimitiveTypes.Float32
	case avro.Double:
		n.kind, n.typ = kDouble, iceberg.PrimitiveTypes.Float64
	case avro.String:
		if lt == avro.UUID {
			n.kind, n.typ = kUUID, iceberg.PrimitiveTypes.UUID
		} else {
			n.kind, n.typ = kString, iceberg.PrimitiveTypes.String
		}
	case avro.Enum:
		n.kind, n.typ = kString, iceberg.PrimitiveTypes.String
		n.symbols = s.(*avro.EnumSchema).Symbols()
	case avro.Bytes, avro.Fixed:
		if f, ok := s.(*avro.FixedSchema); ok && f.Size() < 1 {
			// Avro allows it; Parquet cannot write a fixed of no bytes,
			// so every flush would fail.
			return nil, p.errf(fp, "fixed %s has size %d; it must hold at least one byte", f.FullName(), f.Size())
		}
		if lt == avro.Decimal {
			d := logical.(*avro.DecimalLogicalSchema)
			if d.Precision() < 1 || d.Precision() > maxDecimalDigits || d.Scale() < 0 || d.Scale() > d.Precision() {
				return nil, p.errf(fp, "decimal(%d, %d): precision must be 1..%d and scale 0..precision", d.Precision(), d.Scale(), maxDecimalDigits)
			}
			n.kind, n.prec, n.scale = kDecimal, d.Precision(), d.Scale()
			n.typ = iceberg.DecimalTypeOf(n.prec, n.scale)
			if f, ok := s.(*avro.FixedSchema); ok {
				n.size = f.Size()
			}
		} else if f, ok := s.(*avro.FixedSchema); ok {
			if lt == avro.UUID && f.Size() == 16 {
				n.kind, n.typ, n.size = kUUID, iceberg.PrimitiveTypes.UUID, 16
			} else {
				n.kind, n.size, n.typ = kFixed, f.Size(), iceberg.FixedTypeOf(f.Size())
			}
		} else {
			n.kind, n.typ = kBinary, iceberg.PrimitiveTypes.Binary
		}
	case avro.Record:
		rs := s.(*avro.RecordSchema)
		p.open = append(p.open, rs.FullName())
		defer func() { p.open = p.open[:len(p.open)-1] }()
		st := &iceberg.StructType{}
		seen := map[string]bool{}
		for _, af := range rs.Fields() {
			c, err := p.field(af, fp)
			if err != nil {
				return nil, err
			}
			if seen[c.name] {
				return nil, p.errf(fp+"."+af.Name(), "column %q is declared twice", c.name)
			}
			seen[c.name] = true
			n.fields = append(n.fields, c)
			st.FieldList = append(st.FieldList, iceberg.NestedField{ID: p.id(), Name: c.name, Type: c.typ, Required: c.required, Doc: af.Doc()})
		}
		if len(n.fields) == 0 {
			return nil, p.errf(fp, "a record must have at least one field")
		}
		n.indexFields()
		n.kind, n.typ = kStruct, st
	case avro.Array:
		e, err := p.typ(s.(*avro.ArraySchema).Items(), fp+"[]")
		if err != nil {
			return nil, err
		}
		e.name, e.source, e.element = "element", "element", true
		n.kind, n.elem = kList, e
		n.typ = &iceberg.ListType{ElementID: p.id(), Element: e.typ, ElementRequired: e.required}
	case avro.Map:
		v, err := p.typ(s.(*avro.MapSchema).Values(), fp+"{}")
		if err != nil {
			return nil, err
		}
		v.name, v.source, v.element = "value", "value", true
		k := &node{name: "key", source: "key", kind: kString, required: true, typ: iceberg.PrimitiveTypes.String}
		n.kind, n.key, n.val = kMap, k, v
		n.typ = &iceberg.MapType{KeyID: p.id(), KeyType: k.typ, ValueID: p.id(), ValueType: v.typ, ValueRequired: v.required}
	default:
		return nil, p.errf(fp, "Avro type %s is not supported", s.Type())
	}
	return n, nil
}

// column reads a string property naming a top-level column; ok, if not
// nil, checks the column's type.
func (p *avscParser) column(rec *avro.RecordSchema, prop string, sc *iceberg.Schema, ok func(iceberg.Type) bool) (string, error) {
	v := rec.Prop(prop)
	if v == nil {
		return "", nil
	}
	s, isStr := v.(string)
	if !isStr || s == "" {
		return "", fmt.Errorf("schema %s: %s must be a column name, got %v", p.name, prop, v)
	}
	f, found := sc.FindFieldByName(s)
	if !found || strings.Contains(s, ".") {
		return "", fmt.Errorf("schema %s: %s: no top-level column %q (columns: %s)", p.name, prop, s, columnNames(sc))
	}
	if _, nested := f.Type.(iceberg.NestedType); nested {
		return "", fmt.Errorf("schema %s: %s: column %q is a %s; want a primitive column", p.name, prop, s, f.Type)
	}
	if ok != nil && !ok(f.Type) {
		want := "a timestamp"
		if prop == propKey {
			want = "a string"
		}
		return "", fmt.Errorf("schema %s: %s: column %q is %s; want %s", p.name, prop, s, f.Type, want)
	}
	return s, nil
}

// strings reads a property holding a list of strings.
func (p *avscParser) strings(rec *avro.RecordSchema, prop string) ([]string, error) {
	v := rec.Prop(prop)
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("schema %s: %s must be a list of strings, got %v", p.name, prop, v)
	}
	out := make([]string, len(list))
	for i, e := range list {
		s, ok := e.(string)
		if !ok {
			return nil, fmt.Errorf("schema %s: %s[%d] must be a string, got %v", p.name, prop, i, e)
		}
		out[i] = strings.TrimSpace(s)
	}
	return out, nil
}

func (p *avscParser) columns(rec *avro.RecordSchema, prop string, sc *iceberg.Schema) ([]string, error) {
	names, err := p.strings(rec, prop)
	if err != nil {
		return nil, err
	}
	for i, s := range names {
		if _, ok := sc.FindFieldByName(s); !ok {
			return nil, fmt.Errorf("schema %s: %s[%d]: no column %q (columns: %s)", p.name, prop, i, s, columnNames(sc))
		}
	}
	return names, nil
}

// transformExpr matches "col", "name(col)" and "name(N, col)".
var transformExpr = regexp.MustCompile(`^(?:([a-z]+)\(\s*(?:(\d+)\s*,\s*)?([^(),\s]+)\s*\)|([^(),\s]+))$`)

// transform parses a partition or sort expression into its source column
// (which must exist and suit the transform), the transform and the Iceberg
// partition field name (as Java's PartitionSpec.Builder names them).
func (p *avscParser) transform(prop string, i int, expr string, sc *iceberg.Schema) (iceberg.NestedField, iceberg.Transform, string, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("schema %s: %s[%d] %q: %s", p.name, prop, i, expr, fmt.Sprintf(format, args...))
	}
	m := transformExpr.FindStringSubmatch(strings.ToLower(strings.TrimSpace(expr)))
	if m == nil {
		return iceberg.NestedField{}, nil, "", bad("want identity(col), year|month|day|hour(col), bucket(N, col), Truncate(N, col) or col")
	}
	name, width, col := m[1], m[2], m[3]
	if col == "" {
		name, col = "identity", m[4]
	}
	// Column names keep their case: find the original spelling.
	if f, ok := sc.FindFieldByNameCaseInsensitive(col); ok {
		col = f.Name
	}
	src, ok := sc.FindFieldByName(col)
	if !ok {
		return iceberg.NestedField{}, nil, "", bad("no column %q (columns: %s)", col, columnNames(sc))
	}
	var t iceberg.Transform
	var field string
	switch name {
	case "identity", "year", "month", "day", "hour":
		if width != "" {
			return iceberg.NestedField{}, nil, "", bad("%s takes one argument, the column", name)
		}
		t, _ = iceberg.ParseTransform(name)
		field = col + "_" + name
		if name == "identity" {
			field = col
		}
	case "bucket", "truncate":
		n, err := strconv.Atoi(width)
		if width == "" || err != nil || n <= 0 {
			return iceberg.NestedField{}, nil, "", bad("%s needs a positive width first, like %s(16, %s)", name, name, col)
		}
		if name == "bucket" {
			t, field = iceberg.BucketTransform{NumBuckets: n}, col+"_bucket"
		} else {
			t, field = iceberg.TruncateTransform{Width: n}, col+"_trunc"
		}
	default:
		return iceberg.NestedField{}, nil, "", bad("unknown transform %q", name)
	}
	if !t.CanTransform(src.Type) {
		return iceberg.NestedField{}, nil, "", bad("%s cannot be applied to column %q of type %s", name, col, src.Type)
	}
	return src, t, field, nil
}

func (p *avscParser) partitionSpec(rec *avro.RecordSchema, sc *iceberg.Schema) (iceberg.PartitionSpec, error) {
	exprs, err := p.strings(rec, propPartition)
	if err != nil || len(exprs) == 0 {
		return *iceberg.UnpartitionedSpec, err
	}
	var opts []iceberg.PartitionOption
	names := map[string]bool{}
	for i, e := range exprs {
		src, t, field, err := p.transform(propPartition, i, e, sc)
		if err != nil {
			return iceberg.PartitionSpec{}, err
		}
		if names[field] {
			return iceberg.PartitionSpec{}, fmt.Errorf("schema %s: %s[%d] %q: partition field %q is declared twice", p.name, propPartition, i, e, field)
		}
		names[field] = true
		id := firstPartitionID + i
		opts = append(opts, iceberg.AddPartitionFieldByName(src.Name, field, t, sc, &id))
	}
	spec, err := iceberg.NewPartitionSpecOpts(opts...)
	if err != nil {
		return iceberg.PartitionSpec{}, fmt.Errorf("schema %s: %s: %w", p.name, propPartition, err)
	}
	return spec, nil
}

// sortOrder parses floe.sort: "expr [asc|desc] [nulls first|last]" each.
// Nulls sort first ascending and last descending unless said, as in Iceberg.
func (p *avscParser) sortOrder(rec *avro.RecordSchema, sc *iceberg.Schema) (table.SortOrder, error) {
	exprs, err := p.strings(rec, propSort)
	if err != nil || len(exprs) == 0 {
		return table.UnsortedSortOrder, err
	}
	var fields []table.SortField
	for i, e := range exprs {
		words := strings.Fields(strings.ToLower(e))
		// The expression itself may contain spaces ("bucket(16, id)"): it
		// ends at the first direction or nulls keyword.
		cut := len(words)
		for j, w := range words {
			if w == "asc" || w == "desc" || w == "nulls" {
				cut = j
				break
			}
		}
		expr := strings.Join(strings.Fields(e)[:cut], " ")
		src, t, _, err := p.transform(propSort, i, expr, sc)
		if err != nil {
			return table.SortOrder{}, err
		}
		sf := table.SortField{SourceIDs: []int{src.ID}, Transform: t, Direction: table.SortASC, NullOrder: table.NullsFirst}
		rest := words[cut:]
		if len(rest) > 0 && (rest[0] == "asc" || rest[0] == "desc") {
			if rest[0] == "desc" {
				sf.Direction, sf.NullOrder = table.SortDESC, table.NullsLast
			}
			rest = rest[1:]
		}
		switch {
		case len(rest) == 0:
		case len(rest) == 2 && rest[0] == "nulls" && rest[1] == "first":
			sf.NullOrder = table.NullsFirst
		case len(rest) == 2 && rest[0] == "nulls" && rest[1] == "last":
			sf.NullOrder = table.NullsLast
		default:
			return table.SortOrder{}, fmt.Errorf("schema %s: %s[%d] %q: after the expression want [asc|desc] [nulls first|nulls last]", p.name, propSort, i, e)
		}
		fields = append(fields, sf)
	}
	so, err := table.NewSortOrder(defaultSortOrderID, fields)
	if err != nil {
		return table.SortOrder{}, fmt.Errorf("schema %s: %s: %w", p.name, propSort, err)
	}
	return so, nil
}

func columnNames(sc *iceberg.Schema) string {
	var names []string
	for _, f := range sc.Fields() {
		if !isMetadataColumn(f.Name) {
			names = append(names, f.Name)
		}
	}
	return strings.Join(names, ", ")
}

// isMetadataColumn reports whether name is one of the Kafka metadata
// columns floe appends to every schema.
func isMetadataColumn(name string) bool {
	for _, f := range clickstreamFields[colKafkaTopic:] {
		if f.Name == name {
			return true
		}
	}
	return false
}
