package schemas

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/compute"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"github.com/hamba/avro/v2"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// ChangeKind is what a Change does to a table column.
type ChangeKind uint8

// The schema changes floe applies to a table. All of them keep every row
// already in the table readable as it was: Iceberg reads a column a data
// file lacks as null, and reads an int file column as long.
const (
	// AddColumn adds a top-level optional column (rows written before
	// it read as null).
	AddColumn ChangeKind = iota + 1
	// WidenColumn promotes a column's type: int → long, float → double,
	// decimal(P, S) → decimal(P', S) with P' > P.
	WidenColumn
	// MakeOptional lets a required column hold nulls.
	MakeOptional
)

// Change is one change a producer's schema (or an edited schema file) asks
// of the table.
type Change struct {
	Kind ChangeKind
	// Column is the top-level column's name.
	Column string
	// Type is the new column's type (AddColumn) or the wider type
	// (WidenColumn).
	Type iceberg.Type
	// Doc is the new column's documentation (AddColumn).
	Doc string
}

func (c Change) String() string {
	switch c.Kind {
	case AddColumn:
		return "add column " + c.Column + " " + c.Type.String()
	case WidenColumn:
		return "widen column " + c.Column + " to " + c.Type.String()
	case MakeOptional:
		return "make column " + c.Column + " optional"
	}
	return "change " + strconv.Itoa(int(c.Kind)) + " of column " + c.Column
}

// EvolveRequest is what a Builder of an Evolving schema returns, instead of
// appending, for a message whose writer schema (fetched from the registry)
// has fields the table lacks or wider types than its columns. Nothing was
// appended. The caller evolves the table (lakehouse.Table.Evolve), derives
// the new Schema (WithTable), and appends the message again with a Builder
// of that Schema; if the table refuses a change, Refuse gives the error to
// handle the message with.
type EvolveRequest struct {
	SchemaID int
	Changes  []Change
	stop     bool // the registry's on_incompatible is "stop"
}

func (e *EvolveRequest) Error() string {
	var parts []string
	for _, c := range e.Changes {
		parts = append(parts, c.String())
	}
	return "schema id " + strconv.Itoa(e.SchemaID) + " needs the table to change: " + strings.Join(parts, ", ")
}

// Refuse returns the error for the message when the table cannot take the
// change to field: an *IncompatibleSchemaError that stops the partition
// (on_incompatible: stop), or a *DecodeError with reason
// incompatible_schema that dead-letters it (on_incompatible: dlq).
func (e *EvolveRequest) Refuse(field, detail string) error {
	if e.stop {
		return &IncompatibleSchemaError{SchemaID: e.SchemaID, Field: field, Detail: detail}
	}
	return &DecodeError{Reason: ReasonIncompatibleSchema, Field: field, Detail: Truncate(detail, maxDetailBytes)}
}

// Evolving returns a copy of s whose wire-format Builders return an
// *EvolveRequest for a writer schema that adds fields or widens types,
// rather than skipping the new fields and refusing the wider types. Only
// a caller that can evolve the table should use it.
func (s *Schema) Evolving() *Schema {
	out := *s
	out.evolve = true
	return &out
}

// writerPlan is what a writer schema needs of the table: changes, or the
// name of a field the table can never hold because an enrichment column
// has its name (clash): the writer's value and the enrichment's would share
// the column; or, with changes, why a field the table holds does not fit
// its column even once they are made (unfit). The changes are then not
// made: the decoder would refuse every record of the writer schema, and
// the table would gain columns for a schema none of whose rows it holds.
type writerPlan struct {
	changes []Change
	clash   string
	unfit   *DecodeError
}

// request returns the EvolveRequest of writer schema id (key: the parsed
// writer schema or message type), nil when the table fits it, or, for a
// writer field named like an enrichment column or a writer schema that
// needs changes but does not fit the columns it has, the error that
// refuses the message as for any change the table cannot make
// (EvolveRequest.Refuse).
func (d *wireDecoder) request(id int, key any, plan func() writerPlan) error {
	if !d.evolve {
		return nil
	}
	p, ok := d.plans[key]
	if !ok {
		p = plan()
		if d.plans == nil {
			d.plans = map[any]writerPlan{}
		}
		d.plans[key] = p
	}
	req := &EvolveRequest{SchemaID: id, Changes: p.changes, stop: d.reg.stop}
	switch {
	case p.clash != "":
		return req.Refuse(p.clash, enrichmentClash(p.clash))
	case p.unfit != nil:
		return req.Refuse(p.unfit.Field, p.unfit.Detail)
	case len(p.changes) == 0:
		return nil
	}
	return req
}

