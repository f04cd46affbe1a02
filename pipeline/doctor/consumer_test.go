package doctor

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"
)

// caseStudy000 is seed 000: a clickstream on 12 partitions at 45,000 msg/s,
// six NiFi consumers with a synchronous 600 ms lookup, 2.1 M lag, a rebalance
// every ~8 minutes.
var caseStudy000 = Consumer{
	MaxPollRecords: 500, MaxPollInterval: 300 * time.Second,
	SessionTimeout: 10 * time.Second, Heartbeat: 3 * time.Second,
	PerRecord: 600 * time.Millisecond, Partitions: 12, Members: 6,
	Rate: 45000, Lag: 2_100_000, ObservedRebalanceEvery: 8 * time.Minute,
}

// caseStudy001 is seed 001: payments on 24 partitions, 8 instances, a ledger
// call of p50 700 ms / p99 2.8 s, Java defaults except the session timeout
// someone raised to 120000 without effect.
var caseStudy001 = Consumer{
	MaxPollRecords: 500, MaxPollInterval: 300 * time.Second,
	SessionTimeout: 120 * time.Second, Heartbeat: 3 * time.Second,
	PerRecord: 700 * time.Millisecond, P99: 2800 * time.Millisecond,
	Partitions: 24, Members: 8, ObservedRebalanceEvery: 5 * time.Minute,
}

func diagnose(t *testing.T, c Consumer) (*ConsumerReport, string) {
	t.Helper()
	r, err := DiagnoseConsumer(c)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return r, b.String()
}

func finding(t *testing.T, r *ConsumerReport, topic string) Finding {
	t.Helper()
	for _, f := range r.Findings {
		if f.Topic == topic {
			return f
		}
	}
	t.Fatalf("no %q finding in %+v", topic, r.Findings)
	return Finding{}
}

func mustContain(t *testing.T, text string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(text, w) {
			t.Errorf("output lacks %q:\n%s", w, text)
		}
	}
}

func remedyRank(r *ConsumerReport, prefix string) int {
	for _, m := range r.Remedies {
		if strings.HasPrefix(m.Action, prefix) {
			return m.Rank
		}
	}
	return 0
}

// TestCaseStudy000 encodes the worked answer of seed 000.
func TestCaseStudy000(t *testing.T) {
	r, text := diagnose(t, caseStudy000)
	// 500 × 600 ms = 300 s, equal to max.poll.interval.ms: the group rebalances.
	if r.Verdict != VerdictRebalances || r.PollLoopSeconds != 300 {
		t.Fatalf("verdict %s, poll loop %vs; want rebalances at 300s", r.Verdict, r.PollLoopSeconds)
	}
	mustContain(t, text, "500 × 600ms = 300s", "300s ≥ max.poll.interval.ms=300000", "exactly at the boundary",
		"480s = 300s poll deadline + 180s of rebalance, rejoin and catch-up: consistent")
	// The 10 s session is not the primary cause, but tight for GC and jitter.
	if r.SessionIsCause {
		t.Error("session.timeout reported as the cause")
	}
	sess := finding(t, r, "session")
	mustContain(t, sess.Conclusion, "not the cause", "background thread")
	mustContain(t, strings.Join(sess.Math, "\n"), "tight for GC pauses and network jitter")
	// ~1.7 records/s per consumer, far below 45,000 msg/s: lag never drains.
	if got := r.PerMemberRate; got < 1.66 || got > 1.67 {
		t.Errorf("per-member rate %v, want 1/0.6 ≈ 1.67", got)
	}
	if r.ActiveMembers != 6 || r.GroupRate != 10 {
		t.Errorf("group: %d active at %v records/s, want 6 at 10", r.ActiveMembers, r.GroupRate)
	}
	if r.LagGrowthPerSecond != 44990 || r.DrainSeconds != -1 {
		t.Errorf("lag growth %v/s, drain %v; want 44,990/s and never (-1)", r.LagGrowthPerSecond, r.DrainSeconds)
	}
	if r.InFlightNeeded != 27000 {
		t.Errorf("Little's law: %v in flight, want 45,000 × 0.6 = 27,000", r.InFlightNeeded)
	}
	mustContain(t, text, "1 / 600ms = 1.67 records/s", "6 active consumers × 1.67 = 10 records/s",
		"lag 2,100,000 never drains", "27,000 > 12 partitions", "45,000 records/s × 600ms = 27,000", "real amplifier")
	// Duplicates: at-least-once re-delivery of a batch per member.
	if r.DuplicatesPerRebalance != 3000 {
		t.Errorf("duplicates window %d, want 500 × 6", r.DuplicatesPerRebalance)
	}
	mustContain(t, finding(t, r, "duplicates").Conclusion, "at-least-once")
	// Remedies: max.poll.records 50 (≈30 s), max.poll.interval 600000,
	// session 30000 / heartbeat 10000, add consumers 6 → 12, idempotent sink.
	if r.RecommendedMaxPollRecords != 50 {
		t.Errorf("recommended max.poll.records %d, want 50", r.RecommendedMaxPollRecords)
	}
	if r.RecommendedMaxPollIntervalSeconds != 600 {
		t.Errorf("recommended max.poll.interval %vs, want 600", r.RecommendedMaxPollIntervalSeconds)
	}
	mustContain(t, text, "50 × 600ms = 30s at the mean", "max.poll.interval.ms to 600000",
		"session.timeout.ms=30000 and heartbeat.interval.ms=10000", "Add consumers: 6 → 12", "10 → 20 records/s",
		"Adding partitions beyond 12 without an ordering plan")
	order := []string{"Lower max.poll.records", "Decouple polling", "Raise max.poll.interval.ms", "Set session.timeout.ms", "Add consumers", "Make the sink idempotent"}
	for i := 1; i < len(order); i++ {
		a, b := remedyRank(r, order[i-1]), remedyRank(r, order[i])
		if a == 0 || b == 0 || a >= b {
			t.Errorf("remedy %q (rank %d) should come before %q (rank %d)", order[i-1], a, order[i], b)
		}
	}
}

