package schemas

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/bufbuild/protocompile"
	"github.com/google/uuid"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// compileProto compiles the .proto text of a registry schema (which may
// import the well-known types) into a file descriptor.
func compileProto(id int, text string) (protoreflect.FileDescriptor, error) {
	name := "schema-" + strconv.Itoa(id) + ".proto"
	c := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
			Accessor: func(path string) (io.ReadCloser, error) {
				if path == name {
					return io.NopCloser(strings.NewReader(text)), nil
				}
				return nil, fmt.Errorf("import %q is not a well-known type", path)
			},
		}),
	}
	files, err := c.Compile(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("not a valid .proto: %w", err)
	}
	return files[0], nil
}

// maxProtoIndexes bounds the message-index path of the wire format.
const maxProtoIndexes = 16

// protoMessageDescriptor reads the wire format's message indexes (a zigzag
// varint count, 0 meaning the first message, then that many zigzag varint
// indexes into nested message lists) and returns the message they name and
// the bytes after them.
func protoMessageDescriptor(fd protoreflect.FileDescriptor, b []byte) (protoreflect.MessageDescriptor, []byte, *DecodeError) {
	bad := func(detail string) (protoreflect.MessageDescriptor, []byte, *DecodeError) {
		return nil, nil, &DecodeError{Reason: ReasonMalformedValue, Detail: detail}
	}
	n, k := binary.Varint(b)
	if k <= 0 {
		return bad("the Protobuf message indexes are truncated")
	}
	b = b[k:]
	idx := []int64{0}
	if n != 0 {
		if n < 0 || n > maxProtoIndexes {
			return bad("the Protobuf message index count " + strconv.FormatInt(n, 10) + " is out of range")
		}
		idx = idx[:0]
		for range n {
			v, k := binary.Varint(b)
			if k <= 0 {
				return bad("the Protobuf message indexes are truncated")
			}
			b = b[k:]
			idx = append(idx, v)
		}
	}
	msgs := fd.Messages()
	var md protoreflect.MessageDescriptor
	for _, i := range idx {
		if i < 0 || i >= int64(msgs.Len()) {
			return nil, nil, &DecodeError{Reason: ReasonUnknownSchema, Detail: "message index " + strconv.FormatInt(i, 10) + " does not exist in the schema"}
		}
		md = msgs.Get(int(i))
		msgs = md.Messages()
	}
	return md, b, nil
}

// decodeProto unmarshals value as md and stores its fields in record's
// columns, matching fields by name. maps are md's message types that hold
// map fields (newProtoMaps). It returns how many more bytes the row holds
// than the message (see valueDecoder and protoFill).
func decodeProto(md protoreflect.MessageDescriptor, maps protoMaps, value []byte, record *node, cols []array.Builder) (int, *DecodeError) {
	m := dynamicpb.NewMessage(md)
	if err := (proto.UnmarshalOptions{RecursionLimit: maxAvroDepth}).Unmarshal(value, m); err != nil {
		return 0, &DecodeError{Reason: ReasonMalformedValue, Detail: Truncate("not a valid "+string(md.FullName())+": "+err.Error(), maxDetailBytes)}
	}
	if err := protoWireTypes(m); err != nil {
		return 0, err
	}
	if maps[md] {
		if err := maps.entryWireTypes(md, value); err != nil {
			return 0, err
		}
	}
	var p protoFill
	err := p.record(m, record, nil, cols)
	return p.grown, err
}

