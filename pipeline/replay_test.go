package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestReplayHalfPresent replays a range whose first half is already in the
// table: the half is skipped, the rest inserted, no watermark moves, and a
// live member started afterwards commits each offset exactly once.
func TestReplayHalfPresent(t *testing.T) {
	j := newJob(t, 2000, pipeline.CommitConfig{Interval: pipeline.Duration(200 * time.Millisecond)}, nil)
	log := slog.New(slog.DiscardHandler)
	half := j.end[0] / 2
	first, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: half}}, pipeline.ReplayOptions{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if first.Inserted != half || first.Skipped != 0 {
		t.Fatalf("first replay: %+v, want %d inserted", first, half)
	}
	// Two partitions at once: partition 0 is half present.
	second, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc,
		[]pipeline.ReplayRange{{Partition: 0, From: 0, To: j.end[0]}, {Partition: 1, From: 0, To: j.end[1]}}, pipeline.ReplayOptions{}, log)
	if err != nil {
		t.Fatal(err)
	}
	if second.Skipped != half || second.Inserted != j.end[0]-half+j.end[1] || second.Read != j.end[0]+j.end[1] {
		t.Fatalf("second replay: %+v, want %d skipped and %d inserted", second, half, j.end[0]-half+j.end[1])
	}
	if wm, _ := j.tbl.Watermarks(t.Context()); len(wm) != 0 {
		t.Fatalf("replays moved watermarks: %v", wm)
	}

	// The live job then starts from no watermark: the MERGE skips what the
	// replays inserted, and every offset is in the table once.
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- m.Run(ctx) }()
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := m.Stats().Skipped.Load(); got != j.end[0]+j.end[1] {
		t.Fatalf("live job skipped %d rows, want the %d replayed", got, j.end[0]+j.end[1])
	}
	var total int64
	for _, o := range j.end {
		total += o
	}
	if n := distinctIDs(t, j.tbl); int64(n) != total {
		t.Fatalf("%d distinct ids, want %d", n, total)
	}
}

func TestReplayRejectsBadRanges(t *testing.T) {
	j := newJob(t, 100, pipeline.CommitConfig{}, nil)
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		r    pipeline.ReplayRange
		want string
	}{
		{pipeline.ReplayRange{Partition: 0, From: 5, To: 5}, "from < to"},
		{pipeline.ReplayRange{Partition: 9, From: 0, To: 1}, "no partition 9"},
		{pipeline.ReplayRange{Partition: 0, From: 0, To: 1 << 40}, "beyond the end"},
	} {
		if _, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{tc.r}, pipeline.ReplayOptions{}, log); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Replay(%+v) = %v, want an error with %q", tc.r, err, tc.want)
		}
	}
}

// TestReplayRefusesDeletedOffsets: a range that starts below the log's
// start (retention deleted those records) is refused, naming where the log
// starts, where the reader used to start at the log's start silently or,
// with nothing left of the range, wait forever; a range from the log start
// is replayed.
func TestReplayRefusesDeletedOffsets(t *testing.T) {
	j := newJob(t, 400, pipeline.CommitConfig{}, nil)
	// All of partition 0, and the head of partition 1.
	if err := j.cl.DeleteRecords(t.Context(), "clicks", map[int32]int64{0: j.end[0], 1: 50}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	for _, tc := range []struct {
		r    pipeline.ReplayRange
		want string
	}{
		{pipeline.ReplayRange{Partition: 1, From: 0, To: 80}, "clicks/1 starts at offset 50 (retention deleted what came before): want from >= 50"},
		{pipeline.ReplayRange{Partition: 0, From: 0, To: 10}, fmt.Sprintf("clicks/0 starts at offset %d", j.end[0])},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		_, err := pipeline.Replay(ctx, j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{tc.r}, pipeline.ReplayOptions{}, log)
		cancel()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Replay(%+v) = %v, want an error with %q", tc.r, err, tc.want)
		}
	}
	res, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{{Partition: 1, From: 50, To: 80}}, pipeline.ReplayOptions{}, log)
	if err != nil || res.Read != 30 || res.Inserted != 30 {
		t.Fatalf("replay from the log start: %+v, %v; want 30 read and inserted", res, err)
	}
}