// enrichmentClash says why a field or column named name cannot be one of
// the schema's own: an enrichment column (enrich.fields) has its name. It
// is the same at start-up (a schema file's column, WithColumns) and for a
// registry's writer schema that gains such a field.
func enrichmentClash(name string) string {
	return "collides with enrichment column " + strconv.Quote(name) + " (enrich.fields); rename one of them"
}

// caseTwin returns the column of the table (of record, a metadata or an
// extra column), or the one added for an earlier writer field (a change of
// adding), whose name differs from name only in case, or "". A writer field
// so named cannot become a column, as WithColumns refuses one: Spark
// resolves column names case-insensitively by default and Trino lower-cases
// them, so the table could not be read.
func caseTwin(record *node, extra []Column, adding []Change, name string) string {
	for _, c := range adding {
		if c.Kind == AddColumn && strings.EqualFold(c.Column, name) {
			return c.Column
		}
	}
	for _, f := range record.fields {
		if strings.EqualFold(f.name, name) {
			return f.name
		}
	}
	for _, f := range clickstreamFields[colKafkaTopic:] {
		if strings.EqualFold(f.Name, name) {
			return f.Name
		}
	}
	for _, c := range extra {
		if strings.EqualFold(c.Name, name) {
			return c.Name
		}
	}
	return ""
}

// caseClash says why a writer field cannot become a column: column col's
// name differs from its only in case.
func caseClash(col string) string {
	return "differs from column " + strconv.Quote(col) + " only in case, which Spark and Trino do not tell apart; rename the field"
}

// isExtra reports whether name is one of the extra (enrichment) columns.
func isExtra(extra []Column, name string) bool {
	return slices.ContainsFunc(extra, func(c Column) bool { return c.Name == name })
}

// avroPlan lists the changes the Avro writer schema w needs of the columns
// of record: a column for each top-level writer field the table lacks (a
// field whose type no column can hold — a recursive record, a type past
// maxColumnNodes or maxAvroDepth — is skipped, as Avro schema resolution
// skips it), a wider type where the writer's is a promotion of the
// column's, and an optional column where the writer's field is a union
// with null. Anything else that does not fit is left to the decoder, which
// reports it as incompatible; but changes are only asked for a writer
// whose fields fit their columns once they are made (avroRecordFits). A
// new field named like one of the extra columns is a clash, not a change.
func avroPlan(w avro.Schema, record *node, extra []Column) writerPlan {
	rec, ok := deref(w).(*avro.RecordSchema)
	if !ok {
		return writerPlan{}
	}
	var out []Change
	for _, wf := range rec.Fields() {
		i := record.fieldIndexName(wf.Name())
		if i < 0 {
			if isExtra(extra, wf.Name()) {
				return writerPlan{clash: wf.Name()}
			}
			if isMetadataColumn(wf.Name()) || record.hasColumn(wf.Name()) {
				continue // not addable: the name is a column's, of another field
			}
			if col := caseTwin(record, extra, out, wf.Name()); col != "" {
				return writerPlan{unfit: &DecodeError{Field: wf.Name(), Detail: caseClash(col)}}
			}
			p := &avscParser{name: "writer", nextID: 1}
			n, err := p.typ(wf.Type(), wf.Name())
			if err != nil {
				continue
			}
			out = append(out, Change{Kind: AddColumn, Column: wf.Name(), Type: n.typ, Doc: wf.Doc()})
			continue
		}
		t := record.fields[i]
		wt, nullable := avroNullable(wf.Type())
		if nullable && t.required {
			out = append(out, Change{Kind: MakeOptional, Column: t.name})
		}
		if wide := avroWider(wt, t); wide != nil {
			out = append(out, Change{Kind: WidenColumn, Column: t.name, Type: wide})
		}
	}
	if len(out) > 0 {
		if err := avroRecordFits(rec, planned(record, out)); err != nil {
			return writerPlan{unfit: err}
		}
	}
	return writerPlan{changes: out}
}