// protoWireTypes refuses message m, read by Unmarshal, if a field it
// declares arrived with a wire type its type does not have (an int64 as
// bytes): the runtime keeps such a field with the unknown ones, so the
// field reads as unset — its default or null — and the sent value would be
// lost from the row. Unknown fields of numbers m does not declare are a
// newer writer's and stay ignored. Nested messages (in fields, lists and
// map values) are checked too; a map entry's key or value with the wrong
// wire type is dropped by the runtime without a trace, so the encoded
// entries are checked instead (protoMaps.entryWireTypes).
func protoWireTypes(m protoreflect.Message) *DecodeError {
	fields := m.Descriptor().Fields()
	for b := m.GetUnknown(); len(b) > 0; {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			break // Unmarshal parsed these bytes; never on a record it took
		}
		k := protowire.ConsumeFieldValue(num, typ, b[n:])
		if k < 0 {
			break
		}
		b = b[n+k:]
		if fd := fields.ByNumber(num); fd != nil {
			return &DecodeError{Reason: ReasonMalformedValue, Field: string(fd.Name()),
				Detail: "field " + strconv.Itoa(int(num)) + " has wire type " + protoWireName(typ) + ", its " + fd.Kind().String() + " " + protoWantWire(fd)}
		}
	}
	var derr *DecodeError
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := range l.Len() {
				if derr = protoWireTypes(l.Get(i).Message()); derr != nil {
					derr = fieldErr(string(fd.Name()), fieldErr("["+strconv.Itoa(i)+"]", derr))
					return false
				}
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				if derr = protoWireTypes(e.Message()); derr != nil {
					derr = fieldErr(string(fd.Name()), fieldErr("["+strconv.Quote(Truncate(k.String(), 32))+"]", derr))
				}
				return derr == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			if derr = protoWireTypes(v.Message()); derr != nil {
				derr = fieldErr(string(fd.Name()), derr)
			}
		}
		return derr == nil
	})
	return derr
}

// protoWireName names wire type t as the Protobuf encoding guide does.
func protoWireName(t protowire.Type) string {
	switch t {
	case protowire.VarintType:
		return "VARINT"
	case protowire.Fixed64Type:
		return "I64"
	case protowire.BytesType:
		return "LEN"
	case protowire.StartGroupType:
		return "SGROUP"
	case protowire.EndGroupType:
		return "EGROUP"
	case protowire.Fixed32Type:
		return "I32"
	}
	return strconv.Itoa(int(t))
}

// protoWireType is the wire type field fd's values are sent with,
// unpacked.
func protoWireType(fd protoreflect.FieldDescriptor) protowire.Type {
	switch fd.Kind() {
	case protoreflect.BoolKind, protoreflect.EnumKind, protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Uint32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Uint64Kind:
		return protowire.VarintType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		return protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		return protowire.Fixed64Type
	case protoreflect.GroupKind:
		return protowire.StartGroupType
	}
	return protowire.BytesType // string, bytes, message
}

// protoWantWire says which wire types field fd's values are sent with: a
// repeated number, bool or enum may also come packed, as LEN.
func protoWantWire(fd protoreflect.FieldDescriptor) string {
	want := protoWireType(fd)
	if fd.IsList() && want != protowire.BytesType && want != protowire.StartGroupType {
		return "is sent as " + protoWireName(want) + " or, packed, LEN"
	}
	return "is sent as " + protoWireName(want)
}

// protoMaps holds the message types, under one message type, whose
// messages hold a map field, in themselves or in a message they nest:
// those whose encoded bytes entryWireTypes reads. Nil when none does,
// which costs nothing per message.
type protoMaps map[protoreflect.MessageDescriptor]bool

// newProtoMaps finds the message types under md that hold maps.
func newProtoMaps(md protoreflect.MessageDescriptor) protoMaps {
	var all []protoreflect.MessageDescriptor
	var reach func(protoreflect.MessageDescriptor)
	reach = func(md protoreflect.MessageDescriptor) {
		for _, m := range all {
			if m == md {
				return
			}
		}
		all = append(all, md)
		fs := md.Fields()
		for i := range fs.Len() {
			if m := fs.Get(i).Message(); m != nil {
				reach(m)
			}
		}
	}
	reach(md)
	var maps protoMaps
	for changed := true; changed; { // types may nest each other
		changed = false
		for _, m := range all {
			if maps[m] {
				continue
			}
			fs := m.Fields()
			for i := range fs.Len() {
				if f := fs.Get(i); f.IsMap() || f.Message() != nil && maps[f.Message()] {
					if maps == nil {
						maps = protoMaps{}
					}
					maps[m], changed = true, true
					break
				}
			}
		}
	}
	return maps
}

