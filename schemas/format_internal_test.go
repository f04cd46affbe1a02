package schemas

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/big"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"
)

// testPayment is one payment, rendered in each format by the helpers below.
type testPayment struct {
	n        int
	country  string // "" = null
	metadata map[string]string
}

func (p testPayment) id() string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", p.n) }
func (p testPayment) cents() int64 {
	return int64(p.n)*1001 - 500
}
func (p testPayment) created() time.Time {
	return time.Date(2024, 11, 1+p.n%28, 10, 0, 0, 123000*p.n%1000000, time.UTC)
}

func (p testPayment) json() []byte {
	country := "null"
	if p.country != "" {
		country = `"` + p.country + `"`
	}
	meta := "null"
	if p.metadata != nil {
		var parts []string
		for _, k := range sortedKeys(p.metadata) {
			parts = append(parts, fmt.Sprintf("%q:%q", k, p.metadata[k]))
		}
		meta = "{" + strings.Join(parts, ",") + "}"
	}
	return fmt.Appendf(nil, `{"payment_id":%q,"amount":"%s","currency":"EUR","status":"SETTLED","created_at":%q,`+
		`"account":{"id":"acct-%d","country":%s,"opened_on":"2020-01-%02d"},"tags":["t%d","x"],"metadata":%s}`,
		p.id(), big.NewRat(p.cents(), 100).FloatString(2), p.created().Format(time.RFC3339Nano), p.n%10, country, 1+p.n%28, p.n%5, meta)
}

// avroValue is the payment as hamba/avro's generic value for the
// schema file's schema.
func (p testPayment) avroValue() map[string]any {
	var country any
	if p.country != "" {
		country = p.country
	}
	var meta any
	if p.metadata != nil {
		m := map[string]any{}
		for k, v := range p.metadata {
			m[k] = v
		}
		meta = map[string]any{"map": m} // hamba's form of a union's non-null branch
	}
	return map[string]any{
		"payment_id": p.id(),
		"amount":     big.NewRat(p.cents(), 100),
		"currency":   "EUR",
		"status":     "SETTLED",
		"created_at": p.created(),
		"account": map[string]any{
			"id": fmt.Sprintf("acct-%d", p.n%10), "country": country,
			"opened_on": time.Date(2020, 1, 1+p.n%28, 0, 0, 0, 0, time.UTC),
		},
		"tags":     []any{fmt.Sprintf("t%d", p.n%5), "x"},
		"metadata": meta,
	}
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	for i := range ks {
		for j := i + 1; j < len(ks); j++ {
			if ks[j] < ks[i] {
				ks[i], ks[j] = ks[j], ks[i]
			}
		}
	}
	return ks
}

func testPayments() []testPayment {
	var ps []testPayment
	for n := range 40 {
		p := testPayment{n: n}
		if n%3 != 0 {
			p.country = "DE"
		}
		if n%2 == 0 {
			p.metadata = map[string]string{"channel": "web"}
		}
		ps = append(ps, p)
	}
	return ps
}

// build appends every value to a fresh builder of sc and returns the batch.
func build(t *testing.T, sc *Schema, values [][]byte) arrow.RecordBatch {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	b := sc.NewRecordBuilder(mem, 0)
	ingested := time.Date(2024, 12, 1, 0, 0, 0, 0, time.UTC)
	for i, v := range values {
		if err := b.Append(v, Meta{Topic: "payments", Partition: 1, Offset: int64(i)}, ingested, ""); err != nil {
			t.Fatalf("value %d: %v", i, err)
		}
	}
	rec := b.NewRecord()
	b.Release()
	t.Cleanup(func() {
		rec.Release()
		mem.AssertSize(t, 0)
	})
	return rec
}

