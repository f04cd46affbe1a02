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
		{`{"type":"fixed","name":"Z","size":0}`, `{"type":"array","items":"bytes"}`}, // a table's fixed holds a byte at least
	} {
		t.Run(tc.items, func(t *testing.T) {
			reg, cl := testRegistry(t)
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

// TestAvroItemsCountedInSizeBytes: SizeBytes, which commit.max_bytes bounds
// a member's memory with, counts the list elements an Avro message's items
// become. It counted their bytes in the message, which an item of null or
// an empty record does not take: a 9-byte message of 65,536 nulls held
// 0.5 MB of list elements and counted 57 bytes, so nothing but
// max_records stopped a window holding gigabytes.
func TestAvroItemsCountedInSizeBytes(t *testing.T) {
	zeros := binary.AppendVarint(nil, 4096)
	zeros = append(zeros, make([]byte, 4096+1)...) // 4,096 longs of 0, one byte each
	empty := []byte{0}
	for range 200 { // each block's count: the bytes after its header
		empty = append(binary.AppendVarint(nil, int64(len(empty))), empty...)
	}
	for _, tc := range []struct {
		name, items, table string
		body               []byte
	}{
		{"nulls", `"null"`, `["null","long"]`, append(binary.AppendVarint(nil, maxZeroSizeItems), 0)},
		{"empty records", `{"type":"record","name":"E","fields":[]}`,
			`{"type":"record","name":"E","fields":[{"name":"a","type":["null","long"]},{"name":"b","type":["null","double"]}]}`,
			empty},
		{"one-byte longs", `"long"`, `"long"`, zeros},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg, cl := testRegistry(t)
			id := register(t, cl, "w", `{"type":"record","name":"R","fields":[{"name":"xs","type":{"type":"array","items":`+tc.items+`}}]}`, sr.TypeAvro)
			sc := registryAvro(t, reg, `{"type":"record","name":"R","fields":[{"name":"xs","type":{"type":"array","items":`+tc.table+`}}]}`)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			b := sc.NewRecordBuilder(mem, 0)
			defer b.Release()
			msg := wire(id, nil, tc.body)
			for i := range 50 {
				if err := b.Append(msg, Meta{Topic: "t", Offset: int64(i)}, time.Time{}, ""); err != nil {
					t.Fatal(err)
				}
			}
			// Arrow builders double their buffers as they grow.
			if held, size := mem.CurrentAlloc(), b.SizeBytes(); held > 3*size {
				t.Fatalf("50 messages of %d bytes hold %d bytes; SizeBytes counts %d", len(msg), held, size)
			}
		})
	}
}

// TestAvroItemsFillBuilder: a message whose items would take a list's
// elements past the 2^31 that its int32 offsets address is refused with
// ErrBuilderFull, to be appended after a flush. Only the string bytes were
// bounded, and null items take none.
func TestAvroItemsFillBuilder(t *testing.T) {
	reg, cl := testRegistry(t)
	id := register(t, cl, "w", `{"type":"record","name":"R","fields":[{"name":"xs","type":{"type":"array","items":"null"}}]}`, sr.TypeAvro)
	sc := registryAvro(t, reg, `{"type":"record","name":"R","fields":[{"name":"xs","type":{"type":"array","items":["null","boolean"]}}]}`)
	b := sc.NewRecordBuilder(nil, 0)
	defer b.Release()
	msg := wire(id, nil, append(binary.AppendVarint(nil, maxZeroSizeItems), 0))
	if err := b.Append(msg, Meta{Topic: "t"}, time.Time{}, ""); err != nil {
		t.Fatal(err)
	}
	// As if the batch held 2^31 - 2^16 elements already (appending them
	// would take minutes).
	b.(*genericBuilder).strBytes = maxStringBytes - maxZeroSizeItems
	if err := b.Append(msg, Meta{Topic: "t", Offset: 1}, time.Time{}, ""); !errors.Is(err, ErrBuilderFull) {
		t.Fatalf("appending %d more elements: %v, want ErrBuilderFull", maxZeroSizeItems, err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if rec.NumRows() != 1 {
		t.Fatalf("the batch holds %d rows, want 1", rec.NumRows())
	}
}

// TestUnknownSchemaIDAskedAgain: an id the registry did not have yet (a
// producer registering it just after, a replica lagging) is asked for
// again once unknownRetry has passed, instead of dead-lettering its
// messages until a restart.
func TestUnknownSchemaIDAskedAgain(t *testing.T) {
	reg, cl := testRegistry(t)
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

// TestUnknownSchemaIDsBounded: the ids a registry did not have are kept
// until asked again, at most maxUnknownIDs of them: values that only look
// framed carry ids without end, and every one was kept for the life of the
// process (20,000 garbage records: 20,000 entries). Expired ones make room.
func TestUnknownSchemaIDsBounded(t *testing.T) {
	reg, _ := testRegistry(t)
	r, err := newRegistry(RegistryConfig{URL: reg.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer func(d time.Duration) { unknownRetry = d }(unknownRetry)
	unknownRetry = time.Hour
	for id := range maxUnknownIDs + 100 {
		ws, err := r.get(1_000_000+id, FormatAvro)
		if err != nil || ws.err == nil || ws.err.Reason != ReasonUnknownSchema {
			t.Fatalf("id %d: %v, %v; want unknown_schema", id, ws, err)
		}
	}
	if len(r.byID) > maxUnknownIDs || r.unknown != len(r.byID) {
		t.Fatalf("%d ids kept (%d counted unknown), want at most %d", len(r.byID), r.unknown, maxUnknownIDs)
	}
	for _, ws := range r.byID {
		ws.retryAt = time.Now().Add(-time.Second) // expired
	}
	if _, err := r.get(2_000_000, FormatAvro); err != nil {
		t.Fatal(err)
	}
	if len(r.byID) != 1 || r.unknown != 1 {
		t.Fatalf("after the others expired: %d ids kept (%d counted unknown), want the new one", len(r.byID), r.unknown)
	}
}

// TestWrongLengthBytesIsTheRecords: a bytes value of the wrong length for a
// uuid or fixed column is one record's fault (invalid_field, dead-lettered),
// not the writer schema's (incompatible_schema stopped the partition by
// default, at one bad value); a writer fixed of another size still is.
func TestWrongLengthBytesIsTheRecords(t *testing.T) {
	reg, cl := testRegistry(t)
	sc := registryAvro(t, reg, `{"type":"record","name":"R","fields":[`+
		`{"name":"id","type":{"type":"fixed","name":"U","size":16,"logicalType":"uuid"}},`+
		`{"name":"fx","type":{"type":"fixed","name":"F","size":4}}]}`)
	b := sc.NewRecordBuilder(nil, 0)
	defer b.Release()
	bytesID := register(t, cl, "bytes", `{"type":"record","name":"R","fields":[{"name":"id","type":"bytes"},{"name":"fx","type":"bytes"}]}`, sr.TypeAvro)
	fixedID := register(t, cl, "fixed", `{"type":"record","name":"R","fields":[{"name":"id","type":"bytes"},{"name":"fx","type":{"type":"fixed","name":"F","size":3}}]}`, sr.TypeAvro)
	value := func(idLen int, fx []byte) []byte { // Avro: a zigzag length, then the bytes
		v := binary.AppendVarint(nil, int64(idLen))
		v = append(v, make([]byte, idLen)...)
		return append(v, fx...)
	}
	for _, tc := range []struct {
		name   string
		msg    []byte
		reason string
		field  string
	}{
		{"uuid of 15 bytes", wire(bytesID, nil, value(15, append(binary.AppendVarint(nil, 4), 1, 2, 3, 4))), ReasonInvalidField, "id"},
		{"fixed(4) of 3 bytes", wire(bytesID, nil, value(16, append(binary.AppendVarint(nil, 3), 1, 2, 3))), ReasonInvalidField, "fx"},
	} {
		err := b.Append(tc.msg, Meta{Topic: "t"}, time.Time{}, "")
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != tc.reason || de.Field != tc.field {
			t.Errorf("%s: %v, want %s %s", tc.name, err, tc.reason, tc.field)
		}
	}
	// Every value of this writer's field has the wrong size: the schema's
	// fault, which stops the partition by default.
	var ie *IncompatibleSchemaError
	if err := b.Append(wire(fixedID, nil, value(16, []byte{1, 2, 3})), Meta{Topic: "t"}, time.Time{}, ""); !errors.As(err, &ie) {
		t.Errorf("a writer fixed(3) for fixed(4): %v, want an incompatible writer schema", err)
	}
	if err := b.Append(wire(bytesID, nil, value(16, append(binary.AppendVarint(nil, 4), 1, 2, 3, 4))), Meta{Topic: "t"}, time.Time{}, ""); err != nil {
		t.Fatalf("the right lengths: %v", err)
	}
}

// registryAvro is the schema of the Avro record schema avsc, decoding the
// Confluent wire format with reg's writer schemas.
func registryAvro(t *testing.T, reg *srfake.Registry, avsc string) *Schema {
	t.Helper()
	tbl, err := ParseAvsc("t", []byte(avsc))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := tbl.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// testRegistry starts a fake schema registry until t ends, and a client of it.
func testRegistry(t *testing.T) (*srfake.Registry, *sr.Client) {
	t.Helper()
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return reg, cl
}

// TestWriterFieldNamedLikeARenamedColumn: a writer field named like a
// column that stores another field (clickstream's event_ts, whose source
// is ts) asks for no column (it used to ask to add event_ts at every
// round, the table unchanged, until the partition stopped); the writer
// schema is judged as any other: it lacks the required ts, an incompatible
// schema (here dead-lettered, on_incompatible: dlq).
func TestWriterFieldNamedLikeARenamedColumn(t *testing.T) {
	reg, cl := testRegistry(t)
	writer := `{"type":"record","name":"Click","fields":[{"name":"session_id","type":"string"},{"name":"event_type","type":"string"},
	  {"name":"event_ts","type":{"type":"long","logicalType":"timestamp-millis"}}]}`
	id := register(t, cl, "w", writer, sr.TypeAvro)
	cs, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := cs.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	b := sc.Evolving().NewRecordBuilder(nil, 0)
	defer b.Release()
	// session_id "s", event_type "e", event_ts 0
	err = b.Append(wire(id, nil, []byte{2, 's', 2, 'e', 0}), Meta{Topic: "t"}, time.Time{}, "")
	var req *EvolveRequest
	var de *DecodeError
	if errors.As(err, &req) || !errors.As(err, &de) || de.Reason != ReasonIncompatibleSchema || de.Field != "ts" {
		t.Fatalf("append: %v (an evolve request: %v), want ts incompatible", err, req != nil)
	}
}