// planned returns record as changes leave its columns: widened, made
// optional. (Added columns are not among its fields: no writer field is
// checked against them.)
func planned(record *node, changes []Change) *node {
	out := *record
	out.fields = slices.Clone(record.fields)
	for _, c := range changes {
		i := slices.IndexFunc(out.fields, func(f *node) bool { return f.name == c.Column })
		if i < 0 || c.Kind == AddColumn {
			continue
		}
		f := *out.fields[i]
		switch c.Kind {
		case WidenColumn:
			if f.widen(c.Type) != nil {
				continue
			}
		case MakeOptional:
			f.required = false
		}
		out.fields[i] = &f
	}
	return &out
}

// hasColumn reports whether one of n's fields is stored in a column named
// name (a field renamed by floe.column has a source name of its own).
func (n *node) hasColumn(name string) bool {
	return slices.ContainsFunc(n.fields, func(f *node) bool { return f.name == name })
}

// avroNullable unwraps ["null", T] into T.
func avroNullable(s avro.Schema) (avro.Schema, bool) {
	s = deref(s)
	u, ok := s.(*avro.UnionSchema)
	if !ok || len(u.Types()) != 2 || !u.Nullable() {
		return s, false
	}
	nullAt, _ := u.Indices()
	return deref(u.Types()[1-nullAt]), true
}

// avroWider returns the wider column type that writer type w needs of
// column t, or nil.
func avroWider(w avro.Schema, t *node) iceberg.Type {
	lt := avro.LogicalType("")
	if l := logicalOf(w); l != nil {
		lt = l.Type()
	}
	switch {
	case t.kind == kInt && w.Type() == avro.Long && lt == "":
		return iceberg.PrimitiveTypes.Int64
	case t.kind == kFloat && w.Type() == avro.Double:
		return iceberg.PrimitiveTypes.Float64
	case t.kind == kDecimal && lt == avro.Decimal:
		d := logicalOf(w).(*avro.DecimalLogicalSchema)
		if d.Scale() == t.scale && d.Precision() > t.prec && d.Precision() <= maxDecimalDigits {
			return iceberg.DecimalTypeOf(d.Precision(), d.Scale())
		}
	}
	return nil
}

// protoPlan is avroPlan for a Protobuf message type: every field is
// optional in proto3, so a new field becomes an optional column; a scalar
// with presence makes a required column optional; a 64-bit or unsigned
// integer widens an int column to long, a double a float column to double.
// As with avroPlan, changes are only asked for a message type that fits
// the columns once they are made (protoFits, as for a plain Protobuf
// message type at start).
func protoPlan(md protoreflect.MessageDescriptor, record *node, extra []Column) writerPlan {
	var out []Change
	fields := md.Fields()
	for i := range fields.Len() {
		fd := fields.Get(i)
		name := string(fd.Name())
		j := record.fieldIndexName(name)
		if j < 0 {
			if isExtra(extra, name) {
				return writerPlan{clash: name}
			}
			if isMetadataColumn(name) || record.hasColumn(name) {
				continue // not addable: the name is a column's, of another field
			}
			if col := caseTwin(record, extra, out, name); col != "" {
				return writerPlan{unfit: &DecodeError{Field: name, Detail: caseClash(col)}}
			}
			var c protoColumn
			if typ := c.protoType(fd, 0); typ != nil {
				out = append(out, Change{Kind: AddColumn, Column: name, Type: typ})
			}
			continue
		}
		if fd.IsList() || fd.IsMap() {
			continue
		}
		t := record.fields[j]
		// A scalar with presence (proto3 optional, proto2 optional, a
		// oneof member) may be unset, which its column must hold as null,
		// as for Avro's ["null", T]. Message fields are left out: proto3
		// cannot declare one required, so any writer would make every
		// required struct or timestamp column optional.
		if t.required && fd.HasPresence() && fd.Message() == nil && fd.Cardinality() != protoreflect.Required {
			out = append(out, Change{Kind: MakeOptional, Column: t.name})
		}
		switch fd.Kind() {
		case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
			protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			if t.kind == kInt {
				out = append(out, Change{Kind: WidenColumn, Column: t.name, Type: iceberg.PrimitiveTypes.Int64})
			}
		case protoreflect.DoubleKind:
			if t.kind == kFloat {
				out = append(out, Change{Kind: WidenColumn, Column: t.name, Type: iceberg.PrimitiveTypes.Float64})
			}
		}
	}
	if len(out) > 0 {
		if err := protoFits(md, planned(record, out)); err != nil {
			return writerPlan{unfit: err}
		}
	}
	return writerPlan{changes: out}
}

