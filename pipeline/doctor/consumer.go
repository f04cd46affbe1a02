// Package doctor diagnoses Kafka consumers from their numbers, the way the
// case studies in DESIGN.md do by hand: it does the arithmetic (poll budget,
// heartbeat versus session, throughput versus arrival rate, Little's law, lag
// and time to drain) and renders it with the conclusion it supports. It does
// no I/O: `floe doctor` gathers the inputs (group state, end offsets, table
// watermarks, scraped metrics) and hands them here.
package doctor

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Consumer describes a classic Java consumer group (KafkaConsumer with the
// background heartbeat thread of KIP-62) that processes each poll's records
// one at a time before polling again. Zero optional fields are unknown.
type Consumer struct {
	// MaxPollRecords is max.poll.records (required).
	MaxPollRecords int `json:"max_poll_records"`
	// MaxPollInterval is max.poll.interval.ms (required).
	MaxPollInterval time.Duration `json:"-"`
	// SessionTimeout is session.timeout.ms (required).
	SessionTimeout time.Duration `json:"-"`
	// Heartbeat is heartbeat.interval.ms (required, below SessionTimeout).
	Heartbeat time.Duration `json:"-"`
	// PerRecord is the mean processing time of one record (required).
	PerRecord time.Duration `json:"-"`
	// P99 is the 99th percentile of the per-record time. Unknown (0): the
	// tail is taken as TailFactor × PerRecord.
	P99 time.Duration `json:"-"`
	// Partitions of the topic (optional).
	Partitions int `json:"partitions,omitempty"`
	// Members of the group, one consumer each (optional).
	Members int `json:"members,omitempty"`
	// Rate is the arrival rate in records per second (optional).
	Rate float64 `json:"rate,omitempty"`
	// Lag is the current backlog in records (optional).
	Lag int64 `json:"lag,omitempty"`
	// ObservedRebalanceEvery is the observed time between rebalances
	// (optional).
	ObservedRebalanceEvery time.Duration `json:"-"`
}

// MarshalJSON writes the durations in seconds, the unit of the report.
func (c Consumer) MarshalJSON() ([]byte, error) {
	type plain Consumer
	return json.Marshal(struct {
		plain
		MaxPollIntervalSeconds float64 `json:"max_poll_interval_seconds"`
		SessionTimeoutSeconds  float64 `json:"session_timeout_seconds"`
		HeartbeatSeconds       float64 `json:"heartbeat_seconds"`
		PerRecordSeconds       float64 `json:"per_record_seconds"`
		P99Seconds             float64 `json:"p99_seconds,omitempty"`
		RebalanceEverySeconds  float64 `json:"observed_rebalance_every_seconds,omitempty"`
	}{plain(c), c.MaxPollInterval.Seconds(), c.SessionTimeout.Seconds(), c.Heartbeat.Seconds(),
		c.PerRecord.Seconds(), c.P99.Seconds(), c.ObservedRebalanceEvery.Seconds()})
}

// maxBatch bounds a batch at the tail so that every product of the
// calculator fits in a time.Duration (292 years): the stopgap interval
// doubles a batch and rounds it up.
const maxBatch = 100 * yearSeconds * time.Second

const yearSeconds = 365 * 24 * 3600

// TailFactor is the p99/mean ratio assumed when no p99 is given: both case
// studies' lookup services have a p99 of 4-5 × their mean.
const TailFactor = 5

// Validate rejects missing or contradictory settings, naming the flag.
func (c Consumer) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	if c.MaxPollRecords < 1 || c.MaxPollRecords > math.MaxInt32 {
		bad("max-poll-records", "must be from 1 to %d (a Java int), got %d", math.MaxInt32, c.MaxPollRecords)
	}
	if c.MaxPollInterval <= 0 {
		bad("max-poll-interval", "must be positive, got %s", c.MaxPollInterval)
	}
	if c.SessionTimeout <= 0 {
		bad("session-timeout", "must be positive, got %s", c.SessionTimeout)
	}
	if c.Heartbeat <= 0 {
		bad("heartbeat", "must be positive, got %s", c.Heartbeat)
	} else if c.SessionTimeout > 0 && c.Heartbeat >= c.SessionTimeout {
		bad("heartbeat", "%s must be below --session-timeout %s (Kafka rejects the configuration)", c.Heartbeat, c.SessionTimeout)
	}
	if c.PerRecord <= 0 {
		bad("per-record", "the mean processing time of one record is required and must be positive, got %s", c.PerRecord)
	}
	if c.P99 < 0 || (c.P99 > 0 && c.P99 < c.PerRecord) {
		bad("p99", "%s must not be below the mean --per-record %s", c.P99, c.PerRecord)
	} else if c.PerRecord > 0 && c.MaxPollRecords >= 1 {
		flag, tail, tailName := "p99", c.P99.Seconds(), fmt.Sprint(c.P99)
		if c.P99 == 0 {
			flag, tail, tailName = "per-record", TailFactor*c.PerRecord.Seconds(), fmt.Sprintf("%d × %s (the assumed p99)", TailFactor, c.PerRecord)
		}
		if batch := float64(c.MaxPollRecords) * tail; batch > maxBatch.Seconds() {
			bad(flag, "a batch at the tail, --max-poll-records %d × %s, takes %.0f years; the calculator stops at %.0f",
				c.MaxPollRecords, tailName, batch/yearSeconds, maxBatch.Seconds()/yearSeconds)
		}
	}
	if c.Partitions < 0 {
		bad("partitions", "must not be negative, got %d", c.Partitions)
	}
	// Both Java ints, so their product, the duplicates bound, fits an int64.
	if c.Members < 0 || c.Members > math.MaxInt32 {
		bad("members", "must be from 0 to %d (a Java int), got %d", math.MaxInt32, c.Members)
	}
	// Offsets are 64-bit: no topic takes more records than that per second,
	// and the rate times a batch-bounded time stays finite.
	if !(c.Rate >= 0 && c.Rate <= math.MaxInt64) {
		bad("rate", "must be a number of records per second from 0 to %d, got %v", int64(math.MaxInt64), c.Rate)
	}
	if c.Lag < 0 {
		bad("lag", "must not be negative, got %d", c.Lag)
	}
	if c.ObservedRebalanceEvery < 0 {
		bad("rebalance-every", "must not be negative, got %s", c.ObservedRebalanceEvery)
	}
	return errors.Join(errs...)
}

