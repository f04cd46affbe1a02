package pipeline_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go/table"
	"github.com/bufbuild/protocompile"
	"github.com/hamba/avro/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	cl, err := embedded.StartTopic(ctx, "payments", 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
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
	letters, err := pipeline.ReadDeadLetters(ctx, cfg.Kafka, nil)
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

// retriedPayment is payment i as JSON, always valid: one a minute from
// 2024-11-01T10:00Z on.
func retriedPayment(i int) []byte {
	created := time.Date(2024, 11, 1, 10, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Minute)
	return fmt.Appendf(nil, `{"payment_id":"00000000-0000-4000-8000-%012d","amount":"%d.00","currency":"EUR",`+
		`"status":"SETTLED","created_at":%q,"account":{"id":"acct-%d"},"tags":[]}`, i, i, created.Format(time.RFC3339), i%10)
}

// landed is where a produced message went.
type landed struct {
	partition int32
	offset    int64
}

// produceByKey writes msgs in one Produce call per key, in order, so that
// it learns each message's partition and offset, and each key's partition.
func produceByKey(t *testing.T, cl *embedded.Cluster, topic string, msgs []clickgen.Message, keyPart map[string]int32) []landed {
	t.Helper()
	byKey := map[string][]int{}
	var keys []string
	for i, m := range msgs {
		k := string(m.Key)
		if byKey[k] == nil {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], i)
	}
	out := make([]landed, len(msgs))
	for _, k := range keys {
		batch := make([]clickgen.Message, len(byKey[k]))
		for j, i := range byKey[k] {
			batch[j] = msgs[i]
		}
		got, err := cl.Produce(t.Context(), topic, batch)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 {
			t.Fatalf("key %s landed in %d partitions", k, len(got))
		}
		for p, offs := range got {
			keyPart[k] = p
			for j, i := range byKey[k] {
				out[i] = landed{p, offs[j]}
			}
		}
	}
	return out
}

