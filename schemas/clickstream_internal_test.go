package schemas

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestClickstreamFileMatchesHandBuilt proves the embedded clickstream.avsc
// declares exactly the columns, ids, docs, identifier fields, partition spec
// and Arrow schema the fast Builder is written for.
func TestClickstreamFileMatchesHandBuilt(t *testing.T) {
	want, err := newClickstream()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Iceberg.Equals(want.Iceberg) {
		t.Errorf("Iceberg schema from the file:\n%s\nhand-built:\n%s", got.Iceberg, want.Iceberg)
	}
	for i, f := range want.Iceberg.Fields() {
		if g := got.Iceberg.Fields()[i]; g.Doc != f.Doc {
			t.Errorf("field %s doc = %q, want %q", f.Name, g.Doc, f.Doc)
		}
	}
	if !got.Spec.Equals(want.Spec) || got.Spec.Field(0).FieldID != want.Spec.Field(0).FieldID {
		t.Errorf("spec = %v, want %v", got.Spec, want.Spec)
	}
	if !got.Arrow.Equal(want.Arrow) || fmt.Sprint(got.Arrow) != fmt.Sprint(want.Arrow) {
		t.Errorf("Arrow schema = %s, want %s", got.Arrow, want.Arrow)
	}
	if got.KeyField != want.KeyField || got.EventTime != want.EventTime || fmt.Sprint(got.HighCardinality) != fmt.Sprint(want.HighCardinality) {
		t.Errorf("key, event time, high cardinality = %q %q %v, want %q %q %v",
			got.KeyField, got.EventTime, got.HighCardinality, want.KeyField, want.EventTime, want.HighCardinality)
	}
	if !got.SortOrder.Equals(table.UnsortedSortOrder) {
		t.Errorf("sort order = %v, want unsorted", got.SortOrder)
	}
	if _, ok := got.NewRecordBuilder(nil, 0).(*Builder); !ok {
		t.Error("the built-in schema's RecordBuilder is not the fast Builder")
	}
}

// TestGenericMatchesFastPath decodes the same messages, good and broken in
// every way the generator and the decoder tests know, with the fast Builder
// and with the generic JSON decoder on the same schema file: the batches
// and the dead-letter reasons must be identical.
func TestGenericMatchesFastPath(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	sc, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	slow := *sc
	slow.fast = false
	fastB := sc.NewRecordBuilder(mem, 4096)
	slowB := slow.NewRecordBuilder(mem, 4096)
	defer fastB.Release()
	defer slowB.Release()
	if _, ok := slowB.(*genericBuilder); !ok {
		t.Fatalf("slow builder is %T", slowB)
	}

	var msgs [][]byte
	gen := clickgen.New(clickgen.Config{MalformedRate: 0.3, Seed: 7})
	for range 3000 {
		msgs = append(msgs, gen.Next().Value)
	}
	for _, s := range []string{
		`{"session_id":"s","event_type":"e","ts":"2024-11-29T06:00:00.5+05:30","seq":null,"url":null}`,
		`{"session_id":"s\u00e9\"","event_type":"e","ts":-1,"x":{"y":[1,{"z":null}]},"seq":9223372036854775807}`,
		`{"session_id":"s","session_id":"t","event_type":"e","ts":1}`,
		`{"session_id":"","event_type":"e","ts":1}`,
		`{"session_id":1,"event_type":"e","ts":1}`,
		`{"session_id":"s","event_type":"e","ts":1.5}`,
		`{"session_id":"s","event_type":"e","ts":"nope"}`,
		`{"session_id":"s","event_type":"e","ts":""}`,
		`{"session_id":"s","event_type":"e","ts":9223372036854775807}`,
		`{"session_id":"s","event_type":"e","ts":1,"seq":"1"}`,
		`{"session_id":"s","event_type":"e","ts":1,"seq":1.5}`,
		"{\"session_id\":\"\xff\",\"event_type\":\"e\",\"ts\":1}",
		"{\"session_id\":\"s\",\"event_type\":\"e\",\"ts\":1,\"url\":\"\xc3\"}",
		`{"session_id":"s","event_type":"e"}`, `{"event_type":"e","ts":1}`,
		`{}`, `[]`, `null`, `"x"`, `1e400`, `{`, ``, " ", `{"a":1} {}`,
		string(make([]byte, 5000)),
	} {
		msgs = append(msgs, []byte(s))
	}
	ingested := time.Date(2024, 11, 29, 7, 0, 0, 0, time.UTC)
	bad := 0
	for i, m := range msgs {
		meta := Meta{Topic: "clicks", Partition: 3, Offset: int64(i), Timestamp: ingested.Add(-time.Second)}
		status := []string{"ok", ""}[i%2]
		ef, es := fastB.Append(m, meta, ingested, status), slowB.Append(m, meta, ingested, status)
		var df, ds *DecodeError
		errors.As(ef, &df)
		errors.As(es, &ds)
		if (ef == nil) != (es == nil) || (df == nil) != (ds == nil) ||
			(df != nil && (df.Reason != ds.Reason || df.Field != ds.Field)) {
			t.Fatalf("message %q: fast path says %v, generic says %v", m, ef, es)
		}
		if ef != nil {
			bad++
		}
	}
	if bad < 500 {
		t.Fatalf("only %d of %d messages were rejected; the corpus is too kind", bad, len(msgs))
	}
	rf, rs := fastB.NewRecord(), slowB.NewRecord()
	defer rf.Release()
	defer rs.Release()
	if rf.NumRows() != int64(len(msgs)-bad) || !array.RecordEqual(rf, rs) {
		t.Fatalf("batches differ (%d and %d rows, want %d)", rf.NumRows(), rs.NumRows(), len(msgs)-bad)
	}
	if !rs.Schema().Equal(sc.Arrow) {
		t.Fatalf("generic batch schema %s, want %s", rs.Schema(), sc.Arrow)
	}
}

// newClickstream builds the built-in schema by hand, column by column, from
// clickstreamFields, which the fast Builder is written against. It is the
// reference the embedded clickstream.avsc is checked against.
func newClickstream() (*Schema, error) {
	fields := make([]iceberg.NestedField, numCols)
	for i, f := range clickstreamFields {
		f.ID = i + 1
		fields[i] = f
	}
	// The Kafka coordinates identify a row: they are what the dedupe MERGE
	// joins on, so declare them to engines that understand identifier fields.
	identifiers := []int{colKafkaTopic + 1, colKafkaPartition + 1, colKafkaOffset + 1}
	sc := iceberg.NewSchemaWithIdentifiers(0, identifiers, fields...)

	fieldID := dayPartitionFieldID
	spec, err := iceberg.NewPartitionSpecOpts(
		iceberg.AddPartitionFieldByName(fields[colEventTS].Name, "event_ts_day", iceberg.DayTransform{}, sc, &fieldID))
	if err != nil {
		return nil, fmt.Errorf("building the %s partition spec: %w", Clickstream, err)
	}

	as, err := table.SchemaToArrowSchema(sc, nil, true, false)
	if err != nil {
		return nil, fmt.Errorf("converting the %s schema to Arrow: %w", Clickstream, err)
	}

	return &Schema{
		Name:            Clickstream,
		Iceberg:         sc,
		Arrow:           as,
		Spec:            spec,
		SortOrder:       table.UnsortedSortOrder,
		KeyField:        fields[colSessionID].Name,
		EventTime:       fields[colEventTS].Name,
		HighCardinality: []string{fields[colEventID].Name, fields[colURL].Name},
	}, nil
}
