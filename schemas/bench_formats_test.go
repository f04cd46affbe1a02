package schemas_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/hamba/avro/v2"

	"github.com/floe-dev/floe/schemas"
)

// BenchmarkAppendFormats measures the generic builder of a schema file on
// the same 333-byte clickstream records as BenchmarkAppend: as JSON (the
// built-in schema's file decoded without the fast path) and as plain Avro.
// The fast Builder of BenchmarkAppend/append is the baseline.
func BenchmarkAppendFormats(b *testing.B) {
	msgs := benchMessages(b)
	file, err := schemas.Lookup("clickstream.avsc")
	if err != nil {
		b.Fatal(err)
	}
	avroSchema := avro.MustParse(string(mustRead(b, "clickstream.avsc")))
	var avroMsgs [][]byte
	for _, m := range msgs {
		var v map[string]any
		if err := json.Unmarshal(m, &v); err != nil {
			b.Fatal(err)
		}
		v["ts"] = time.UnixMilli(int64(v["ts"].(float64))).UTC()
		v["seq"] = map[string]any{"long": int64(v["seq"].(float64))}
		for _, k := range []string{"event_id", "user_id", "url", "referrer", "user_agent"} {
			v[k] = map[string]any{"string": v[k]}
		}
		out, err := avro.Marshal(avroSchema, v)
		if err != nil {
			b.Fatal(err)
		}
		avroMsgs = append(avroMsgs, out)
	}
	avroFile, err := file.WithFormat(schemas.Format{Kind: schemas.FormatAvro})
	if err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		sc   *schemas.Schema
		msgs [][]byte
	}{{"generic-json", file, msgs}, {"avro", avroFile, avroMsgs}} {
		b.Run(c.name, func(b *testing.B) {
			bld := c.sc.NewRecordBuilder(memory.DefaultAllocator, 0)
			defer bld.Release()
			b.SetBytes(333)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := bld.Append(c.msgs[i%len(c.msgs)], testMeta(int64(i)), testIngested, "ok"); err != nil {
					b.Fatal(err)
				}
				if bld.Len() == benchBatchRows {
					bld.NewRecord().Release()
				}
			}
		})
	}
}
