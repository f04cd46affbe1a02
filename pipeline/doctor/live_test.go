package doctor

import (
	"bytes"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func render(t *testing.T, r *LiveReport) string {
	t.Helper()
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestLiveLagAndDrain(t *testing.T) {
	// Two partitions; over 10 s 1,000 records arrive and 3,000 are committed:
	// lag 10,000 → 8,000, draining 200/s, 40 s to go.
	in := Live{Topic: "clicks", GroupID: "g", Table: "a.t", GroupState: "Stable",
		Members: []GroupMember{{ID: "m1", ClientID: "floe", Host: "/10.0.0.1", Partitions: []int32{0, 1}}},
		First:   Sample{At: t0, End: map[int32]int64{0: 10000, 1: 5000}, Watermarks: map[int32]int64{0: 2000, 1: 3000}},
		Second:  &Sample{At: t0.Add(10 * time.Second), End: map[int32]int64{0: 10500, 1: 5500}, Watermarks: map[int32]int64{0: 4000, 1: 4000}},
	}
	r, err := DiagnoseLive(in)
	if err != nil {
		t.Fatal(err)
	}
	if r.TotalLag != 8000 || r.Partitions[0].Lag != 6500 || r.Partitions[1].Lag != 1500 {
		t.Fatalf("lag %d (%+v), want 8000 = 6500 + 1500", r.TotalLag, r.Partitions)
	}
	if r.ArrivalRate != 100 || r.CommitRate != 300 || r.LagTrend != -200 || r.Trend != "draining" || r.DrainSeconds != 40 {
		t.Fatalf("arrival %v commit %v trend %v %s drain %v; want 100, 300, -200, draining, 40", r.ArrivalRate, r.CommitRate, r.LagTrend, r.Trend, r.DrainSeconds)
	}
	if r.Partitions[0].Trend != -150 {
		t.Fatalf("partition 0 trend %v, want -150/s", r.Partitions[0].Trend)
	}
	text := render(t, r)
	mustContain(t, text, "= 6500 + 1500 = 8,000 records", "lag 10,000 → 8,000; arrivals 100/s − commits 300/s = -200/s",
		"time to drain = 8,000 / 200 per second = 40s", "members vs partitions: 1 member, 2 partitions (group Stable)", "2 partitions per member")
}

func TestLiveStoppedGroupAndHazard(t *testing.T) {
	// The job stopped: no members, nothing moves. A third partition was
	// added after ingestion began; its records count from the log start.
	s := Sample{At: t0, End: map[int32]int64{0: 100, 1: 100, 2: 40}, Start: map[int32]int64{2: 10}, Watermarks: map[int32]int64{0: 100, 1: 70}}
	s2 := s
	s2.At = t0.Add(5 * time.Second)
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Empty", First: s, Second: &s2,
		Commits: []Commit{{At: t0.Add(-time.Hour), Offsets: 100, Rows: 100}, {At: t0.Add(-time.Hour + 10*time.Second), Offsets: 170, Rows: 65, Duplicates: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.TotalLag != 60 || r.Trend != "steady" || r.DrainSeconds != -1 || r.CommitRate != 0 {
		t.Fatalf("lag %d trend %s drain %v commit rate %v; want 60 (0+30+30), steady, never, 0 (history is an hour old)", r.TotalLag, r.Trend, r.DrainSeconds, r.CommitRate)
	}
	if len(r.Hazards) != 1 || r.DuplicatesSkipped != 5 || r.RowsCommitted != 165 || r.CommitsPerMinute != 6 {
		t.Fatalf("hazards %v, duplicates %d, rows %d, commits/min %v", r.Hazards, r.DuplicatesSkipped, r.RowsCommitted, r.CommitsPerMinute)
	}
	text := render(t, r)
	mustContain(t, text, "members vs partitions: 0 members, 3 partitions (group Empty)", "No member is consuming",
		"topic clicks has 3 partitions, the table's offset map reaches 2; partitions [2] were added", "hash(key) % 3, not % 2",
		"5 duplicates skipped by the MERGE")
	// Without the added partition there is no hazard.
	delete(s.End, 2)
	if r, _ := DiagnoseLive(Live{Topic: "clicks", First: s}); len(r.Hazards) != 0 || r.Trend != "unknown" {
		t.Fatalf("hazards %v trend %s for an unchanged topic sampled once", r.Hazards, r.Trend)
	}
}

// TestLiveHazardFromCarriedCounts: once expiry dropped the commits that
// recorded the topic's first partition count, the counts maintenance
// carried (Live.PartitionCounts) still tell that partitions were added:
// the commits left, all at the new count, told nothing.
func TestLiveHazardFromCarriedCounts(t *testing.T) {
	s := Sample{At: t0, End: map[int32]int64{0: 100, 1: 100, 2: 40}, Watermarks: map[int32]int64{0: 100, 1: 70, 2: 40}}
	commits := []Commit{{At: t0.Add(-time.Minute), Offsets: 210, Rows: 210, Partitions: 3}}
	r, err := DiagnoseLive(Live{Topic: "clicks", First: s, Commits: commits, PartitionCounts: []int{2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Hazards) != 1 {
		t.Fatalf("hazards %v, want the partition added after ingestion began", r.Hazards)
	}
	mustContain(t, render(t, r), "topic clicks has 3 partitions, the table's commits recorded 2; partitions [2] were added")
	if r, _ := DiagnoseLive(Live{Topic: "clicks", First: s, Commits: commits}); len(r.Hazards) != 0 {
		t.Fatalf("hazards %v from commits all at 3 partitions", r.Hazards)
	}
}

// TestLiveLagFromTheGroupOffsets: a partition the table has no watermark
// for counts its lag from the group's Kafka offset, where start_offset
// latest resolved (floe run pins it there and reads from there), or from
// the log start when that is later. It counted from the log start alone: a
// caught-up job started at latest was behind by the topic's history.
func TestLiveLagFromTheGroupOffsets(t *testing.T) {
	// Partition 0 is in the table; 1 was pinned at its end when the job
	// started and got 5 records since; 2 was pinned below its log start
	// (retention moved on); 3 has no pin.
	s := Sample{At: t0, End: map[int32]int64{0: 900, 1: 805, 2: 700, 3: 300},
		Start:      map[int32]int64{0: 0, 1: 0, 2: 650, 3: 100},
		Watermarks: map[int32]int64{0: 900},
		Group:      map[int32]int64{0: 850, 1: 800, 2: 600}}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", First: s})
	if err != nil {
		t.Fatal(err)
	}
	var lags []int64
	for _, p := range r.Partitions {
		lags = append(lags, p.Lag)
	}
	if r.TotalLag != 255 || fmt.Sprint(lags) != "[0 5 50 200]" {
		t.Fatalf("lag %d %v; want 255 = 0 (table) + 5 (from the pin) + 50 (from the log start, above the pin) + 200 (no pin)", r.TotalLag, lags)
	}
	mustContain(t, render(t, r), "partitions [1 2 3] are not in the table's offset map: counted from the group's Kafka offset")
}

// TestLiveRetentionIsNotLag: records retention deleted before the table got
// them are reported as lost, not as lag: no member can read them any more.
// They were counted as lag, without a word.
func TestLiveRetentionIsNotLag(t *testing.T) {
	// Partition 0's group offset (where latest resolved) is below its log
	// start; partition 1's watermark is 100 but its log starts at 500;
	// partition 2 is in the table above its log start.
	s := Sample{At: t0, End: map[int32]int64{0: 300, 1: 600, 2: 600},
		Start:      map[int32]int64{0: 250, 1: 500, 2: 500},
		Watermarks: map[int32]int64{1: 100, 2: 550},
		Group:      map[int32]int64{0: 200}}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Empty", First: s})
	if err != nil {
		t.Fatal(err)
	}
	if r.TotalLag != 200 || r.Partitions[1].Lag != 100 || r.Partitions[0].Deleted != 50 || r.Partitions[1].Deleted != 400 || r.Partitions[2].Deleted != 0 {
		t.Fatalf("lag %d %+v; want 200 = 50 + 100 + 50, 50 and 400 deleted", r.TotalLag, r.Partitions)
	}
	if len(r.Hazards) != 1 {
		t.Fatalf("hazards %v, want the records retention deleted", r.Hazards)
	}
	mustContain(t, render(t, r), "HAZARD: 450 records deleted by retention before they were committed (partition 0: 50 offsets from 200 up to its log start 250; partition 1: 400 offsets from 100 up to its log start 500)",
		"partition 1: its log starts at 500, above 100: 600 − 500 = 100 records, not 500 (retention deleted 400)")
}

func TestLiveCommitRateFromHistory(t *testing.T) {
	// Commits every 10 s move 5,000 offsets each; a 5 s sample saw none, so
	// the commit rate comes from the history: 500/s against 100/s arriving.
	var cs []Commit
	for i := range 7 {
		cs = append(cs, Commit{At: t0.Add(time.Duration(i*10-60) * time.Second), Offsets: int64(i * 5000)})
	}
	s1 := Sample{At: t0.Add(time.Second), End: map[int32]int64{0: 100000}, Watermarks: map[int32]int64{0: 30000}}
	s2 := Sample{At: t0.Add(6 * time.Second), End: map[int32]int64{0: 100500}, Watermarks: map[int32]int64{0: 30000}}
	r, err := DiagnoseLive(Live{Topic: "clicks", First: s1, Second: &s2, Commits: cs, Members: []GroupMember{{ID: "m1", Partitions: []int32{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.CommitRate != 500 || r.LagTrend != -400 || r.Trend != "draining" || math.Abs(r.DrainSeconds-70500.0/400) > 1e-9 {
		t.Fatalf("commit rate %v trend %v %s drain %v; want 500, -400, draining, 176.25", r.CommitRate, r.LagTrend, r.Trend, r.DrainSeconds)
	}
}

// TestLiveStoppedJobDoesNotDrain: a sample that saw no commit borrows the
// commit rate of the history only while a member is in the group and the
// last commit is no older than twice the spacing of the commits before it.
// A job that stopped a minute ago after committing every 20 s was reported
// draining in seconds at its old rate, beside "No member is consuming".
func TestLiveStoppedJobDoesNotDrain(t *testing.T) {
	cs := []Commit{{At: t0.Add(-100 * time.Second)}, {At: t0.Add(-80 * time.Second), Offsets: 1000}, {At: t0.Add(-60 * time.Second), Offsets: 2000}}
	s1 := Sample{At: t0, End: map[int32]int64{0: 2300}, Watermarks: map[int32]int64{0: 2000}}
	s2 := s1
	s2.At = t0.Add(5 * time.Second)
	member := []GroupMember{{ID: "m1", Partitions: []int32{0}}}
	for _, tc := range []struct {
		name    string
		members []GroupMember
		commits []Commit
		trend   string
	}{
		{"stopped", nil, cs, "steady"},
		// A member is in the group but has not committed for three times
		// the spacing: stalled.
		{"stalled", member, cs, "steady"},
		// The same history a minute later: the last commit at the first
		// sample, 5 s before the second.
		{"committing", member, []Commit{{At: t0.Add(-40 * time.Second)}, {At: t0.Add(-20 * time.Second), Offsets: 1000}, {At: t0, Offsets: 2000}}, "draining"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", Members: tc.members, First: s1, Second: &s2, Commits: tc.commits})
			if err != nil {
				t.Fatal(err)
			}
			if r.Trend != tc.trend {
				t.Fatalf("trend %s (commit rate %v/s, drain %v s), want %s:\n%s", r.Trend, r.CommitRate, r.DrainSeconds, tc.trend, render(t, r))
			}
			if tc.trend == "steady" && (r.CommitRate != 0 || r.DrainSeconds != -1) {
				t.Fatalf("commit rate %v/s, drain %v s; want 0 and never", r.CommitRate, r.DrainSeconds)
			}
		})
	}
}

// TestLiveRetentionIsNoCommit: retention moving a log start over offsets
// not committed yet takes them out of lag, but commits nothing: a stopped
// job is not draining. The log start of a partition the table has no
// watermark for counted as its watermark, and its moves as commits: no
// member, nothing committed, and doctor said "Draining".
func TestLiveRetentionIsNoCommit(t *testing.T) {
	// Over 5 s: partition 0 (not in the table) gets 100 records and its log
	// start moves by 1,000; partition 1's log start passes its watermark,
	// 500, by 200.
	s1 := Sample{At: t0, End: map[int32]int64{0: 5000, 1: 1000}, Start: map[int32]int64{0: 1000, 1: 400}, Watermarks: map[int32]int64{1: 500}}
	s2 := Sample{At: t0.Add(5 * time.Second), End: map[int32]int64{0: 5100, 1: 1000}, Start: map[int32]int64{0: 2000, 1: 700}, Watermarks: map[int32]int64{1: 500}}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Empty", First: s1, Second: &s2})
	if err != nil {
		t.Fatal(err)
	}
	text := render(t, r)
	if r.CommitRate != 0 || r.DeletedRate != 240 || r.LagTrend != 20 || r.Trend != "growing" {
		t.Fatalf("commit rate %v, deleted %v/s, trend %v %s; want 0, 240 = (1,000 + 200) / 5 s, 20, growing:\n%s", r.CommitRate, r.DeletedRate, r.LagTrend, r.Trend, text)
	}
	mustContain(t, text, "lag 4,500 → 3,400; arrivals 20/s − commits 0/s = 20/s",
		"retention deleted 240 records/s before they were committed: lag changed by 20 − 240 = -220/s",
		"Retention deletes 240 records/s before they are committed: lost to the table, not drained.")
}

// TestLiveLogEndsBelowTheWatermark: a topic deleted and created again (or
// truncated) restarts its offsets below the table's watermarks; floe run
// refuses it, so records arrive and nothing is committed. doctor clamped
// the negative lag to 0 and said "Caught up".
func TestLiveLogEndsBelowTheWatermark(t *testing.T) {
	// Partition 0 is in the table at 90,000, partition 1 read from the
	// group's offset 80,000 (latest pinned there), partition 2 caught up;
	// 200 records arrive in each of 0 and 1 over 5 s.
	s1 := Sample{At: t0, End: map[int32]int64{0: 500, 1: 300, 2: 1000},
		Watermarks: map[int32]int64{0: 90000, 2: 1000}, Group: map[int32]int64{1: 80000}}
	s2 := s1
	s2.At, s2.End = t0.Add(5*time.Second), map[int32]int64{0: 700, 1: 500, 2: 1000}
	for _, c := range []struct {
		name   string
		second *Sample
	}{{"sampled once", nil}, {"sampled twice", &s2}} {
		t.Run(c.name, func(t *testing.T) {
			r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Empty", First: s1, Second: c.second})
			if err != nil {
				t.Fatal(err)
			}
			text := render(t, r)
			if r.Trend != "log-behind" || r.DrainSeconds != -1 || len(r.Hazards) != 1 || strings.Contains(text, "Caught up") {
				t.Fatalf("trend %s, drain %v, hazards %v; want log-behind, -1 and one hazard:\n%s", r.Trend, r.DrainSeconds, r.Hazards, text)
			}
			mustContain(t, text, "HAZARD: the log of clicks ends below where the job resumes it (partition 0 ends at "+group(r.Partitions[0].End)+", the table's watermark is 90,000; partition 1 ends at "+group(r.Partitions[1].End)+", the group's offset is 80,000): the topic was recreated or truncated.",
				"floe run refuses the topic (status 2)", "Ingest the topic into a new table (this one holds rows at the offsets the new log reuses) under a new kafka.group",
				"partition 0: its log ends at "+group(r.Partitions[0].End)+", below 90,000", "Not ingesting: partitions [0 1] end below where the job resumes them")
		})
	}
}

// TestLiveJobKeepingPace: a job committing as many records as arrive keeps
// its lag where it is (what one commit interval holds) and is said to keep
// pace, each record committed lag / commit rate after it arrived. It was
// reported idle: "nothing arrived and nothing was committed", never
// draining (-1).
func TestLiveJobKeepingPace(t *testing.T) {
	// Over 5 s, 500 records arrive and 500 are committed; lag stays at 100.
	s1 := Sample{At: t0, End: map[int32]int64{0: 1000}, Watermarks: map[int32]int64{0: 900}}
	s2 := Sample{At: t0.Add(5 * time.Second), End: map[int32]int64{0: 1500}, Watermarks: map[int32]int64{0: 1400}}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", Members: []GroupMember{{ID: "m1", Partitions: []int32{0}}},
		First: s1, Second: &s2, Commits: []Commit{{At: t0.Add(-time.Second), Offsets: 900}, {At: t0.Add(4 * time.Second), Offsets: 1400}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.ArrivalRate != 100 || r.CommitRate != 100 || r.Trend != "keeping-pace" || r.DrainSeconds != 1 {
		t.Fatalf("arrival %v commit %v trend %s drain %v; want 100, 100, keeping-pace, 1 (100 / 100 per second)", r.ArrivalRate, r.CommitRate, r.Trend, r.DrainSeconds)
	}
	text := render(t, r)
	mustContain(t, text, "time to commit the records behind = 100 / 100 per second = 1s",
		"Keeping pace: 100 records/s arrive and are committed; lag stays at 100 records")
	if strings.Contains(text, "nothing arrived") {
		t.Fatalf("a job keeping pace reported idle:\n%s", text)
	}
}

// TestLiveDrainBeyondDurationRange: a backlog that drains too slowly for a
// time.Duration (40 M records at one offset committed every 290 s: 370
// years) is reported as such. The drain time converted to a Duration wrapped
// to math.MinInt64, whose negation printing it recursed on forever: `floe
// doctor` died of a stack overflow.
func TestLiveDrainBeyondDurationRange(t *testing.T) {
	cs := []Commit{{At: t0.Add(-300 * time.Second), Offsets: 100}, {At: t0.Add(-10 * time.Second), Offsets: 101}}
	s1 := Sample{At: t0, End: map[int32]int64{0: 40_000_101}, Watermarks: map[int32]int64{0: 101}}
	s2 := Sample{At: t0.Add(5 * time.Second), End: map[int32]int64{0: 40_000_101}, Watermarks: map[int32]int64{0: 101}}
	r, err := DiagnoseLive(Live{Topic: "clicks", First: s1, Second: &s2, Commits: cs, Members: []GroupMember{{ID: "m1", Partitions: []int32{0}}}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Trend != "draining" || r.DrainSeconds != 40_000_000*290 {
		t.Fatalf("trend %s, drain %v s; want draining in 1.16e10 s", r.Trend, r.DrainSeconds)
	}
	mustContain(t, render(t, r), "time to drain = 40,000,000 / 0.00 per second = 292+ years", "caught up in about 292+ years if rates hold")
}

const scrape1 = `# TYPE floe_consumer_lag_records gauge
floe_consumer_lag_records{topic="clicks",partition="0"} 1200
floe_consumer_lag_records{topic="other",partition="0"} 7
# TYPE floe_consumer_lag_seconds gauge
floe_consumer_lag_seconds{topic="clicks",partition="0"} 2.5
# TYPE floe_rebalances_total counter
floe_rebalances_total 3
# TYPE floe_duplicates_skipped_total counter
floe_duplicates_skipped_total 42
# TYPE floe_records_consumed_total counter
floe_records_consumed_total 100000
# TYPE floe_enrich_cache_hits_total counter
floe_enrich_cache_hits_total 50000
# TYPE floe_enrich_cache_misses_total counter
floe_enrich_cache_misses_total 50000
# TYPE floe_assigned_partitions gauge
floe_assigned_partitions 2
# TYPE floe_enrich_in_flight_records gauge
floe_enrich_in_flight_records 900
# TYPE process_start_time_seconds gauge
process_start_time_seconds %START%
# TYPE floe_enrich_request_duration_seconds histogram
floe_enrich_request_duration_seconds_bucket{le="0.5"} 0
floe_enrich_request_duration_seconds_bucket{le="1"} 90
floe_enrich_request_duration_seconds_bucket{le="5"} 100
floe_enrich_request_duration_seconds_bucket{le="+Inf"} 100
floe_enrich_request_duration_seconds_sum 60
floe_enrich_request_duration_seconds_count 100
`

func TestParseMetricsAndLittlesLaw(t *testing.T) {
	// The process started half an hour before the first scrape.
	text := strings.Replace(scrape1, "%START%", fmt.Sprint(t0.Add(-30*time.Minute).Unix()), 1)
	m1, err := ParseMetrics(strings.NewReader(text), "clicks", "analytics.clicks", t0)
	if err != nil {
		t.Fatal(err)
	}
	if m1.LagRecords[0] != 1200 || m1.LagSeconds[0] != 2.5 || len(m1.LagRecords) != 1 || m1.Values[MetricRebalances] != 3 {
		t.Fatalf("parsed %+v", m1)
	}
	if m1.Latency.Mean() != 0.6 || math.Abs(m1.Latency.Quantile(0.99)-4.6) > 1e-9 {
		t.Fatalf("latency mean %v p99 %v, want 0.6 and 1 + 4 × 9/10 = 4.6", m1.Latency.Mean(), m1.Latency.Quantile(0.99))
	}
	// Ten seconds later 100,000 more records were consumed (10,000/s), a
	// third of them missed the cache, and 100 more requests took 0.6 s on
	// average; three more rebalances.
	text2 := strings.NewReplacer("floe_records_consumed_total 100000", "floe_records_consumed_total 200000",
		`le="1"} 90`, `le="1"} 190`, `le="5"} 100`, `le="5"} 200`, `le="+Inf"} 100`, `le="+Inf"} 200`,
		"_sum 60", "_sum 120", "_count 100", "_count 200", "floe_rebalances_total 3", "floe_rebalances_total 6",
		"hits_total 50000", "hits_total 150000", "misses_total 50000", "misses_total 100000").Replace(text)
	m2, err := ParseMetrics(strings.NewReader(text2), "clicks", "analytics.clicks", t0.Add(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	end := map[int32]int64{0: 5000, 1: 5000}
	wm := map[int32]int64{0: 3800, 1: 5000}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable",
		Members: []GroupMember{{ClientID: "floe", Partitions: []int32{0, 1}}},
		Enrich:  &EnrichLimits{MaxInFlightRecords: 500, MaxInFlightRequests: 256, KeysPerRequest: 500},
		First:   Sample{At: t0, End: end, Watermarks: wm, Metrics: m1},
		Second:  &Sample{At: t0.Add(10 * time.Second), End: end, Watermarks: wm, Metrics: m2}})
	if err != nil {
		t.Fatal(err)
	}
	// L = 10,000/s × 1/3 misses × 0.6 s = 2,000 in flight; capacity
	// min(2 lanes × 500, 256 × 500) = 1,000.
	e := r.Enrich
	if e == nil || e.RatePerSecond != 10000 || math.Abs(e.InFlightNeeded-2000) > 1e-6 || e.Capacity != 1000 || e.InFlightObserved != 900 {
		t.Fatalf("enrich %+v", e)
	}
	// 6 generations, the first join excluded: 5 in 30m10s ≈ 9.9 per hour.
	if r.Rebalances != 6 || math.Abs(r.RebalancesPerHour-5/(1810.0/3600)) > 1e-6 {
		t.Fatalf("rebalances %v, %v per hour; want 6, 5 in 30m10s", r.Rebalances, r.RebalancesPerHour)
	}
	out := render(t, r)
	mustContain(t, out, "10,000 records/s × 33 % cache misses × 600ms = 2,000 records in flight", "min(2 lanes × max_in_flight_records 500, max_in_flight_requests 256 × 500 keys) = 1,000 → 200 % used",
		"Enrichment is the bottleneck: lookups are capped near capacity / latency = 1,667 per second", "+3 during the 10s sample", "floe_rebalances_total = 6; minus the first join = 5", "Rebalancing more than every 10 minutes")
	// Far more in flight than the rate and latency explain: records wait for
	// in-order release. 9,000 / (10,000/s × 1/3) = 2.7 s per looked-up record.
	m2.Values[MetricEnrichInFlight] = 9000
	r, err = DiagnoseLive(Live{Topic: "clicks", Members: []GroupMember{{Partitions: []int32{0, 1}}},
		Enrich: &EnrichLimits{MaxInFlightRecords: 20000, MaxInFlightRequests: 256, KeysPerRequest: 500},
		First:  Sample{At: t0, End: end, Watermarks: wm, Metrics: m1},
		Second: &Sample{At: t0.Add(10 * time.Second), End: end, Watermarks: wm, Metrics: m2}})
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, render(t, r), "= 40,000 → 22 % used", "= 2.7s per looked-up record in the stage, against 600ms per request: records wait for in-order release", "Enrichment has headroom")
	// Windows 90 % full with records waiting: the tail is the bottleneck.
	m2.Values[MetricEnrichInFlight] = 36000
	r, err = DiagnoseLive(Live{Topic: "clicks", Members: []GroupMember{{Partitions: []int32{0, 1}}},
		Enrich: &EnrichLimits{MaxInFlightRecords: 20000, MaxInFlightRequests: 256, KeysPerRequest: 500},
		First:  Sample{At: t0, End: end, Watermarks: wm, Metrics: m1},
		Second: &Sample{At: t0.Add(10 * time.Second), End: end, Watermarks: wm, Metrics: m2}})
	if err != nil {
		t.Fatal(err)
	}
	mustContain(t, render(t, r), "→ 90 % used", "in-flight windows are 90 % full", "held by the latency tail (p99 995ms)")
	if len(r.MetricsMissing) != 0 {
		t.Fatalf("missing %v", r.MetricsMissing)
	}
}

// TestLiveCountersResetBetweenScrapes: when the scraped member restarted
// between the two scrapes, or --metrics-url answers from another member of
// the group, the counters are read from the second scrape alone, and the
// report says why. Their differences were taken as rates: a negative
// enrichment rate and Little's law, "+-2 during the sample".
func TestLiveCountersResetBetweenScrapes(t *testing.T) {
	started := func(at time.Time) string { return strings.Replace(scrape1, "%START%", fmt.Sprint(at.Unix()), 1) }
	m1, err := ParseMetrics(strings.NewReader(started(t0.Add(-30*time.Minute))), "clicks", "a.t", t0)
	if err != nil {
		t.Fatal(err)
	}
	// Counters smaller than the first scrape's.
	lower := strings.NewReplacer("floe_records_consumed_total 100000", "floe_records_consumed_total 500",
		"floe_rebalances_total 3", "floe_rebalances_total 1", "hits_total 50000", "hits_total 100", "misses_total 50000", "misses_total 400",
		`le="1"} 90`, `le="1"} 9`, `le="5"} 100`, `le="5"} 10`, `le="+Inf"} 100`, `le="+Inf"} 10`, "_sum 60", "_sum 6", "_count 100", "_count 10")
	for _, tc := range []struct {
		name  string
		start time.Time
		// rate is the enrichment rate since the second scrape's start.
		rate float64
		why  string
	}{
		// Started 2 s before the second scrape.
		{"restarted", t0.Add(3 * time.Second), 250, "process_start_time_seconds 2026-11-29T11:30:00Z → 2026-11-29T12:00:03Z"},
		// Another member, started with the first: its counters are lower.
		{"another member", t0.Add(-30 * time.Minute), 500.0 / 1805, "floe_enrich_cache_hits_total 50,000 → 100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m2, err := ParseMetrics(strings.NewReader(lower.Replace(started(tc.start))), "clicks", "a.t", t0.Add(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			end, wm := map[int32]int64{0: 2000, 1: 2000}, map[int32]int64{0: 800, 1: 800}
			r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", Members: []GroupMember{{ID: "m1", Partitions: []int32{0, 1}}},
				Enrich: &EnrichLimits{MaxInFlightRecords: 1000, MaxInFlightRequests: 64, KeysPerRequest: 100},
				First:  Sample{At: t0, End: end, Watermarks: wm, Metrics: m1},
				Second: &Sample{At: t0.Add(5 * time.Second), End: end, Watermarks: wm, Metrics: m2}})
			if err != nil {
				t.Fatal(err)
			}
			text := render(t, r)
			if r.Enrich == nil || math.Abs(r.Enrich.RatePerSecond-tc.rate) > 1e-9 || strings.Contains(text, "during the 5s sample") {
				t.Fatalf("enrich %+v; want the rate since the second scrape's start, %v/s, and no rebalances counted during the sample:\n%s", r.Enrich, tc.rate, text)
			}
			mustContain(t, text, tc.why, "The member restarted between the two scrapes, or --metrics-url reached another member",
				"latency since start: mean 600ms", "80 % cache misses")
		})
	}
}

// TestLiveScrapeOfOneOfSeveralMembers: --metrics-url scrapes one member of
// several. A partition another member holds has no lag series in the
// scrape: its lag in seconds is unknown ("-"), where it read 0 as for a
// caught-up partition. An idle member (more members than partitions)
// exports no lag series at all; they were listed as not exported by this
// floe, blaming its version.
func TestLiveScrapeOfOneOfSeveralMembers(t *testing.T) {
	holding, err := ParseMetrics(strings.NewReader(`# TYPE floe_consumer_lag_seconds gauge
floe_consumer_lag_seconds{topic="clicks",partition="0"} 2.5
# TYPE floe_consumer_lag_records gauge
floe_consumer_lag_records{topic="clicks",partition="0"} 100
# TYPE floe_assigned_partitions gauge
floe_assigned_partitions 1
`), "clicks", "analytics.clicks", t0)
	if err != nil {
		t.Fatal(err)
	}
	s := Sample{At: t0, End: map[int32]int64{0: 1100, 1: 1500}, Watermarks: map[int32]int64{0: 1000, 1: 1000}, Metrics: holding}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", First: s,
		Members: []GroupMember{{ID: "a", Partitions: []int32{0}}, {ID: "b", Partitions: []int32{1}}}})
	if err != nil {
		t.Fatal(err)
	}
	if p0, p1 := r.Partitions[0].LagSeconds, r.Partitions[1].LagSeconds; p0 == nil || *p0 != 2.5 || p1 != nil {
		t.Fatalf("want lag seconds 2.5 for the scraped member's partition, none for the other's:\n%s", render(t, r))
	}
	mustContain(t, render(t, r), fmt.Sprintf("%9d %12s %12s %10s %10s %10s\n", 1, "1,500", "1,000", "500", "?", "-"))

	idle, err := ParseMetrics(strings.NewReader(`# TYPE floe_rebalances_total counter
floe_rebalances_total 1
# TYPE floe_duplicates_skipped_total counter
floe_duplicates_skipped_total 0
# TYPE floe_records_consumed_total counter
floe_records_consumed_total 0
# TYPE floe_assigned_partitions gauge
floe_assigned_partitions 0
`), "clicks", "analytics.clicks", t0)
	if err != nil {
		t.Fatal(err)
	}
	s = Sample{At: t0, End: map[int32]int64{0: 100}, Watermarks: map[int32]int64{0: 100}, Metrics: idle}
	r, err = DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", First: s,
		Members: []GroupMember{{ID: "a", Partitions: []int32{0}}, {ID: "b", Partitions: []int32{}}}})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.MetricsMissing) != 0 {
		t.Fatalf("an idle member's scrape lacks %v", r.MetricsMissing)
	}
}

func TestParseMetricsRejectsGarbage(t *testing.T) {
	if _, err := ParseMetrics(strings.NewReader("floe_x{ 1\n"), "clicks", "analytics.clicks", t0); err == nil || !strings.Contains(err.Error(), "parsing metrics") {
		t.Fatalf("error %v", err)
	}
}

// TestMetricsOfOneRoute: a job with routes labels each route's series with
// its table, and `floe doctor --table` reads only that route's (and the
// series without the label): the routes' counters were summed, and the lag
// of two routes of one topic overwrote each other's.
func TestMetricsOfOneRoute(t *testing.T) {
	const text = `# TYPE floe_duplicates_skipped_total counter
floe_duplicates_skipped_total{table="shop.orders"} 0
floe_duplicates_skipped_total{table="shop.refunds"} 7
# TYPE floe_records_consumed_total counter
floe_records_consumed_total{table="shop.orders"} 100
floe_records_consumed_total{table="shop.refunds"} 300
# TYPE floe_consumer_lag_records gauge
floe_consumer_lag_records{partition="0",table="shop.orders",topic="orders"} 5
floe_consumer_lag_records{partition="0",table="shop.refunds",topic="orders"} 500
# TYPE floe_partitions_added_total counter
floe_partitions_added_total 2
`
	m, err := ParseMetrics(strings.NewReader(text), "orders", "shop.orders", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if d, c, lag, added := m.Values[MetricDuplicates], m.Values[MetricConsumed], m.LagRecords[0], m.Values[MetricPartitionsAdded]; d != 0 || c != 100 || lag != 5 || added != 2 {
		t.Fatalf("route shop.orders: duplicates %v, consumed %v, lag %v, partitions added %v; want 0, 100, 5, 2", d, c, lag, added)
	}
}

// TestLiveOneRecentCommitHasNoRate: with one commit within the rate's
// window the report said "0 commits/min" beside a commit seconds old.
func TestLiveOneRecentCommitHasNoRate(t *testing.T) {
	s := Sample{At: t0, End: map[int32]int64{0: 100}, Watermarks: map[int32]int64{0: 100}}
	r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", First: s,
		Commits: []Commit{{At: t0.Add(-3 * time.Second), Offsets: 100, Rows: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	text := render(t, r)
	mustContain(t, text, "last commit 3s ago; no other commit within 300s of it")
	if strings.Contains(text, "0 commits/min") {
		t.Fatalf("the report gives a rate of one commit:\n%s", text)
	}
}

// TestLiveRebalancesDuringTheSample: the rebalances of the two scrapes'
// sample decide as well as the average since the member started: a member
// up for 30 days that rebalances 10 times in a 5 s sample is in a storm
// (the lifetime average, 0.1 an hour, called it rare), one rebalance in the
// sample is named, none leaves the average to decide.
func TestLiveRebalancesDuringTheSample(t *testing.T) {
	scrape := func(rebalances int, at time.Time) *Metrics {
		text := fmt.Sprintf("# TYPE floe_rebalances_total counter\nfloe_rebalances_total %d\n"+
			"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %d\n"+
			"# TYPE floe_assigned_partitions gauge\nfloe_assigned_partitions 0\n", rebalances, t0.Add(-30*24*time.Hour).Unix())
		m, err := ParseMetrics(strings.NewReader(text), "clicks", "a.t", at)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	end, wm := map[int32]int64{0: 2000, 1: 2000}, map[int32]int64{0: 800, 1: 800}
	for _, tc := range []struct {
		during int
		sample time.Duration
		want   string
	}{
		{10, 5 * time.Second, "Rebalancing more than every 10 minutes"},
		{1, 5 * time.Second, "A rebalance during the sample"},
		{0, 5 * time.Second, "Rebalances are rare"},
		{2, time.Hour, "Rebalances are rare"}, // every 30 minutes: no storm
	} {
		during, want := tc.during, tc.want
		r, err := DiagnoseLive(Live{Topic: "clicks", GroupState: "Stable", Members: []GroupMember{{ID: "m1", Partitions: []int32{}}},
			First:  Sample{At: t0, End: end, Watermarks: wm, Metrics: scrape(60, t0)},
			Second: &Sample{At: t0.Add(tc.sample), End: end, Watermarks: wm, Metrics: scrape(60+during, t0.Add(tc.sample))}})
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(r.Findings, func(f Finding) bool { return f.Topic == "rebalances" })
		if i < 0 || !strings.HasPrefix(r.Findings[i].Conclusion, want) {
			t.Errorf("%d rebalances in a %s sample: want %q\n%s", during, tc.sample, want, render(t, r))
		}
	}
}