// protoColumn numbers the nested fields of a column made from a Protobuf
// field, unique within its type as Iceberg needs, and bounds them as
// avscParser does a writer's Avro type (maxColumnNodes, maxAvroDepth): a
// message type used twice at each level, or one that contains itself,
// would make a column of exponential size.
type protoColumn struct {
	ids, nodes int
	// tooLarge is set once the bounds are passed: no column holds the field.
	tooLarge bool
}

func (c *protoColumn) nextID() int {
	c.ids++
	return c.ids
}

// protoType is the column type of a new Protobuf field, as decodeProto
// stores it; nil if none (a map with non-string keys, a message with no
// storable field, past c's bounds).
func (c *protoColumn) protoType(fd protoreflect.FieldDescriptor, depth int) iceberg.Type {
	if c.nodes++; c.nodes > maxColumnNodes || depth >= maxAvroDepth {
		c.tooLarge = true
	}
	if c.tooLarge {
		return nil
	}
	if fd.IsMap() {
		if fd.MapKey().Kind() != protoreflect.StringKind {
			return nil
		}
		v := c.protoScalarType(fd.MapValue(), depth)
		if v == nil {
			return nil
		}
		return &iceberg.MapType{KeyID: c.nextID(), KeyType: iceberg.PrimitiveTypes.String, ValueID: c.nextID(), ValueType: v, ValueRequired: false}
	}
	e := c.protoScalarType(fd, depth)
	if e == nil || !fd.IsList() {
		return e
	}
	return &iceberg.ListType{ElementID: c.nextID(), Element: e, ElementRequired: false}
}

func (c *protoColumn) protoScalarType(fd protoreflect.FieldDescriptor, depth int) iceberg.Type {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return iceberg.PrimitiveTypes.Bool
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return iceberg.PrimitiveTypes.Int32
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		return iceberg.PrimitiveTypes.Int64
	case protoreflect.FloatKind:
		return iceberg.PrimitiveTypes.Float32
	case protoreflect.DoubleKind:
		return iceberg.PrimitiveTypes.Float64
	case protoreflect.StringKind, protoreflect.EnumKind:
		return iceberg.PrimitiveTypes.String
	case protoreflect.BytesKind:
		return iceberg.PrimitiveTypes.Binary
	case protoreflect.MessageKind, protoreflect.GroupKind:
		if fd.Message().FullName() == "google.protobuf.Timestamp" {
			return iceberg.PrimitiveTypes.TimestampTz
		}
		st := &iceberg.StructType{}
		fields := fd.Message().Fields()
		for i := range fields.Len() {
			f := fields.Get(i)
			t := c.protoType(f, depth+1)
			if c.tooLarge {
				return nil
			}
			if t != nil {
				st.FieldList = append(st.FieldList, iceberg.NestedField{ID: c.nextID(), Name: string(f.Name()), Type: t})
			}
		}
		if len(st.FieldList) == 0 {
			return nil
		}
		return st
	}
	return nil
}

// Promotes reports whether Iceberg can promote a column of type from to
// type to: int → long, float → double, decimal(P, S) → decimal(P', S) with
// P' >= P. Equal types promote trivially.
func Promotes(from, to iceberg.Type) bool {
	if from.Equals(to) {
		return true
	}
	switch f := from.(type) {
	case iceberg.Int32Type:
		return to.Equals(iceberg.PrimitiveTypes.Int64)
	case iceberg.Float32Type:
		return to.Equals(iceberg.PrimitiveTypes.Float64)
	case iceberg.DecimalType:
		t, ok := to.(iceberg.DecimalType)
		return ok && t.Scale() == f.Scale() && t.Precision() >= f.Precision()
	}
	return false
}

