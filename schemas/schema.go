package schemas

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Clickstream is the name of the built-in schema, the value of the `schema:`
// configuration key that selects it.
const Clickstream = "clickstream"

// Schema is a record schema: how a Kafka message value becomes a table row.
// The Iceberg, Arrow and partition forms travel together so that the table
// that is created, the batches that are built and the files that are written
// cannot drift apart. A Schema is read-only once returned by [Lookup]; it may
// be shared by any number of goroutines and Builders.
type Schema struct {
	// Name is the name the schema was looked up by; it appears in logs and
	// dead-letter headers.
	Name string
	// Iceberg is the table schema, with field IDs 1..N in column order. Pass
	// it to the catalog when creating the table.
	Iceberg *iceberg.Schema
	// Arrow is the schema of every batch a Builder emits. It is derived from
	// Iceberg by iceberg-go (with PARQUET:field_id metadata, small types) so
	// that table.WriteRecords accepts the batches as they are.
	Arrow *arrow.Schema
	// Spec is the table's partition spec: day(event_ts) into the partition
	// field "event_ts_day" for the built-in schema, so that analysts'
	// time-range queries prune files; floe.partition in a schema file.
	Spec iceberg.PartitionSpec
	// SortOrder is the table's declared sort order (floe.sort in a schema
	// file; unsorted for the built-in schema, whose files are sorted by
	// KeyField).
	SortOrder table.SortOrder
	// KeyField is the column that is the ordering unit: records sharing it
	// share a Kafka partition and must keep their relative order.
	KeyField string
	// EventTime is the column holding the event's own time ("" if the
	// schema declares none).
	EventTime string
	// DedupeKey is the business-key column whose repeats are duplicates of
	// one event ("" if the schema declares none).
	DedupeKey string
	// Extra lists the optional columns appended by WithColumns (enrichment
	// attributes), in column order after the schema's own.
	Extra []Column
	// HighCardinality names the string columns whose values are nearly all
	// distinct (ids, URLs): a Parquet dictionary for them costs CPU and
	// saves nothing, so tables are created without one.
	HighCardinality []string

	// user is the field tree of a schema parsed from a file (the built-in
	// schema is one too, clickstream.avsc).
	user *userSchema
	// fast marks the built-in schema: its JSON is decoded by the
	// hand-tuned Builder rather than the generic one.
	fast bool
	// kind is the message format chosen by WithFormat ("" and FormatJSON:
	// JSON); reg the registry of the Confluent wire format (nil: plain
	// values). Every Schema derived from this one shares reg and its cache.
	kind string
	reg  *registry
	// proto is the message type of plain Protobuf values.
	proto protoreflect.MessageDescriptor
	// evolve makes the wire-format decoders ask for table changes (see
	// Evolving).
	evolve bool
}

// Column positions of the clickstream schema. They are the positions in both
// Schema.Arrow and the Iceberg schema (whose field IDs are position+1); the
// first nine are also the slots of the JSON fields they come from.
const (
	colEventID = iota
	colSessionID
	colUserID
	colEventType
	colURL
	colReferrer
	colUserAgent
	colEventTS // from JSON "ts"
	colSeq
	colKafkaTopic
	colKafkaPartition
	colKafkaOffset
	colKafkaTimestamp
	colIngestedAt
	colEnrichStatus
	numCols

	// numStringEventCols is the number of leading string columns that come
	// from the message (event_id .. user_agent).
	numStringEventCols = colEventTS
	// numJSONFields is the number of columns that come from the message.
	numJSONFields = colSeq + 1
)

// dayPartitionFieldID is the first partition field ID Iceberg assigns; fixing
// it keeps the spec identical whether or not the catalog renumbers it.
const dayPartitionFieldID = 1000

var (
	str  = iceberg.PrimitiveTypes.String
	tstz = iceberg.PrimitiveTypes.TimestampTz
)

// clickstreamFields is the built-in column list, in column order.
var clickstreamFields = [numCols]iceberg.NestedField{
	colEventID:        {Name: "event_id", Type: str, Doc: "Producer-assigned event id (not guaranteed unique)."},
	colSessionID:      {Name: "session_id", Type: str, Required: true, Doc: "Session id; also the Kafka message key."},
	colUserID:         {Name: "user_id", Type: str},
	colEventType:      {Name: "event_type", Type: str, Required: true},
	colURL:            {Name: "url", Type: str},
	colReferrer:       {Name: "referrer", Type: str},
	colUserAgent:      {Name: "user_agent", Type: str},
	colEventTS:        {Name: "event_ts", Type: tstz, Required: true, Doc: "Event time, from the message field ts."},
	colSeq:            {Name: "seq", Type: iceberg.PrimitiveTypes.Int64, Doc: "Producer sequence number within the session."},
	colKafkaTopic:     {Name: "_kafka_topic", Type: str, Required: true},
	colKafkaPartition: {Name: "_kafka_partition", Type: iceberg.PrimitiveTypes.Int32, Required: true},
	colKafkaOffset:    {Name: "_kafka_offset", Type: iceberg.PrimitiveTypes.Int64, Required: true},
	colKafkaTimestamp: {Name: "_kafka_timestamp", Type: tstz, Doc: "Kafka record timestamp: the producer's CreateTime, also on a LogAppendTime topic (the Kafka client does not read the broker's time); null when the record has none."},
	colIngestedAt:     {Name: "_ingested_at", Type: tstz, Doc: "When floe decoded the record."},
	colEnrichStatus:   {Name: "_enrich_status", Type: str, Doc: "Outcome of the enrichment lookup for this record."},
}

// Lookup returns the schema selected by the `schema:` configuration value:
// the built-in name "clickstream", or else the path of an Avro schema file
// (see ParseAvsc). Each call returns a fresh Schema, so callers cannot
// disturb one another.
func Lookup(name string) (*Schema, error) {
	switch name {
	case Clickstream:
		// The built-in schema is the embedded clickstream.avsc; a test
		// proves it equal to newClickstream, whose column layout the fast
		// Builder is written for.
		sc, err := ParseAvsc(Clickstream, clickstreamAvsc)
		if err != nil {
			return nil, fmt.Errorf("the built-in schema: %w", err)
		}
		sc.fast = true
		return sc, nil
	case "":
		return nil, fmt.Errorf("no schema: set schema to %q or the path of an Avro schema file (.avsc)", Clickstream)
	default:
		return LoadFile(name)
	}
}
