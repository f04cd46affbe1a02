package schemas

import (
	"encoding/binary"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/iceberg-go"
	"google.golang.org/protobuf/encoding/protowire"
)

// timeRangeAvsc has a column of each kind of time that integers can spell:
// timestamptz in milliseconds and in microseconds, timestamp, date, and a
// timestamptz that Protobuf fills from a google.protobuf.Timestamp.
// timeRangeProto is the same as a .proto.
const (
	timeRangeAvsc = `{"type":"record","name":"R","floe.partition":["hour(tsm)"],"fields":[
	  {"name":"id","type":"string"},
	  {"name":"tsm","type":["null",{"type":"long","logicalType":"timestamp-millis"}],"default":null},
	  {"name":"tsu","type":["null",{"type":"long","logicalType":"timestamp-micros"}],"default":null},
	  {"name":"lts","type":["null",{"type":"long","logicalType":"local-timestamp-micros"}],"default":null},
	  {"name":"day","type":["null",{"type":"int","logicalType":"date"}],"default":null},
	  {"name":"pts","type":["null",{"type":"long","logicalType":"timestamp-micros"}],"default":null}]}`
	timeRangeProto = `syntax = "proto3"; package p;
import "google/protobuf/timestamp.proto";
message R { string id = 1; optional int64 tsm = 2; optional int64 tsu = 3; optional int64 lts = 4; optional int32 day = 5;
  google.protobuf.Timestamp pts = 6; }`
)