// SameShape reports whether two types are equal but for field ids, which
// a schema file assigns by position and a table keeps from its creation.
func SameShape(a, b iceberg.Type) bool {
	switch x := a.(type) {
	case *iceberg.StructType:
		y, ok := b.(*iceberg.StructType)
		if !ok || len(x.FieldList) != len(y.FieldList) {
			return false
		}
		for i, f := range x.FieldList {
			g := y.FieldList[i]
			if f.Name != g.Name || f.Required != g.Required || !SameShape(f.Type, g.Type) {
				return false
			}
		}
		return true
	case *iceberg.ListType:
		y, ok := b.(*iceberg.ListType)
		return ok && x.ElementRequired == y.ElementRequired && SameShape(x.Element, y.Element)
	case *iceberg.MapType:
		y, ok := b.(*iceberg.MapType)
		return ok && x.ValueRequired == y.ValueRequired && SameShape(x.KeyType, y.KeyType) && SameShape(x.ValueType, y.ValueType)
	}
	return a.Equals(b)
}

// PlanTable lists the changes table schema ts needs to hold the rows of s
// (a schema file edited since the table was created): a column for each
// field the table lacks, wider types, optional columns. A column the table
// holds wider than s declares it (widened by a registry's writer schema, or
// by an earlier file) needs nothing: s's values fit. A type change that is
// not a promotion either way (string → int), a nested field added or
// changed, is an error naming the column and both types. A required
// column s no longer declares is made optional: the column stays (its rows
// keep their values, WithTable fills it from messages that still carry
// the field), and messages without the field give it nulls.
func PlanTable(ts *iceberg.Schema, s *Schema) ([]Change, error) {
	var out []Change
	for _, f := range s.Iceberg.Fields() {
		got, ok := ts.FindFieldByName(f.Name)
		if !ok {
			if isMetadataColumn(f.Name) {
				return nil, fmt.Errorf("the table lacks floe's column %q", f.Name)
			}
			out = append(out, Change{Kind: AddColumn, Column: f.Name, Type: f.Type, Doc: f.Doc})
			continue
		}
		switch {
		case SameShape(got.Type, f.Type):
		case Promotes(got.Type, f.Type):
			out = append(out, Change{Kind: WidenColumn, Column: f.Name, Type: f.Type})
		case Promotes(f.Type, got.Type):
			// The table is wider: kept (WithTable writes s's values so).
		default:
			return nil, fmt.Errorf("column %q is %s in the table but %s in schema %s: %s cannot be promoted to %s (allowed: int → long, float → double, a larger decimal precision, a new optional field)",
				f.Name, got.Type, f.Type, s.Name, got.Type, f.Type)
		}
		if got.Required && !f.Required {
			out = append(out, Change{Kind: MakeOptional, Column: f.Name})
		}
	}
	for _, f := range ts.Fields() {
		if _, ok := s.Iceberg.FindFieldByName(f.Name); !ok && f.Required && !isMetadataColumn(f.Name) {
			out = append(out, Change{Kind: MakeOptional, Column: f.Name})
		}
	}
	return out, nil
}

