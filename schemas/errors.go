package schemas

import (
	"errors"
	"strconv"
	"time"
)

// Meta is the Kafka coordinates of a message. They become the _kafka_*
// columns, which are the row identity the dedupe MERGE relies on, so they are
// passed in by the consumer rather than trusted from the message body.
type Meta struct {
	Topic     string
	Partition int32
	Offset    int64
	// Timestamp is the broker or producer timestamp of the record; the zero
	// time (a record without one) is stored as null.
	Timestamp time.Time
}

// Reasons a message cannot become a row. They are stable machine codes: the
// dead-letter topic carries them, and operators alert and replay by them.
const (
	// ReasonMalformedJSON: the value is empty, not JSON, or not a JSON object.
	ReasonMalformedJSON = "malformed_json"
	// ReasonMissingField: a required field is absent or null.
	ReasonMissingField = "missing_field"
	// ReasonInvalidField: a field has the wrong JSON type or an unusable value
	// (an empty required string, a bad timestamp, a non-integer number,
	// invalid UTF-8).
	ReasonInvalidField = "invalid_field"
	// ReasonTooLarge: the value is longer than the Builder's message limit
	// (it was not parsed), or its row would take more than a batch holds.
	ReasonTooLarge = "too_large"
)

// DecodeError says why a message cannot become a row. The pipeline sends the
// message to the dead-letter topic with these fields instead of failing the
// partition, so every field is meant to be read by people and by tools.
type DecodeError struct {
	// Reason is one of the Reason* codes.
	Reason string
	// Field is the offending field as named in the message ("ts", not
	// "event_ts"), or "" when the problem is not about one field.
	Field string
	// Detail is a human-readable explanation, at most 256 bytes of valid
	// UTF-8, so it fits in a dead-letter header; it quotes at most a short
	// excerpt of the message.
	Detail string
}

// Error formats the reason first so that log lines group by it.
func (e *DecodeError) Error() string {
	if e.Field == "" {
		return "decoding record: " + e.Reason + ": " + e.Detail
	}
	return "decoding record: " + e.Reason + " " + strconv.Quote(e.Field) + ": " + e.Detail
}

// ErrUnresolved is returned by Builder.AppendResolved when the row's key
// was not resolved: nothing was appended.
var ErrUnresolved = errors.New("schemas: the row's enrichment key was not resolved")

// ErrBuilderFull is returned by Builder.Append when the row would push a
// string column, or a list's elements, past what Arrow's 32-bit offsets can
// address (2 GiB, 2^31 elements). The message itself is fine: call
// NewRecord and append it again. Flushing by SizeBytes long before this
// point makes it unreachable in practice.
var ErrBuilderFull = errors.New("schemas: builder holds 2 GiB of string data or list elements; call NewRecord before appending more")