// entryWireTypes refuses the encoded message b of type md (one that
// Unmarshal took) if one of its map entries, at any depth, has a key
// (field 1) or a value (field 2) sent with a wire type its type does not
// have: the runtime drops such a key or value without a trace, and the row
// got "" or the default in place of what was sent. It reads only the
// fields whose types hold maps; protoWireTypes checks everything else.
func (maps protoMaps) entryWireTypes(md protoreflect.MessageDescriptor, b []byte) *DecodeError {
	fields := md.Fields()
	var counts map[protowire.Number]int // list elements so far, for the path
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil // Unmarshal parsed these bytes; never on a message it took
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		var payload []byte
		nested := fd != nil && fd.Message() != nil && (fd.IsMap() || maps[fd.Message()])
		switch {
		case nested && typ == protowire.BytesType:
			payload, n = protowire.ConsumeBytes(b)
		case nested && typ == protowire.StartGroupType && fd.Kind() == protoreflect.GroupKind:
			payload, n = protowire.ConsumeGroup(num, b)
		default: // a wrong wire type is protoWireTypes'
			nested = false
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return nil
		}
		b = b[n:]
		if !nested {
			continue
		}
		name := string(fd.Name())
		if fd.IsMap() {
			if err := maps.entry(fd, payload); err != nil {
				return fieldErr(name, err)
			}
			continue
		}
		if fd.IsList() {
			if counts == nil {
				counts = map[protowire.Number]int{}
			}
			i := counts[num]
			counts[num]++
			if err := maps.entryWireTypes(fd.Message(), payload); err != nil {
				return fieldErr(name, fieldErr("["+strconv.Itoa(i)+"]", err))
			}
			continue
		}
		if err := maps.entryWireTypes(fd.Message(), payload); err != nil {
			return fieldErr(name, err)
		}
	}
	return nil
}

// entry checks one encoded entry of map field fd, and its value if that
// is a message holding maps.
func (maps protoMaps) entry(fd protoreflect.FieldDescriptor, b []byte) *DecodeError {
	var key, value []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil
		}
		b = b[n:]
		n = protowire.ConsumeFieldValue(num, typ, b)
		if n < 0 {
			return nil
		}
		v := b[:n]
		b = b[n:]
		var f protoreflect.FieldDescriptor
		what := "key"
		switch num {
		case 1:
			f = fd.MapKey()
		case 2:
			f, what = fd.MapValue(), "value"
		default:
			continue // not declared: ignored, as in a message
		}
		if want := protoWireType(f); typ != want {
			return &DecodeError{Reason: ReasonMalformedValue,
				Detail: "a map entry's " + what + " (field " + strconv.Itoa(int(num)) + ") has wire type " + protoWireName(typ) + ", its " + f.Kind().String() + " " + protoWantWire(f)}
		}
		if num == 1 {
			key = v
		} else {
			value = v
		}
	}
	m := fd.MapValue().Message()
	if value == nil || m == nil || !maps[m] {
		return nil
	}
	payload, _ := protowire.ConsumeBytes(value)
	if err := maps.entryWireTypes(m, payload); err != nil {
		k := ""
		if fd.MapKey().Kind() == protoreflect.StringKind {
			s, _ := protowire.ConsumeBytes(key)
			k = string(s)
		}
		return fieldErr("["+strconv.Quote(Truncate(k, 32))+"]", err)
	}
	return nil
}

// protoFill stores a message's fields in columns, counting in grown the
// bytes of the enum names it stores as strings and the widths of the list
// and map elements (node.arrowWidth): an empty sub-message is 2 bytes of
// the message and, as an element of a list of wide records, hundreds in
// Arrow.
type protoFill struct{ grown int }

