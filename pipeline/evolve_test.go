package pipeline_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
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

// The table's schema file, and the producers' writer schemas: v2 adds an
// optional coupon, v3 also widens qty to long and price to double, and
// bad changes qty to a string.
const (
	ordersAvsc = `{"type": "record", "name": "Order", "namespace": "ex", "floe.key": "order_id", "fields": [
	  {"name": "order_id", "type": "string"},
	  {"name": "qty", "type": "int"},
	  {"name": "price", "type": "float"}]}`
	ordersAvroV2 = `{"type": "record", "name": "Order", "namespace": "ex", "fields": [
	  {"name": "order_id", "type": "string"},
	  {"name": "qty", "type": "int"},
	  {"name": "price", "type": "float"},
	  {"name": "coupon", "type": ["null", "string"], "default": null}]}`
	ordersAvroV3 = `{"type": "record", "name": "Order", "namespace": "ex", "fields": [
	  {"name": "order_id", "type": "string"},
	  {"name": "qty", "type": "long"},
	  {"name": "price", "type": "double"},
	  {"name": "coupon", "type": ["null", "string"], "default": null}]}`
	ordersAvroBad = `{"type": "record", "name": "Order", "namespace": "ex", "fields": [
	  {"name": "order_id", "type": "string"},
	  {"name": "qty", "type": "string"},
	  {"name": "price", "type": "float"}]}`
	ordersProtoV1 = `syntax = "proto3";
package ex;
message Order { string order_id = 1; int32 qty = 2; float price = 3; }`
	ordersProtoV2 = `syntax = "proto3";
package ex;
message Order { string order_id = 1; int64 qty = 2; double price = 3; string coupon = 4; }`
)

// evolveRig is a kfake topic "orders", a schema registry, a SQLite catalog
// and a member writing the orders table with the orders schema file.
type evolveRig struct {
	cl     *embedded.Cluster
	src    *sr.Client
	cfg    pipeline.Config
	tbl    *lakehouse.Table
	member *pipeline.Member
	log    *lockedBuffer
	done   chan error
	cancel context.CancelFunc
}