// runDedupeMember runs a member until the returned stop is called (stop waits
// for it to flush, commit and leave).
func runDedupeMember(t *testing.T, cfg pipeline.Config, tbl *lakehouse.Table, sc *schemas.Schema) (*pipeline.Member, func()) {
	t.Helper()
	m, err := pipeline.NewMember(cfg, tbl, sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(stop)
	return m, stop
}

// waitTopicCaughtUp waits until the table's watermarks reach the topic's end
// offsets.
func waitTopicCaughtUp(t *testing.T, cl *embedded.Cluster, tbl *lakehouse.Table, topic string) {
	t.Helper()
	end, err := cl.EndOffsets(t.Context(), topic)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		wm, err := tbl.Watermarks(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		caught := true
		for p, o := range end {
			if w, _ := wm.Get(topic, p); w < o {
				caught = false
			}
		}
		if caught {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up within 60s: %v, want %v", wm, end)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dedupeJob is a job on a fresh kfake topic of two partitions and a fresh
// SQLite catalog, flushing every 40 records.
func dedupeJob(t *testing.T, topic, schema string, dd *pipeline.DedupeConfig) (*embedded.Cluster, pipeline.Config, *lakehouse.Table, *schemas.Schema) {
	t.Helper()
	cl, err := embedded.StartTopic(t.Context(), topic, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	dir := t.TempDir()
	cfg := pipeline.Config{
		Kafka: pipeline.KafkaConfig{Brokers: cl.Addrs(), Topic: topic, Group: "g",
			SessionTimeout: pipeline.Duration(6 * time.Second), HeartbeatInterval: pipeline.Duration(250 * time.Millisecond),
			RebalanceTimeout: pipeline.Duration(10 * time.Second)},
		Schema: schema,
		Table: pipeline.TableConfig{Name: "fin." + topic, Catalog: map[string]string{
			"type": "sql", "uri": "file:" + filepath.Join(dir, "c.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
			"warehouse": "file://" + filepath.Join(dir, "wh")}},
		Commit: pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond), MaxRecords: 40},
		Dedupe: dd,
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	sc, err := schemas.Lookup(cfg.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: cfg.Table.Name, Catalog: cfg.Table.Catalog, Group: "g"}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	return cl, cfg, tbl, sc
}

// columnCounts reads column col of the table independently of floe:
// value → rows.
func columnCounts(t *testing.T, tbl *lakehouse.Table, col string) map[string]int {
	t.Helper()
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := it.Scan(table.WithSelectedFields(col)).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		ids := b.Column(0).(*array.String)
		for i := range ids.Len() {
			got[ids.Value(i)]++
		}
		b.Release()
	}
	return got
}

// TestPaymentsRetriedProducerDedupe is the payments scenario of the
// business-key MERGE: a producer that retries sends some payments twice at
// two offsets of one partition, and some again in the other partition under
// another message key, across several flushes and a member restart. The
// table holds each payment_id once, the skipped count equals the retried
// copies, and verify finds no duplicate business key — until a copy is
// inserted behind floe's back.
func TestPaymentsRetriedProducerDedupe(t *testing.T) {
	const n = 600
	cl, cfg, tbl, sc := dedupeJob(t, "payments", filepath.Join("..", "schemas", "examples", "payments.avsc"), nil)
	keyOf := func(i int) []byte { return fmt.Appendf(nil, "acct-%d", i%10) }
	keyPart := map[string]int32{}
	copies := 0
	// Phase 1: payments 0-299, every 7th retried at once (same key, next
	// offsets of its partition).
	var msgs []clickgen.Message
	retryOf0 := -1 // the index of payment 0's retried copy
	for i := range n / 2 {
		msgs = append(msgs, clickgen.Message{Key: keyOf(i), Value: retriedPayment(i)})
		if i%7 == 0 {
			if i == 0 {
				retryOf0 = len(msgs)
			}
			msgs = append(msgs, clickgen.Message{Key: keyOf(i), Value: retriedPayment(i)})
			copies++
		}
	}
	at := produceByKey(t, cl, "payments", msgs, keyPart)
	retry0 := at[retryOf0]
	otherKey := func(i int) []byte {
		for k := range 10 {
			if keyPart[fmt.Sprintf("acct-%d", k)] != keyPart[string(keyOf(i))] {
				return fmt.Appendf(nil, "acct-%d", k)
			}
		}
		t.Fatalf("all account keys hash to partition %d", keyPart[string(keyOf(i))])
		return nil
	}

	a, stopA := runDedupeMember(t, cfg, tbl, sc)
	waitTopicCaughtUp(t, cl, tbl, "payments")
	stopA()

	// Phase 2, while no member runs: payments 300-599 with the same
	// retries, every 11th payment of phase 1 and every 13th of phase 2
	// again in the other partition (another message key).
	msgs = nil
	for i := range n / 2 {
		if i%11 == 0 {
			msgs = append(msgs, clickgen.Message{Key: otherKey(i), Value: retriedPayment(i)})
			copies++
		}
	}
	for i := n / 2; i < n; i++ {
		msgs = append(msgs, clickgen.Message{Key: keyOf(i), Value: retriedPayment(i)})
		if i%7 == 0 {
			msgs = append(msgs, clickgen.Message{Key: keyOf(i), Value: retriedPayment(i)})
			copies++
		}
		if i%13 == 0 {
			msgs = append(msgs, clickgen.Message{Key: otherKey(i), Value: retriedPayment(i)})
			copies++
		}
	}
	produceByKey(t, cl, "payments", msgs, keyPart)
	b, stopB := runDedupeMember(t, cfg, tbl, sc)
	waitTopicCaughtUp(t, cl, tbl, "payments")
	stopB()

	ids := columnCounts(t, tbl, "payment_id")
	if len(ids) != n {
		t.Fatalf("%d distinct payment ids, want %d", len(ids), n)
	}
	for id, c := range ids {
		if c != 1 {
			t.Errorf("payment %s: %d rows, want 1", id, c)
		}
	}
	skipped := a.Stats().BusinessDuplicates.Load() + b.Stats().BusinessDuplicates.Load()
	rows := a.Stats().Rows.Load() + b.Stats().Rows.Load()
	if int(skipped) != copies || rows != n || a.Stats().Commits.Load() < 3 || b.Stats().Commits.Load() < 3 {
		t.Fatalf("skipped %d business duplicates, committed %d rows in %d + %d commits; want %d, %d, several",
			skipped, rows, a.Stats().Commits.Load(), b.Stats().Commits.Load(), copies, n)
	}
	dl, err := pipeline.ReadDeadLetters(t.Context(), cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := tbl.Verify(t.Context(), "payments", dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.DedupeKey != "payment_id" || rep.DuplicateKeys != 0 || rep.DistinctKeys != n || rep.BusinessSkipped != int64(copies) {
		var out strings.Builder
		rep.WriteText(&out)
		t.Fatalf("verify: duplicate keys %d, distinct %d, skipped %d (want 0, %d, %d):\n%s", rep.DuplicateKeys, rep.DistinctKeys, rep.BusinessSkipped, n, copies, out.String())
	}

	// A replay of everything committed inserts nothing, and accounts for
	// every record: the retried copies are business-key duplicates (its
	// summary left them out, so read was more than it accounted for).
	wm, err := tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var ranges []pipeline.ReplayRange
	for p, w := range wm["payments"] {
		ranges = append(ranges, pipeline.ReplayRange{Partition: p, From: 0, To: w})
	}
	replayed, err := pipeline.Replay(t.Context(), cfg, tbl, sc, ranges, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if replayed.Inserted != 0 || replayed.BusinessDuplicates != int64(copies) ||
		replayed.Read != replayed.Skipped+replayed.BusinessDuplicates+replayed.DeadLettered {
		t.Fatalf("replay of the committed ranges: %+v; want nothing inserted, %d business-key duplicates, every record read accounted for", replayed, copies)
	}

	// Maintenance expires the flushes' snapshots, which recorded the
	// skipped offsets: they stay covered.
	time.Sleep(20 * time.Millisecond)
	mrep, err := tbl.Maintain(t.Context(), lakehouse.MaintainOptions{MinInputFiles: 2, ExpireOlderThan: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if int64(mrep.SnapshotsExpired) < a.Stats().Commits.Load() {
		t.Fatalf("maintenance expired %d snapshots, want at least member a's %d flushes", mrep.SnapshotsExpired, a.Stats().Commits.Load())
	}
	if rep, err = tbl.Verify(t.Context(), "payments", dl.Read); err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.BusinessSkipped != int64(copies) {
		var out strings.Builder
		rep.WriteText(&out)
		t.Fatalf("verify after expiring %d snapshots: skipped %d, want %d:\n%s", mrep.SnapshotsExpired, rep.BusinessSkipped, copies, out.String())
	}

	// Behind floe's back: payment 0's retried copy, which floe skipped, is
	// written at its own coordinates by a writer that does not dedupe (a
	// replay with the business-key MERGE off).
	id0 := "00000000-0000-4000-8000-000000000000"
	bld := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
	defer bld.Release()
	if err := bld.Append(retriedPayment(0), schemas.Meta{Topic: "payments", Partition: retry0.partition, Offset: retry0.offset, Timestamp: time.Now()}, time.Now(), "off"); err != nil {
		t.Fatal(err)
	}
	saved := tbl.Dedupe()
	if err := tbl.SetDedupe(lakehouse.Dedupe{}); err != nil {
		t.Fatal(err)
	}
	res, err := tbl.Commit(t.Context(), []lakehouse.Part{{Range: lakehouse.Range{Topic: "payments", Partition: retry0.partition,
		From: retry0.offset, To: retry0.offset + 1}, Resume: lakehouse.Replay, Rows: bld.NewRecord()}})
	if err != nil || res.Rows != 1 {
		t.Fatalf("writing the copy: %d rows, %v", res.Rows, err)
	}
	if err := tbl.SetDedupe(saved); err != nil {
		t.Fatal(err)
	}
	rep, err = tbl.Verify(t.Context(), "payments", dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("%s (payments/%d@%d, payments/%d@%d)", id0, at[0].partition, at[0].offset, retry0.partition, retry0.offset)
	if rep.OK() || rep.DuplicateKeys != 1 || rep.DuplicateIDs != 0 || len(rep.DuplicateKeyExamples) != 1 || rep.DuplicateKeyExamples[0] != want {
		t.Fatalf("verify after a copy behind floe's back: OK %v, duplicate keys %d, duplicate ids %d, examples %v; want false, 1, 0, [%s]",
			rep.OK(), rep.DuplicateKeys, rep.DuplicateIDs, rep.DuplicateKeyExamples, want)
	}
}

// TestClickstreamEventIDDedupe: with `dedupe: {key: event_id}` the
// clickstream's event repeated at a later offset becomes one row.
func TestClickstreamEventIDDedupe(t *testing.T) {
	cl, cfg, tbl, sc := dedupeJob(t, "clicks", "clickstream", &pipeline.DedupeConfig{Key: "event_id"})
	var msgs []clickgen.Message
	ev := func(i, seq int) clickgen.Message {
		return clickgen.Message{Key: fmt.Appendf(nil, "s-%d", i%4), Value: fmt.Appendf(nil,
			`{"event_id":"e-%d","session_id":"s-%d","event_type":"click","ts":%d,"seq":%d}`, i, i%4, 1732860000000+int64(i), seq)}
	}
	for i := range 100 {
		msgs = append(msgs, ev(i, i))
	}
	for i := range 10 { // the producer resends e-0 .. e-9
		msgs = append(msgs, ev(i, 100+i))
	}
	if _, err := cl.Produce(t.Context(), "clicks", msgs); err != nil {
		t.Fatal(err)
	}
	m, stop := runDedupeMember(t, cfg, tbl, sc)
	waitTopicCaughtUp(t, cl, tbl, "clicks")
	stop()
	ids := columnCounts(t, tbl, "event_id")
	if len(ids) != 100 {
		t.Fatalf("%d distinct event ids, want 100", len(ids))
	}
	for id, c := range ids {
		if c != 1 {
			t.Errorf("event %s: %d rows", id, c)
		}
	}
	if got := m.Stats().BusinessDuplicates.Load(); got != 10 {
		t.Fatalf("skipped %d business duplicates, want 10", got)
	}
	reg := prometheus.NewRegistry()
	if err := m.Stats().Register(reg); err != nil {
		t.Fatal(err)
	}
	want := `# HELP floe_business_duplicates_skipped_total Rows the business-key MERGE skipped: their dedupe key was already in the table or earlier in the flush.
# TYPE floe_business_duplicates_skipped_total counter
floe_business_duplicates_skipped_total 10
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "floe_business_duplicates_skipped_total"); err != nil {
		t.Fatal(err)
	}
	rep, err := tbl.Verify(t.Context(), "clicks", lakehouse.DeadLetters{}.Read)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.DedupeKey != "event_id" || rep.DuplicateKeys != 0 || rep.BusinessSkipped != 10 {
		t.Fatalf("verify: OK %v, key %q, duplicate keys %d, skipped %d", rep.OK(), rep.DedupeKey, rep.DuplicateKeys, rep.BusinessSkipped)
	}
}

// TestDedupeForRejectsKeyWithoutPresence: a numeric dedupe key that plain
// Protobuf values may leave unset (a proto3 scalar without optional, which
// decodes as 0) is refused at configuration, naming the key; with optional
// it is accepted.
func TestDedupeForRejectsKeyWithoutPresence(t *testing.T) {
	base, err := schemas.ParseAvsc("r.avsc", []byte(`{"type":"record","name":"R","fields":[
		{"name":"id","type":"string"},{"name":"n","type":"long"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.Config{Dedupe: &pipeline.DedupeConfig{Key: "n"}}
	for _, c := range []struct{ decl, want string }{
		{"int64", `dedupe.key: column "n": field n of message R has no presence`},
		{"optional int64", ""},
	} {
		file := filepath.Join(t.TempDir(), "r.proto")
		if err := os.WriteFile(file, []byte("syntax = \"proto3\";\nmessage R {\n  string id = 1;\n  "+c.decl+" n = 2;\n}\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		sc, err := base.WithFormat(schemas.Format{Kind: schemas.FormatProtobuf, Proto: &schemas.ProtoConfig{File: file, Message: "R"}})
		if err != nil {
			t.Fatal(err)
		}
		d, err := cfg.DedupeFor(sc)
		switch {
		case c.want == "" && (err != nil || d.Key != "n"):
			t.Errorf("%s: DedupeFor = %+v, %v; want key n", c.decl, d, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: DedupeFor error %v, want %q", c.decl, err, c.want)
		}
	}
}