func (p *protoFill) record(m protoreflect.Message, t *node, sb *array.StructBuilder, cols []array.Builder) *DecodeError {
	fields := m.Descriptor().Fields()
	for i, f := range t.fields {
		var b array.Builder
		if cols != nil {
			b = cols[i]
		} else if sb != nil {
			b = sb.FieldBuilder(i)
		}
		fd := fields.ByName(protoreflect.Name(f.source))
		if fd == nil && f.required {
			return fieldErr(f.source, incompatible("is required, and the writer's message type lacks it"))
		}
		if fd == nil || (fd.HasPresence() && !m.Has(fd)) {
			if f.required {
				return fieldErr(f.source, missingValue())
			}
			putNull(b)
			continue
		}
		if err := p.value(fd, m.Get(fd), f, b); err != nil {
			return fieldErr(f.source, err)
		}
	}
	return nil
}

func (p *protoFill) value(fd protoreflect.FieldDescriptor, v protoreflect.Value, t *node, b array.Builder) *DecodeError {
	switch {
	case fd.IsList():
		if t.kind != kList {
			return protoCannotWhole(fd, t)
		}
		l := v.List()
		if l.Len() > 0 {
			if p.grown += l.Len() * t.elem.arrowWidth(); p.grown > maxStringBytes {
				return rowTooLarge(p.grown)
			}
		}
		eb := openList(b)
		for i := range l.Len() {
			if err := p.scalar(fd, l.Get(i), t.elem, eb); err != nil {
				return fieldErr("["+strconv.Itoa(i)+"]", err)
			}
		}
		return nil
	case fd.IsMap():
		if t.kind != kMap || fd.MapKey().Kind() != protoreflect.StringKind {
			return protoCannotWhole(fd, t)
		}
		if n := v.Map().Len(); n > 0 {
			if p.grown += n * (t.key.arrowWidth() + t.val.arrowWidth()); p.grown > maxStringBytes {
				return rowTooLarge(p.grown)
			}
		}
		kb, vb := openMap(b)
		var derr *DecodeError
		v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			key := k.String()
			if !utf8.ValidString(key) { // proto2 strings are not checked by the runtime
				derr = invalid("a key is not valid UTF-8")
				return false
			}
			put(t.key, kb, &scalar{b: []byte(key)})
			if err := p.scalar(fd.MapValue(), e, t.val, vb); err != nil {
				derr = fieldErr("["+strconv.Quote(Truncate(key, 32))+"]", err)
				return false
			}
			return true
		})
		return derr
	}
	return p.scalar(fd, v, t, b)
}

// protoCannotWhole is the error of a repeated or map field fd whose
// column t is not a list or a map of string keys.
func protoCannotWhole(fd protoreflect.FieldDescriptor, t *node) *DecodeError {
	what := "repeated " + fd.Kind().String()
	if fd.IsMap() {
		what = "map"
	}
	return incompatible("the writer's " + what + " cannot be stored in a column of type " + t.typ.String())
}