// TestCaseStudy001 encodes the worked answer of seed 001.
func TestCaseStudy001(t *testing.T) {
	r, text := diagnose(t, caseStudy001)
	// 500 × 700 ms = 350 s > 300 s: the client leaves the group.
	if r.Verdict != VerdictRebalances || r.PollLoopSeconds != 350 {
		t.Fatalf("verdict %s, poll loop %vs; want rebalances at 350s", r.Verdict, r.PollLoopSeconds)
	}
	mustContain(t, text, "500 × 700ms = 350s", "over by 50s")
	// Raising session.timeout.ms to 120000 did nothing: not the cause.
	mustContain(t, finding(t, r, "session").Conclusion, "session.timeout.ms (120s) is not the cause", "does not move the poll deadline")
	mustContain(t, finding(t, r, "duplicates").Conclusion, "CommitFailedException")
	// Ranked: 1 shrink the batch to ~50 (140 s at p99), 2 decouple polling,
	// 3 raise max.poll.interval.ms as a stopgap (900000), 4 reduce the call
	// cost; the idempotent sink as the final defence; do not add instances.
	if r.RecommendedMaxPollRecords != 50 {
		t.Errorf("recommended max.poll.records %d, want 50", r.RecommendedMaxPollRecords)
	}
	mustContain(t, text, "50 × 2.8s = 140s at the tail", "max.poll.interval.ms to 900000 (stopgap)", "delays detection of genuinely stuck consumers",
		"pause()/resume()", "highest contiguous completed offset")
	for i, want := range []string{"Lower max.poll.records", "Decouple polling", "Raise max.poll.interval.ms", "Reduce the call cost", "Make the sink idempotent"} {
		if got := remedyRank(r, want); got != i+1 {
			t.Errorf("remedy %q ranked %d, want %d", want, got, i+1)
		}
	}
	if len(r.Remedies) != 5 {
		t.Errorf("%d remedies, want 5 (no session change: 120 s is not tight): %+v", len(r.Remedies), r.Remedies)
	}
	mustContain(t, strings.Join(r.Avoid, "\n"), "Adding instances: 8 consumers already fit within 24 partitions", "Raising session.timeout.ms")
	if remedyRank(r, "Add consumers") != 0 {
		t.Error("recommends adding consumers; the worked answer says not to")
	}
}