func newEvolveRig(t *testing.T, format, onIncompatible string, partitions int) *evolveRig {
	t.Helper()
	ctx := t.Context()
	cl, err := embedded.StartTopic(ctx, "orders", partitions)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	src, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "orders.avsc")
	if err := os.WriteFile(path, []byte(ordersAvsc), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.Config{
		Kafka: pipeline.KafkaConfig{Brokers: cl.Addrs(), Topic: "orders", Group: "g",
			SessionTimeout: pipeline.Duration(6 * time.Second), HeartbeatInterval: pipeline.Duration(250 * time.Millisecond),
			RebalanceTimeout: pipeline.Duration(10 * time.Second)},
		Schema:   path,
		Format:   format,
		Registry: &schemas.RegistryConfig{URL: reg.URL(), OnIncompatible: onIncompatible},
		Table: pipeline.TableConfig{Name: "shop.orders", Catalog: map[string]string{
			"type": "sql", "uri": "file:" + filepath.Join(dir, "c.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
			"warehouse": "file://" + filepath.Join(dir, "wh")}},
		// Long enough that the records of a burst are buffered together:
		// the rows of the old schema are still in the builder when the
		// first record of the new one arrives.
		Commit: pipeline.CommitConfig{Interval: pipeline.Duration(time.Second)},
	}
	if format == "json" {
		cfg.Registry = nil
	}
	if format == "protobuf-plain" {
		proto := filepath.Join(dir, "orders.proto")
		if err := os.WriteFile(proto, []byte(ordersProtoV1), 0o644); err != nil {
			t.Fatal(err)
		}
		cfg.Format, cfg.Registry, cfg.Proto = "protobuf", nil, &schemas.ProtoConfig{File: proto, Message: "ex.Order"}
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
	log := &lockedBuffer{}
	m, err := pipeline.NewMember(cfg, tbl, sc, pipeline.WithLogger(slog.New(slog.NewTextHandler(log, nil))))
	if err != nil {
		t.Fatal(err)
	}
	return &evolveRig{cl: cl, src: src, cfg: cfg, tbl: tbl, member: m, log: log}
}

// lockedBuffer is a log destination the member's goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// register adds a writer schema under its own subject and returns its id.
func (r *evolveRig) register(t *testing.T, subject, text string, typ sr.SchemaType) int {
	t.Helper()
	ss, err := r.src.CreateSchema(t.Context(), subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatal(err)
	}
	return ss.ID
}

// produce writes values; value i is order o-<from+i>, keyed over the
// partitions.
func (r *evolveRig) produce(t *testing.T, from int, values [][]byte) {
	t.Helper()
	var msgs []clickgen.Message
	for i, v := range values {
		msgs = append(msgs, clickgen.Message{Key: fmt.Appendf(nil, "k-%d", (from+i)%7), Value: v})
	}
	if _, err := r.cl.Produce(t.Context(), "orders", msgs); err != nil {
		t.Fatal(err)
	}
}

// avroV1ThenV2 registers the three Avro writer schemas, produces orders
// [0, 200) with v1 and [200, 400) with v2 (coupon), and runs the member
// until it has committed them; it returns the ids of v2 and v3.
func (r *evolveRig) avroV1ThenV2(t *testing.T) (v2, v3 int) {
	t.Helper()
	v1 := r.register(t, "v1", ordersAvsc, sr.TypeAvro)
	v2 = r.register(t, "v2", ordersAvroV2, sr.TypeAvro)
	v3 = r.register(t, "v3", ordersAvroV3, sr.TypeAvro)
	r.produce(t, 0, avroOrders(t, ordersAvsc, v1, 0, 200))
	r.produce(t, 200, avroOrders(t, ordersAvroV2, v2, 200, 400))
	r.start(t)
	r.waitCaughtUp(t)
	return v2, v3
}

func (r *evolveRig) start(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done, m := make(chan error, 1), r.member
	r.done, r.cancel = done, cancel
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

// waitCaughtUp waits until the table's watermarks reach the topic's end,
// failing if the member stops first.
func (r *evolveRig) waitCaughtUp(t *testing.T) {
	t.Helper()
	end, err := r.cl.EndOffsets(t.Context(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		wm, err := r.tbl.Watermarks(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		caught := true
		for p, o := range end {
			if w, _ := wm.Get("orders", p); w < o {
				caught = false
			}
		}
		if caught {
			return
		}
		select {
		case err := <-r.done:
			t.Fatalf("the member stopped (%v) before catching up: %v, want %v", err, wm, end)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("not caught up within 60s: %v, want %v", wm, end)
		}
	}
}

// rows reads the table: order id → column → value, checking that no Kafka
// offset is there twice.
func (r *evolveRig) rows(t *testing.T) (map[string]map[string]string, []string) {
	t.Helper()
	it, err := r.tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var cols []string
	for _, f := range it.Schema().Fields() {
		req := ""
		if f.Required {
			req = " required"
		}
		cols = append(cols, f.Name+" "+f.Type.String()+req)
	}
	_, batches, err := it.Scan().ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]string{}
	offsets := map[[2]int64]bool{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		for i := range int(b.NumRows()) {
			row := map[string]string{}
			for c, f := range b.Schema().Fields() {
				row[f.Name] = "null"
				if !b.Column(c).IsNull(i) {
					row[f.Name] = b.Column(c).ValueStr(i)
				}
			}
			p := b.Column(b.Schema().FieldIndices("_kafka_partition")[0]).(*array.Int32).Value(i)
			o := b.Column(b.Schema().FieldIndices("_kafka_offset")[0]).(*array.Int64).Value(i)
			if offsets[[2]int64{int64(p), o}] {
				t.Errorf("offset %d/%d is in the table twice", p, o)
			}
			offsets[[2]int64{int64(p), o}] = true
			out[row["order_id"]] = row
		}
		b.Release()
	}
	return out, cols
}

func wire(id int, body []byte, protoIndex bool) []byte {
	out := binary.BigEndian.AppendUint32([]byte{0}, uint32(id))
	if protoIndex {
		out = binary.AppendVarint(out, 0) // the first message
	}
	return append(out, body...)
}

// avroOrders encodes orders [from, to) with writer schema text and id;
// wide orders carry qty << 33 (past 32 bits) as a long.
func avroOrders(t *testing.T, text string, id, from, to int) [][]byte {
	t.Helper()
	w := avro.MustParse(text)
	wide := strings.Contains(text, `"long"`)
	var out [][]byte
	for i := from; i < to; i++ {
		v := map[string]any{"order_id": fmt.Sprintf("o-%d", i)}
		switch {
		case strings.Contains(text, `"qty", "type": "string"`):
			v["qty"], v["price"] = fmt.Sprint(i), float32(i)+0.5
		case wide:
			v["qty"], v["price"] = int64(i)<<33, float64(i)+0.25
		default:
			v["qty"], v["price"] = i, float32(i)+0.5
		}
		if strings.Contains(text, "coupon") {
			v["coupon"] = fmt.Sprintf("c-%d", i)
		}
		body, err := avro.Marshal(w, v)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, wire(id, body, false))
	}
	return out
}

// checkOrders checks n orders: coupon null before couponFrom, qty and
// price of the writer schema each was written with.
func checkOrders(t *testing.T, rows map[string]map[string]string, n, couponFrom, wideFrom int) {
	t.Helper()
	if len(rows) != n {
		t.Fatalf("%d orders in the table, want %d", len(rows), n)
	}
	for i := range n {
		r := rows[fmt.Sprintf("o-%d", i)]
		qty, price, coupon := fmt.Sprint(i), fmt.Sprintf("%d.5", i), "null"
		if i >= wideFrom {
			qty, price = fmt.Sprint(int64(i)<<33), fmt.Sprintf("%d.25", i)
		}
		if i >= couponFrom {
			coupon = fmt.Sprintf("c-%d", i)
		}
		if r == nil || r["qty"] != qty || r["price"] != price || r["coupon"] != coupon {
			t.Errorf("order %d = %v, want qty %s, price %s, coupon %s", i, r, qty, price, coupon)
		}
	}
}

const evolvedColumns = "order_id string required, qty long required, price double required, coupon string, _kafka_topic string required"

// TestEvolveAvroMidStream: Avro producers switch, mid-stream, to a writer
// schema with a new optional field, then to one that widens int → long and
// float → double. Without a restart the member evolves the table: coupon
// appears as a column (rows before it null, after it the values), qty
// becomes long and price double with every value intact, and every offset
// is in the table exactly once — including the rows that were buffered
// under the old schema when the new one arrived.
func TestEvolveAvroMidStream(t *testing.T) {
	r := newEvolveRig(t, "avro", "", 2)
	_, v3 := r.avroV1ThenV2(t)
	rows, cols := r.rows(t)
	if got := strings.Join(cols[:5], ", "); got != "order_id string required, qty int required, price float required, coupon string, _kafka_topic string required" {
		t.Fatalf("columns after v2: %s", got)
	}
	checkOrders(t, rows, 400, 200, 400)

	r.produce(t, 400, avroOrders(t, ordersAvroV3, v3, 400, 600))
	r.waitCaughtUp(t)
	rows, cols = r.rows(t)
	if got := strings.Join(cols[:5], ", "); got != evolvedColumns {
		t.Fatalf("columns after v3: %s", got)
	}
	checkOrders(t, rows, 600, 200, 400)
	if s := r.member.Stats(); s.DeadLettered.Load() != 0 {
		t.Errorf("%d dead letters, want 0", s.DeadLettered.Load())
	}
}

// TestReplayEvolvesAsTheLiveJob: a replay ahead of the live job (a
// backfill) of records whose writer schema the live job evolved the table
// for (coupon), then of records that need another evolution (qty long,
// price double), keeps every value: the replay builds rows with the
// table's columns, not only the schema file's, and evolves the table as
// the live job would. It used to store coupon as null, and refuse the
// wider types.
func TestReplayEvolvesAsTheLiveJob(t *testing.T) {
	r := newEvolveRig(t, "avro", "", 1)
	v2, v3 := r.avroV1ThenV2(t)
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	r.done <- nil // for the cleanup

	r.produce(t, 400, avroOrders(t, ordersAvroV2, v2, 400, 500))
	r.produce(t, 500, avroOrders(t, ordersAvroV3, v3, 500, 600))
	file, err := schemas.Lookup(r.cfg.Schema) // the schema file, without coupon
	if err != nil {
		t.Fatal(err)
	}
	res, err := pipeline.Replay(t.Context(), r.cfg, r.tbl, file, []pipeline.ReplayRange{{Partition: 0, From: 400, To: 600}},
		pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if err != nil || res.Inserted != 200 || res.DeadLettered != 0 {
		t.Fatalf("replay: %+v, %v; want 200 inserted", res, err)
	}
	rows, cols := r.rows(t)
	if got := strings.Join(cols[:5], ", "); got != evolvedColumns {
		t.Fatalf("columns after the replay: %s", got)
	}
	checkOrders(t, rows, 600, 200, 500)
}

// TestEvolveProtobufMidStream: the same with Protobuf producers, whose v2
// message adds coupon and widens qty to int64 and price to double in one
// step.
func TestEvolveProtobufMidStream(t *testing.T) {
	r := newEvolveRig(t, "protobuf", "", 2)
	var values [][]byte
	for v, text := range []string{ordersProtoV1, ordersProtoV2} {
		id := r.register(t, fmt.Sprint("p", v), text, sr.TypeProtobuf)
		c := protocompile.Compiler{Resolver: &protocompile.SourceResolver{
			Accessor: protocompile.SourceAccessorFromMap(map[string]string{"o.proto": text}),
		}}
		files, err := c.Compile(t.Context(), "o.proto")
		if err != nil {
			t.Fatal(err)
		}
		md := files[0].Messages().ByName("Order")
		f := md.Fields()
		for i := v * 200; i < v*200+200; i++ {
			m := dynamicpb.NewMessage(md)
			m.Set(f.ByName("order_id"), protoreflect.ValueOfString(fmt.Sprintf("o-%d", i)))
			if v == 0 {
				m.Set(f.ByName("qty"), protoreflect.ValueOfInt32(int32(i)))
				m.Set(f.ByName("price"), protoreflect.ValueOfFloat32(float32(i)+0.5))
			} else {
				m.Set(f.ByName("qty"), protoreflect.ValueOfInt64(int64(i)<<33))
				m.Set(f.ByName("price"), protoreflect.ValueOfFloat64(float64(i)+0.25))
				m.Set(f.ByName("coupon"), protoreflect.ValueOfString(fmt.Sprintf("c-%d", i)))
			}
			body, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			values = append(values, wire(id, body, true))
		}
	}
	r.produce(t, 0, values)
	r.start(t)
	r.waitCaughtUp(t)
	rows, cols := r.rows(t)
	if got := strings.Join(cols[:5], ", "); got != evolvedColumns {
		t.Fatalf("columns after v2: %s", got)
	}
	checkOrders(t, rows, 400, 200, 200)
}

// TestEvolveIncompatibleChange: a writer schema that turns qty into a
// string is not a promotion. By default the partition stops at its first
// such record, with an error naming the field and both types, and nothing
// from that offset on is committed; with on_incompatible: dlq those
// records are dead letters and the rest are rows. No row is written with
// another type.
func TestEvolveIncompatibleChange(t *testing.T) {
	for _, mode := range []string{"stop", "dlq"} {
		t.Run(mode, func(t *testing.T) {
			r := newEvolveRig(t, "avro", mode, 1)
			v1 := r.register(t, "v1", ordersAvsc, sr.TypeAvro)
			bad := r.register(t, "bad", ordersAvroBad, sr.TypeAvro)
			r.produce(t, 0, avroOrders(t, ordersAvsc, v1, 0, 100))
			r.produce(t, 100, avroOrders(t, ordersAvroBad, bad, 100, 120))
			r.produce(t, 120, avroOrders(t, ordersAvsc, v1, 120, 140))
			r.start(t)
			if mode == "stop" {
				// The partition stops at offset 100: the member commits
				// what precedes it, logs the error and holds the
				// partition, retrying in place, without leaving the
				// generation (a rejoin would fail on the same record
				// again: a rebalance storm).
				want := `field \"qty\": the writer's string cannot be stored in a column of type int`
				deadline := time.Now().Add(60 * time.Second)
				for !strings.Contains(r.log.String(), want) || r.member.Stats().Commits.Load() == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("no stop naming qty, string and int within 60s; log:\n%s", r.log.String())
					}
					time.Sleep(50 * time.Millisecond)
				}
				time.Sleep(2 * time.Second) // a retry that must not get further
				if g := r.member.Stats().Generations.Load(); g != 1 {
					t.Fatalf("%d generations: the stopped partition made the member rejoin", g)
				}
				// Held (between retries) most of the time.
				for held := time.Now().Add(10 * time.Second); r.member.Stats().StoppedPartitions.Load() != 1; {
					if time.Now().After(held) {
						t.Fatal("the partition is not held as stopped")
					}
					time.Sleep(10 * time.Millisecond)
				}
				wm, err := r.tbl.Watermarks(t.Context())
				if err != nil {
					t.Fatal(err)
				}
				if w, _ := wm.Get("orders", 0); w != 100 {
					t.Fatalf("watermark %d, want 100: the incompatible record's offset", w)
				}
				rows, _ := r.rows(t)
				if len(rows) != 100 {
					t.Fatalf("%d rows, want the 100 before the incompatible record", len(rows))
				}
				for i := range 100 {
					if row := rows[fmt.Sprintf("o-%d", i)]; row == nil || row["qty"] != fmt.Sprint(i) {
						t.Errorf("order %d: %v", i, row)
					}
				}
				// A scheduled run (--until-caught-up) cannot wait for a
				// fix: it ends with the error instead of holding.
				r.cancel()
				if err := <-r.done; err != nil {
					t.Fatal(err)
				}
				r.done <- nil // for the cleanup
				end, err := r.cl.EndOffsets(t.Context(), "orders")
				if err != nil {
					t.Fatal(err)
				}
				sc, err := schemas.Lookup(r.cfg.Schema)
				if err != nil {
					t.Fatal(err)
				}
				sched, err := pipeline.NewMember(r.cfg, r.tbl, sc, pipeline.UntilOffsets(end))
				if err != nil {
					t.Fatal(err)
				}
				ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
				defer cancel()
				if err := sched.Run(ctx); err == nil || !strings.Contains(err.Error(), "qty") || ctx.Err() != nil {
					t.Fatalf("scheduled run over the stopped partition: %v (context: %v)", err, ctx.Err())
				}
				return
			}
			r.waitCaughtUp(t)
			rows, cols := r.rows(t)
			if cols[1] != "qty int required" {
				t.Fatalf("qty column is %s", cols[1])
			}
			if len(rows) != 120 {
				t.Fatalf("%d rows, want 120", len(rows))
			}
			for i := range 140 {
				row, ok := rows[fmt.Sprintf("o-%d", i)]
				if ok == (i >= 100 && i < 120) || ok && row["qty"] != fmt.Sprint(i) {
					t.Errorf("order %d: %v", i, row)
				}
			}
			letters, err := pipeline.ReadDeadLetters(t.Context(), r.cfg.Kafka, nil)
			if err != nil {
				t.Fatal(err)
			}
			if n := len(letters[0]); n != 20 {
				t.Fatalf("%d dead letters, want 20", n)
			}
			for o := range letters[0] {
				if o < 100 || o >= 120 {
					t.Errorf("offset %d dead-lettered", o)
				}
			}
		})
	}
}

// TestEvolveColumnConflict: another member (or producer) already added
// coupon as a string; a writer schema whose coupon is an int cannot have
// it. With on_incompatible: dlq its records are dead letters (reason
// incompatible_schema, see schemas' TestEvolveRequestRefuse), the others
// are rows, and the column keeps its type.
func TestEvolveColumnConflict(t *testing.T) {
	r := newEvolveRig(t, "avro", "dlq", 1)
	if _, err := r.tbl.Evolve(t.Context(), []schemas.Change{{Kind: schemas.AddColumn, Column: "coupon", Type: iceberg.PrimitiveTypes.String}}); err != nil {
		t.Fatal(err)
	}
	v1 := r.register(t, "v1", ordersAvsc, sr.TypeAvro)
	intCoupon := strings.Replace(ordersAvroV2, `["null", "string"]`, `["null", "int"]`, 1)
	bad := r.register(t, "int-coupon", intCoupon, sr.TypeAvro)
	r.produce(t, 0, avroOrders(t, ordersAvsc, v1, 0, 50))
	var values [][]byte
	w := avro.MustParse(intCoupon)
	for i := 50; i < 60; i++ {
		body, err := avro.Marshal(w, map[string]any{"order_id": fmt.Sprintf("o-%d", i), "qty": i, "price": float32(i) + 0.5, "coupon": 7})
		if err != nil {
			t.Fatal(err)
		}
		values = append(values, wire(bad, body, false))
	}
	r.produce(t, 50, values)
	r.produce(t, 60, avroOrders(t, ordersAvsc, v1, 60, 80))
	r.start(t)
	r.waitCaughtUp(t)
	rows, cols := r.rows(t)
	if cols[3] != "coupon string" || len(rows) != 70 {
		t.Fatalf("%d rows, columns %v; want 70 and coupon string", len(rows), cols)
	}
	for i := range 80 {
		if _, ok := rows[fmt.Sprintf("o-%d", i)]; ok == (i >= 50 && i < 60) {
			t.Errorf("order %d: row %v", i, ok)
		}
	}
	letters, err := pipeline.ReadDeadLetters(t.Context(), r.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(letters[0]) != 10 {
		t.Fatalf("%d dead letters, want 10", len(letters[0]))
	}
}

// TestEvolveSchemaFileBetweenRuns: what `floe run` does at start. A first
// run writes JSON orders with the schema file; the file then gains an
// optional coupon and widens qty to long; the second run evolves the table
// before consuming (lakehouse.Table.EvolveTo) and writes the new orders:
// old rows read coupon as null and keep their qty, new rows carry both.
func TestEvolveSchemaFileBetweenRuns(t *testing.T) {
	r := newEvolveRig(t, "json", "", 2)
	order := func(i int, wide bool) []byte {
		if wide {
			return fmt.Appendf(nil, `{"order_id":"o-%d","qty":%d,"price":%d.25,"coupon":"c-%d"}`, i, int64(i)<<33, i, i)
		}
		return fmt.Appendf(nil, `{"order_id":"o-%d","qty":%d,"price":%d.5}`, i, i, i)
	}
	var values [][]byte
	for i := range 100 {
		values = append(values, order(i, false))
	}
	r.produce(t, 0, values)
	r.start(t)
	r.waitCaughtUp(t)
	r.cancel()
	if err := <-r.done; err != nil {
		t.Fatal(err)
	}
	r.done <- nil // for the cleanup

	// The second run, with the edited file.
	v2 := strings.Replace(ordersAvsc, `{"name": "qty", "type": "int"}`, `{"name": "qty", "type": "long"}`, 1)
	v2 = strings.Replace(v2, `"float"}]}`, `"double"}, {"name": "coupon", "type": ["null", "string"], "default": null}]}`, 1)
	if err := os.WriteFile(r.cfg.Schema, []byte(v2), 0o644); err != nil {
		t.Fatal(err)
	}
	file, err := schemas.Lookup(r.cfg.Schema)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: r.cfg.Table.Name, Catalog: r.cfg.Table.Catalog, Group: "g"}, file)
	if err != nil {
		t.Fatalf("opening the table with the edited file: %v", err)
	}
	t.Cleanup(func() { tbl.Close() })
	sc, err := tbl.EvolveTo(t.Context(), file)
	if err != nil {
		t.Fatal(err)
	}
	if r.member, err = pipeline.NewMember(r.cfg, tbl, sc); err != nil {
		t.Fatal(err)
	}
	values = values[:0]
	for i := 100; i < 200; i++ {
		values = append(values, order(i, true))
	}
	r.produce(t, 100, values)
	r.start(t)
	r.waitCaughtUp(t)
	rows, cols := r.rows(t)
	if got := strings.Join(cols[:5], ", "); got != evolvedColumns {
		t.Fatalf("columns after the second run: %s", got)
	}
	checkOrders(t, rows, 200, 100, 100)
}
