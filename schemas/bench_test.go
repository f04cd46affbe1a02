package schemas_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/valyala/fastjson"
)

// benchMessages are distinct realistic clickstream messages of 333 bytes, the
// size the performance targets in DESIGN.md are measured with.
func benchMessages(b *testing.B) [][]byte {
	b.Helper()
	msgs := make([][]byte, 1024)
	for i := range msgs {
		msgs[i] = message(i, 333)
		if len(msgs[i]) != 333 {
			b.Fatalf("message %d is %d bytes", i, len(msgs[i]))
		}
	}
	return msgs
}

// benchBatchRows is the batch size BenchmarkAppend flushes at, so that its
// memory stays bounded and the cost of NewRecord is included, amortised.
const benchBatchRows = 64 << 10

// BenchmarkAppend measures the per-record decode+append cost. The
// "fastjson-parse-only" sub-benchmark is the baseline in the same run: the
// bare parse of the same bytes, which Append can only add to.
func BenchmarkAppend(b *testing.B) {
	msgs := benchMessages(b)

	b.Run("fastjson-parse-only", func(b *testing.B) {
		var p fastjson.Parser
		b.SetBytes(333)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := p.ParseBytes(msgs[i%len(msgs)]); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("append", func(b *testing.B) {
		s := clickstream(b)
		bld := s.NewBuilder(memory.DefaultAllocator, 0)
		defer bld.Release()
		// Measure the steady state: one batch first, so buffers start at
		// the size of the last batch, as they do in a running pipeline.
		for i := range benchBatchRows {
			if err := bld.Append(msgs[i%len(msgs)], testMeta(int64(i)), testIngested, "ok"); err != nil {
				b.Fatal(err)
			}
		}
		bld.NewRecord().Release()
		b.SetBytes(333)
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if err := bld.Append(msgs[i%len(msgs)], testMeta(int64(i)), testIngested, "ok"); err != nil {
				b.Fatal(err)
			}
			if bld.Len() == benchBatchRows {
				bld.NewRecord().Release()
			}
		}
	})

	b.Run("append-invalid", func(b *testing.B) {
		// The dead-letter path: a message that fails late, on its last field.
		bad := []byte(string(msgs[0][:len(msgs[0])-2]) + `"0"}`) // "seq":0} becomes "seq":"0"}
		s := clickstream(b)
		bld := s.NewBuilder(memory.DefaultAllocator, 0)
		defer bld.Release()
		b.SetBytes(int64(len(bad)))
		b.ReportAllocs()
		for b.Loop() {
			if err := bld.Append(bad, testMeta(0), testIngested, "ok"); err == nil {
				b.Fatal("bad message accepted")
			}
		}
	})
}

// BenchmarkNewRecord measures handing a full batch over as a record batch
// and releasing it. Filling the batch is part of each op (stopping the timer
// around it would make the benchmark run for minutes), so the NewRecord cost
// itself is timed separately and reported as newrecord-ns/batch and
// newrecord-ns/row; ns/op is fill plus hand-over.
func BenchmarkNewRecord(b *testing.B) {
	msgs := benchMessages(b)
	for _, rows := range []int{8 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("rows=%d", rows), func(b *testing.B) {
			s := clickstream(b)
			bld := s.NewBuilder(memory.DefaultAllocator, 0)
			defer bld.Release()
			var spent time.Duration
			batches := 0
			b.ReportAllocs()
			for b.Loop() {
				for i := range rows {
					if err := bld.Append(msgs[i%len(msgs)], testMeta(int64(i)), testIngested, "ok"); err != nil {
						b.Fatal(err)
					}
				}
				start := time.Now()
				rec := bld.NewRecord()
				rec.Release()
				spent += time.Since(start)
				batches++
			}
			b.ReportMetric(float64(spent.Nanoseconds())/float64(batches), "newrecord-ns/batch")
			b.ReportMetric(float64(spent.Nanoseconds())/float64(batches*rows), "newrecord-ns/row")
		})
	}
}