// Verdicts of the poll-budget check.
const (
	// VerdictRebalances: a batch at the mean per-record time reaches
	// max.poll.interval, so every batch expires the member.
	VerdictRebalances = "rebalances"
	// VerdictAtRisk: only a batch at the tail (p99) reaches the interval.
	VerdictAtRisk = "at-risk"
	// VerdictStable: even a batch at the tail fits.
	VerdictStable = "stable"
)

// Finding is one conclusion with the arithmetic that supports it.
type Finding struct {
	// Topic is a short key: poll, session, throughput, duplicates, scaling.
	Topic string `json:"topic"`
	// Conclusion is one sentence.
	Conclusion string `json:"conclusion"`
	// Math holds the lines of arithmetic behind it.
	Math []string `json:"math"`
}

// Remedy is one ranked change with its effect and the constraint it imposes.
type Remedy struct {
	Rank       int    `json:"rank"`
	Action     string `json:"action"`
	Effect     string `json:"effect"`
	Constraint string `json:"constraint"`
}

// ConsumerReport is the calculator's answer. Durations are in seconds.
type ConsumerReport struct {
	Input Consumer `json:"input"`
	// Verdict is one of VerdictRebalances, VerdictAtRisk, VerdictStable.
	Verdict string `json:"verdict"`
	// PollLoopSeconds is max.poll.records × per-record: one batch at the mean.
	PollLoopSeconds float64 `json:"poll_loop_seconds"`
	// PollLoopTailSeconds is max.poll.records × p99 (or the assumed tail).
	PollLoopTailSeconds float64 `json:"poll_loop_tail_seconds"`
	// TailAssumed says the p99 was not given and TailFactor × mean was used.
	TailAssumed bool `json:"tail_assumed"`
	// SessionIsCause is always false for this consumer model: heartbeats run
	// on their own thread, so the session does not expire during a batch.
	SessionIsCause bool `json:"session_is_cause"`
	// PerMemberRate is records per second one synchronous consumer processes.
	PerMemberRate float64 `json:"per_member_rate"`
	// ActiveMembers is min(members, partitions) when both are known.
	ActiveMembers int `json:"active_members,omitempty"`
	// GroupRate is ActiveMembers × PerMemberRate.
	GroupRate float64 `json:"group_rate,omitempty"`
	// LagGrowthPerSecond is Rate − GroupRate (negative: draining).
	LagGrowthPerSecond float64 `json:"lag_growth_per_second,omitempty"`
	// DrainSeconds is Lag / (GroupRate − Rate); -1 when it never drains (a
	// deficit, or the verdict is VerdictRebalances: no batch is committed),
	// 0 when unknown or nothing to drain.
	DrainSeconds float64 `json:"drain_seconds"`
	// InFlightNeeded is Little's law: Rate × mean per-record time, the
	// records that must be in processing at once to keep up.
	InFlightNeeded float64 `json:"in_flight_needed,omitempty"`
	// DuplicatesPerRebalance bounds the records re-delivered per rebalance:
	// a batch per member processed but not committed.
	DuplicatesPerRebalance int64 `json:"duplicates_per_rebalance"`
	// RecommendedMaxPollRecords keeps a batch at the tail within half the
	// poll interval; 0 when no change is needed.
	RecommendedMaxPollRecords int `json:"recommended_max_poll_records,omitempty"`
	// RecommendedMaxPollIntervalSeconds is the stopgap interval: twice the
	// current batch at the mean, rounded up.
	RecommendedMaxPollIntervalSeconds float64   `json:"recommended_max_poll_interval_seconds,omitempty"`
	Findings                          []Finding `json:"findings"`
	Remedies                          []Remedy  `json:"remedies"`
	// Avoid lists tempting changes that would not help, and why.
	Avoid []string `json:"avoid,omitempty"`
}

