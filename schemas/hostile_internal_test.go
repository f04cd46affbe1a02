package schemas

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// TestAvroItemsBounded: items that take no bytes (null, an empty record, a
// fixed of size 0) cannot make a small message hold millions of list
// elements, block after block: a 306-byte message used to become 6.5
// million elements (35 MB), a 6 KB one 8.8 million; now each is refused as
// malformed with next to nothing allocated.
func TestAvroItemsBounded(t *testing.T) {
	for _, tc := range []struct{ items, table string }{
		{`"null"`, `{"type":"array","items":["null","string"]}`},
		{`{"type":"record","name":"E","fields":[]}`, `{"type":"array","items":{"type":"record","name":"E","fields":[{"name":"a","type":["null","int"]}]}}`},
		{`{"type":"fixed","name":"Z","size":0}`, `{"type":"array","items":{"type":"fixed","name":"Z","size":0}}`},
	} {
		t.Run(tc.items, func(t *testing.T) {
			reg := srfake.New()
			t.Cleanup(reg.Close)
			cl, err := sr.NewClient(sr.URLs(reg.URL()))
			if err != nil {
				t.Fatal(err)
			}
			id := register(t, cl, "w", `{"type":"record","name":"R","fields":[{"name":"xs","type":{"type":"array","items":`+tc.items+`}}]}`, sr.TypeAvro)
			tbl, err := ParseAvsc("t", []byte(`{"type":"record","name":"R","fields":[{"name":"xs","type":`+tc.table+`}]}`))
			if err != nil {
				t.Fatal(err)
			}
			sc, err := tbl.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "dlq"}})
			if err != nil {
				t.Fatal(err)
			}
			var body []byte
			if tc.items == `"null"` {
				for range 100 { // blocks of 65,536 nulls
					body = binary.AppendVarint(body, 65536)
				}
				body = append(body, 0)
			} else {
				body = []byte{0}
				for range 3000 { // each block's count: the bytes after its header
					body = append(binary.AppendVarint(nil, int64(len(body))), body...)
				}
			}
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			b := sc.NewRecordBuilder(mem, 0)
			defer b.Release()
			err = b.Append(wire(id, nil, body), Meta{Topic: "t"}, time.Time{}, "")
			var de *DecodeError
			if !errors.As(err, &de) || de.Reason != ReasonMalformedValue {
				t.Fatalf("a %d-byte message: %v, want it malformed", len(body), err)
			}
			if n := mem.CurrentAlloc(); n > 1<<20 {
				t.Fatalf("refusing it left %d bytes allocated", n)
			}
		})
	}
}

// TestUnknownSchemaIDAskedAgain: an id the registry did not have yet (a
// producer registering it just after, a replica lagging) is asked for
// again once unknownRetry has passed, instead of dead-lettering its
// messages until a restart.
func TestUnknownSchemaIDAskedAgain(t *testing.T) {
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := ParseAvsc("t", []byte(`{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := tbl.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { unknownRetry = d }(unknownRetry)
	unknownRetry = 0 // asked again at once
	b := sc.NewRecordBuilder(nil, 0)
	defer b.Release()
	body := []byte{2, 'x'} // {"s": "x"}
	var de *DecodeError
	if err := b.Append(wire(1, nil, body), Meta{Topic: "t"}, time.Time{}, ""); !errors.As(err, &de) || de.Reason != ReasonUnknownSchema {
		t.Fatalf("before the id is registered: %v, want unknown_schema", err)
	}
	if id := register(t, cl, "w", `{"type":"record","name":"R","fields":[{"name":"s","type":"string"}]}`, sr.TypeAvro); id != 1 {
		t.Fatalf("registered as id %d, want 1", id)
	}
	if err := b.Append(wire(1, nil, body), Meta{Topic: "t"}, time.Time{}, ""); err != nil {
		t.Fatalf("once registered: %v", err)
	}
	if b.Len() != 1 {
		t.Fatalf("%d rows, want 1", b.Len())
	}
}