// TestReplayTimeRange resolves a time range through offsets-for-times: only
// the records produced after the range's start are replayed.
func TestReplayTimeRange(t *testing.T) {
	j := newJob(t, 500, pipeline.CommitConfig{}, nil)
	ctx := t.Context()
	time.Sleep(1100 * time.Millisecond)
	start := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(start) + 10*time.Millisecond)
	if _, err := j.cl.ProduceRate(ctx, "clicks", clickgen.New(clickgen.Config{Sessions: 50, Seed: 9}), 300, 0); err != nil {
		t.Fatal(err)
	}
	end, err := j.cl.EndOffsets(ctx, "clicks")
	if err != nil {
		t.Fatal(err)
	}
	ranges, trimmed, err := pipeline.ResolveTimes(ctx, j.cfg.Kafka, nil, start, start.Add(time.Hour))
	if err != nil || len(trimmed) != 0 {
		t.Fatalf("resolving: %v; trimmed %v, want none", err, trimmed)
	}
	var total int64
	for _, r := range ranges {
		if r.From != j.end[r.Partition] || r.To != end[r.Partition] {
			t.Errorf("partition %d resolved to [%d, %d), want [%d, %d)", r.Partition, r.From, r.To, j.end[r.Partition], end[r.Partition])
		}
		total += r.To - r.From
	}
	if total != 300 {
		t.Fatalf("the time range holds %d records, want the 300 produced after it began (%v)", total, ranges)
	}
	res, err := pipeline.Replay(ctx, j.cfg, j.tbl, j.sc, ranges, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if err != nil || res.Inserted != 300 {
		t.Fatalf("replay of the time range: %+v, %v; want 300 inserted", res, err)
	}
	if _, _, err := pipeline.ResolveTimes(ctx, j.cfg.Kafka, nil, start, start); err == nil {
		t.Fatal("an empty time range was accepted")
	}
	if _, _, err := pipeline.ResolveTimes(ctx, j.cfg.Kafka, []int32{7}, start, start.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "no partition 7") {
		t.Fatalf("unknown partition: %v", err)
	}
}