// DiagnoseConsumer does the calculator's arithmetic for c.
func DiagnoseConsumer(c Consumer) (*ConsumerReport, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	r := &ConsumerReport{Input: c, DrainSeconds: 0}
	n := c.MaxPollRecords
	tail, tailName := c.P99, "p99"
	if tail == 0 {
		tail, tailName, r.TailAssumed = TailFactor*c.PerRecord, fmt.Sprintf("assumed p99 (%d × mean; pass --p99)", TailFactor), true
	}
	loop := time.Duration(n) * c.PerRecord
	loopTail := time.Duration(n) * tail
	r.PollLoopSeconds, r.PollLoopTailSeconds = loop.Seconds(), loopTail.Seconds()
	members := max(c.Members, 1)
	r.DuplicatesPerRebalance = int64(n) * int64(members)

	// The poll budget.
	poll := Finding{Topic: "poll", Math: []string{
		fmt.Sprintf("poll loop = max.poll.records × per-record = %d × %s = %s", n, dur(c.PerRecord), dur(loop)),
		fmt.Sprintf("at the tail: %d × %s %s = %s", n, dur(tail), tailName, dur(loopTail)),
	}}
	switch {
	case loop >= c.MaxPollInterval:
		r.Verdict = VerdictRebalances
		over := "exactly at the boundary: any fetch, commit or GC pause crosses it"
		if loop > c.MaxPollInterval {
			over = "over by " + dur(loop-c.MaxPollInterval)
		}
		poll.Math = append(poll.Math, fmt.Sprintf("%s ≥ max.poll.interval.ms=%d (%s): %s", dur(loop), c.MaxPollInterval.Milliseconds(), dur(c.MaxPollInterval), over))
		poll.Conclusion = fmt.Sprintf("The group rebalances: one batch takes %s at the mean, which reaches max.poll.interval.ms (%s), so the consumer does not call poll() in time, leaves the group, and its partitions are reassigned — on every batch.", dur(loop), dur(c.MaxPollInterval))
	case loopTail >= c.MaxPollInterval:
		r.Verdict = VerdictAtRisk
		poll.Math = append(poll.Math, fmt.Sprintf("%s < max.poll.interval.ms %s ≤ %s", dur(loop), dur(c.MaxPollInterval), dur(loopTail)))
		poll.Conclusion = fmt.Sprintf("At risk: a batch at the mean (%s) fits in max.poll.interval.ms (%s), but a batch of slow records (%s) does not; tail latency will expire members intermittently.", dur(loop), dur(c.MaxPollInterval), dur(loopTail))
	default:
		r.Verdict = VerdictStable
		poll.Math = append(poll.Math, fmt.Sprintf("%s ≤ %s < max.poll.interval.ms %s (headroom %.0f %% at the tail)", dur(loop), dur(loopTail), dur(c.MaxPollInterval), 100*(1-loopTail.Seconds()/c.MaxPollInterval.Seconds())))
		poll.Conclusion = "The poll budget holds: even a batch at the tail finishes within max.poll.interval.ms."
	}
	if r.Verdict == VerdictRebalances && c.ObservedRebalanceEvery > 0 {
		obs := c.ObservedRebalanceEvery
		if obs >= c.MaxPollInterval {
			poll.Math = append(poll.Math, fmt.Sprintf("observed every %s = %s poll deadline + %s of rebalance, rejoin and catch-up: consistent", dur(obs), dur(c.MaxPollInterval), dur(obs-c.MaxPollInterval)))
		} else {
			poll.Math = append(poll.Math, fmt.Sprintf("observed every %s < the %s deadline: with %d members each expiring on its own batch the group rebalances more often than one member does: consistent", dur(obs), dur(c.MaxPollInterval), members))
		}
	}
	r.Findings = append(r.Findings, poll)

	// Heartbeats versus the session.
	sess := Finding{Topic: "session", Math: []string{
		fmt.Sprintf("heartbeat.interval.ms=%d on the background thread, session.timeout.ms=%d: %.1f heartbeats per session", c.Heartbeat.Milliseconds(), c.SessionTimeout.Milliseconds(), c.SessionTimeout.Seconds()/c.Heartbeat.Seconds()),
	}}
	if r.Verdict == VerdictStable {
		sess.Conclusion = "session.timeout.ms bounds only how long a dead or paused process goes unnoticed; heartbeats continue while records are processed."
	} else {
		sess.Conclusion = fmt.Sprintf("session.timeout.ms (%s) is not the cause: heartbeats continue on the background thread during the %s batch, so the session stays alive; raising it does not move the poll deadline.", dur(c.SessionTimeout), dur(loop))
	}
	if c.Heartbeat > c.SessionTimeout/3 {
		sess.Math = append(sess.Math, fmt.Sprintf("heartbeat %s > session/3 = %s: one lost heartbeat brings the member close to expiry", dur(c.Heartbeat), dur(c.SessionTimeout/3)))
	}
	if c.SessionTimeout < 30*time.Second {
		sess.Math = append(sess.Math, fmt.Sprintf("session %s < 30 s: tight for GC pauses and network jitter; spurious expirations add rebalances once the group is already unstable", dur(c.SessionTimeout)))
	}
	r.Findings = append(r.Findings, sess)

	// Throughput against arrivals.
	r.PerMemberRate = 1 / c.PerRecord.Seconds()
	thr := Finding{Topic: "throughput", Math: []string{
		fmt.Sprintf("one synchronous consumer: 1 / %s = %s records/s", dur(c.PerRecord), num(r.PerMemberRate)),
	}}
	active := c.Members
	if c.Members > 0 && c.Partitions > 0 {
		active = min(c.Members, c.Partitions)
	}
	if active > 0 {
		r.ActiveMembers = active
		r.GroupRate = float64(active) * r.PerMemberRate
		thr.Math = append(thr.Math, fmt.Sprintf("group: %d active consumers × %s = %s records/s", active, num(r.PerMemberRate), num(r.GroupRate)))
	}
	if c.Rate > 0 {
		r.InFlightNeeded = c.Rate * c.PerRecord.Seconds()
		little := fmt.Sprintf("Little's law: %s records/s × %s = %s records in processing at once to keep up", num(c.Rate), dur(c.PerRecord), num(r.InFlightNeeded))
		if !r.TailAssumed {
			little += fmt.Sprintf(" (%s sized for the p99)", num(c.Rate*tail.Seconds()))
		}
		if active > 0 {
			r.LagGrowthPerSecond = c.Rate - r.GroupRate
			if r.LagGrowthPerSecond > 0 {
				thr.Math = append(thr.Math, fmt.Sprintf("arrivals %s − capacity %s = lag grows by %s records/s (%s per hour)", num(c.Rate), num(r.GroupRate), num(r.LagGrowthPerSecond), num(r.LagGrowthPerSecond*3600)))
				r.DrainSeconds = -1
			} else {
				thr.Math = append(thr.Math, fmt.Sprintf("capacity %s − arrivals %s = %s records/s of headroom", num(r.GroupRate), num(c.Rate), num(-r.LagGrowthPerSecond)))
				if c.Lag > 0 {
					r.DrainSeconds = float64(c.Lag) / -r.LagGrowthPerSecond
					if r.LagGrowthPerSecond == 0 || r.Verdict == VerdictRebalances {
						r.DrainSeconds = -1
					}
				}
			}
			if c.Lag > 0 {
				switch {
				case r.Verdict == VerdictRebalances:
					thr.Math = append(thr.Math, fmt.Sprintf("lag %s never drains: every batch expires its member before it commits (see poll)", num(float64(c.Lag))))
				case r.DrainSeconds < 0:
					thr.Math = append(thr.Math, fmt.Sprintf("lag %s never drains at this rate", num(float64(c.Lag))))
				default:
					thr.Math = append(thr.Math, fmt.Sprintf("time to drain: %s / %s = %s", num(float64(c.Lag)), num(-r.LagGrowthPerSecond), dur(sec(r.DrainSeconds))))
				}
			}
		}
		needed := math.Ceil(c.Rate / r.PerMemberRate)
		line := fmt.Sprintf("synchronous consumers needed: %s / %s = %s", num(c.Rate), num(r.PerMemberRate), num(needed))
		if c.Partitions > 0 && needed > float64(c.Partitions) {
			line += fmt.Sprintf(" > %d partitions (at most %d active consumers: %s records/s)", c.Partitions, c.Partitions, num(float64(c.Partitions)*r.PerMemberRate))
		}
		thr.Math = append(thr.Math, line, little)
		switch {
		case r.LagGrowthPerSecond > 0:
			thr.Conclusion = fmt.Sprintf("The synchronous call is the real amplifier: it caps throughput at %s records/s per consumer, %s for the group, far below %s arriving; lag grows and never drains. Keeping up needs about %s records in flight at once, which only asynchronous, batched lookups provide.", num(r.PerMemberRate), num(r.GroupRate), num(c.Rate), num(r.InFlightNeeded))
		case r.Verdict == VerdictRebalances:
			// The capacity is what the group processes, not what it
			// commits: the expelled member's work is re-read by the next.
			thr.Conclusion = fmt.Sprintf("Capacity %s records/s would exceed arrivals of %s records/s, but every batch expires its member before it commits: effective progress is about zero until the poll budget is fixed.", num(r.GroupRate), num(c.Rate))
		default:
			thr.Conclusion = fmt.Sprintf("Capacity %s records/s covers arrivals of %s records/s.", num(r.GroupRate), num(c.Rate))
		}
	} else {
		thr.Conclusion = fmt.Sprintf("Each consumer processes %s records/s; pass --rate to compare with arrivals.", num(r.PerMemberRate))
	}
	r.Findings = append(r.Findings, thr)

	// Duplicates.
	dup := Finding{Topic: "duplicates", Math: []string{
		fmt.Sprintf("re-delivered per rebalance ≤ max.poll.records × members = %d × %d = %s records processed but not committed", n, members, num(float64(r.DuplicatesPerRebalance))),
	}}
	if c.Members == 0 {
		dup.Math[0] = fmt.Sprintf("re-delivered per rebalance ≤ max.poll.records = %d records per member, processed but not committed (pass --members for the group)", n)
	}
	if r.Verdict == VerdictStable {
		dup.Conclusion = "Consumption is at-least-once: every rebalance (deploys, crashes) still re-delivers the uncommitted part of a batch, so the sink must be idempotent."
	} else {
		dup.Conclusion = "Duplicates follow from at-least-once consumption: the expelled consumer cannot commit what it processed (CommitFailedException: no longer a member of the group), so the new owner re-reads and re-writes those records."
	}
	r.Findings = append(r.Findings, dup)

	// Members and partitions.
	if c.Members > 0 && c.Partitions > 0 {
		sc := Finding{Topic: "scaling", Math: []string{
			fmt.Sprintf("%d members, %d partitions: %s", c.Members, c.Partitions, spread(c.Members, c.Partitions)),
		}}
		switch {
		case c.Members > c.Partitions:
			sc.Conclusion = fmt.Sprintf("%d members idle: a group uses at most one consumer per partition.", c.Members-c.Partitions)
		case r.LagGrowthPerSecond > 0:
			sc.Conclusion = fmt.Sprintf("Adding consumers up to %d is immediate and ordering-neutral (keys keep their partitions) and multiplies throughput by %s, but is not enough alone; adding partitions changes hash(key) %% partitions and splits in-flight sessions.", c.Partitions, num(float64(c.Partitions)/float64(c.Members)))
		default:
			sc.Conclusion = "Adding instances does not shorten a batch: members already fit within the partitions, and more members mean more rebalances on every deploy."
		}
		r.Findings = append(r.Findings, sc)
	}

	r.remedies(tail)
	return r, nil
}