// TestTimesWithinYears1To9999: a timestamp or a date outside the years
// 0001 to 9999 (UTC) is an invalid_field dead letter naming the field, in
// JSON (integers and strings), Avro, Protobuf (integers and
// google.protobuf.Timestamp) and the built-in clickstream decoder; the
// first and last instants of those years are rows. Integers reached
// ±292,000 years: iceberg-go's hour() transform, an int32 of hours, wrapped
// past ±245,000, and such a row (8e15 ms, year 255,000) went into a
// partition of another time, where scans pruning by it never look.
func TestTimesWithinYears1To9999(t *testing.T) {
	const (
		maxMillis = 253_402_300_799_999 // 9999-12-31T23:59:59.999Z
		minMillis = -62_135_596_800_000 // 0001-01-01T00:00:00Z
		maxMicros = 253_402_300_799_999_999
		minMicros = -62_135_596_800_000_000
	)
	// Integers, in every format.
	ints := []struct {
		field string
		v     int64
		ok    bool
	}{
		{"tsm", maxMillis, true}, {"tsm", minMillis, true},
		{"tsm", maxMillis + 1, false}, {"tsm", minMillis - 1, false},
		{"tsm", 8_000_000_000_000_000, false}, {"tsm", -8_000_000_000_000_000, false},
		{"tsu", maxMicros, true}, {"tsu", minMicros, true},
		{"tsu", maxMicros + 1, false}, {"tsu", minMicros - 1, false},
		{"lts", maxMicros, true}, {"lts", maxMicros + 1, false}, {"lts", minMicros - 1, false},
		{"day", 2_932_896, true}, {"day", -719_162, true}, // 9999-12-31, 0001-01-01
		{"day", 2_932_897, false}, {"day", -719_163, false}, {"day", 2_000_000_000, false},
	}
	fields := []string{"tsm", "tsu", "lts", "day"}

	tbl, err := ParseAvsc("r", []byte(timeRangeAvsc))
	if err != nil {
		t.Fatal(err)
	}
	avroSc, err := tbl.WithFormat(Format{Kind: FormatAvro})
	if err != nil {
		t.Fatal(err)
	}
	protoSc, err := tbl.WithFormat(Format{Kind: FormatProtobuf, Proto: &ProtoConfig{File: plainPayments(t, timeRangeProto), Message: "p.R"}})
	if err != nil {
		t.Fatal(err)
	}
	// row decodes value with sc and returns the error, or the row's
	// value of field.
	row := func(sc *Schema, value []byte, field string) (any, error) {
		b := sc.NewRecordBuilder(memory.DefaultAllocator, 0)
		defer b.Release()
		if err := b.Append(value, Meta{Topic: "t"}, time.Time{}, ""); err != nil {
			return nil, err
		}
		rec := b.NewRecord()
		defer rec.Release()
		switch c := rec.Column(rec.Schema().FieldIndices(field)[0]).(type) {
		case *array.Timestamp:
			return int64(c.Value(0)), nil
		case *array.Date32:
			return int64(c.Value(0)), nil
		default:
			return c.ValueStr(0), nil
		}
	}
	check := func(t *testing.T, what, field string, ok bool, want int64, got any, err error) {
		t.Helper()
		var de *DecodeError
		switch {
		case ok && err != nil:
			t.Errorf("%s: %v, want a row", what, err)
		case ok && got != want:
			t.Errorf("%s: row %s=%v, want %d", what, field, got, want)
		case !ok && (!errors.As(err, &de) || de.Reason != ReasonInvalidField || de.Field != field || !strings.Contains(de.Detail, "years 0001 to 9999")):
			t.Errorf("%s: %v (row %v), want invalid_field %s within the years 0001 to 9999", what, err, got, field)
		}
	}
	for _, c := range ints {
		want := c.v
		if c.field == "tsm" {
			want *= 1000
		}
		// JSON.
		got, err := row(tbl, []byte(`{"id":"a","`+c.field+`":`+strconv.FormatInt(c.v, 10)+`}`), c.field)
		check(t, "json "+c.field+" "+strconv.FormatInt(c.v, 10), c.field, c.ok, want, got, err)
		// Avro: the id, then each union's branch (0 null, 1 the value).
		av := binary.AppendVarint(nil, 1)
		av = append(av, 'a')
		for _, f := range fields {
			if f == c.field {
				av = binary.AppendVarint(binary.AppendVarint(av, 1), c.v)
			} else {
				av = binary.AppendVarint(av, 0)
			}
		}
		av = binary.AppendVarint(av, 0) // pts
		got, err = row(avroSc, av, c.field)
		check(t, "avro "+c.field+" "+strconv.FormatInt(c.v, 10), c.field, c.ok, want, got, err)
		// Protobuf.
		num := slices.Index(fields, c.field) + 2
		got, err = row(protoSc, slices.Concat(pbBytes(1, []byte("a")), pbVarint(protowire.Number(num), uint64(c.v))), c.field)
		check(t, "protobuf "+c.field+" "+strconv.FormatInt(c.v, 10), c.field, c.ok, want, got, err)
	}

	// A google.protobuf.Timestamp.
	for _, c := range []struct {
		secs  int64
		nanos uint64
		ok    bool
	}{
		{253_402_300_799, 999_999_999, true}, {-62_135_596_800, 0, true},
		{253_402_300_800, 0, false}, {-62_135_596_801, 999_999_999, false}, {8_000_000_000_000, 0, false},
	} {
		ts := pbBytes(6, slices.Concat(pbVarint(1, uint64(c.secs)), pbVarint(2, c.nanos)))
		got, err := row(protoSc, slices.Concat(pbBytes(1, []byte("a")), ts), "pts")
		check(t, "protobuf Timestamp "+strconv.FormatInt(c.secs, 10), "pts", c.ok, c.secs*1_000_000+int64(c.nanos/1000), got, err)
	}

	// Strings, in JSON: checked in UTC.
	for _, c := range []struct {
		field, s string
		ok       bool
		want     int64
	}{
		{"tsm", "9999-12-31T23:59:59.999999Z", true, maxMicros},
		{"tsm", "0001-01-01T00:00:00Z", true, minMicros},
		{"tsm", "0001-01-01T00:30:00+01:00", false, 0},
		{"tsm", "9999-12-31T23:30:00-01:00", false, 0},
		{"tsu", "0000-06-01T00:00:00Z", false, 0},
		{"lts", "0000-12-31T23:59:59.999999", false, 0},
		{"lts", "0001-01-01T00:00:00", true, minMicros},
		{"day", "0000-12-31", false, 0},
		{"day", "9999-12-31", true, 2_932_896},
	} {
		got, err := row(tbl, []byte(`{"id":"a","`+c.field+`":"`+c.s+`"}`), c.field)
		check(t, "json "+c.field+" "+c.s, c.field, c.ok, c.want, got, err)
	}

	// The built-in clickstream decoder's ts, as milliseconds or a string.
	cs, err := Lookup(Clickstream)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		ts   string
		ok   bool
		want int64
	}{
		{strconv.Itoa(maxMillis), true, maxMillis * 1000}, {strconv.Itoa(minMillis), true, minMillis * 1000},
		{strconv.Itoa(maxMillis + 1), false, 0}, {"8000000000000000", false, 0}, {strconv.Itoa(minMillis - 1), false, 0},
		{`"0000-12-31T23:59:59Z"`, false, 0}, {`"9999-12-31T23:30:00-01:00"`, false, 0}, {`"9999-12-31T23:59:59Z"`, true, maxMicros - 999_999},
	} {
		got, err := row(cs, []byte(`{"session_id":"s","event_type":"e","ts":`+c.ts+`}`), "event_ts")
		check(t, "clickstream ts "+c.ts, "ts", c.ok, c.want, got, err)
	}

	// The last and first instants taken keep their hour partition.
	hour, _ := iceberg.HourTransform{}.Transformer(iceberg.PrimitiveTypes.TimestampTz)
	for _, us := range []int64{maxMicros, minMicros} {
		h := hour(iceberg.Timestamp(us)).Val
		if want := time.UnixMicro(us).UTC().Truncate(time.Hour); time.Unix(int64(h)*3600, 0).UTC() != want {
			t.Errorf("%d µs: hour partition %d, %s; want %s", us, h, time.Unix(int64(h)*3600, 0).UTC(), want)
		}
	}
}