// WithTable returns s adapted to table schema ts, the table's current
// schema after an evolution (by this member, another one, or an earlier
// run): its columns take the table's field ids, wider types and
// optionality, and the table's columns that s lacks become columns of s
// too, filled by field name from messages. Rows the result builds are
// written to the table exactly. A field s declares required stays required
// to the decoders of plain values (JSON, Avro or Protobuf without a
// registry: the file is the contract) though its column is optional — a
// field added to the file, or made required in it, since the table was
// created, which Iceberg can only add optional —: a record without it is
// refused (missing_field) as on a table created from the file. A
// registry's writer schemas follow the table's optionality (userSchema's
// table). It fails, naming the column, when a column of s is missing from
// the table or the table's type cannot hold its values.
func (s *Schema) WithTable(ts *iceberg.Schema) (*Schema, error) {
	if s.user == nil {
		return nil, fmt.Errorf("schema %s: only a schema file can follow an evolved table", s.Name)
	}
	byName := map[string]bool{}
	rec := &node{kind: kStruct, required: true}
	// optional is rec with the table's optionality, if it differs.
	var optional []*node
	var user, meta, extra []iceberg.NestedField
	same := true
	for _, n := range s.user.record.fields {
		byName[n.name] = true
		tf, ok := ts.FindFieldByName(n.name)
		if !ok {
			return nil, fmt.Errorf("schema %s: column %q is missing from the table", s.Name, n.name)
		}
		c := *n
		switch {
		case SameShape(n.typ, tf.Type):
			c.typ = tf.Type
		case Promotes(n.typ, tf.Type):
			same = false
			if err := c.widen(tf.Type); err != nil {
				return nil, fmt.Errorf("schema %s: column %q: %w", s.Name, n.name, err)
			}
		default:
			return nil, fmt.Errorf("schema %s: column %q is %s in the table but %s in the schema, which cannot be promoted to it", s.Name, n.name, tf.Type, n.typ)
		}
		rec.fields = append(rec.fields, &c)
		if c.required && !tf.Required {
			same = false // the fast Builder writes the file's required columns as such
			if optional == nil {
				optional = slices.Clone(rec.fields[:len(rec.fields)-1])
			}
			o := c
			o.required = false
			optional = append(optional, &o)
		} else if optional != nil {
			optional = append(optional, &c)
		}
		user = append(user, tf)
	}
	extraNames := map[string]bool{}
	for _, c := range s.Extra {
		extraNames[c.Name] = true
	}
	for _, tf := range ts.Fields() {
		switch {
		case byName[tf.Name]:
		case isMetadataColumn(tf.Name):
			meta = append(meta, tf)
		case extraNames[tf.Name]:
			extra = append(extra, tf)
		default:
			n, err := nodeOf(tf.Name, tf.Type, tf.Required)
			if err != nil {
				return nil, fmt.Errorf("schema %s: table column %q: %w", s.Name, tf.Name, err)
			}
			same = false
			rec.fields = append(rec.fields, n)
			if optional != nil {
				optional = append(optional, n)
			}
			user = append(user, tf)
		}
	}
	if len(meta) != numCols-colKafkaTopic {
		return nil, fmt.Errorf("schema %s: the table lacks some of floe's columns %s", s.Name, metadataColumnNames())
	}
	if len(extra) != len(s.Extra) {
		return nil, fmt.Errorf("schema %s: the table lacks some of the extra columns", s.Name)
	}
	// Metadata and extra columns keep the schema's order, which the
	// builders write them in.
	meta = orderLike(meta, s.Iceberg.Fields()[len(s.user.record.fields):len(s.user.record.fields)+len(meta)])
	extra = orderLike(extra, s.Iceberg.Fields()[len(s.Iceberg.Fields())-len(extra):])
	rec.indexFields()
	var tableRec *node
	if optional != nil {
		tableRec = &node{kind: kStruct, required: true, fields: optional}
		tableRec.indexFields()
	}
	fields := append(append(user, meta...), extra...)
	sc := iceberg.NewSchemaWithIdentifiers(ts.ID, ts.IdentifierFieldIDs, fields...)
	as, err := table.SchemaToArrowSchema(sc, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("schema %s: converting to Arrow: %w", s.Name, err)
	}
	out := *s
	out.Iceberg, out.Arrow = sc, as
	out.user = &userSchema{record: rec, table: tableRec, avro: s.user.avro}
	out.fast = s.fast && same
	return &out, nil
}

// orderLike returns fields in the order of the names in like.
func orderLike(fields, like []iceberg.NestedField) []iceberg.NestedField {
	out := make([]iceberg.NestedField, 0, len(fields))
	for _, l := range like {
		for _, f := range fields {
			if f.Name == l.Name {
				out = append(out, f)
			}
		}
	}
	return out
}