func loadPayments(t *testing.T) *Schema {
	t.Helper()
	sc, err := Lookup("examples/payments.avsc")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestAvroPlainMatchesJSON: payments written as plain Avro with the schema
// file's own schema become exactly the rows their JSON form becomes.
func TestAvroPlainMatchesJSON(t *testing.T) {
	sc := loadPayments(t)
	asc, err := sc.WithFormat(Format{Kind: FormatAvro})
	if err != nil {
		t.Fatal(err)
	}
	var js, av [][]byte
	for _, p := range testPayments() {
		js = append(js, p.json())
		b, err := avro.Marshal(sc.user.avro, p.avroValue())
		if err != nil {
			t.Fatalf("encoding payment %d: %v", p.n, err)
		}
		av = append(av, b)
	}
	want, got := build(t, sc, js), build(t, asc, av)
	if !array.RecordEqual(want, got) {
		for i := range got.NumCols() {
			if !array.Equal(got.Column(int(i)), want.Column(int(i))) {
				t.Errorf("column %s: Avro %v, JSON %v", got.ColumnName(int(i)), got.Column(int(i)), want.Column(int(i)))
			}
		}
		t.Fatal("Avro rows differ from JSON rows")
	}
}

// The registry's writer schema of the payments: fields in another order, a
// field the table does not have (skipped), and no metadata (null).
const paymentsWriterV1 = `{"type":"record","name":"Payment","namespace":"com.example.payments","fields":[
 {"name":"note","type":{"type":"array","items":{"type":"map","values":["null","double"]}}},
 {"name":"created_at","type":{"type":"long","logicalType":"timestamp-micros"}},
 {"name":"payment_id","type":{"type":"string","logicalType":"uuid"}},
 {"name":"amount","type":{"type":"bytes","logicalType":"decimal","precision":18,"scale":2}},
 {"name":"currency","type":"string"},
 {"name":"status","type":{"type":"enum","name":"Status","symbols":["PENDING","AUTHORIZED","SETTLED","FAILED"]}},
 {"name":"account","type":{"type":"record","name":"Account","fields":[
   {"name":"opened_on","type":["null",{"type":"int","logicalType":"date"}]},
   {"name":"id","type":"string"},
   {"name":"country","type":["null","string"]}]}},
 {"name":"tags","type":{"type":"array","items":"string"}}]}`

const paymentsProto = `syntax = "proto3";
package com.example.payments;
import "google/protobuf/timestamp.proto";
message Other { string x = 1; }
message Payment {
  message Account {
    string id = 1;
    optional string country = 2;
    int32 opened_on = 3;
  }
  enum Status { PENDING = 0; AUTHORIZED = 1; SETTLED = 2; FAILED = 3; }
  string payment_id = 1;
  string amount = 2;
  string currency = 3;
  Status status = 4;
  google.protobuf.Timestamp created_at = 5;
  Account account = 6;
  repeated string tags = 7;
  map<string, string> metadata = 8;
  int64 ignored = 9;
}`

func wire(id int, indexes []int, body []byte) []byte {
	b := []byte{0, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(id))
	if indexes != nil {
		b = binary.AppendVarint(b, int64(len(indexes)))
		for _, i := range indexes {
			b = binary.AppendVarint(b, int64(i))
		}
	}
	return append(b, body...)
}

// protoPayment encodes p as the Payment message of fd.
func protoPayment(t testing.TB, md protoreflect.MessageDescriptor, p testPayment) []byte {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	f := md.Fields()
	set := func(name string, v protoreflect.Value) { m.Set(f.ByName(protoreflect.Name(name)), v) }
	set("payment_id", protoreflect.ValueOfString(p.id()))
	set("amount", protoreflect.ValueOfString(big.NewRat(p.cents(), 100).FloatString(2)))
	set("currency", protoreflect.ValueOfString("EUR"))
	set("status", protoreflect.ValueOfEnum(2))
	ts := dynamicpb.NewMessage(f.ByName("created_at").Message())
	ts.Set(ts.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(p.created().Unix()))
	ts.Set(ts.Descriptor().Fields().ByName("nanos"), protoreflect.ValueOfInt32(int32(p.created().Nanosecond())))
	set("created_at", protoreflect.ValueOfMessage(ts))
	acct := dynamicpb.NewMessage(f.ByName("account").Message())
	af := acct.Descriptor().Fields()
	acct.Set(af.ByName("id"), protoreflect.ValueOfString(fmt.Sprintf("acct-%d", p.n%10)))
	if p.country != "" {
		acct.Set(af.ByName("country"), protoreflect.ValueOfString(p.country))
	}
	acct.Set(af.ByName("opened_on"), protoreflect.ValueOfInt32(int32(time.Date(2020, 1, 1+p.n%28, 0, 0, 0, 0, time.UTC).Unix()/86400)))
	set("account", protoreflect.ValueOfMessage(acct))
	tags := m.NewField(f.ByName("tags")).List()
	tags.Append(protoreflect.ValueOfString(fmt.Sprintf("t%d", p.n%5)))
	tags.Append(protoreflect.ValueOfString("x"))
	set("tags", protoreflect.ValueOfList(tags))
	if p.metadata != nil {
		mm := m.NewField(f.ByName("metadata")).Map()
		for k, v := range p.metadata {
			mm.Set(protoreflect.ValueOfString(k).MapKey(), protoreflect.ValueOfString(v))
		}
		set("metadata", protoreflect.ValueOfMap(mm))
	}
	set("ignored", protoreflect.ValueOfInt64(99))
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRegistryFormats reads Avro and Protobuf payments in the Confluent wire
// format with their writer schemas fetched from a registry speaking the
// Confluent REST API over HTTP: the rows equal those of the same payments
// as JSON, and malformed messages, unknown ids and schemas of the wrong
// format are dead letters with their reason.
func TestRegistryFormats(t *testing.T) {
	reg, cl := testRegistry(t)
	ctx := context.Background()
	avroSS, err := cl.CreateSchema(ctx, "payments-avro-value", sr.Schema{Schema: paymentsWriterV1, Type: sr.TypeAvro})
	if err != nil {
		t.Fatal(err)
	}
	protoSS, err := cl.CreateSchema(ctx, "payments-proto-value", sr.Schema{Schema: paymentsProto, Type: sr.TypeProtobuf})
	if err != nil {
		t.Fatal(err)
	}

	sc := loadPayments(t)
	writer := avro.MustParse(paymentsWriterV1)
	fd, err := compileProto(protoSS.ID, paymentsProto)
	if err != nil {
		t.Fatal(err)
	}
	md := fd.Messages().ByName("Payment")
	var js, av, pb [][]byte
	for _, p := range testPayments() {
		v := p.avroValue()
		v["note"] = []any{map[string]any{"a": 1.5, "b": nil}}
		delete(v, "metadata")
		b, err := avro.Marshal(writer, v)
		if err != nil {
			t.Fatalf("encoding payment %d: %v", p.n, err)
		}
		av = append(av, wire(avroSS.ID, nil, b))
		pb = append(pb, wire(protoSS.ID, []int{1}, protoPayment(t, md, p)))
		p.metadata = nil // not in the Avro writer schema
		js = append(js, p.json())
	}
	asc, err := sc.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	if want, got := build(t, sc, js), build(t, asc, av); !array.RecordEqual(want, got) {
		t.Fatalf("Avro rows differ from JSON rows")
	}
	psc, err := sc.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	js = js[:0]
	for _, p := range testPayments() {
		if p.metadata == nil {
			p.metadata = map[string]string{} // a Protobuf map is never null
		}
		js = append(js, p.json())
	}
	if want, got := build(t, sc, js), build(t, psc, pb); !array.RecordEqual(want, got) {
		t.Fatalf("Protobuf rows differ from JSON rows:\n%v\n%v", got, want)
	}
	// A Timestamp's nanos must be below a second: 2147483647 used to be
	// stored as 2.1 s more.
	bad := dynamicpb.NewMessage(md)
	if err := proto.Unmarshal(protoPayment(t, md, testPayments()[0]), bad); err != nil {
		t.Fatal(err)
	}
	created := bad.Get(md.Fields().ByName("created_at")).Message()
	created.Set(created.Descriptor().Fields().ByName("nanos"), protoreflect.ValueOfInt32(math.MaxInt32))
	badBody, err := proto.Marshal(bad)
	if err != nil {
		t.Fatal(err)
	}
	pbb := psc.NewRecordBuilder(nil, 0)
	defer pbb.Release()
	var nanosErr *DecodeError
	if err := pbb.Append(wire(protoSS.ID, []int{1}, badBody), Meta{Topic: "t"}, time.Time{}, ""); !errors.As(err, &nanosErr) || nanosErr.Reason != ReasonInvalidField || nanosErr.Field != "created_at" {
		t.Fatalf("a Timestamp with nanos %d: %v, want invalid_field created_at", math.MaxInt32, err)
	}

	// An incompatible writer schema: amount became a double. By default the
	// partition stops with an error naming the schema id and the field;
	// with on_incompatible: dlq the message is a dead letter.
	v2text := strings.Replace(paymentsWriterV1, `{"type":"bytes","logicalType":"decimal","precision":18,"scale":2}`, `"double"`, 1)
	v2, err := cl.CreateSchema(ctx, "payments-v2-value", sr.Schema{Schema: v2text})
	if err != nil {
		t.Fatal(err)
	}
	v := testPayments()[1].avroValue()
	v["amount"], v["note"] = 5.01, []any{}
	v2body, err := avro.Marshal(avro.MustParse(v2text), v)
	if err != nil {
		t.Fatal(err)
	}
	adlq, err := sc.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	pdlq, err := sc.WithFormat(Format{Kind: FormatProtobuf, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "dlq"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sc    *Schema
		value []byte
		field string
	}{{asc, wire(v2.ID, nil, v2body), "amount"}, {psc, wire(protoSS.ID, []int{0}, []byte{0x0a, 0x01, 'x'}), "payment_id"}} {
		b := c.sc.NewRecordBuilder(nil, 0)
		err := b.Append(c.value, Meta{Topic: "p"}, time.Time{}, "")
		var ie *IncompatibleSchemaError
		if !errors.As(err, &ie) || ie.Field != c.field || !strings.Contains(err.Error(), "is incompatible with the table: field \""+c.field+"\"") || b.Len() != 0 {
			t.Errorf("incompatible writer schema: %v (%d rows), want an IncompatibleSchemaError naming %q", err, b.Len(), c.field)
		}
		b.Release()
	}
	if _, err := sc.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL(), OnIncompatible: "ignore"}}); err == nil || !strings.Contains(err.Error(), "registry.on_incompatible") {
		t.Errorf("on_incompatible ignore: %v", err)
	}

	good := av[0]
	cases := []struct {
		name   string
		sc     *Schema
		value  []byte
		reason string
		field  string
	}{
		{"empty", asc, nil, ReasonMalformedValue, ""},
		{"no magic byte", asc, append([]byte{1}, good[1:]...), ReasonMalformedValue, ""},
		{"short header", asc, good[:4], ReasonMalformedValue, ""},
		{"unknown id", asc, wire(4242, nil, good[5:]), ReasonUnknownSchema, ""},
		{"protobuf id read as avro", asc, pb[0], ReasonUnknownSchema, ""},
		{"avro id read as protobuf", psc, av[0], ReasonUnknownSchema, ""},
		{"truncated avro", asc, good[:len(good)-3], ReasonMalformedValue, "tags[1]"},
		{"trailing bytes", asc, append(append([]byte(nil), good...), 0), ReasonMalformedValue, ""},
		{"truncated protobuf", psc, wire(protoSS.ID, []int{1}, []byte{0x0a, 0x10, 'p'}), ReasonMalformedValue, ""}, // field 1 says 16 bytes, 1 follows
		{"bad message index", psc, wire(protoSS.ID, []int{7}, nil), ReasonUnknownSchema, ""},
		{"protobuf empty message", psc, wire(protoSS.ID, []int{1}, nil), ReasonInvalidField, "amount"}, // "" is no decimal
		{"wrong message type, dlq", pdlq, wire(protoSS.ID, []int{0}, []byte{0x0a, 0x01, 'x'}), ReasonIncompatibleSchema, "payment_id"},
		{"incompatible avro, dlq", adlq, wire(v2.ID, nil, v2body), ReasonIncompatibleSchema, "amount"},
	}
	for _, c := range cases {
		b := c.sc.NewRecordBuilder(nil, 0)
		err := b.Append(c.value, Meta{Topic: "p"}, time.Time{}, "")
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != c.reason || de.Field != c.field {
			t.Errorf("%s: error %v, want %s %q", c.name, err, c.reason, c.field)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d rows appended", c.name, b.Len())
		}
		b.Release()
	}

	// A registry that cannot be reached is not the message's fault: the
	// error is not a DecodeError, so the partition stops instead of
	// dead-lettering.
	down, err := sc.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: "http://127.0.0.1:1", Timeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	b := down.NewRecordBuilder(nil, 0)
	defer b.Release()
	var de *DecodeError
	if err := b.Append(good, Meta{}, time.Time{}, ""); err == nil || errors.As(err, &de) || !strings.Contains(err.Error(), "schema id") {
		t.Fatalf("unreachable registry: %v, want a plain error naming the schema id", err)
	}
}

