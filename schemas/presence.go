package schemas

import (
	"fmt"

	"github.com/apache/iceberg-go"

	"google.golang.org/protobuf/reflect/protoreflect"
)

// CheckKeyPresence returns an error naming column when column is an int or
// long column and the format s decodes cannot tell a message that leaves its
// field unset from one that sets it to 0: a plain Protobuf field without presence (a proto3
// scalar not marked optional) decodes unset as 0 or "", and with a schema
// registry the writer's message type, hence presence, is known only per
// message. A business key (floe.dedupe-key) must not be such a field, or
// every record without one would share the key 0. String keys pass: the
// business-key MERGE takes "" for no key. Other formats decode a missing
// field as null (or fail a required column), so they pass.
func (s *Schema) CheckKeyPresence(column string) error {
	if s.kind != FormatProtobuf || s.user == nil {
		return nil
	}
	f, ok := s.Iceberg.FindFieldByName(column)
	if !ok || (f.Type != iceberg.PrimitiveTypes.Int32 && f.Type != iceberg.PrimitiveTypes.Int64) {
		return nil
	}
	if s.reg != nil {
		return fmt.Errorf("column %q: with format protobuf and a schema registry, floe cannot check that the field has presence (proto3 \"optional\"); an unset numeric field would decode as 0", column)
	}
	if s.proto == nil {
		return nil
	}
	for _, n := range s.user.record.fields {
		if n.name != column {
			continue
		}
		fd := s.proto.Fields().ByName(protoreflect.Name(n.source))
		if fd == nil {
			return fmt.Errorf("column %q: message %s has no field %q", column, s.proto.FullName(), n.source)
		}
		if !fd.HasPresence() {
			return fmt.Errorf("column %q: field %s of message %s has no presence (a proto3 scalar without \"optional\"), so an unset field decodes as its zero value; declare it optional", column, fd.Name(), s.proto.FullName())
		}
		return nil
	}
	return nil
}