func metadataColumnNames() string {
	var names []string
	for _, f := range clickstreamFields[colKafkaTopic:] {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// widen changes a primitive node to the wider type t.
func (n *node) widen(t iceberg.Type) error {
	switch x := t.(type) {
	case iceberg.Int64Type:
		n.kind = kLong
	case iceberg.Float64Type:
		n.kind = kDouble
	case iceberg.DecimalType:
		n.prec, n.scale = x.Precision(), x.Scale()
	default:
		return fmt.Errorf("cannot widen %s to %s", n.typ, t)
	}
	n.typ = t
	return nil
}

// primitiveKinds are the kinds of the Iceberg types without parameters.
var primitiveKinds = map[iceberg.Type]kind{
	iceberg.PrimitiveTypes.String:      kString,
	iceberg.PrimitiveTypes.Int32:       kInt,
	iceberg.PrimitiveTypes.Int64:       kLong,
	iceberg.PrimitiveTypes.Float32:     kFloat,
	iceberg.PrimitiveTypes.Float64:     kDouble,
	iceberg.PrimitiveTypes.Bool:        kBool,
	iceberg.PrimitiveTypes.Date:        kDate,
	iceberg.PrimitiveTypes.Time:        kTime,
	iceberg.PrimitiveTypes.Timestamp:   kTimestamp,
	iceberg.PrimitiveTypes.TimestampTz: kTimestampTz,
	iceberg.PrimitiveTypes.UUID:        kUUID,
	iceberg.PrimitiveTypes.Binary:      kBinary,
}

// nodeOf builds the node of a table column that no schema file declares
// (one an evolution added): it is filled from the message field of the
// same name.
func nodeOf(name string, t iceberg.Type, required bool) (*node, error) {
	n := &node{name: name, source: name, required: required, typ: t}
	if k, ok := primitiveKinds[t]; ok {
		n.kind = k
		n.noUnit = k == kTime || k == kTimestamp || k == kTimestampTz
		return n, nil
	}
	switch x := t.(type) {
	case iceberg.DecimalType:
		n.kind, n.prec, n.scale = kDecimal, x.Precision(), x.Scale()
	case iceberg.FixedType:
		if x.Len() < 1 {
			return nil, fmt.Errorf("type %s holds no bytes; Parquet cannot write it", t)
		}
		n.kind, n.size = kFixed, x.Len()
	case *iceberg.StructType:
		n.kind = kStruct
		for _, f := range x.FieldList {
			c, err := nodeOf(f.Name, f.Type, f.Required)
			if err != nil {
				return nil, err
			}
			n.fields = append(n.fields, c)
		}
		n.indexFields()
	case *iceberg.ListType:
		e, err := nodeOf("element", x.Element, x.ElementRequired)
		if err != nil {
			return nil, err
		}
		e.element = true
		n.kind, n.elem = kList, e
	case *iceberg.MapType:
		if !x.KeyType.Equals(iceberg.PrimitiveTypes.String) {
			return nil, fmt.Errorf("a map with %s keys is not supported", x.KeyType)
		}
		v, err := nodeOf("value", x.ValueType, x.ValueRequired)
		if err != nil {
			return nil, err
		}
		v.element = true
		k := &node{name: "key", source: "key", kind: kString, required: true, typ: x.KeyType}
		n.kind, n.key, n.val = kMap, k, v
	default:
		return nil, fmt.Errorf("type %s is not supported", t)
	}
	return n, nil
}

// Conform returns the rows of rec, a batch built with an earlier version of
// s (before WithTable), as a batch of s: columns matched by field id,
// those rec lacks null, widened ones cast. The pipeline uses it for rows
// buffered before a switch to an evolved schema, so that a flush still
// commits one batch per partition. rec is not released.
func (s *Schema) Conform(ctx context.Context, rec arrow.RecordBatch) (arrow.RecordBatch, error) {
	byID := map[string]int{}
	for i, f := range rec.Schema().Fields() {
		if id, ok := f.Metadata.GetValue(fieldIDKey); ok {
			byID[id] = i
		}
	}
	n := rec.NumRows()
	cols := make([]arrow.Array, 0, s.Arrow.NumFields())
	defer func() {
		for _, c := range cols {
			c.Release()
		}
	}()
	mem := compute.GetAllocator(ctx)
	for _, f := range s.Arrow.Fields() {
		id, _ := f.Metadata.GetValue(fieldIDKey)
		i, ok := byID[id]
		switch {
		case !ok:
			cols = append(cols, array.MakeArrayOfNull(mem, f.Type, int(n)))
		case arrow.TypeEqual(rec.Column(i).DataType(), f.Type):
			c := rec.Column(i)
			c.Retain()
			cols = append(cols, c)
		default:
			c, err := compute.CastArray(ctx, rec.Column(i), compute.SafeCastOptions(f.Type))
			if err != nil {
				return nil, fmt.Errorf("column %s: converting %s to %s: %w", f.Name, rec.Column(i).DataType(), f.Type, err)
			}
			cols = append(cols, c)
		}
	}
	return array.NewRecordBatch(s.Arrow, cols, n), nil
}

// fieldIDKey is the Arrow field metadata key of the Iceberg field id.
const fieldIDKey = "PARQUET:field_id"