// TestResolveTimesFarBounds: a time range's bounds far from now resolve
// like near ones. kafka-go's TimeOffsetOf counts nanoseconds, which
// overflow past 2262: a --to-time of 2600 asked for 2015 (nothing in the
// range, exit 0), one of 9999-12-31 for 1816, a negative time the broker
// refused (Unsupported Version), as it did a --from-time before 1970.
func TestResolveTimesFarBounds(t *testing.T) {
	j := newJob(t, 200, pipeline.CommitConfig{}, nil)
	date := func(s string) time.Time {
		d, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	hourAgo := time.Now().Add(-time.Hour)
	for _, tc := range []struct{ from, to time.Time }{
		{hourAgo, date("2200-01-01T00:00:00Z")},
		{hourAgo, date("2600-01-01T00:00:00Z")},
		{hourAgo, date("9999-12-31T23:59:59Z")},
		{date("1960-01-01T00:00:00Z"), date("9999-12-31T23:59:59Z")},
		{date("1677-01-01T00:00:00Z"), date("2600-01-01T00:00:00Z")},
	} {
		ranges, _, err := pipeline.ResolveTimes(t.Context(), j.cfg.Kafka, nil, tc.from, tc.to)
		var total int64
		for _, r := range ranges {
			total += r.To - r.From
		}
		if err != nil || total != 200 {
			t.Errorf("[%s, %s): %d offsets in %v, %v; want the 200 records", tc.from.Format(time.RFC3339), tc.to.Format(time.RFC3339), total, ranges, err)
		}
	}
}

// TestResolveTimesNamesTrimmedStarts: a time range that starts at a
// partition's log start, retention having deleted records below, resolves
// from there — what is left — and says so (floe replay warns),
// where an offset range below the log start is refused. It was silent:
// "the last 7 days" of a topic kept 7 days replayed less than asked, exit
// 0. A partition whose log starts at 0 is not named.
func TestResolveTimesNamesTrimmedStarts(t *testing.T) {
	j := newJob(t, 200, pipeline.CommitConfig{}, nil)
	if err := j.cl.DeleteRecords(t.Context(), "clicks", map[int32]int64{0: 30}); err != nil {
		t.Fatal(err)
	}
	ranges, trimmed, err := pipeline.ResolveTimes(t.Context(), j.cfg.Kafka, nil, time.Now().Add(-time.Hour), time.Now().Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if len(trimmed) != 1 || trimmed[0].Partition != 0 || trimmed[0].LogStart != 30 {
		t.Fatalf("trimmed %+v, want partition 0 from its log start 30", trimmed)
	}
	if ranges[0].Partition != 0 || ranges[0].From != 30 || ranges[0].To != j.end[0] {
		t.Fatalf("ranges %v, want partition 0 from 30 to %d", ranges, j.end[0])
	}
}

// TestReplayReenrichAfterPassthrough: rows written with null enrichment
// during an outage under policy passthrough are repaired by a replay with
// Reenrich once the service answers: no skipped row, no duplicate, the
// watermarks untouched.
// TestReplayNeverDeadLettersLookups: under policy dlq, a replay during an
// outage stores rows without enrichment (as passthrough) rather than
// dead-lettering records whose rows may be in the table already.
func TestReplayNeverDeadLettersLookups(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	srv.SetOutage(true)
	j := newJob(t, 400, fastCommit, enrichConfig(url, enrich.PolicyDLQ))
	var ranges []pipeline.ReplayRange
	for p, e := range j.end {
		ranges = append(ranges, pipeline.ReplayRange{Partition: p, From: 0, To: e})
	}
	res, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, ranges, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if res.Read != 400 || res.Inserted != 400 || res.DeadLettered != 0 {
		t.Fatalf("replay during an outage under dlq: %+v; want 400 inserted, none dead-lettered", res)
	}
	for _, r := range readEnriched(t, j.tbl) {
		if r.status != "skipped" && r.status != "error" {
			t.Fatalf("a row stored with status %q during the outage", r.status)
		}
	}
}

func TestReplayReenrichAfterPassthrough(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	srv.SetOutage(true)
	j := newJob(t, 1000, fastCommit, enrichConfig(url, enrich.PolicyPassthrough))
	runUntilCaughtUp(t, j)
	unenriched := 0
	for _, r := range readEnriched(t, j.tbl) {
		if r.status == "skipped" || r.status == "error" {
			unenriched++
		}
	}
	if unenriched != 1000 {
		t.Fatalf("%d rows without enrichment after the outage, want 1000", unenriched)
	}
	before, _ := j.tbl.Watermarks(t.Context())

	srv.SetOutage(false)
	var ranges []pipeline.ReplayRange
	for p, e := range j.end {
		ranges = append(ranges, pipeline.ReplayRange{Partition: p, From: 0, To: e})
	}
	res, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, ranges, pipeline.ReplayOptions{Reenrich: true}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if res.Read != 1000 || res.Inserted != 0 || res.Skipped != 1000 || res.Replaced != 1000 {
		t.Fatalf("re-enrichment: %+v; want 1000 read, skipped by the MERGE and replaced", res)
	}
	rows := readEnriched(t, j.tbl)
	checkOnceInOrder(t, rows)
	if len(rows) != 1000 {
		t.Fatalf("%d rows after re-enrichment, want 1000", len(rows))
	}
	for _, r := range rows {
		if want := srv.Knows(r.user); (want && (r.status != "ok" || r.segment == "")) || (!want && r.status != "miss") {
			t.Fatalf("row %d/%d: status %q segment %q (service knows %s: %v)", r.partition, r.offset, r.status, r.segment, r.user, want)
		}
	}
	after, _ := j.tbl.Watermarks(t.Context())
	for p, e := range j.end {
		if w, _ := after.Get("clicks", p); w != e {
			t.Fatalf("partition %d watermark %d after re-enrichment, want %d (before: %v)", p, w, e, before)
		}
	}
}

// TestScheduledRunEndsWhenRetentionEmptiedAPartition: a scheduled run
// (--until-caught-up) whose end offsets include a partition retention has
// emptied (log start = end offset) ends once the others are committed, and
// without waiting for commit.interval: the last of the others to reach its
// end asks for the final flush. Nothing can be fetched from that partition;
// the run used to wait for its watermark to reach the end forever.
func TestScheduledRunEndsWhenRetentionEmptiedAPartition(t *testing.T) {
	j := newJob(t, 400, pipeline.CommitConfig{Interval: pipeline.Duration(30 * time.Second)}, nil)
	if j.end[0] == 0 {
		t.Fatal("partition 0 got no records")
	}
	// Retention deletes everything in partition 0.
	if err := j.cl.DeleteRecords(t.Context(), "clicks", map[int32]int64{0: j.end[0]}); err != nil {
		t.Fatal(err)
	}
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(j.end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	waitRun(t, done, 15*time.Second, "the scheduled run did not end (commit.interval is 30 s)")
	wm, err := j.tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for p, e := range j.end {
		if w, _ := wm.Get("clicks", p); p != 0 && w != e {
			t.Fatalf("partition %d committed up to %d, want its end %d", p, w, e)
		}
	}
}

// TestReplayCommitsDeadLettersWithinTheBounds: a replay commits whenever
// what it holds reaches commit.max_records or commit.max_bytes, counting
// dead letters (each holds its whole record) with the rows. It counted
// only the builder's rows, and no bytes: a range of records that cannot
// be decoded was held in memory until the range ended.
func TestReplayCommitsDeadLettersWithinTheBounds(t *testing.T) {
	for _, tc := range []struct {
		name   string
		commit pipeline.CommitConfig
		// commits wants at least one commit per this many records read.
		per int64
	}{
		{"max_records", pipeline.CommitConfig{MaxRecords: 50}, 50},
		{"max_bytes", pipeline.CommitConfig{MaxBytes: 8 << 10}, 60}, // records of a few hundred bytes
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 0, tc.commit, nil)
			gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 4, MalformedRate: 0.5})
			if _, err := j.cl.ProduceRate(t.Context(), "clicks", gen, 1600, 0); err != nil {
				t.Fatal(err)
			}
			end, err := j.cl.EndOffsets(t.Context(), "clicks")
			if err != nil {
				t.Fatal(err)
			}
			res, err := pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc,
				[]pipeline.ReplayRange{{Partition: 0, From: 0, To: end[0]}}, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if res.Read != end[0] || res.Inserted+res.DeadLettered != res.Read || res.DeadLettered < res.Read/4 {
				t.Fatalf("%+v: want %d read, each a row or a dead letter, many dead letters", res, end[0])
			}
			if res.Commits < res.Read/tc.per {
				t.Fatalf("%d records read (%d dead letters) in %d commits: want one per %d records at least", res.Read, res.DeadLettered, res.Commits, tc.per)
			}
		})
	}
}