// protoScalar stores one non-repeated value (or one list element or map
// value) of field fd.
func (p *protoFill) scalar(fd protoreflect.FieldDescriptor, v protoreflect.Value, t *node, b array.Builder) *DecodeError {
	if !protoKindFits(fd, t) {
		return protoCannot(fd, t)
	}
	var s scalar
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		m := v.Message()
		if t.kind == kTimestampTz {
			f := m.Descriptor().Fields()
			secs, nanos := m.Get(f.ByName("seconds")).Int(), m.Get(f.ByName("nanos")).Int()
			if secs > math.MaxInt64/1_000_000-1 || secs < math.MinInt64/1_000_000+1 || nanos < 0 || nanos >= 1_000_000_000 {
				return invalid("a timestamp is out of range")
			}
			us, err := timeMicros(secs*1_000_000+nanos/1000, false)
			if err != nil {
				return err
			}
			s.i = us
			break
		}
		return p.record(m, t, openStruct(b), nil)
	case protoreflect.BoolKind:
		if v.Bool() {
			s.i = 1
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		var x int64
		switch fd.Kind() {
		case protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
			u := v.Uint()
			if u > math.MaxInt64 {
				return invalid("an unsigned value above 2^63-1 does not fit a long")
			}
			x = int64(u)
		default:
			x = v.Int()
		}
		switch t.kind {
		case kInt:
			if x > math.MaxInt32 || x < math.MinInt32 {
				return invalid("must fit in 32 bits")
			}
			s.i = x
		case kLong:
			s.i = x
		case kFloat, kDouble:
			s.f = float64(x)
		case kTimestamp, kTimestampTz:
			if t.noUnit {
				return unitUnknown()
			}
			us, err := timeMicros(x, t.millis)
			if err != nil {
				return err
			}
			s.i = us
		case kDate:
			if err := dateDays(x); err != nil {
				return err
			}
			s.i = x
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		s.f = v.Float()
	case protoreflect.EnumKind:
		ev := fd.Enum().Values().ByNumber(v.Enum())
		if ev == nil {
			return invalid("enum number " + strconv.Itoa(int(v.Enum())) + " is not declared")
		}
		s.b = []byte(ev.Name())
		p.grown += len(s.b)
		if t.symbols != nil && !isSymbol(t.symbols, s.b) {
			return invalid("is not one of the enum's symbols")
		}
	case protoreflect.StringKind:
		str := v.String()
		switch t.kind {
		case kString:
			if !utf8.ValidString(str) {
				return invalid("is not valid UTF-8")
			}
			if t.symbols != nil && !isSymbol(t.symbols, []byte(str)) {
				return invalid("is not one of the enum's symbols")
			}
			s.b = []byte(str)
		case kUUID:
			u, err := uuid.Parse(str)
			if err != nil {
				return invalid("is not a UUID")
			}
			s.b = u[:]
		case kDecimal:
			num, err := parseDecimal(str, t.prec, t.scale)
			if err != nil {
				return err
			}
			s.d = num
		}
	case protoreflect.BytesKind:
		raw := v.Bytes()
		switch {
		case t.kind == kBinary, t.kind == kFixed && len(raw) == t.size, t.kind == kUUID && len(raw) == 16:
			s.b = raw
		case t.kind == kFixed:
			return wrongLength(len(raw), t.size) // one value: the record's fault
		default: // kUUID
			return wrongLength(len(raw), 16)
		}
	}
	put(t, b, &s)
	return nil
}

// protoKindFits reports whether values of field fd (or its list elements,
// or its map values) can be stored in a column of t's kind: the kinds
// protoFill.scalar converts. A message fits a struct column whose own
// fields fit (protoFits checks them); a Timestamp also fits timestamptz.
func protoKindFits(fd protoreflect.FieldDescriptor, t *node) bool {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return t.kind == kStruct || t.kind == kTimestampTz && fd.Message().FullName() == "google.protobuf.Timestamp"
	case protoreflect.BoolKind:
		return t.kind == kBool
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind,
		protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint32Kind, protoreflect.Fixed32Kind, protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		switch t.kind {
		case kInt, kLong, kFloat, kDouble, kTimestamp, kTimestampTz, kDate:
			return true
		}
	case protoreflect.FloatKind:
		return t.kind == kFloat || t.kind == kDouble
	case protoreflect.DoubleKind:
		return t.kind == kDouble
	case protoreflect.EnumKind:
		return t.kind == kString
	case protoreflect.StringKind:
		return t.kind == kString || t.kind == kUUID || t.kind == kDecimal
	case protoreflect.BytesKind:
		return t.kind == kBinary || t.kind == kFixed || t.kind == kUUID
	}
	return false
}

func protoCannot(fd protoreflect.FieldDescriptor, t *node) *DecodeError {
	return incompatible("the writer's " + fd.Kind().String() + " cannot be stored in a column of type " + t.typ.String())
}

