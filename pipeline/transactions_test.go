package pipeline_test

// Topics written by transactional producers: committed transactions are
// ingested, aborted ones are not, and the transactions' markers are no
// records. kfake keeps transactions as Apache Kafka does: a control batch
// for each marker, the aborted transactions listed in read_committed
// fetches, and the last stable offset held at an open transaction's start.

import (
	"fmt"
	"hash/crc32"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
)

// txnValue is the clickstream value of the record called name.
func txnValue(name string) []byte {
	return fmt.Appendf(nil, `{"event_id":"%s","session_id":"s","user_id":"u-%s","event_type":"click","ts":1700000000000}`, name, name)
}

// produceTxn writes one transaction of cl (a transactional client): a
// record per name to its partition, then commits it (*commit true), aborts
// it, or, with commit nil, leaves it open.
func produceTxn(t *testing.T, cl *kgo.Client, records map[int32][]string, commit *bool) {
	t.Helper()
	ctx := t.Context()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, p := range slices.Sorted(maps.Keys(records)) {
		for _, name := range records[p] {
			r := &kgo.Record{Topic: "clicks", Partition: p, Key: []byte(name), Value: txnValue(name)}
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if commit == nil {
		return
	}
	end := kgo.TryAbort
	if *commit {
		end = kgo.TryCommit
	}
	if err := cl.EndTransaction(ctx, end); err != nil {
		t.Fatal(err)
	}
}

// TestTransactionalTopic: partition 0 holds a committed transaction (offsets
// 0, 1; its marker 2), an aborted one (3, 4; marker 5), a record written
// without a transaction (6) and a committed transaction last (7; marker 8,
// the log's last offset); partition 1 only an aborted transaction (0..2;
// marker 3); partition 2 a transaction still open. The scheduled run
// ingests offsets 0, 1, 6 and 7 of partition 0, ends (the trailing marker
// is covered: the table's watermark reaches the log's end) without waiting
// for the open transaction, and verify finds the markers and the aborted
// records absent, not lost. Before, kafka-go returned the aborted records as
// rows and each marker as a record, a dead letter (malformed_json), and
// read on to the open transaction's records.
func TestTransactionalTopic(t *testing.T) {
	for _, tc := range []struct {
		enriched bool
		codec    kgo.CompressionCodec
	}{{false, kgo.NoCompression()}, {false, kgo.GzipCompression()}, {true, kgo.NoCompression()}} {
		enriched := tc.enriched
		t.Run(fmt.Sprintf("enriched=%v/gzip=%v", enriched, tc.codec != kgo.NoCompression()), func(t *testing.T) {
			var ecfg *enrich.Config
			if enriched {
				// A fixed 100 ms lookup: records wait in their lanes, and
				// the markers pass the lanes behind them.
				_, url := startServer(t, enrich.ServerConfig{P50: 100 * time.Millisecond, P99: time.Millisecond})
				ecfg = enrichConfig(url, enrich.PolicyPause)
			}
			j := newJob(t, 0, fastCommit, ecfg)
			ctx := t.Context()
			txn := func(id string) *kgo.Client {
				cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.TransactionalID(id),
					kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerBatchCompression(tc.codec))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(cl.Close)
				return cl
			}
			commit, abort := true, false
			a, b := txn("a"), txn("b")
			produceTxn(t, a, map[int32][]string{0: {"e0", "e1"}}, &commit)
			produceTxn(t, a, map[int32][]string{0: {"e2", "e3"}, 1: {"f0", "f1", "f2"}}, &abort)
			plain, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
			if err != nil {
				t.Fatal(err)
			}
			defer plain.Close()
			if err := plain.ProduceSync(ctx, &kgo.Record{Topic: "clicks", Partition: 0, Value: txnValue("e4")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
			produceTxn(t, a, map[int32][]string{0: {"e5"}}, &commit)
			produceTxn(t, b, map[int32][]string{2: {"g0"}}, nil)

			end, err := pipeline.EndOffsets(ctx, j.cfg.Kafka)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[int32]int64{0: 9, 1: 4, 2: 0, 3: 0}; !maps.Equal(end, want) {
				t.Fatalf("end offsets %v, want %v (the last stable offsets)", end, want)
			}
			// A replay of the partitions' logs reads the committed
			// records only, and ends at the trailing markers.
			rep, err := pipeline.Replay(ctx, j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: 9}, {Partition: 1, From: 0, To: 4}},
				pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if rep.Read != 4 || rep.Inserted != 4 {
				t.Fatalf("replay: %+v, want the 4 committed records read and inserted", rep)
			}
			m := runScheduled(t, j, "the scheduled run over transactions")

			ids := rowIDs(t, j.tbl)
			slices.SortFunc(ids, func(x, y [2]int64) int { return int(x[0]-y[0])*100 + int(x[1]-y[1]) })
			if want := [][2]int64{{0, 0}, {0, 1}, {0, 6}, {0, 7}}; !slices.Equal(ids, want) {
				t.Fatalf("rows %v, want %v: the committed records only", ids, want)
			}
			if n := m.Stats().Skipped.Load(); n != 4 {
				t.Fatalf("the run skipped %d rows, want the 4 the replay inserted", n)
			}
			if n := m.Stats().DeadLettered.Load(); n != 0 {
				t.Fatalf("%d dead letters, want none: markers are no records", n)
			}
			if n := m.Stats().TransactionSkipped.Load(); n != 9 {
				t.Fatalf("%d offsets skipped as markers or aborted, want 9", n)
			}
			wm, err := j.tbl.Watermarks(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if want := map[int32]int64{0: 9, 1: 4}; !maps.Equal(wm["clicks"], want) {
				t.Fatalf("watermarks %v, want %v: past the trailing markers", wm["clicks"], want)
			}
			// Verify counts coverage from the first offset the job's
			// commits covered (floe.first): partition 0's markers and
			// aborted records (5), and partition 1's aborted records and
			// marker (4), which hold no row at all.
			vr := verifyWithDeadLetters(t, j)
			if !vr.OK() || vr.AbsentFromLog != 9 {
				t.Fatalf("verify: OK %v, absent %d, want OK and 9 absent (the markers and aborted records of partitions 0 and 1)", vr.OK(), vr.AbsentFromLog)
			}
		})
	}
}

// openTxnLog writes to partition 0 of j's topic a plain record (e0, at
// at(0)), a record of a transaction left open (g0, at(1)) and a plain
// record (e1, at(2)): the partition's last stable offset is 1, its high
// watermark 3. It returns the transaction's client.
func openTxnLog(t *testing.T, j *job, at func(i int) time.Time) *kgo.Client {
	t.Helper()
	ctx := t.Context()
	plain, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	open, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.TransactionalID("open"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(open.Close)
	rec := func(name string, i int) *kgo.Record {
		return &kgo.Record{Topic: "clicks", Partition: 0, Key: []byte(name), Value: txnValue(name), Timestamp: at(i)}
	}
	if err := plain.ProduceSync(ctx, rec("e0", 0)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := open.ProduceSync(ctx, rec("g0", 1)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := plain.ProduceSync(ctx, rec("e1", 2)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	return open
}

// TestReplayTimesBeforeAnOpenTransaction: a replay of the times up to
// before e1 resolves to the committed offsets [0, 1) and is accepted. The
// offsets for the times were looked up uncommitted: e1's offset, 2, past
// the last stable offset, which replay then refused as beyond the log's
// end.
func TestReplayTimesBeforeAnOpenTransaction(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	now := time.Now().Truncate(time.Millisecond)
	openTxnLog(t, j, func(i int) time.Time { return now.Add(time.Duration(i-3) * time.Hour) })
	ranges, _, err := pipeline.ResolveTimes(t.Context(), j.cfg.Kafka, []int32{0}, now.Add(-4*time.Hour), now.Add(-90*time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	if want := []pipeline.ReplayRange{{Partition: 0, From: 0, To: 1}}; !slices.Equal(ranges, want) {
		t.Fatalf("ranges %+v, want %+v", ranges, want)
	}
	if err := pipeline.CheckReplay(t.Context(), j.cfg, j.sc, ranges, pipeline.ReplayOptions{}); err != nil {
		t.Fatalf("the replay floe resolved is refused: %v", err)
	}
}

// TestWatermarkPastAnOpenTransaction: a table whose watermark passed an
// open transaction's first offset (written by floe before it read
// committed) is not taken for a recreated topic's: the scheduled run,
// whose target is the last stable offset, finds it caught up. Checked
// against the last stable offset, it was refused as "recreated or
// truncated: ingest it into a new table" until the transaction ended.
func TestWatermarkPastAnOpenTransaction(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	ctx := t.Context()
	openTxnLog(t, j, func(int) time.Time { return time.Now() })
	if _, err := j.tbl.Commit(ctx, []lakehouse.Part{{Range: lakehouse.Range{Topic: "clicks", Partition: 0, From: 0, To: 3}, Resume: lakehouse.NoWatermark}}); err != nil {
		t.Fatal(err)
	}
	runScheduled(t, j, "the scheduled run of a caught-up table")
	if err := pipeline.CheckReplay(ctx, j.cfg, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: 1}}, pipeline.ReplayOptions{}); err != nil {
		t.Fatalf("replay refused: %v", err)
	}
	err := pipeline.CheckReplay(ctx, j.cfg, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: 3}}, pipeline.ReplayOptions{})
	if want := "a transaction still open holds the offsets from 1 on"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("replay past the open transaction: %v, want an error saying %q", err, want)
	}
}

// TestLatestStartBesideAnOpenTransaction: a job started with start_offset
// latest while a transaction is open starts at the last stable offset, as
// Kafka's Java consumer (read_committed, auto.offset.reset=latest) does:
// the transaction's record and the plain record written after it began
// are ingested once it commits. Pinned at the high watermark, they were
// never read, and verify could not tell (the table's range starts at the
// pin).
func TestLatestStartBesideAnOpenTransaction(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	j.cfg.Kafka.StartOffset = "latest"
	ctx := t.Context()
	open := openTxnLog(t, j, func(int) time.Time { return time.Now() })
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer func() { stop(); <-done }()
	var pin map[int32]int64
	waitFor(t, 30*time.Second, "the pin of partition 0", func() bool {
		pin, _ = pipeline.GroupOffsets(ctx, j.cfg.Kafka, []int{0})
		_, ok := pin[0]
		return ok
	})
	if pin[0] != 1 {
		t.Fatalf("latest pinned at %d, want 1, the last stable offset", pin[0])
	}
	if err := open.EndTransaction(ctx, kgo.TryCommit); err != nil { // its marker at 3
		t.Fatal(err)
	}
	plain, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if err := plain.ProduceSync(ctx, &kgo.Record{Topic: "clicks", Partition: 0, Value: txnValue("e2")}).FirstErr(); err != nil { // 4
		t.Fatal(err)
	}
	waitCaughtUp(t, j.tbl, map[int32]int64{0: 5}, 30*time.Second)
	ids := rowIDs(t, j.tbl)
	slices.SortFunc(ids, func(x, y [2]int64) int { return int(x[1] - y[1]) })
	if want := [][2]int64{{0, 1}, {0, 2}, {0, 4}}; !slices.Equal(ids, want) {
		t.Fatalf("rows %v, want %v: g0, e1 and e2, what the job can read since it started", ids, want)
	}
}

// markerBatch encodes a transaction's commit marker at off: a control
// batch of producer 9 holding one control record.
func markerBatch(off int64) []byte {
	r := kmsg.Record{Key: []byte{0, 0, 0, 1}, Value: []byte{0, 0, 0, 0, 0, 0}} // version 0, COMMIT
	r.Length = int32(len(r.AppendTo(nil)) - 1)
	ts := time.Now().UnixMilli()
	b := kmsg.RecordBatch{FirstOffset: off, Magic: 2, Attributes: 0x30, FirstTimestamp: ts, MaxTimestamp: ts,
		ProducerID: 9, NumRecords: 1, Records: r.AppendTo(nil)}
	b.Length = int32(len(b.AppendTo(nil)) - 12)
	b.CRC = int32(crc32.Checksum(b.AppendTo(nil)[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b.AppendTo(nil)
}

// TestCompactedOffsetsBeforeAMarker: the log cleaner removed offsets 5..7,
// just before a transaction's marker at 8 (a compacted transactional
// topic, as Kafka Streams' exactly-once changelogs are). The run counts
// them as skipped by the log (floe_offset_gaps_total, its warning), the
// marker alone as a transaction's offset, and verify finds all four
// absent. The marker's batch told only its last offset: the removed
// offsets were counted as the transaction's, and not reported; and still
// were with enrichment, whose lane (the marker waiting behind records
// that wait for their lookups) dropped where the batch began.
func TestCompactedOffsetsBeforeAMarker(t *testing.T) {
	for _, enriched := range []bool{false, true} {
		t.Run(fmt.Sprintf("enriched=%v", enriched), func(t *testing.T) {
			var ec *enrich.Config
			if enriched {
				_, url := startServer(t, enrich.ServerConfig{P50: 400 * time.Millisecond, P99: 100 * time.Millisecond})
				ec = enrichConfig(url, enrich.PolicyPause)
			}
			j := newJob(t, 0, fastCommit, ec)
			segment := append(cleanedBatch(t, 0, offsetsIn(0, 5), 4, false), markerBatch(8)...)
			serveCleanedLog(t, j, 30, 0, func(offset int64) []byte {
				if offset < 9 {
					return segment
				}
				return nil
			})
			m := runScheduled(t, j, "the scheduled run over the compacted transactional log")
			if gaps, txn := m.Stats().OffsetGaps.Load(), m.Stats().TransactionSkipped.Load(); gaps != 3 || txn != 1 {
				t.Fatalf("%d offsets skipped by the log and %d by transactions, want 3 and 1", gaps, txn)
			}
			rep := verifyWithDeadLetters(t, j)
			if !rep.OK() || rep.AbsentFromLog != 4 {
				t.Fatalf("verify: OK %v, absent %d, want OK and 4 absent", rep.OK(), rep.AbsentFromLog)
			}
		})
	}
}

// TestReplayProgressOfATransactionalRange: a replay's progress
// (ReplayOptions.Read, out of the ranges' offsets) ends at its total on a
// transactional topic too. It counted records, not the markers between
// them: a finished replay of 5 one-record transactions stopped at 5 of 10,
// its final line with an ETA.
func TestReplayProgressOfATransactionalRange(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.TransactionalID("a"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	commit := true
	for range 5 {
		produceTxn(t, cl, map[int32][]string{0: {"e"}}, &commit)
	}
	end, err := pipeline.EndOffsets(t.Context(), j.cfg.Kafka)
	if err != nil {
		t.Fatal(err)
	}
	var read atomic.Int64
	total := end[0]
	res, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: end[0]}},
		pipeline.ReplayOptions{Read: &read}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("replay done: %+v; progress %d of %d", res, read.Load(), total)
	if read.Load() != total {
		t.Fatalf("a finished replay's progress is %d of %d (%.0f %%)", read.Load(), total, 100*float64(read.Load())/float64(total))
	}
}