func TestConsumerVerdicts(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Consumer
		want string
	}{
		{"batch fits, tail does not", Consumer{MaxPollRecords: 100, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second, Heartbeat: 3 * time.Second, PerRecord: time.Second, P99: 4 * time.Second}, VerdictAtRisk},
		{"even the tail fits", Consumer{MaxPollRecords: 50, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second, Heartbeat: 3 * time.Second, PerRecord: 700 * time.Millisecond, P99: 2800 * time.Millisecond}, VerdictStable},
		{"just under at the mean, assumed tail over", Consumer{MaxPollRecords: 499, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second, Heartbeat: 3 * time.Second, PerRecord: 600 * time.Millisecond}, VerdictAtRisk},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := diagnose(t, tc.c)
			if r.Verdict != tc.want {
				t.Fatalf("verdict %s, want %s", r.Verdict, tc.want)
			}
			if tc.want == VerdictStable && (r.RecommendedMaxPollRecords != 0 || remedyRank(r, "Make the sink idempotent") != 1) {
				t.Errorf("a stable consumer gets remedies %+v", r.Remedies)
			}
		})
	}
}

func TestConsumerDrain(t *testing.T) {
	// 20 members at 10 ms per record: 2,000 records/s against 1,500
	// arriving drains 1,000,000 records in 1,000,000 / 500 = 2,000 s.
	c := Consumer{MaxPollRecords: 100, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second, Heartbeat: 3 * time.Second,
		PerRecord: 10 * time.Millisecond, Partitions: 24, Members: 20, Rate: 1500, Lag: 1_000_000}
	r, text := diagnose(t, c)
	if r.GroupRate != 2000 || r.DrainSeconds != 2000 {
		t.Fatalf("group rate %v, drain %vs; want 2000 and 2000", r.GroupRate, r.DrainSeconds)
	}
	mustContain(t, text, "time to drain: 1,000,000 / 500 = 33m20s")
	// More members than partitions: the extra ones idle.
	c.Members = 30
	r, _ = diagnose(t, c)
	if r.ActiveMembers != 24 {
		t.Fatalf("%d active members of 30 on 24 partitions", r.ActiveMembers)
	}
	mustContain(t, finding(t, r, "scaling").Conclusion, "6 members idle")
}

// TestConsumerDrainBeyondDurationRange: 10^10 records of lag drained at 0.5
// records/s take 634 years, beyond a time.Duration. Printing the drain time
// recursed forever on the Duration it wrapped to (math.MinInt64): the
// calculator died of a stack overflow.
func TestConsumerDrainBeyondDurationRange(t *testing.T) {
	c := Consumer{MaxPollRecords: 100, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second, Heartbeat: 3 * time.Second,
		PerRecord: time.Second, Partitions: 1, Members: 1, Rate: 0.5, Lag: 10_000_000_000}
	r, text := diagnose(t, c)
	if r.DrainSeconds != 2e10 {
		t.Fatalf("drain %v s, want 2e10", r.DrainSeconds)
	}
	mustContain(t, text, "time to drain: 10,000,000,000 / 0.50 = 292+ years")
	for d, want := range map[time.Duration]string{math.MinInt64: "-292+ years", -90 * time.Second: "-90s"} {
		if got := dur(d); got != want {
			t.Errorf("dur(%d) = %q, want %q", int64(d), got, want)
		}
	}
}

// TestConsumerRebalancingGroupDoesNotDrain: when every batch expires its
// member (500 records × 1 s against a 300 s poll interval), nothing is
// committed, however much the group processes: the lag never drains. The
// report said so in its verdict, then that capacity covered arrivals and
// the lag drained in 200 s.
func TestConsumerRebalancingGroupDoesNotDrain(t *testing.T) {
	r, text := diagnose(t, Consumer{MaxPollRecords: 500, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second,
		Heartbeat: 3 * time.Second, PerRecord: time.Second, Partitions: 10, Members: 10, Rate: 5, Lag: 1000})
	if r.Verdict != VerdictRebalances || r.DrainSeconds != -1 {
		t.Fatalf("verdict %s, drain %v s; want rebalances, never (-1)", r.Verdict, r.DrainSeconds)
	}
	mustContain(t, text, "lag 1,000 never drains: every batch expires its member before it commits",
		"effective progress is about zero until the poll budget is fixed")
}

