package pipeline_test

// The record batches Apache Kafka's log cleaner leaves behind, read through
// the patched kafka-go reader (third_party/kafka-go). kfake's own
// compaction (TestCompactedTopicVerifies) rewrites batches whole, so these
// tests answer partition 0's fetches as Kafka serves a cleaned log: one
// segment per answer, a cleaned batch keeping its compression and its
// lastOffsetDelta, and a batch the cleaner emptied kept as a header with no
// record (for its idempotent producer's state).

import (
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"hash/crc32"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// cleanedValue is the clickstream value of the record at off.
func cleanedValue(off int64) []byte {
	return fmt.Appendf(nil, `{"event_id":"e%d","session_id":"s","user_id":"u","event_type":"click","ts":1700000000000,"seq":%d}`, off, off)
}

// cleanedBatch encodes a v2 record batch at base holding the records of
// offsets (none: an emptied batch), with lastOffsetDelta last as the
// producer wrote it, gzip-compressed or not.
func cleanedBatch(t *testing.T, base int64, offsets []int64, last int32, gzipped bool) []byte {
	t.Helper()
	var records []byte
	for _, off := range offsets {
		r := kmsg.Record{OffsetDelta: int32(off - base), Key: fmt.Appendf(nil, "k%d", off), Value: cleanedValue(off)}
		r.Length = int32(len(r.AppendTo(nil)) - 1) // less the one byte of Length 0
		records = r.AppendTo(records)
	}
	var attrs int16
	if gzipped {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		if _, err := zw.Write(records); err != nil {
			t.Fatal(err)
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		records, attrs = buf.Bytes(), 1
	}
	ts := time.Now().UnixMilli()
	b := kmsg.RecordBatch{FirstOffset: base, Magic: 2, Attributes: attrs, LastOffsetDelta: last,
		FirstTimestamp: ts, MaxTimestamp: ts, ProducerID: 7, NumRecords: int32(len(offsets)), Records: records}
	b.Length = int32(len(b.AppendTo(nil)) - 12) // less FirstOffset and Length
	// The CRC covers the batch from its Attributes (byte 21) on.
	b.CRC = int32(crc32.Checksum(b.AppendTo(nil)[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}

// offsetsIn returns the offsets of [from, to).
func offsetsIn(from, to int64) []int64 {
	var out []int64
	for off := from; off < to; off++ {
		out = append(out, off)
	}
	return out
}

// serveCleanedLog produces n records to partition 0 of j's topic, deletes
// those below logStart, and answers each fetch of partition 0 at an offset
// cleaned has batches for with them (one segment of the cleaned log), the
// others from kfake's log.
func serveCleanedLog(t *testing.T, j *job, n, logStart int64, cleaned func(offset int64) []byte) {
	t.Helper()
	ctx := t.Context()
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for off := range n {
		r := &kgo.Record{Topic: "clicks", Partition: 0, Key: fmt.Appendf(nil, "k%d", off), Value: cleanedValue(off)}
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if logStart > 0 {
		if err := j.cl.DeleteRecords(ctx, "clicks", map[int32]int64{0: logStart}); err != nil {
			t.Fatal(err)
		}
	}
	kf := j.cl.Kfake()
	kf.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		req := r.(*kmsg.FetchRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic != "clicks" || len(req.Topics[0].Partitions) != 1 ||
			req.Topics[0].Partitions[0].Partition != 0 {
			return nil, nil, false
		}
		offset := req.Topics[0].Partitions[0].FetchOffset
		p := kmsg.NewFetchResponseTopicPartition()
		p.HighWatermark, p.LastStableOffset, p.LogStartOffset = n, n, logStart
		if offset < logStart {
			p.ErrorCode = kerr.OffsetOutOfRange.Code
		} else if p.RecordBatches = cleaned(offset); p.RecordBatches == nil {
			return nil, nil, false
		}
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.Partitions = "clicks", []kmsg.FetchResponseTopicPartition{p}
		resp := req.ResponseKind().(*kmsg.FetchResponse)
		resp.Topics = append(resp.Topics, rt)
		return resp, nil, true
	})
}

// runCleanedLog runs j as a scheduled job to the topic's end and checks
// that verify finds every record of the log in the table and absent
// offsets absent from it.
func runCleanedLog(t *testing.T, j *job, absent int64) {
	t.Helper()
	runScheduled(t, j, "the scheduled run over the cleaned log")
	rep := verifyWithDeadLetters(t, j)
	var out strings.Builder
	rep.WriteText(&out)
	if !rep.OK() || rep.AbsentFromLog != absent {
		t.Fatalf("verify: OK %v, absent %d, want OK and %d absent:\n%s", rep.OK(), rep.AbsentFromLog, absent, out.String())
	}
}

// TestCleanedBatchEndingAFetchIsPassed: a segment of the cleaned log ends
// with a batch whose last records (8, 9) the cleaner removed; the batch
// keeps its lastOffsetDelta, 9, and the reader goes on at 10. Compressed,
// the reader fetched offset 8 for ever: the partition stalled without an
// error or a log line.
func TestCleanedBatchEndingAFetchIsPassed(t *testing.T) {
	for _, gzipped := range []bool{false, true} {
		t.Run(fmt.Sprintf("gzip=%v", gzipped), func(t *testing.T) {
			j := newJob(t, 0, fastCommit, nil)
			segment := cleanedBatch(t, 0, offsetsIn(0, 8), 9, gzipped)
			serveCleanedLog(t, j, 30, 0, func(offset int64) []byte {
				if offset < 10 {
					return segment
				}
				return nil
			})
			runCleanedLog(t, j, 2)
		})
	}
}

// TestEmptiedBatchAloneInAFetchIsPassed: a segment of the cleaned log ends
// with a batch the cleaner emptied (offsets 10..14), which the fetch at 10
// answers alone. The reader rewound to offset 1 (it jumped past the last
// offset of the batches it had read records of, none), then stopped the
// partition, failed with records out of order or looped.
func TestEmptiedBatchAloneInAFetchIsPassed(t *testing.T) {
	for _, logStart := range []int64{0, 5} {
		t.Run(fmt.Sprintf("log-start=%d", logStart), func(t *testing.T) {
			j := newJob(t, 0, fastCommit, nil)
			emptied := cleanedBatch(t, 10, nil, 4, false)
			segment := append(cleanedBatch(t, logStart, offsetsIn(logStart, 10), int32(9-logStart), false), emptied...)
			serveCleanedLog(t, j, 30, logStart, func(offset int64) []byte {
				switch {
				case offset < 10:
					return segment
				case offset < 15:
					return emptied
				}
				return nil
			})
			runCleanedLog(t, j, 5)
		})
	}
}

// TestEmptiedBatchesInARowAreSkipped: two batches in a row the cleaner
// emptied (two producers' last batches, 10..14 and 15..19), then one with
// records. The reader parsed the header of the third batch as a record and
// panicked in its own goroutine ("markRead: negative count"): floe crashed,
// and again at every start.
func TestEmptiedBatchesInARowAreSkipped(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	var segment []byte
	for _, b := range [][]byte{
		cleanedBatch(t, 0, offsetsIn(0, 10), 9, false),
		cleanedBatch(t, 10, nil, 4, false),
		cleanedBatch(t, 15, nil, 4, false),
		cleanedBatch(t, 20, offsetsIn(20, 30), 9, false),
	} {
		segment = append(segment, b...)
	}
	serveCleanedLog(t, j, 30, 0, func(offset int64) []byte {
		if offset < 20 {
			return segment
		}
		return nil
	})
	runCleanedLog(t, j, 10)
}

// TestReplayOfAnEmptiedTailEnds replays ranges of a cleaned log that end in
// a batch the cleaner emptied (offsets 25..29, the last of the log): the
// replay commits what the log holds and ends. It waited for a record at or
// after the range's end for ever: the reader passes the emptied batch
// without returning a record, and the log has none after it.
func TestReplayOfAnEmptiedTailEnds(t *testing.T) {
	pipeline.SetReplayIdle(t, 200*time.Millisecond)
	j := newJob(t, 0, fastCommit, nil)
	segment := append(cleanedBatch(t, 0, offsetsIn(0, 25), 24, false), cleanedBatch(t, 25, nil, 4, false)...)
	serveCleanedLog(t, j, 30, 0, func(offset int64) []byte {
		if offset < 30 {
			return segment
		}
		return nil
	})
	for _, tc := range []struct {
		r        pipeline.ReplayRange
		inserted int64
	}{
		{pipeline.ReplayRange{Partition: 0, From: 20, To: 30}, 5},
		{pipeline.ReplayRange{Partition: 0, From: 26, To: 30}, 0}, // within the emptied batch
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
		res, err := pipeline.Replay(ctx, j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{tc.r}, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
		cancel()
		if err != nil || res.Read != tc.inserted || res.Inserted != tc.inserted {
			t.Errorf("replay of [%d, %d): %+v, %v; want %d read and inserted", tc.r.From, tc.r.To, res, err, tc.inserted)
		}
	}
}

// TestScheduledRunOverAnEmptiedTailEnds: the log's last batch (25..29) is
// one the log cleaner emptied (an idempotent producer's last tombstones,
// removed after delete.retention.ms): the end offset is 30, the last record
// 24. The run covers 25..29 as compacted away and ends, whether the
// emptied batch follows the records in a fetch or starts one (Kafka
// answers from the batch holding the fetch offset: a fetch at 25 gets it
// alone). The reader passed the batch without a word, the watermark stayed
// at 25, and the run waited for ever.
func TestScheduledRunOverAnEmptiedTailEnds(t *testing.T) {
	records, emptied := offsetsIn(0, 25), []int64(nil)
	for _, alone := range []bool{false, true} {
		t.Run(fmt.Sprintf("alone=%v", alone), func(t *testing.T) {
			j := newJob(t, 0, fastCommit, nil)
			head := cleanedBatch(t, 0, records, 24, false)
			if !alone {
				head = append(head, cleanedBatch(t, 25, emptied, 4, false)...)
			}
			serveCleanedLog(t, j, 30, 0, func(offset int64) []byte {
				switch {
				case offset < 25:
					return head
				case offset < 30:
					return cleanedBatch(t, 25, emptied, 4, false)
				}
				return nil
			})
			m := runScheduled(t, j, "the scheduled run over a log ending in an emptied batch")
			if gaps := m.Stats().OffsetGaps.Load(); gaps != 5 {
				t.Errorf("%d offsets skipped by the log, want 5", gaps)
			}
			runCleanedLog(t, j, 5)
		})
	}
}

// TestScheduledRunEndsWhenRetentionEmptiesThePartitions: retention deletes
// every record below the run's end offsets after the run looked for
// partitions with nothing to read, before they were fetched. The run ends:
// it waited for ever for records no longer in the log.
func TestScheduledRunEndsWhenRetentionEmptiesThePartitions(t *testing.T) {
	for _, committed := range []bool{false, true} {
		t.Run(fmt.Sprintf("watermark=%v", committed), func(t *testing.T) {
			j := newJob(t, 400, fastCommit, nil)
			if committed {
				// The table holds the first 400 records: the run reads
				// the next 400 from its watermarks.
				runUntilCaughtUp(t, j)
				if _, err := j.cl.ProduceRate(t.Context(), "clicks", clickgen.New(clickgen.Config{Sessions: 100, Seed: 4}), 400, 0); err != nil {
					t.Fatal(err)
				}
				var err error
				if j.end, err = j.cl.EndOffsets(t.Context(), "clicks"); err != nil {
					t.Fatal(err)
				}
			}
			tbl, fc := faultyTable(t, j)
			fc.Outage(true) // holds the generation in its watermark read
			m, err := pipeline.NewMember(j.cfg, tbl, j.sc, pipeline.UntilOffsets(j.end))
			if err != nil {
				t.Fatal(err)
			}
			done, stop := startRun(m)
			defer stop()
			waitFor(t, 30*time.Second, "the member did not try the watermarks", func() bool { return fc.FailedLoads() >= 3 })
			if err := j.cl.DeleteRecords(t.Context(), "clicks", j.end); err != nil {
				t.Fatal(err)
			}
			fc.Outage(false)
			waitRun(t, done, 60*time.Second, "the scheduled run whose partitions retention emptied did not end")
		})
	}
}