// remedies ranks what to change, given the findings.
func (r *ConsumerReport) remedies(tail time.Duration) {
	c := r.Input
	add := func(action, effect, constraint string) {
		r.Remedies = append(r.Remedies, Remedy{Rank: len(r.Remedies) + 1, Action: action, Effect: effect, Constraint: constraint})
	}
	unstable := r.Verdict != VerdictStable
	deficit := r.LagGrowthPerSecond > 0
	if unstable {
		budget := c.MaxPollInterval / 2
		n := niceFloor(int(budget / tail))
		if n >= 1 && n < c.MaxPollRecords {
			r.RecommendedMaxPollRecords = n
			add(fmt.Sprintf("Lower max.poll.records to %d", n),
				fmt.Sprintf("a batch takes %d × %s = %s at the mean and %d × %s = %s at the tail, within half of max.poll.interval.ms (%s)",
					n, dur(c.PerRecord), dur(time.Duration(n)*c.PerRecord), n, dur(tail), dur(time.Duration(n)*tail), dur(budget)),
				"fewer records per poll; no code change; restart-only, roll one member at a time")
		}
	}
	if unstable || deficit {
		effect := "poll() keeps its deadline whatever the lookup latency"
		if r.InFlightNeeded > 0 {
			effect = fmt.Sprintf("throughput follows concurrency, not latency: %s records in flight (Little's law) instead of 1 per consumer", num(r.InFlightNeeded))
		}
		add("Decouple polling from processing: asynchronous, bounded, batched lookups",
			effect,
			"keep calling poll() while partitions are paused (pause()/resume() when the queue is full); commit only the highest contiguous completed offset; release records per partition in offset order to keep per-key order")
	}
	if r.Verdict == VerdictRebalances {
		iv := niceMinutesCeil(2 * time.Duration(c.MaxPollRecords) * c.PerRecord)
		r.RecommendedMaxPollIntervalSeconds = iv.Seconds()
		add(fmt.Sprintf("Raise max.poll.interval.ms to %d (stopgap)", iv.Milliseconds()),
			fmt.Sprintf("2 × the current %s batch, rounded up: the boundary is no longer hit at the mean", dur(time.Duration(c.MaxPollRecords)*c.PerRecord)),
			fmt.Sprintf("hides tail latency (a batch at the tail still needs %s) and delays detection of genuinely stuck consumers", dur(time.Duration(c.MaxPollRecords)*tail)))
	}
	if c.SessionTimeout < 30*time.Second {
		add("Set session.timeout.ms=30000 and heartbeat.interval.ms=10000",
			"GC pauses and network jitter no longer expire members of an already unstable group",
			"a crashed consumer is detected after 30 s instead of "+dur(c.SessionTimeout)+"; restart-only")
	}
	if deficit && c.Members > 0 && c.Partitions > c.Members {
		add(fmt.Sprintf("Add consumers: %d → %d (one per partition)", c.Members, c.Partitions),
			fmt.Sprintf("%s → %s records/s; immediate; key-to-partition mapping unchanged", num(r.GroupRate), num(float64(c.Partitions)*r.PerMemberRate)),
			fmt.Sprintf("not enough alone while lookups are synchronous; beyond %d partitions consumers idle", c.Partitions))
	}
	if unstable || deficit {
		add("Reduce the call cost: batch the lookup API (many keys per request), cache results, add a circuit breaker",
			"fewer and shorter calls per record; p99 spikes no longer stretch a batch",
			"needs a batch endpoint on the service; a breaker needs a policy for records it cannot enrich (pause, pass through, dead-letter)")
	}
	add("Make the sink idempotent: upsert or MERGE keyed on (topic, partition, offset) or a business key, and commit offsets only after the write is durable",
		"re-delivered records become no-ops: effectively-once results from at-least-once consumption",
		"configuration changes only how often duplicates happen; this is the last line of defence (floe's dedupe MERGE does exactly this)")
	if deficit && c.Partitions > 0 {
		r.Avoid = append(r.Avoid, fmt.Sprintf("Adding partitions beyond %d without an ordering plan: hash(key) %% partitions changes, so in-flight sessions split across old and new partitions; pause producers, dual-publish to an expanded topic, or use a stable custom partitioner.", c.Partitions))
	}
	if !deficit && c.Members > 0 && c.Partitions > 0 && c.Members <= c.Partitions {
		r.Avoid = append(r.Avoid, fmt.Sprintf("Adding instances: %d consumers already fit within %d partitions; more members do not shorten a batch and add rebalances on every deploy.", c.Members, c.Partitions))
	}
	if r.Verdict != VerdictStable {
		r.Avoid = append(r.Avoid, "Raising session.timeout.ms to fix these rebalances: it widens the heartbeat window only; the poll deadline is max.poll.interval.ms.")
	}
}