func TestConsumerRejectsBadInput(t *testing.T) {
	ok := caseStudy001
	for _, tc := range []struct {
		mut  func(*Consumer)
		flag string
	}{
		{func(c *Consumer) { c.PerRecord = 0 }, "--per-record"},
		{func(c *Consumer) { c.MaxPollRecords = 0 }, "--max-poll-records"},
		{func(c *Consumer) { c.Heartbeat = c.SessionTimeout }, "--heartbeat"},
		{func(c *Consumer) { c.P99 = time.Millisecond }, "--p99"},
		{func(c *Consumer) { c.Rate = -1 }, "--rate"},
	} {
		c := ok
		tc.mut(&c)
		_, err := DiagnoseConsumer(c)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("error %v does not name %s", err, tc.flag)
		}
	}
}

// TestConsumerRejectsInputBeyondItsRange: inputs whose products leave a
// time.Duration or a float64 are rejected, naming the flag. Before, 3000
// records × 1000 h each wrapped the poll loop negative (verdict STABLE,
// "headroom 446744174 %"), and 10^308 records/s × 10 s made the in-flight
// count +Inf, which --json could not encode.
func TestConsumerRejectsInputBeyondItsRange(t *testing.T) {
	for _, tc := range []struct {
		mut  func(*Consumer)
		flag string
	}{
		{func(c *Consumer) { c.MaxPollRecords, c.PerRecord, c.P99 = 3000, 1000*time.Hour, 0 }, "--per-record"},
		{func(c *Consumer) { c.MaxPollRecords, c.P99 = 3000, 300*time.Hour }, "--p99"},
		{func(c *Consumer) { c.MaxPollRecords = 1 << 40 }, "--max-poll-records"},
		{func(c *Consumer) { c.Members = 1 << 40 }, "--members"},
		{func(c *Consumer) { c.Rate, c.PerRecord, c.P99 = 1e308, 10*time.Second, 0 }, "--rate"},
		{func(c *Consumer) { c.Rate = math.NaN() }, "--rate"},
	} {
		c := caseStudy001
		tc.mut(&c)
		_, err := DiagnoseConsumer(c)
		if err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("error %v does not name %s", err, tc.flag)
		}
	}
	// Just inside the range every number is finite and printable.
	c := Consumer{MaxPollRecords: 1, MaxPollInterval: 300 * time.Second, SessionTimeout: 45 * time.Second, Heartbeat: 3 * time.Second,
		PerRecord: 1000 * time.Hour, Partitions: 3, Members: 3, Rate: 9e18, Lag: math.MaxInt64}
	r, text := diagnose(t, c)
	if _, err := json.Marshal(r); err != nil {
		t.Fatal(err)
	}
	if r.Verdict != VerdictRebalances || r.PollLoopSeconds != 3.6e6 {
		t.Fatalf("verdict %s, poll loop %v s; want rebalances at 3.6e6 s", r.Verdict, r.PollLoopSeconds)
	}
	mustContain(t, text, "lag 9.2e+18 never drains", "9e+18 records/s × 41.7 days = 3.2e+25 records in processing")
}

func TestConsumerJSON(t *testing.T) {
	r, _ := diagnose(t, caseStudy000)
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Verdict string `json:"verdict"`
		Input   struct {
			MaxPollIntervalSeconds float64 `json:"max_poll_interval_seconds"`
			PerRecordSeconds       float64 `json:"per_record_seconds"`
		} `json:"input"`
		InFlight float64 `json:"in_flight_needed"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Verdict != VerdictRebalances || back.Input.MaxPollIntervalSeconds != 300 || back.Input.PerRecordSeconds != 0.6 || back.InFlight != 27000 {
		t.Fatalf("JSON round trip: %s", b)
	}
}

func TestNiceRounding(t *testing.T) {
	for in, want := range map[int]int{53: 50, 50: 50, 7: 7, 107: 100, 250: 250, 43: 40, 1999: 1500} {
		if got := niceFloor(in); got != want {
			t.Errorf("niceFloor(%d) = %d, want %d", in, got, want)
		}
	}
	for in, want := range map[time.Duration]time.Duration{600 * time.Second: 10 * time.Minute, 700 * time.Second: 15 * time.Minute, 61 * time.Minute: 75 * time.Minute} {
		if got := niceMinutesCeil(in); got != want {
			t.Errorf("niceMinutesCeil(%s) = %s, want %s", in, got, want)
		}
	}
}