// TestFieldRouteReplayLooksUpOnlyItsRecords replays a field route that
// takes none of the topic's records: it reads them all and looks up none,
// as its live member does. The replay used to look up every record it read
// and drop the other routes' ones only after their lookups.
func TestFieldRouteReplayLooksUpOnlyItsRecords(t *testing.T) {
	srv, url := startServer(t, enrich.ServerConfig{P50: enrich.NoLatency})
	r := newRouteRig(t)
	jobs := r.config(t, "floe", "", "", `enrich:
  url: `+url+`/lookup
  key: user_id
  fields: [{name: segment, type: string}]
routes:
  - topic: clicks
    where: {field: event_type, in: [no_such_type]}
    table: {name: shop.none}
  - topic: clicks
    where: {default: true}
    table: {name: shop.other}
`)
	end := r.produce(t, 600)
	job := jobs[0]
	r.run(t, job, end)
	tbl, sc := r.table(t, job)
	if n := srv.Requests(); n != 0 {
		t.Fatalf("the live route that takes no record sent %d lookup requests", n)
	}
	var ranges []pipeline.ReplayRange
	for p, e := range end {
		ranges = append(ranges, pipeline.ReplayRange{Partition: p, From: 0, To: e})
	}
	res, err := pipeline.Replay(t.Context(), job, tbl, sc, ranges, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if res.Read != 600 || res.Inserted != 0 {
		t.Errorf("replay of a route that takes no record: %+v; want 600 read, none inserted", res)
	}
	if n := srv.Requests(); n != 0 {
		t.Errorf("replay of a route that takes no record sent %d lookup requests", n)
	}
}

// TestFieldRouteReplayKeepsOtherRoutesLossesGaps replays a field route over
// offsets whose rows of the other route are lost (shop.other's watermark
// moved over them without a row): verify must still report them as gaps.
// The replay left the other route's records uncovered, so the next record
// it took reported the run before it as absent from the log; its commit
// recorded that, and verify took the loss for offsets the log never held.
func TestFieldRouteReplayKeepsOtherRoutesLossesGaps(t *testing.T) {
	r := newRouteRig(t)
	jobs := r.config(t, "floe", "", "", routesPurchase)
	end1 := r.produce(t, 600)
	for _, job := range jobs {
		r.run(t, job, end1)
	}
	end2 := r.produce(t, 600)
	r.run(t, jobs[0], end2)
	orders, sc := r.table(t, jobs[0])
	other, _ := r.table(t, jobs[1])
	var lost []lakehouse.Part
	var ranges []pipeline.ReplayRange
	for p, e := range end2 {
		lost = append(lost, lakehouse.Part{Range: lakehouse.Range{Topic: "clicks", Partition: p, From: end1[p], To: e}, Resume: end1[p]})
		ranges = append(ranges, pipeline.ReplayRange{Partition: p, From: end1[p], To: e})
	}
	if _, err := other.Commit(t.Context(), lost); err != nil {
		t.Fatal(err)
	}
	coverage := func() (gaps, absent int64) {
		rep, err := lakehouse.VerifyRoutes(t.Context(), "clicks", []*lakehouse.Table{orders, other}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range rep.Partitions {
			gaps, absent = gaps+p.GapOffsets, absent+p.AbsentFromLog
		}
		return gaps, absent
	}
	gaps, absent := coverage()
	if gaps == 0 || absent != 0 {
		t.Fatalf("before the replay: %d gap offsets, %d absent from the log; want the loss as gaps", gaps, absent)
	}
	res, err := pipeline.Replay(t.Context(), jobs[0], orders, sc, ranges, pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if res.Read != 600 || res.Inserted != 0 {
		t.Fatalf("replay of shop.orders: %+v; want 600 read, none inserted", res)
	}
	if g, a := coverage(); g != gaps || a != 0 {
		t.Fatalf("after the replay of shop.orders: %d gap offsets, %d absent from the log; want the %d lost as gaps", g, a, gaps)
	}
}

// TestReplayWhenRetentionDeletesPartOfTheRange: retention deletes offsets
// of partition 0 from 10 on while a replay of [0, 30) reads it, the reader
// at offset 10 (fetches from 10 are held until then). The replay commits
// what it read and ends, warning of the offsets it could not read. With
// the rest of the range deleted it waited for a record for ever; with
// records left after the range, it ended as if it had read all of it.
func TestReplayWhenRetentionDeletesPartOfTheRange(t *testing.T) {
	pipeline.SetReplayIdle(t, 200*time.Millisecond)
	for _, tc := range []struct {
		name           string
		records, until int64 // produced, deleted up to
		read           int64
		warning        string
	}{
		{"part of the range", 30, 20, 20, "skipped by the log"},
		{"the rest of the range", 30, 30, 10, "deleted by retention"},
		{"the rest of the range, records after it", 40, 35, 10, "skipped by the log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j := newJob(t, 0, fastCommit, nil)
			head := cleanedBatch(t, 0, offsetsIn(0, 10), 9, false)
			serveCleanedLog(t, j, tc.records, 0, func(offset int64) []byte {
				if offset < 10 {
					return head // the fetch from 0 returns offsets 0..9 alone
				}
				return nil
			})
			var read atomic.Int64
			var deleted atomic.Bool
			kf := j.cl.Kfake()
			kf.ControlKey(kmsg.Fetch.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
				kf.KeepControl()
				req := r.(*kmsg.FetchRequest)
				if deleted.Load() || len(req.Topics) != 1 || len(req.Topics[0].Partitions) != 1 ||
					req.Topics[0].Partitions[0].Partition != 0 || req.Topics[0].Partitions[0].FetchOffset < 10 {
					return nil, nil, false
				}
				p := kmsg.NewFetchResponseTopicPartition() // nothing yet
				p.HighWatermark, p.LastStableOffset, p.RecordBatches = tc.records, tc.records, []byte{}
				rt := kmsg.NewFetchResponseTopic()
				rt.Topic, rt.Partitions = "clicks", []kmsg.FetchResponseTopicPartition{p}
				resp := req.ResponseKind().(*kmsg.FetchResponse)
				resp.Topics = append(resp.Topics, rt)
				return resp, nil, true
			})
			go func() {
				for read.Load() < 10 && t.Context().Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
				if err := j.cl.DeleteRecords(t.Context(), "clicks", map[int32]int64{0: tc.until}); err != nil {
					t.Error(err)
				}
				deleted.Store(true)
			}()
			log := &lockedBuffer{}
			ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
			defer cancel()
			res, err := pipeline.Replay(ctx, j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: 30}},
				pipeline.ReplayOptions{Read: &read}, slog.New(slog.NewTextHandler(log, nil)))
			if err != nil || res.Read != tc.read || res.Inserted != tc.read {
				t.Fatalf("replay: %+v, %v; want %d read and inserted", res, err, tc.read)
			}
			if !strings.Contains(log.String(), tc.warning) || !strings.Contains(log.String(), "from=10") {
				t.Fatalf("no warning %q of the offsets from 10 in the log:\n%s", tc.warning, log.String())
			}
		})
	}
}
