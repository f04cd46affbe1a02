package pipeline_test

import (
	"fmt"
	"testing"

	"github.com/bufbuild/protocompile"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/floe-dev/floe/pipeline"
)

// TestPlainProtobufEndToEnd: plain Protobuf values (no registry, the
// message type named by proto.file and proto.message) become typed rows;
// malformed values are dead letters; every offset is covered once.
func TestPlainProtobufEndToEnd(t *testing.T) {
	r := newEvolveRig(t, "protobuf-plain", "", 2)
	c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"o.proto": ordersProtoV1}),
	}}
	files, err := c.Compile(t.Context(), "o.proto")
	if err != nil {
		t.Fatal(err)
	}
	md := files[0].Messages().ByName("Order")
	f := md.Fields()
	var values [][]byte
	bad := map[int]bool{}
	for i := range 300 {
		m := dynamicpb.NewMessage(md)
		m.Set(f.ByName("order_id"), protoreflect.ValueOfString(fmt.Sprintf("o-%d", i)))
		m.Set(f.ByName("qty"), protoreflect.ValueOfInt32(int32(i)))
		m.Set(f.ByName("price"), protoreflect.ValueOfFloat32(float32(i)+0.5))
		body, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if i%30 == 29 {
			// A price whose 4 bytes are cut to one. (Cutting the marshaled
			// message is no good: field order is not fixed.)
			body, bad[i] = append(body, 0x1d, 0x00), true
		}
		values = append(values, body)
	}
	r.produce(t, 0, values)
	r.start(t)
	r.waitCaughtUp(t)
	rows, cols := r.rows(t)
	if cols[1] != "qty int required" || cols[2] != "price float required" {
		t.Fatalf("columns %v", cols)
	}
	if len(rows) != 300-len(bad) {
		t.Fatalf("%d rows, want %d", len(rows), 300-len(bad))
	}
	for i := range 300 {
		row, ok := rows[fmt.Sprintf("o-%d", i)]
		if ok == bad[i] || ok && (row["qty"] != fmt.Sprint(i) || row["price"] != fmt.Sprintf("%d.5", i)) {
			t.Errorf("order %d: %v (malformed: %v)", i, row, bad[i])
		}
	}
	letters, err := pipeline.ReadDeadLetters(t.Context(), r.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, offs := range letters {
		n += len(offs)
	}
	if n != len(bad) {
		t.Fatalf("%d dead letters, want %d", n, len(bad))
	}
}
