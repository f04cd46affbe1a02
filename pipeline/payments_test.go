package pipeline_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// payment returns the i-th test payment as JSON, and whether it is good.
// Every 25th has an amount with three decimals (invalid for decimal(18, 2));
// every 40th lacks its currency.
func payment(i int) (value []byte, good bool) {
	amount := fmt.Sprintf(`"%d.%02d"`, i*7, i%100)
	if i%25 == 24 {
		amount = `"1.234"`
	}
	currency := `"currency":"EUR",`
	if i%40 == 39 {
		currency = ""
	}
	meta := `null`
	if i%2 == 0 {
		meta = fmt.Sprintf(`{"channel":"web","attempt":"%d"}`, i%3)
	}
	v := fmt.Sprintf(`{"payment_id":"00000000-0000-4000-8000-%012d","amount":%s,%s"status":"SETTLED",`+
		`"created_at":"2024-11-%02dT10:00:00.000123Z","account":{"id":"acct-%d","country":"DE","opened_on":"2020-01-02"},`+
		`"tags":["t%d","x"],"metadata":%s}`, i, amount, currency, 1+i%28, i%10, i%5, meta)
	return []byte(v), i%25 != 24 && i%40 != 39
}

// avroPayment is payment i as the value hamba/avro encodes with the
// payments schema file's Avro schema, and whether it is good: every 25th is
// cut short and every 40th names a schema id the registry lacks.
func avroPayment(t *testing.T, w avro.Schema, id, i int) ([]byte, bool) {
	t.Helper()
	var meta any
	if i%2 == 0 {
		meta = map[string]any{"map": map[string]any{"channel": "web", "attempt": fmt.Sprint(i % 3)}}
	}
	v := map[string]any{
		"payment_id": fmt.Sprintf("00000000-0000-4000-8000-%012d", i),
		"amount":     big.NewRat(int64(i*7*100+i%100), 100),
		"currency":   "EUR",
		"status":     "SETTLED",
		"created_at": time.Date(2024, 11, 1+i%28, 10, 0, 0, 123000, time.UTC),
		"account": map[string]any{"id": fmt.Sprintf("acct-%d", i%10), "country": "DE",
			"opened_on": time.Date(2020, 1, 2, 0, 0, 0, 0, time.UTC)},
		"tags":     []any{fmt.Sprintf("t%d", i%5), "x"},
		"metadata": meta,
	}
	body, err := avro.Marshal(w, v)
	if err != nil {
		t.Fatalf("encoding payment %d: %v", i, err)
	}
	if i%40 == 39 {
		id = 9999
	}
	out := binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
	if i%25 == 24 {
		body = body[:len(body)/2]
	}
	return append(out, body...), i%25 != 24 && i%40 != 39
}

// TestPaymentsEndToEnd runs the payments example schema through a member:
// payments on a kfake topic become typed Iceberg columns (uuid, decimal,
// timestamp, struct, list, map), and bad ones dead letters; as JSON, and
// as Avro in the Confluent wire format with the writer schema in a registry
// that speaks the Confluent REST API.
func TestPaymentsEndToEnd(t *testing.T) {
	t.Run("json", func(t *testing.T) {
		var values [][]byte
		var good []bool
		for i := range paymentCount {
			v, ok := payment(i)
			values, good = append(values, v), append(good, ok)
		}
		runPayments(t, values, good, "json", nil)
	})
	t.Run("avro-registry", func(t *testing.T) {
		reg := srfake.New()
		t.Cleanup(reg.Close)
		text, err := os.ReadFile(filepath.Join("..", "schemas", "examples", "payments.avsc"))
		if err != nil {
			t.Fatal(err)
		}
		cl, err := sr.NewClient(sr.URLs(reg.URL()))
		if err != nil {
			t.Fatal(err)
		}
		ss, err := cl.CreateSchema(t.Context(), "payments-value", sr.Schema{Schema: string(text)})
		if err != nil {
			t.Fatal(err)
		}
		w := avro.MustParse(string(text))
		var values [][]byte
		var good []bool
		for i := range paymentCount {
			v, ok := avroPayment(t, w, ss.ID, i)
			values, good = append(values, v), append(good, ok)
		}
		runPayments(t, values, good, "avro", &schemas.RegistryConfig{URL: reg.URL()})
	})
	t.Run("protobuf-registry", func(t *testing.T) {
		reg := srfake.New()
		t.Cleanup(reg.Close)
		cl, err := sr.NewClient(sr.URLs(reg.URL()))
		if err != nil {
			t.Fatal(err)
		}
		ss, err := cl.CreateSchema(t.Context(), "payments-value", sr.Schema{Schema: paymentsProto, Type: sr.TypeProtobuf})
		if err != nil {
			t.Fatal(err)
		}
		md := compilePayment(t)
		var values [][]byte
		var good []bool
		for i := range paymentCount {
			v, ok := protoPayment(t, md, ss.ID, i)
			values, good = append(values, v), append(good, ok)
		}
		runPayments(t, values, good, "protobuf", &schemas.RegistryConfig{URL: reg.URL()})
	})
}

