package schemas

import (
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// BenchmarkAppendArrowBuilders is the baseline for the column buffers in
// columns.go: the same decode, but appending through arrow-go's
// RecordBuilder, as the Builder first did. Compare it with
// BenchmarkAppend/append from the same run.
func BenchmarkAppendArrowBuilders(b *testing.B) {
	s, err := Lookup(Clickstream)
	if err != nil {
		b.Fatal(err)
	}
	bld := s.NewBuilder(memory.DefaultAllocator, 0)
	defer bld.Release()
	rb := array.NewRecordBuilder(memory.DefaultAllocator, s.Arrow)
	defer rb.Release()
	var strs [numStringEventCols]*array.StringBuilder
	for i := range strs {
		strs[i] = rb.Field(i).(*array.StringBuilder)
	}
	var (
		eventTS   = rb.Field(colEventTS).(*array.TimestampBuilder)
		seq       = rb.Field(colSeq).(*array.Int64Builder)
		topic     = rb.Field(colKafkaTopic).(*array.StringBuilder)
		partition = rb.Field(colKafkaPartition).(*array.Int32Builder)
		offset    = rb.Field(colKafkaOffset).(*array.Int64Builder)
		kafkaTS   = rb.Field(colKafkaTimestamp).(*array.TimestampBuilder)
		ingested  = rb.Field(colIngestedAt).(*array.TimestampBuilder)
		status    = rb.Field(colEnrichStatus).(*array.StringBuilder)
	)
	msgs := make([][]byte, 1024)
	for i := range msgs {
		if msgs[i] = benchMessage(i); len(msgs[i]) != 333 {
			b.Fatalf("message is %d bytes, want 333", len(msgs[i]))
		}
	}
	m := Meta{Topic: "clicks", Partition: 7, Timestamp: time.Now()}
	now := time.Now()

	b.SetBytes(333)
	b.ReportAllocs()
	rows := 0
	for i := 0; b.Loop(); i++ {
		var r row
		if err := bld.decode(msgs[i%len(msgs)], &r); err != nil {
			b.Fatal(err)
		}
		for j, sb := range strs {
			if r.strValid[j] {
				sb.BinaryBuilder.Append(r.strs[j])
			} else {
				sb.AppendNull()
			}
		}
		eventTS.Append(arrow.Timestamp(r.eventTS))
		seq.Append(r.seq)
		topic.BinaryBuilder.Append(stringBytes(m.Topic))
		partition.Append(m.Partition)
		offset.Append(int64(i))
		kafkaTS.Append(arrow.Timestamp(m.Timestamp.UnixMicro()))
		ingested.Append(arrow.Timestamp(now.UnixMicro()))
		status.BinaryBuilder.Append(stringBytes("ok"))
		if rows++; rows == 64<<10 {
			rb.NewRecordBatch().Release()
			rows = 0
		}
	}
}

// benchMessage is a 333-byte clickstream message, like the external tests'.
func benchMessage(i int) []byte {
	m := []byte(`{"event_id":"00000000-7a4d-4c1e-9a53-0c6b1d2e3f40","session_id":"s-0000000","user_id":"u-0000000",` +
		`"event_type":"page_view","url":"https://shop.example.com/p/000000?q=xxxxxxxxxxxxxxxxxxxxxx","referrer":"https://www.google.com/",` +
		`"user_agent":"Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/120.0","ts":1732860000000,"seq":1}`)
	const hex = "0123456789abcdef"
	for j := range 8 {
		m[len(`{"event_id":"`)+j] = hex[(i>>(4*(7-j)))&15]
	}
	return m
}