// TestRegistryAvroSchemaReferences: an Avro writer schema that takes a
// named type from another subject (a schema reference, the registry's way
// to share a record), which takes one from a third, is read like one that
// declares them. floe parsed the schema without its references: every
// message was dead-lettered as unknown_schema, "not a valid Avro schema",
// although the registry had the id and all it refers to.
func TestRegistryAvroSchemaReferences(t *testing.T) {
	reg, cl := testRegistry(t)
	create := func(subject, text string, refs ...sr.SchemaReference) int {
		t.Helper()
		ss, err := cl.CreateSchema(t.Context(), subject, sr.Schema{Schema: text, References: refs})
		if err != nil {
			t.Fatal(err)
		}
		return ss.ID
	}
	const geo = `{"type": "record", "name": "Geo", "namespace": "ex", "fields": [{"name": "lat", "type": "double"}]}`
	const addr = `{"type": "record", "name": "Addr", "namespace": "ex", "fields": [{"name": "street", "type": "string"}, {"name": "geo", "type": "ex.Geo"}]}`
	create("geo", geo)
	create("addr", addr, sr.SchemaReference{Name: "ex.Geo", Subject: "geo", Version: 1})
	id := create("orders-value", `{"type": "record", "name": "Order", "namespace": "ex", "fields": [
	  {"name": "id", "type": "string"}, {"name": "ship", "type": ["null", "ex.Addr"], "default": null}]}`,
		sr.SchemaReference{Name: "ex.Addr", Subject: "addr", Version: 1})

	// The same schema with the types declared in place, as the producer's
	// serializer writes with it.
	full := avro.MustParse(`{"type": "record", "name": "Order", "namespace": "ex", "fields": [{"name": "id", "type": "string"},
	  {"name": "ship", "type": ["null", ` + strings.Replace(addr, `"ex.Geo"`, geo, 1) + `], "default": null}]}`)
	value, err := avro.Marshal(full, map[string]any{"id": "o-1", "ship": map[string]any{"ex.Addr": map[string]any{"street": "Dock 4", "geo": map[string]any{"lat": 1.5}}}})
	if err != nil {
		t.Fatal(err)
	}
	file, err := ParseAvsc("orders", []byte(`{"type": "record", "name": "Order", "fields": [{"name": "id", "type": "string"},
	  {"name": "ship", "type": ["null", {"type": "record", "name": "Ship", "fields": [{"name": "street", "type": "string"},
	    {"name": "geo", "type": {"type": "record", "name": "G", "fields": [{"name": "lat", "type": "double"}]}}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := file.WithFormat(Format{Kind: FormatAvro, Registry: &RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	b := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer b.Release()
	if err := b.Append(wire(id, nil, value), Meta{Topic: "o"}, time.Time{}, ""); err != nil {
		t.Fatalf("a message of schema id %d: %v", id, err)
	}
	rec := b.NewRecord()
	defer rec.Release()
	if row := rec.Column(0).ValueStr(0) + " " + rec.Column(1).ValueStr(0); row != `o-1 {"geo":{"lat":1.5},"street":"Dock 4"}` {
		t.Fatalf("row %q", row)
	}
}

// TestRegistryURLPasswordNotShown: a registry.url refused for its scheme is
// named without its user-info password. Before, the error quoted it as
// given.
func TestRegistryURLPasswordNotShown(t *testing.T) {
	_, err := newRegistry(RegistryConfig{URL: "ftp://floe:s3cret-pw@registry.example.com"})
	if err == nil || strings.Contains(err.Error(), "s3cret-pw") || !strings.Contains(err.Error(), "registry.example.com") {
		t.Errorf("got %v, want registry.url refused without its password", err)
	}
}

// appendFrom decodes one wire-format message of schema id through a
// Clickstream schema reading reg (a registry config), returning the error.
func appendFrom(t *testing.T, reg RegistryConfig, id int) error {
	t.Helper()
	cs, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	sc, err := cs.WithFormat(Format{Kind: FormatAvro, Registry: &reg})
	if err != nil {
		t.Fatal(err)
	}
	b := sc.NewRecordBuilder(nil, 0)
	defer b.Release()
	return b.Append(wire(id, nil, []byte{0}), Meta{Topic: "t"}, time.Time{}, "")
}

// TestSchemaIDPastInt32IsDeadLettered: a Confluent-framed value whose id
// bytes are 0x80000000 or above (plain Avro whose first byte is 0, read as
// the wire format) is an unknown_schema dead letter, the registry not
// asked. Confluent's ids are Java ints: its registry cannot convert such a
// path and answers 404 with error_code 404, not 40403, which floe takes for
// no registry at registry.url, stopping the partition for ever. The handler
// answers as that registry does.
func TestSchemaIDPastInt32IsDeadLettered(t *testing.T) {
	var asked atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked.Add(1)
		w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
		w.WriteHeader(http.StatusNotFound)
		id := strings.TrimPrefix(r.URL.Path, "/schemas/ids/")
		if _, err := strconv.ParseInt(id, 10, 32); err != nil {
			_, _ = w.Write([]byte(`{"error_code":404,"message":"HTTP 404 Not Found"}`))
			return
		}
		_, _ = w.Write([]byte(`{"error_code":40403,"message":"Schema ` + id + ` not found"}`))
	}))
	t.Cleanup(srv.Close)
	for _, id := range []int{1 << 31, 0xFFFFFFFF, 7} {
		err := appendFrom(t, RegistryConfig{URL: srv.URL}, id)
		var de *DecodeError
		if !errors.As(err, &de) || de.Reason != ReasonUnknownSchema {
			t.Errorf("schema id %d: %v; want an unknown_schema dead letter, not a stopped partition", id, err)
		}
	}
	if n := asked.Load(); n != 1 {
		t.Errorf("the registry was asked %d times, want once (for id 7)", n)
	}
}

// TestRegistryErrorsHideCredentials: a registry (or the proxy in front of
// it) whose refusal echoes the Authorization it got, in a JSON message or
// a plain body, fails the message without the password, the token or the
// Basic value in the error, which is cut to a snippet. Before, sr's error
// (the message, or the whole body) was wrapped as it came into the error
// that stops the partition and is logged at every retry.
func TestRegistryErrorsHideCredentials(t *testing.T) {
	const secret = "sr-s3cret-pa55word"
	reg := srfake.New()
	t.Cleanup(reg.Close)
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		echo := "rejected " + r.Header.Get("Authorization") + " " + strings.Repeat("padding ", 100)
		if user, pass, ok := r.BasicAuth(); ok {
			echo += " (" + user + ":" + pass + ")"
		}
		if strings.Contains(r.URL.Path, "/schemas/ids/1") {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(echo))
			return true
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_ = json.NewEncoder(w).Encode(map[string]any{"error_code": 40301, "message": echo})
		return true
	})
	withUser := strings.Replace(reg.URL(), "http://", "http://floe:"+secret+"@", 1)
	for _, c := range []RegistryConfig{
		{URL: reg.URL(), BasicAuth: "floe:" + secret},
		{URL: reg.URL(), BearerToken: secret},
		{URL: withUser},
	} {
		for _, id := range []int{1, 2} { // a plain body, a JSON message
			err := appendFrom(t, c, id)
			if err == nil || !strings.Contains(err.Error(), "rejected") {
				t.Fatalf("schema id %d: got %v, want the registry's refusal", id, err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), base64.StdEncoding.EncodeToString([]byte("floe:"+secret))) {
				t.Errorf("schema id %d: a credential is in the error: %v", id, err)
			}
			if len(err.Error()) > 400 {
				t.Errorf("schema id %d: an error of %d bytes, want a snippet of the answer", id, len(err.Error()))
			}
		}
	}
}

// TestRegistryRedirectNotFollowed: a registry that redirects elsewhere
// (here another port of the same host, which net/http treats as the same
// host) fails the message with an error naming the target redacted, and
// the target receives nothing. Before, sr's client followed it with the
// Authorization of basic_auth or bearer_token.
func TestRegistryRedirectNotFollowed(t *testing.T) {
	const secret = "sr-s3cret-pa55word"
	var leaked atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		leaked.Store(r.Header.Get("Authorization"))
		http.NotFound(w, r)
	}))
	t.Cleanup(other.Close)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		http.Redirect(w, r, other.URL+r.URL.Path+"?sig="+secret, http.StatusTemporaryRedirect)
		return true
	})
	for _, c := range []RegistryConfig{
		{URL: reg.URL(), BasicAuth: "floe:" + secret},
		{URL: reg.URL(), BearerToken: secret},
	} {
		err := appendFrom(t, c, 7)
		if err == nil || !strings.Contains(err.Error(), `Get "`+other.URL+`/schemas/ids/7?sig=REDACTED": redirect not followed`) {
			t.Errorf("got %v, want the redirect to %s refused", err, other.URL)

		}
		if err != nil && strings.Contains(err.Error(), secret) {
			t.Errorf("the error holds a secret: %v", err)
		}
	}
	if got := leaked.Load(); got != nil {
		t.Errorf("the redirect's target got a request (Authorization %q)", got)
	}
}

// notFoundAnswers are 404s for a schema: a schema registry's (with its
// error code, which srfake and Confluent's registry send) and three that
// did not come from one — an nginx proxy's page, an ingress's default
// backend, and a JSON error of another service (a Spring Boot app at a
// wrong path prefix) without error_code.
var notFoundAnswers = []struct {
	name, ctype, body string
	registry          bool
}{
	{"registry", "application/vnd.schemaregistry.v1+json", `{"error_code":40403,"message":"Schema 1 not found"}`, true},
	{"nginx html", "text/html", "<html>\r\n<head><title>404 Not Found</title></head>\r\n<body>\r\n<center><h1>404 Not Found</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n", false},
	{"ingress default backend", "text/plain", "default backend - 404", false},
	{"json without error_code", "application/json", `{"timestamp":"2024-11-29T06:00:00Z","status":404,"error":"Not Found","path":"/wrong-prefix/schemas/ids/1"}`, false},
}

// TestRegistry404NotFromRegistryStopsPartition: a 404 for a schema id or
// a schema's reference is the registry's "not found" (an unknown_schema
// dead letter) only with Confluent's error code (40401, 40402, 40403). A
// 404 without one — a proxy or an ingress without a route to the registry
// during a redeploy, a wrong path prefix in registry.url — did not come
// from a registry and says nothing of the schema: it stops the partition
// (an error that is not a *DecodeError, retried) and says so, naming the
// URL without its password. Before, every good record was dead-lettered as
// unknown_schema.
func TestRegistry404NotFromRegistryStopsPartition(t *testing.T) {
	const secret = "sr-s3cret-pa55word"
	check := func(t *testing.T, err error, registry bool, url string) {
		t.Helper()
		var de *DecodeError
		if registry {
			if !errors.As(err, &de) || de.Reason != ReasonUnknownSchema {
				t.Fatalf("the registry's not found: %v, want unknown_schema", err)
			}
			return
		}
		if errors.As(err, &de) {
			t.Fatalf("a good record is dead-lettered: %s %q (the registry was never reached)", de.Reason, de.Detail)
		}
		if err == nil || !strings.Contains(err.Error(), "did not come from a schema registry") || !strings.Contains(err.Error(), url) {
			t.Fatalf("got %v, want an error saying the 404 from %s did not come from a schema registry", err, url)
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the error holds the password: %v", err)
		}
	}
	t.Run("schema id", func(t *testing.T) {
		for _, a := range notFoundAnswers {
			t.Run(a.name, func(t *testing.T) {
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					w.Header().Set("Content-Type", a.ctype)
					w.WriteHeader(http.StatusNotFound)
					_, _ = w.Write([]byte(a.body))
				}))
				t.Cleanup(srv.Close)
				withUser := strings.Replace(srv.URL, "http://", "http://floe:"+secret+"@", 1)
				err := appendFrom(t, RegistryConfig{URL: withUser + "/wrong-prefix"}, 1)
				check(t, err, a.registry, strings.Replace(srv.URL, "http://", "http://floe:REDACTED@", 1)+"/wrong-prefix/schemas/ids/1")
			})
		}
	})
	t.Run("reference", func(t *testing.T) {
		for _, a := range notFoundAnswers {
			t.Run(a.name, func(t *testing.T) {
				reg, cl := testRegistry(t)
				ss, err := cl.CreateSchema(t.Context(), "geo", sr.Schema{Schema: `{"type":"record","name":"Geo","namespace":"ex","fields":[{"name":"lat","type":"double"}]}`})
				if err != nil {
					t.Fatal(err)
				}
				ss, err = cl.CreateSchema(t.Context(), "w", sr.Schema{Schema: `{"type":"record","name":"R","namespace":"ex","fields":[{"name":"geo","type":"ex.Geo"}]}`,
					References: []sr.SchemaReference{{Name: "ex.Geo", Subject: "geo", Version: 1}}})
				if err != nil {
					t.Fatal(err)
				}
				reg.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
					if !strings.HasPrefix(r.URL.Path, "/subjects/") {
						return false
					}
					w.Header().Set("Content-Type", a.ctype)
					w.WriteHeader(http.StatusNotFound)
					_, _ = w.Write([]byte(strings.Replace(a.body, "40403", "40401", 1))) // subject not found
					return true
				})
				sc := registryAvro(t, reg, `{"type":"record","name":"R","fields":[{"name":"geo","type":{"type":"record","name":"G","fields":[{"name":"lat","type":"double"}]}}]}`)
				b := sc.NewRecordBuilder(nil, 0)
				defer b.Release()
				err = b.Append(wire(ss.ID, nil, make([]byte, 8)), Meta{Topic: "t"}, time.Time{}, "")
				check(t, err, a.registry, reg.URL()+"/subjects/geo/versions/1")
			})
		}
	})
}

// TestRegistryInsecureCredentialsWarned: registry credentials sent over
// plain http are warned about, naming none of them; over https, or without
// credentials, nothing is. Before, nothing was.
func TestRegistryInsecureCredentialsWarned(t *testing.T) {
	for _, tc := range []struct {
		c    RegistryConfig
		warn bool
	}{
		{RegistryConfig{URL: "http://registry:8081", BasicAuth: "floe:s3cret"}, true},
		{RegistryConfig{URL: "http://registry:8081", BearerToken: "s3cret"}, true},
		{RegistryConfig{URL: "http://floe:s3cret@registry:8081"}, true},
		{RegistryConfig{URL: "https://registry:8081", BasicAuth: "floe:s3cret"}, false},
		{RegistryConfig{URL: "http://registry:8081"}, false},
	} {
		var buf bytes.Buffer
		tc.c.WarnInsecure(slog.New(slog.NewTextHandler(&buf, nil)))
		if got := strings.Contains(buf.String(), "plain http"); got != tc.warn || strings.Contains(buf.String(), "s3cret") {
			t.Errorf("%+v: logged %q, want a warning: %v", tc.c, buf.String(), tc.warn)
		}
	}
}