// paymentsProto is the producers' Protobuf schema of the payments; Payment
// is the second message, so the wire format carries message index [1].
const paymentsProto = `syntax = "proto3";
package com.example.payments;
import "google/protobuf/timestamp.proto";
message Refund { string payment_id = 1; }
message Payment {
  message Account {
    string id = 1;
    optional string country = 2;
    int32 opened_on = 3;
  }
  string payment_id = 1;
  string amount = 2;
  string currency = 3;
  string status = 4;
  google.protobuf.Timestamp created_at = 5;
  Account account = 6;
  repeated string tags = 7;
  map<string, string> metadata = 8;
}`

func compilePayment(t *testing.T) protoreflect.MessageDescriptor {
	t.Helper()
	c := protocompile.Compiler{Resolver: protocompile.WithStandardImports(&protocompile.SourceResolver{
		Accessor: protocompile.SourceAccessorFromMap(map[string]string{"payments.proto": paymentsProto}),
	})}
	files, err := c.Compile(t.Context(), "payments.proto")
	if err != nil {
		t.Fatal(err)
	}
	return files[0].Messages().ByName("Payment")
}

// protoPayment is payment i as a Protobuf Payment in the Confluent wire
// format, and whether it is good: every 25th is cut short and every 40th
// names a schema id the registry lacks.
func protoPayment(t *testing.T, md protoreflect.MessageDescriptor, id, i int) ([]byte, bool) {
	t.Helper()
	m := dynamicpb.NewMessage(md)
	f := md.Fields()
	str := func(msg *dynamicpb.Message, name, v string) {
		msg.Set(msg.Descriptor().Fields().ByName(protoreflect.Name(name)), protoreflect.ValueOfString(v))
	}
	str(m, "payment_id", fmt.Sprintf("00000000-0000-4000-8000-%012d", i))
	str(m, "amount", big.NewRat(int64(i*7*100+i%100), 100).FloatString(2))
	str(m, "currency", "EUR")
	str(m, "status", "SETTLED")
	ts := dynamicpb.NewMessage(f.ByName("created_at").Message())
	created := time.Date(2024, 11, 1+i%28, 10, 0, 0, 123000, time.UTC)
	ts.Set(ts.Descriptor().Fields().ByName("seconds"), protoreflect.ValueOfInt64(created.Unix()))
	ts.Set(ts.Descriptor().Fields().ByName("nanos"), protoreflect.ValueOfInt32(int32(created.Nanosecond())))
	m.Set(f.ByName("created_at"), protoreflect.ValueOfMessage(ts))
	acct := dynamicpb.NewMessage(f.ByName("account").Message())
	str(acct, "id", fmt.Sprintf("acct-%d", i%10))
	str(acct, "country", "DE")
	acct.Set(acct.Descriptor().Fields().ByName("opened_on"), protoreflect.ValueOfInt32(int32(time.Date(2020, 1, 2, 0, 0, 0, 0, time.UTC).Unix()/86400)))
	m.Set(f.ByName("account"), protoreflect.ValueOfMessage(acct))
	tags := m.NewField(f.ByName("tags")).List()
	tags.Append(protoreflect.ValueOfString(fmt.Sprintf("t%d", i%5)))
	tags.Append(protoreflect.ValueOfString("x"))
	m.Set(f.ByName("tags"), protoreflect.ValueOfList(tags))
	if i%2 == 0 {
		mm := m.NewField(f.ByName("metadata")).Map()
		mm.Set(protoreflect.ValueOfString("channel").MapKey(), protoreflect.ValueOfString("web"))
		mm.Set(protoreflect.ValueOfString("attempt").MapKey(), protoreflect.ValueOfString(fmt.Sprint(i%3)))
		m.Set(f.ByName("metadata"), protoreflect.ValueOfMap(mm))
	}
	body, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if i%40 == 39 {
		id = 9999
	}
	if i%25 == 24 {
		body = body[:len(body)/2]
	}
	out := binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
	out = binary.AppendVarint(out, 1) // one message index:
	out = binary.AppendVarint(out, 1) // the second message, Payment
	return append(out, body...), i%25 != 24 && i%40 != 39
}

const paymentCount = 600

