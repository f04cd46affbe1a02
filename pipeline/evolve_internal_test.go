package pipeline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/hamba/avro/v2"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// TestBufferCarriesRowsAcrossSchemaSwitch: rows buffered under the old
// schema when a record of an evolved writer schema arrives stay in the
// same segment, conformed (the new column null, the widened one long), and
// the segment commits as one batch with every offset once.
func TestBufferCarriesRowsAcrossSchemaSwitch(t *testing.T) {
	tbl, sc, reg, cl := registryRig(t, nil)
	v1 := `{"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}`
	v2 := `{"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "long"},
	  {"name": "tag", "type": ["null", "string"], "default": null}]}`
	msg := func(text string, off int64, v map[string]any) kafka.Message {
		ss, err := cl.CreateSchema(t.Context(), fmt.Sprint("s", len(text)), sr.Schema{Schema: text})
		if err != nil {
			t.Fatal(err)
		}
		body, err := avro.Marshal(avro.MustParse(text), v)
		if err != nil {
			t.Fatal(err)
		}
		return kafka.Message{Offset: off, Time: time.Now(), Value: append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), body...)}
	}
	wsc, err := sc.WithFormat(schemas.Format{Kind: schemas.FormatAvro, Registry: &schemas.RegistryConfig{URL: reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	b, evo := evolvingBuffer(t, tbl, wsc)
	for i, m := range []kafka.Message{
		msg(v1, 0, map[string]any{"id": "a", "n": 1}),
		msg(v1, 1, map[string]any{"id": "b", "n": 2}),
		msg(v2, 2, map[string]any{"id": "c", "n": int64(3) << 40, "tag": "t"}),
		msg(v1, 3, map[string]any{"id": "d", "n": 4}),
	} {
		if _, _, dead, err := b.appendEnriched(m, time.Now(), offResult); err != nil || dead {
			t.Fatalf("record %d: dead %v, %v", i, dead, err)
		}
	}
	seg, ok := b.take()
	if !ok || seg.part.Rows == nil || seg.part.Rows.NumRows() != 4 {
		t.Fatalf("segment %v, want the 4 rows", seg.part)
	}
	if !seg.part.Rows.Schema().Equal(evo.schema().Arrow) {
		t.Fatalf("segment schema %v, want the evolved %v", seg.part.Rows.Schema(), evo.schema().Arrow)
	}
	if _, err := tbl.Commit(t.Context(), []lakehouse.Part{seg.part}); err != nil {
		t.Fatal(err)
	}
	it, err := tbl.Load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := it.Scan().ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rec, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		ids := rec.Column(rec.Schema().FieldIndices("id")[0]).(*array.String)
		ns := rec.Column(rec.Schema().FieldIndices("n")[0]).(*array.Int64)
		tags := rec.Column(rec.Schema().FieldIndices("tag")[0])
		for i := range int(rec.NumRows()) {
			got[ids.Value(i)] = tags.ValueStr(i) + "/" + ns.ValueStr(i)
		}
		rec.Release()
	}
	want := map[string]string{"a": "(null)/1", "b": "(null)/2", "c": "t/3298534883328", "d": "(null)/4"}
	if len(got) != len(want) {
		t.Fatalf("rows %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("row %s = %s, want %s", k, got[k], v)
		}
	}
}

// TestWriterFieldNamedLikeAnEnrichmentColumn: the job enriches into a
// column segment, and a producer's new writer schema gains a field segment
// (and a field tag). The two values cannot share the column, so the writer
// schema is incompatible and on_incompatible decides: dlq dead-letters its
// records (incompatible_schema, naming the field and the enrichment
// column), stop holds the partition with an error naming both; the table
// is not evolved for them. Before, the buffer asked the table to add
// segment, which it already had, until the rounds ran out: every record of
// the writer schema failed the partition, under dlq too, with "needs the
// table to change: add column segment". (The config takes enrichment with
// format json only for now; the buffer and the decoders do not assume it.)
func TestWriterFieldNamedLikeAnEnrichmentColumn(t *testing.T) {
	tbl, sc, reg, cl := registryRig(t, &enrich.Config{Fields: []enrich.Field{{Name: "segment", Type: enrich.TypeString}}})
	v2 := `{"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "int"},
	  {"name": "tag", "type": ["null", "string"], "default": null},
	  {"name": "segment", "type": ["null", "string"], "default": null}]}`
	ss, err := cl.CreateSchema(t.Context(), "o-value", sr.Schema{Schema: v2})
	if err != nil {
		t.Fatal(err)
	}
	body, err := avro.Marshal(avro.MustParse(v2), map[string]any{"id": "a", "n": 1, "tag": "t", "segment": "from-producer"})
	if err != nil {
		t.Fatal(err)
	}
	msg := kafka.Message{Offset: 0, Time: time.Now(), Value: append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), body...)}
	const clash = `collides with enrichment column "segment"`
	for _, mode := range []string{"dlq", "stop"} {
		t.Run(mode, func(t *testing.T) {
			wsc, err := sc.WithFormat(schemas.Format{Kind: schemas.FormatAvro, Registry: &schemas.RegistryConfig{URL: reg.URL(), OnIncompatible: mode}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := evolvingBuffer(t, tbl, wsc)
			_, _, dead, err := b.appendEnriched(msg, time.Now(), enrich.Result{Status: enrich.StatusOK})
			if mode == "dlq" {
				if err != nil || !dead || len(b.letters) != 1 {
					t.Fatalf("dead %v, %d letters, %v; want the record dead-lettered", dead, len(b.letters), err)
				}
				if l := b.letters[0]; l.reason != schemas.ReasonIncompatibleSchema || l.field != "segment" || !strings.Contains(l.detail, clash) {
					t.Fatalf("dead letter %s %q: %s; want incompatible_schema of segment, %s", l.reason, l.field, l.detail, clash)
				}
			} else {
				var ie *schemas.IncompatibleSchemaError
				if !errors.As(err, &ie) || ie.Field != "segment" || !strings.Contains(err.Error(), clash) || dead {
					t.Fatalf("dead %v, %v; want the partition stopped on segment, %s", dead, err, clash)
				}
			}
			it, err := tbl.Load(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := it.Schema().FindFieldByName("tag"); ok {
				t.Fatal("the table was evolved (tag) for a record it does not hold")
			}
		})
	}
}

// TestWriterSchemaThatDoesNotFitDoesNotEvolveTable: a producer's writer
// schema turns the int column n into a string and adds a field junk. None
// of its records can be a row, so the table must not gain junk for it:
// dlq dead-letters the record (incompatible_schema of n), stop holds the
// partition naming n. Before, the buffer evolved the table (junk added)
// and only then was every record refused: a bad producer could add any
// columns it liked without a row landing.
func TestWriterSchemaThatDoesNotFitDoesNotEvolveTable(t *testing.T) {
	tbl, sc, reg, cl := registryRig(t, nil)
	bad := `{"type": "record", "name": "O", "fields": [{"name": "id", "type": "string"}, {"name": "n", "type": "string"},
	  {"name": "junk", "type": ["null", "string"], "default": null}]}`
	ss, err := cl.CreateSchema(t.Context(), "o-value", sr.Schema{Schema: bad})
	if err != nil {
		t.Fatal(err)
	}
	body, err := avro.Marshal(avro.MustParse(bad), map[string]any{"id": "a", "n": "x", "junk": "j"})
	if err != nil {
		t.Fatal(err)
	}
	msg := kafka.Message{Offset: 0, Time: time.Now(), Value: append(binary.BigEndian.AppendUint32([]byte{0}, uint32(ss.ID)), body...)}
	for _, mode := range []string{"dlq", "stop"} {
		t.Run(mode, func(t *testing.T) {
			wsc, err := sc.WithFormat(schemas.Format{Kind: schemas.FormatAvro, Registry: &schemas.RegistryConfig{URL: reg.URL(), OnIncompatible: mode}})
			if err != nil {
				t.Fatal(err)
			}
			b, _ := evolvingBuffer(t, tbl, wsc)
			_, _, dead, err := b.appendEnriched(msg, time.Now(), offResult)
			if mode == "dlq" {
				if err != nil || !dead || len(b.letters) != 1 {
					t.Fatalf("dead %v, %d letters, %v; want the record dead-lettered", dead, len(b.letters), err)
				}
				if l := b.letters[0]; l.reason != schemas.ReasonIncompatibleSchema || l.field != "n" {
					t.Fatalf("dead letter %s %q: %s; want incompatible_schema of n", l.reason, l.field, l.detail)
				}
			} else {
				var ie *schemas.IncompatibleSchemaError
				if !errors.As(err, &ie) || ie.Field != "n" || dead {
					t.Fatalf("dead %v, %v; want the partition stopped on n", dead, err)
				}
			}
			it, err := tbl.Load(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := it.Schema().FindFieldByName("junk"); ok {
				t.Fatal("the table was evolved (junk) for a writer schema none of whose records it holds")
			}
		})
	}
}

// registryRig is a table a.o of the schema file {id string, n int} (with
// enrich's columns, if given) in a SQLite catalog, and a schema registry
// with its client.
func registryRig(t *testing.T, enrichCfg *enrich.Config) (*lakehouse.Table, *schemas.Schema, *srfake.Registry, *sr.Client) {
	t.Helper()
	dir := t.TempDir()
	path := filepath.Join(dir, "o.avsc")
	if err := os.WriteFile(path, []byte(`{"type": "record", "name": "O", "fields": [
	  {"name": "id", "type": "string"}, {"name": "n", "type": "int"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	sc, err := schemas.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if sc, err = WithEnrichment(sc, enrichCfg); err != nil {
		t.Fatal(err)
	}
	tbl, err := lakehouse.Open(t.Context(), lakehouse.Config{Table: "a.o", Group: "g", Catalog: map[string]string{
		"type": "sql", "uri": "file:" + filepath.Join(dir, "c.db"), "sql.dialect": "sqlite", "sql.driver": "sqlite",
		"warehouse": "file://" + filepath.Join(dir, "wh")}}, sc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tbl.Close() })
	reg := srfake.New()
	t.Cleanup(reg.Close)
	cl, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	return tbl, sc, reg, cl
}

// evolvingBuffer is a partition buffer of wsc that evolves tbl through evo,
// as the member's evolver does.
func evolvingBuffer(t *testing.T, tbl *lakehouse.Table, wsc *schemas.Schema) (b *partitionBuffer, evo *evolver) {
	t.Helper()
	evo = &evolver{table: tbl, current: wsc.Evolving()}
	b = newPartitionBuffer(evo.schema(), "o", 0, lakehouse.NoWatermark, 0, nil)
	t.Cleanup(b.release)
	b.evolve = func(from *schemas.Schema, req *schemas.EvolveRequest) (*schemas.Schema, error) {
		return evo.evolve(t.Context(), from, req)
	}
	return b, evo
}
