// Package schemas owns the one place where bytes from Kafka become table rows:
// the record schemas (the built-in "clickstream" and Avro schema files with
// floe properties, see [ParseAvsc]), their Iceberg, Arrow, partition and sort
// forms, and the decoders (JSON, Avro, Protobuf, plain or in the Confluent
// wire format with a schema registry, see [Format]) that append a message to
// a batch being built or explain, as a [DecodeError], why the message
// belongs in the dead-letter topic instead.
//
// Invariants the rest of floe relies on:
//
//   - Schema.Arrow is derived from Schema.Iceberg by iceberg-go itself, so every
//     Arrow field carries its PARQUET:field_id and the batches a [Builder] emits
//     are accepted unchanged by table.WriteRecords.
//   - A [Builder] validates a whole message before it appends anything: a failed
//     Append leaves every column the same length as before, so a bad record can
//     never shift the values of the good ones.
//   - The Kafka coordinates (_kafka_topic, _kafka_partition, _kafka_offset) are
//     required columns: they are the row identity the dedupe MERGE and the
//     offset watermarks are built on, and the Iceberg schema names them as its
//     identifier fields.
//   - Columns are matched by name, never by field id: a schema file's ids are
//     positional, a table's are fixed when the column is added. A Schema
//     adapted to the table ([Schema.WithTable]) carries the table's ids.
//
// Schema evolution: a builder of an [Schema.Evolving] schema returns an
// [EvolveRequest] (and appends nothing) for a registry writer schema with
// new top-level fields or wider types; the caller evolves the table, adapts
// the schema with WithTable and appends again. [PlanTable] does the same
// for a schema file edited between runs. Only promotions Iceberg allows are
// ever asked for (int → long, float → double, decimal precision, required →
// optional, new optional columns), so no row is written with another type.
//
// Decoding is the hottest per-record code in the pipeline, so the built-in
// schema's Builder (schema files get a generic [RecordBuilder]) parses
// with one reusable fastjson parser, keeps only byte slices into the parser's
// buffer until the row is known to be good, and then copies each value once,
// straight into Arrow-layout column buffers from the caller's allocator,
// which NewRecord hands to the batch without copying (columns.go says why
// not arrow-go's builders). Nothing is allocated per record: each batch's
// buffers are allocated at the size the previous batch reached.
package schemas