// spread says how partitions divide over members.
func spread(members, partitions int) string {
	if members > partitions {
		return fmt.Sprintf("%d members own one partition each, %d own none", partitions, members-partitions)
	}
	lo, hi := partitions/members, (partitions+members-1)/members
	if lo == hi {
		return fmt.Sprintf("%d partitions per member", lo)
	}
	return fmt.Sprintf("%d-%d partitions per member", lo, hi)
}

// niceFloor rounds n down to 1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 × a power of ten
// (n ≥ 10), so a recommendation reads like one an operator would set.
func niceFloor(n int) int {
	if n < 10 {
		return n
	}
	p := int(math.Pow(10, math.Floor(math.Log10(float64(n)))))
	best := p
	for _, m := range []float64{1, 1.5, 2, 2.5, 3, 4, 5, 6, 8, 10} {
		if v := int(m * float64(p)); v <= n {
			best = v
		}
	}
	return best
}

// niceMinutesCeil rounds d up to 1, 2, 5, 10, 15, 20, 30 or 45 minutes, then
// whole quarter hours.
func niceMinutesCeil(d time.Duration) time.Duration {
	for _, m := range []time.Duration{1, 2, 5, 10, 15, 20, 30, 45, 60} {
		if d <= m*time.Minute {
			return m * time.Minute
		}
	}
	q := 15 * time.Minute
	return (d + q - 1) / q * q
}