// runPayments produces values to a payments topic, runs a member with the
// payments schema in format until it has caught up, and checks the table
// and the dead letters against payment(i)'s data.
func runPayments(t *testing.T, values [][]byte, good []bool, format string, registry *schemas.RegistryConfig) {
	ctx := t.Context()
	cl, err := embedded.Start(1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	if err := cl.CreateTopic(ctx, "payments", 2); err != nil {
		t.Fatal(err)
	}
	n := len(values)
	var msgs []clickgen.Message
	wantSum, wantGood := new(big.Int), 0
	for i, v := range values {
		msgs = append(msgs, clickgen.Message{Key: fmt.Appendf(nil, "acct-%d", i%10), Value: v})
		if good[i] {
			wantGood++
			wantSum.Add(wantSum, big.NewInt(int64(i*7*100+i%100)))
		}
	}
	if _, err := cl.Produce(ctx, "payments", msgs); err != nil {
		t.Fatal(err)
	}
	end, err := cl.EndOffsets(ctx, "payments")
	if err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	cfg := pipeline.Config{
		Kafka: pipeline.KafkaConfig{Brokers: cl.Addrs(), Topic: "payments", Group: "g",
			SessionTimeout: pipeline.Duration(6 * time.Second), HeartbeatInterval: pipeline.Duration(250 * time.Millisecond),
			RebalanceTimeout: pipeline.Duration(10 * time.Second)},
		Schema:   filepath.Join("..", "schemas", "examples", "payments.avsc"),
		Format:   format,
		Registry: registry,
		Table: pipeline.TableConfig{Name: "fin.payments", Catalog: map[string]string{
			"type": "sql", "uri": "file:" + filepath.Join(dir, "c.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
			"warehouse": "file://" + filepath.Join(dir, "wh")}},
		Commit: pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)},
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	sc, err := schemas.Lookup(cfg.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := lakehouse.Open(ctx, lakehouse.Config{Table: cfg.Table.Name, Catalog: cfg.Table.Catalog, Group: "g"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	m, err := pipeline.NewMember(cfg, tbl, sc)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})

	deadline := time.Now().Add(60 * time.Second)
	for {
		wm, err := tbl.Watermarks(ctx)
		if err != nil {
			t.Fatal(err)
		}
		caught := true
		for p, o := range end {
			if w, _ := wm.Get("payments", p); w < o {
				caught = false
			}
		}
		if caught {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up within 60s: %v, want %v", wm, end)
		}
		time.Sleep(50 * time.Millisecond)
	}

	it, err := tbl.Load(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := it.Schema().Fields(); len(got) != len(sc.Iceberg.Fields()) || got[1].Type.String() != "decimal(18, 2)" {
		t.Fatalf("table columns %v", it.Schema())
	}
	_, batches, err := it.Scan().ToArrowRecords(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rows, sum := 0, new(big.Int)
	seen := map[string]bool{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		col := func(name string) arrow.Array { return b.Column(b.Schema().FieldIndices(name)[0]) }
		ids := col("payment_id").(*array.String)
		amounts := col("amount").(*array.Decimal128)
		account := col("account").(*array.Struct)
		tags := col("tags").(*array.List)
		meta := col("metadata").(*array.Map)
		created := col("created_at").(*array.Timestamp)
		for i := range int(b.NumRows()) {
			rows++
			id := ids.Value(i)
			seen[id] = true
			sum.Add(sum, amounts.Value(i).BigInt())
			var n int
			fmt.Sscanf(id[24:], "%d", &n)
			if got, want := account.ValueStr(i), fmt.Sprintf(`{"country":"DE","id":"acct-%d","opened_on":"2020-01-02"}`, n%10); got != want {
				t.Errorf("payment %d account = %s, want %s", n, got, want)
			}
			if got, want := tags.ValueStr(i), fmt.Sprintf(`["t%d","x"]`, n%5); got != want {
				t.Errorf("payment %d tags = %s, want %s", n, got, want)
			}
			// Avro maps carry no order: either order of the two entries.
			ms, a, c := meta.ValueStr(i), fmt.Sprintf(`{"key":"attempt","value":"%d"}`, n%3), `{"key":"channel","value":"web"}`
			// A Protobuf map is never null: absent is empty.
			noMeta := !meta.IsNull(i) && (format != "protobuf" || ms != "[]")
			if n%2 == 1 && noMeta || n%2 == 0 && ms != "["+c+","+a+"]" && ms != "["+a+","+c+"]" {
				t.Errorf("payment %d metadata = %s", n, meta.ValueStr(i))
			}
			if got, want := created.Value(i).ToTime(arrow.Microsecond).UTC(), time.Date(2024, 11, 1+n%28, 10, 0, 0, 123000, time.UTC); !got.Equal(want) {
				t.Errorf("payment %d created_at = %s, want %s", n, got, want)
			}
		}
		b.Release()
	}
	if rows != wantGood || len(seen) != wantGood || sum.Cmp(wantSum) != 0 {
		t.Fatalf("%d rows, %d distinct payments, amounts sum to %s cents; want %d, %d, %s", rows, len(seen), sum, wantGood, wantGood, wantSum)
	}
	letters, err := pipeline.ReadDeadLetters(ctx, cfg.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	dead := 0
	for _, offs := range letters {
		dead += len(offs)
	}
	if dead != n-wantGood {
		t.Fatalf("%d dead letters, want %d", dead, n-wantGood)
	}
}