// protoFits checks message type md against the columns of record without
// a message: each field a column holds must have a type the column can
// take (protoKindFits), through list elements, map values and nested
// messages, and each required column must have its field. Decoding checks
// the same at every message; this finds a mismatch in a field that is
// rarely set before any message has it.
func protoFits(md protoreflect.MessageDescriptor, record *node) *DecodeError {
	fields := md.Fields()
	for _, f := range record.fields {
		fd := fields.ByName(protoreflect.Name(f.source))
		if fd == nil {
			if f.required {
				return fieldErr(f.source, incompatible("is required, and the writer's message type lacks it"))
			}
			continue
		}
		if err := protoFieldFits(fd, f); err != nil {
			return fieldErr(f.source, err)
		}
	}
	return nil
}

func protoFieldFits(fd protoreflect.FieldDescriptor, t *node) *DecodeError {
	switch {
	case fd.IsList():
		if t.kind != kList {
			return protoCannotWhole(fd, t)
		}
		if err := protoValueFits(fd, t.elem); err != nil {
			return fieldErr("[]", err)
		}
		return nil
	case fd.IsMap():
		if t.kind != kMap || fd.MapKey().Kind() != protoreflect.StringKind {
			return protoCannotWhole(fd, t)
		}
		if err := protoValueFits(fd.MapValue(), t.val); err != nil {
			return fieldErr("[]", err)
		}
		return nil
	}
	return protoValueFits(fd, t)
}

// protoValueFits checks one value of field fd (a list element, a map
// value) against column t.
func protoValueFits(fd protoreflect.FieldDescriptor, t *node) *DecodeError {
	if !protoKindFits(fd, t) {
		return protoCannot(fd, t)
	}
	if t.kind == kStruct {
		return protoFits(fd.Message(), t)
	}
	return nil
}

// loadProtoMessage compiles c.File and returns its message type
// c.Message, checked against the table: a field whose type no column of
// record can hold is refused here, naming it, rather than at every
// message.
func loadProtoMessage(c *ProtoConfig, record *node) (protoreflect.MessageDescriptor, error) {
	if c == nil || c.File == "" || c.Message == "" {
		return nil, errors.New("format protobuf without registry: set proto.file (a .proto file) and proto.message (the message type, like pkg.Msg)")
	}
	dir, name := filepath.Split(c.File)
	comp := protocompile.Compiler{
		Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{ImportPaths: []string{filepath.Clean(dir + ".")}}),
	}
	files, err := comp.Compile(context.Background(), name)
	if err != nil {
		return nil, fmt.Errorf("proto.file %s: %w", c.File, err)
	}
	d := files[0].FindDescriptorByName(protoreflect.FullName(c.Message))
	md, ok := d.(protoreflect.MessageDescriptor)
	if !ok {
		var names []string
		msgs := files[0].Messages()
		for i := range msgs.Len() {
			names = append(names, string(msgs.Get(i).FullName()))
		}
		return nil, fmt.Errorf("proto.message %q: no such message in %s (messages: %s)", c.Message, c.File, strings.Join(names, ", "))
	}
	if err := protoFits(md, record); err != nil {
		return nil, fmt.Errorf("proto.message %s does not fit the schema: field %q: %s", c.Message, err.Field, err.Detail)
	}
	return md, nil
}

// protoDecoder reads plain Protobuf values of one message type.
type protoDecoder struct {
	md     protoreflect.MessageDescriptor
	maps   protoMaps // of md
	record *node
}

func (d *protoDecoder) decode(value []byte, cols []array.Builder) (int, error) {
	if len(value) == 0 {
		// A message of only default values marshals to no bytes, and so
		// is a tombstone: read as the message, it became a row of defaults,
		// where every other format dead-letters it.
		return 0, &DecodeError{Reason: ReasonMalformedValue, Detail: "empty value (a tombstone; a " + string(d.md.FullName()) + " of only default values cannot be told from one)"}
	}
	grown, err := decodeProto(d.md, d.maps, value, d.record, cols)
	if err != nil {
		return 0, err // a nil *DecodeError must not become a non-nil error
	}
	return grown, nil
}