// dur prints a duration the way an operator writes it: 300s, 600ms, 1h30m.
func dur(d time.Duration) string {
	switch {
	case d < 0:
		// -math.MinInt64 is math.MinInt64 again: negate the saturated value.
		return "-" + dur(-max(d, -math.MaxInt64))
	case d == math.MaxInt64:
		// What sec saturates to: the true value may be any longer.
		return "292+ years"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < 10*time.Minute:
		s := d.Seconds()
		if s == math.Trunc(s) {
			return fmt.Sprintf("%.0fs", s)
		}
		return fmt.Sprintf("%.1fs", s)
	case d < 48*time.Hour:
		s := d.Round(time.Second).String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
		return s
	default:
		return fmt.Sprintf("%.1f days", d.Hours()/24)
	}
}

// sec converts seconds to a Duration for dur, saturating at its ±292 years:
// a float beyond the range converts to math.MinInt64 on amd64, so a lag
// draining over centuries became a negative time.
func sec(s float64) time.Duration {
	const limit = float64(math.MaxInt64) / float64(time.Second)
	switch {
	case s >= limit:
		return math.MaxInt64
	case s <= -limit:
		return -math.MaxInt64
	}
	return time.Duration(s * float64(time.Second))
}

// num prints a number with thousands separators and at most two decimals
// below 100.
func num(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return fmt.Sprint(v)
	}
	neg := v < 0
	if neg {
		v = -v
	}
	var s string
	switch {
	case v >= 1e18:
		// Near int64's end, where group cannot take it: 5.8e+27.
		s = fmt.Sprintf("%.2g", v)
	case v == math.Trunc(v) || v >= 100:
		s = group(int64(math.Round(v)))
	case v >= 10:
		s = fmt.Sprintf("%.1f", v)
	default:
		s = fmt.Sprintf("%.2f", v)
	}
	if neg {
		return "-" + s
	}
	return s
}

func group(n int64) string {
	s := fmt.Sprint(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
