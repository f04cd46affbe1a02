package doctor

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// Sample is what `floe doctor` reads at one instant.
type Sample struct {
	At time.Time
	// End is each partition's end offset (high watermark) of the topic.
	End map[int32]int64
	// Start is each partition's log start offset: lag counts from no lower
	// (what is below was deleted), and from here for a partition neither
	// the table nor the group has an offset for. Nil: 0.
	Start map[int32]int64
	// Group is the group's committed Kafka offset of partitions the table
	// has no watermark for (absent: none). floe run pins there where
	// start_offset "latest" resolved and reads from there, so lag counts
	// from it; counted from the log start, a job started at latest was
	// behind by the topic's whole history.
	Group map[int32]int64
	// Watermarks is the group's offset map for the topic from the table: the
	// next offset to commit per partition.
	Watermarks map[int32]int64
	// Metrics is a scrape of a floe member's /metrics; nil without one.
	Metrics *Metrics
}

// GroupMember is one member of the consumer group and its assignment.
type GroupMember struct {
	ID         string  `json:"id"`
	ClientID   string  `json:"client_id"`
	Host       string  `json:"host"`
	Partitions []int32 `json:"partitions"`
}

// Commit is one table snapshot that carries the group's offset map.
type Commit struct {
	At time.Time
	// Offsets is the sum of the topic's watermarks after the commit.
	Offsets int64
	// Rows and Duplicates are floe.rows and floe.duplicates-skipped.
	Rows, Duplicates int64
	// Partitions is the topic's partition count the commit recorded
	// (floe.partitions.<topic>); 0 when it recorded none.
	Partitions int
}

// EnrichLimits is the in-flight capacity the enrich config allows.
type EnrichLimits struct {
	// MaxInFlightRecords bounds one partition's lane.
	MaxInFlightRecords int `json:"max_in_flight_records"`
	// MaxInFlightRequests bounds the requests of one process.
	MaxInFlightRequests int `json:"max_in_flight_requests"`
	// KeysPerRequest is batch_size in batch mode, 1 in single mode.
	KeysPerRequest int `json:"keys_per_request"`
}

// Live is everything `floe doctor` gathered.
type Live struct {
	Topic, GroupID, Table string
	// First is required; Second, taken a little later, gives trends.
	First  Sample
	Second *Sample
	// GroupState is the coordinator's state (Stable, Empty, ...).
	GroupState string
	Members    []GroupMember
	// Commits are the snapshots carrying the offset map, oldest first.
	Commits []Commit
	// PartitionCounts are the topic's partition counts the table recorded,
	// oldest first (lakehouse.PartitionCountsOf): what expiry left of the
	// commits' counts, and those maintenance carried.
	PartitionCounts []int
	// Enrich is nil when the job has no enrichment stage.
	Enrich *EnrichLimits
}

// PartitionLag is one partition's lag: end offset − table watermark.
type PartitionLag struct {
	Partition int32 `json:"partition"`
	End       int64 `json:"end"`
	Watermark int64 `json:"watermark"`
	// InTable is false when the table's offset map has no entry for it:
	// Watermark is then where the job reads it from, the group's Kafka
	// offset, else the log start.
	InTable bool `json:"in_table"`
	// Lag counts from the log start when retention passed Watermark.
	Lag int64 `json:"lag"`
	// Deleted is how many offsets from Watermark on retention deleted before
	// the job committed them: lost to the table, and no lag.
	Deleted int64 `json:"deleted_by_retention,omitempty"`
	// Trend is the change of lag in records per second over the sample.
	Trend float64 `json:"trend_per_second"`
	// LagSeconds is floe_consumer_lag_seconds of the scraped member; nil
	// without a scrape and for a partition that member does not hold (it
	// has no series for it: another member's lag is unknown, not 0).
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
}

// EnrichLoad is Little's law for the enrichment stage of one process.
type EnrichLoad struct {
	RatePerSecond      float64 `json:"rate_per_second"`
	MeanLatencySeconds float64 `json:"mean_latency_seconds"`
	P99LatencySeconds  float64 `json:"p99_latency_seconds"`
	// InFlightNeeded is rate × mean latency.
	InFlightNeeded   float64 `json:"in_flight_needed"`
	InFlightObserved float64 `json:"in_flight_observed"`
	// Capacity is min(lanes × max_in_flight_records, requests × keys).
	Capacity    float64 `json:"capacity"`
	Utilization float64 `json:"utilization"`
}

// LiveReport is the diagnosis of a running (or stopped) floe job.
type LiveReport struct {
	Topic         string         `json:"topic"`
	Group         string         `json:"group"`
	Table         string         `json:"table"`
	SampleSeconds float64        `json:"sample_seconds"`
	Partitions    []PartitionLag `json:"partitions"`
	TotalLag      int64          `json:"total_lag"`
	// LagTrend is ArrivalRate − CommitRate in records per second, positive
	// when the job falls behind; lag itself changes by LagTrend −
	// DeletedRate.
	LagTrend    float64 `json:"lag_trend_per_second"`
	ArrivalRate float64 `json:"arrival_rate"`
	// CommitRate is offsets committed per second: the table's watermarks
	// over the sample, or the recent commit history when the sample saw no
	// commit while a member is in the group and commits keep their pace.
	CommitRate float64 `json:"commit_rate"`
	// DeletedRate is offsets per second retention deleted over the sample
	// before they were committed: lag they take away was not drained.
	DeletedRate float64 `json:"deleted_by_retention_per_second,omitempty"`
	// Trend is caught-up, draining, growing, keeping-pace (records arrive
	// as fast as they are committed), steady (nothing arrives and nothing
	// is committed), log-behind (a partition's log ends below where the
	// job resumes it: the topic was recreated or truncated) or unknown (one
	// sample).
	Trend string `json:"trend"`
	// DrainSeconds is lag / (commit rate − arrival rate) when draining, and
	// lag / commit rate when keeping pace (the records behind are committed
	// in that time while as many arrive: the delay a record waits); 0 when
	// caught up or unknown, -1 when lag does not drain (growing, steady,
	// log-behind).
	DrainSeconds         float64       `json:"drain_seconds"`
	GroupState           string        `json:"group_state"`
	Members              []GroupMember `json:"members"`
	TopicPartitions      int           `json:"topic_partitions"`
	TablePartitions      int           `json:"table_partitions"`
	UnassignedPartitions []int32       `json:"unassigned_partitions,omitempty"`
	Commits              int           `json:"commits"`
	CommitsPerMinute     float64       `json:"commits_per_minute"`
	LastCommitAgeSeconds float64       `json:"last_commit_age_seconds"`
	RowsCommitted        int64         `json:"rows_committed"`
	DuplicatesSkipped    int64         `json:"duplicates_skipped"`
	Rebalances           float64       `json:"rebalances,omitempty"`
	RebalancesPerHour    float64       `json:"rebalances_per_hour,omitempty"`
	Enrich               *EnrichLoad   `json:"enrich,omitempty"`
	Hazards              []string      `json:"hazards,omitempty"`
	Findings             []Finding     `json:"findings"`
	MetricsScraped       bool          `json:"metrics_scraped"`
	MetricsMissing       []string      `json:"metrics_missing,omitempty"`
	EnrichLimits         *EnrichLimits `json:"enrich_limits,omitempty"`
}

// recentCommits is how far back the commit history counts for rates.
const recentCommits = 5 * time.Minute

// DiagnoseLive computes lag, trends, commit and rebalance rates, Little's
// law for enrichment, members versus partitions and the partition-count
// hazard from what `floe doctor` gathered.
func DiagnoseLive(in Live) (*LiveReport, error) {
	if len(in.First.End) == 0 {
		return nil, errors.New("doctor: no end offsets: the topic has no partitions")
	}
	cur := in.First
	if in.Second != nil {
		cur = *in.Second
	}
	r := &LiveReport{Topic: in.Topic, Group: in.GroupID, Table: in.Table, GroupState: in.GroupState,
		Members: in.Members, TopicPartitions: len(cur.End), TablePartitions: len(cur.Watermarks),
		MetricsScraped: cur.Metrics != nil, EnrichLimits: in.Enrich, Trend: "unknown"}
	var dt float64
	if in.Second != nil {
		dt = in.Second.At.Sub(in.First.At).Seconds()
		if dt <= 0 {
			return nil, fmt.Errorf("doctor: second sample at %s is not after the first at %s", in.Second.At, in.First.At)
		}
		r.SampleSeconds = dt
	}

	// Lag per partition and its trend.
	var endBefore, endNow, lagBefore, committed, deleted int64
	for _, p := range sortedKeys(cur.End) {
		pl := lagOf(cur, p)
		r.TotalLag += pl.Lag
		endNow += pl.End
		if in.Second != nil {
			before := lagOf(in.First, p)
			pl.Trend = float64(pl.Lag-before.Lag) / dt
			lagBefore += before.Lag
			endBefore += before.End
			c, d := progress(before, pl)
			committed += c
			deleted += d
		}
		if cur.Metrics != nil {
			if s, ok := cur.Metrics.LagSeconds[p]; ok {
				pl.LagSeconds = &s
			}
		}
		r.Partitions = append(r.Partitions, pl)
	}

	// Commit history: rate, age, rows and duplicates.
	r.Commits = len(in.Commits)
	var historyRate float64
	if n := len(in.Commits); n > 0 {
		last := in.Commits[n-1]
		r.LastCommitAgeSeconds = max(cur.At.Sub(last.At).Seconds(), 0)
		for _, c := range in.Commits {
			r.RowsCommitted += c.Rows
			r.DuplicatesSkipped += c.Duplicates
		}
		i := n - 1
		for i > 0 && last.At.Sub(in.Commits[i-1].At) <= recentCommits {
			i--
		}
		if span := last.At.Sub(in.Commits[i].At).Seconds(); i < n-1 && span > 0 {
			r.CommitsPerMinute = float64(n-1-i) / span * 60
			// The history's rate stands for a sample that saw no commit
			// only while commits go on at their pace: a member is in the
			// group and the last commit is no older than twice their
			// spacing. A stopped or stalled job was said to drain at the
			// rate it had before it stopped.
			spacing := span / float64(n-1-i)
			if len(in.Members) > 0 && cur.At.Sub(last.At).Seconds() <= 2*spacing {
				historyRate = float64(last.Offsets-in.Commits[i].Offsets) / span
			}
		}
	}

	if in.Second != nil {
		r.ArrivalRate = float64(endNow-endBefore) / dt
		r.CommitRate = float64(committed) / dt
		r.DeletedRate = float64(deleted) / dt
		if committed == 0 && historyRate > 0 {
			// Commits are less frequent than the sample: use the history.
			r.CommitRate = historyRate
		}
		r.LagTrend = r.ArrivalRate - r.CommitRate
	}
	behind := r.logBehind()
	switch {
	case len(behind) > 0:
		// Their lag, counted 0, is no progress: floe run refuses them.
		r.Trend, r.DrainSeconds = "log-behind", -1
	case r.TotalLag == 0:
		r.Trend = "caught-up"
	case in.Second == nil:
	case r.LagTrend < 0:
		r.Trend, r.DrainSeconds = "draining", float64(r.TotalLag)/-r.LagTrend
	case r.LagTrend > 0:
		r.Trend, r.DrainSeconds = "growing", -1
	case r.CommitRate > 0:
		// As many arrive as are committed: lag holds at what is in
		// flight, and a job doing so is not idle.
		r.Trend, r.DrainSeconds = "keeping-pace", float64(r.TotalLag)/r.CommitRate
	default:
		r.Trend, r.DrainSeconds = "steady", -1
	}
	r.lagFinding(lagBefore, in.Second != nil, behind)
	r.logBehindHazard(behind)
	r.membersFinding()
	r.partitionHazard(cur, in.Commits, in.PartitionCounts)
	r.commitFinding()
	r.metricsFindings(in, cur)
	// After metricsFindings, which reports partitions added only when no
	// hazard precedes.
	r.retentionHazard()
	return r, nil
}

func lagOf(s Sample, p int32) PartitionLag {
	pl := PartitionLag{Partition: p, End: s.End[p]}
	start := s.Start[p]
	if wm, ok := s.Watermarks[p]; ok {
		pl.Watermark, pl.InTable = wm, true
		pl.Deleted = max(start-wm, 0)
	} else if g, ok := s.Group[p]; ok {
		pl.Watermark = g
		pl.Deleted = max(start-g, 0)
	} else {
		pl.Watermark = start
	}
	pl.Lag = max(pl.End-max(pl.Watermark, start), 0)
	return pl
}

// progress splits the move, between two samples, of where a partition's
// lag counts from (its watermark, or the log start where that is later):
// committed is the table's watermark rising above where lag counted from,
// deleted the rest, retention's. A partition the table has no watermark for
// commits nothing: its lag counts from a fixed group offset or the log
// start, which only retention moves.
func progress(before, now PartitionLag) (committed, deleted int64) {
	from := before.Watermark + before.Deleted
	if now.InTable {
		committed = max(now.Watermark-from, 0)
	}
	deleted = max(now.Watermark+now.Deleted-from-committed, 0)
	return committed, deleted
}

// logBehind returns the partitions whose log ends below where the job
// resumes them, the table's watermark or the group's offset.
func (r *LiveReport) logBehind() []PartitionLag {
	var behind []PartitionLag
	for _, p := range r.Partitions {
		if p.Watermark > p.End {
			behind = append(behind, p)
		}
	}
	return behind
}

// logBehindHazard reports partitions whose log ends below where the job
// resumes them: the topic was deleted and created again (or truncated),
// its offsets restarting at 0. Their lag, clamped to 0, read as caught up
// while records arrived and nothing was committed.
func (r *LiveReport) logBehindHazard(behind []PartitionLag) {
	if len(behind) == 0 {
		return
	}
	var where []string
	var inTable, fromGroup bool
	for _, p := range behind {
		from := "the table's watermark"
		if !p.InTable {
			from = "the group's offset"
		}
		inTable, fromGroup = inTable || p.InTable, fromGroup || !p.InTable
		where = append(where, fmt.Sprintf("partition %d ends at %s, %s is %s", p.Partition, group(p.End), from, group(p.Watermark)))
	}
	var effects []string
	remedy := "Ingest the topic"
	if inTable {
		effects = append(effects, "refuses the topic (status 2) rather than skip every new record below the table's watermark")
		remedy += " into a new table (this one holds rows at the offsets the new log reuses)"
	}
	if fromGroup {
		effects = append(effects, "refuses a partition whose group offset is above its log's end at its first fetch (status 2) rather than wait there and skip every record below")
		remedy += " under a new kafka.group (its offsets are past the log's end)"
	}
	r.Hazards = append(r.Hazards, fmt.Sprintf("the log of %s ends below where the job resumes it (%s): the topic was recreated or truncated. floe run %s: nothing of these partitions is ingested, and their lag counts 0. %s.",
		r.Topic, strings.Join(where, "; "), strings.Join(effects, ", and "), remedy))
}

// retentionHazard reports records retention deleted before the job
// committed them: no member can read them any more, so they are not lag.
func (r *LiveReport) retentionHazard() {
	var total int64
	var where []string
	for _, p := range r.Partitions {
		if p.Deleted > 0 {
			total += p.Deleted
			where = append(where, fmt.Sprintf("partition %d: %s offsets from %s up to its log start %s", p.Partition, group(p.Deleted), group(p.Watermark), group(p.Watermark+p.Deleted)))
		}
	}
	if total == 0 {
		return
	}
	r.Hazards = append(r.Hazards, fmt.Sprintf("%s records deleted by retention before they were committed (%s): the table cannot get them from %s any more, and lag counts from the log start. Raise the topic's retention or the job's throughput.",
		group(total), strings.Join(where, "; "), r.Topic))
}

func (r *LiveReport) lagFinding(before int64, trended bool, behind []PartitionLag) {
	f := Finding{Topic: "lag"}
	var terms []string
	for _, p := range r.Partitions {
		terms = append(terms, fmt.Sprint(p.Lag))
	}
	sum := strings.Join(terms, " + ") + " = "
	if len(terms) > 16 {
		sum = ""
	}
	f.Math = append(f.Math, fmt.Sprintf("lag = Σ (end offset − table watermark) over %d partitions = %s%s records", len(r.Partitions), sum, group(r.TotalLag)))
	var outside []int32
	for _, p := range r.Partitions {
		if !p.InTable {
			outside = append(outside, p.Partition)
		}
		if p.Deleted > 0 {
			f.Math = append(f.Math, fmt.Sprintf("partition %d: its log starts at %s, above %s: %s − %s = %s records, not %s (retention deleted %s)",
				p.Partition, group(p.Watermark+p.Deleted), group(p.Watermark), group(p.End), group(p.Watermark+p.Deleted), group(p.Lag), group(p.End-p.Watermark), group(p.Deleted)))
		}
	}
	if len(outside) > 0 {
		f.Math = append(f.Math, fmt.Sprintf("partitions %v are not in the table's offset map: counted from the group's Kafka offset (where start_offset latest resolved) or the log start, whichever is later", outside))
	}
	if len(behind) > 0 {
		var ps []int32
		for _, p := range behind {
			ps = append(ps, p.Partition)
			f.Math = append(f.Math, fmt.Sprintf("partition %d: its log ends at %s, below %s: %s − %s < 0, counted 0", p.Partition, group(p.End), group(p.Watermark), group(p.End), group(p.Watermark)))
		}
		f.Conclusion = fmt.Sprintf("Not ingesting: partitions %v end below where the job resumes them (the topic was recreated or truncated; see the HAZARD), so their lag of 0 is no progress.", ps)
		r.Findings = append(r.Findings, f)
		return
	}
	if !trended {
		f.Conclusion = fmt.Sprintf("Lag is %s records; sample twice (--sample) for its trend.", group(r.TotalLag))
		r.Findings = append(r.Findings, f)
		return
	}
	f.Math = append(f.Math, fmt.Sprintf("over %s: lag %s → %s; arrivals %s/s − commits %s/s = %s/s",
		dur(sec(r.SampleSeconds)), group(before), group(r.TotalLag), num(r.ArrivalRate), num(r.CommitRate), num(r.LagTrend)))
	if r.DeletedRate > 0 {
		f.Math = append(f.Math, fmt.Sprintf("retention deleted %s records/s before they were committed: lag changed by %s − %s = %s/s",
			num(r.DeletedRate), num(r.LagTrend), num(r.DeletedRate), num(r.LagTrend-r.DeletedRate)))
	}
	switch r.Trend {
	case "caught-up":
		f.Conclusion = "Caught up: every offset produced is committed to the table."
	case "draining":
		d := sec(r.DrainSeconds)
		f.Math = append(f.Math, fmt.Sprintf("time to drain = %s / %s per second = %s", group(r.TotalLag), num(-r.LagTrend), dur(d)))
		f.Conclusion = fmt.Sprintf("Draining: lag falls by %s records/s; caught up in about %s if rates hold.", num(-r.LagTrend), dur(d))
	case "growing":
		f.Conclusion = fmt.Sprintf("Growing: lag rises by %s records/s and will not drain at the current commit rate.", num(r.LagTrend))
	case "keeping-pace":
		d := sec(r.DrainSeconds)
		f.Math = append(f.Math, fmt.Sprintf("time to commit the records behind = %s / %s per second = %s", group(r.TotalLag), num(r.CommitRate), dur(d)))
		f.Conclusion = fmt.Sprintf("Keeping pace: %s records/s arrive and are committed; lag stays at %s records, each committed about %s after it arrived.", num(r.CommitRate), group(r.TotalLag), dur(d))
	default:
		f.Conclusion = fmt.Sprintf("Steady at %s records: nothing arrived and nothing was committed during the sample; it does not drain until a member consumes.", group(r.TotalLag))
	}
	if r.DeletedRate > 0 {
		f.Conclusion += fmt.Sprintf(" Retention deletes %s records/s before they are committed: lost to the table, not drained.", num(r.DeletedRate))
	}
	r.Findings = append(r.Findings, f)
}

func (r *LiveReport) membersFinding() {
	n, parts := len(r.Members), r.TopicPartitions
	owner := map[int32]bool{}
	for _, m := range r.Members {
		for _, p := range m.Partitions {
			owner[p] = true
		}
	}
	if n > 0 {
		for _, p := range r.Partitions {
			if !owner[p.Partition] {
				r.UnassignedPartitions = append(r.UnassignedPartitions, p.Partition)
			}
		}
	}
	f := Finding{Topic: "members", Math: []string{fmt.Sprintf("members vs partitions: %d %s, %d partitions (group %s)", n, plural(n, "member"), parts, orUnknown(r.GroupState))}}
	for _, m := range r.Members {
		f.Math = append(f.Math, fmt.Sprintf("  %s (%s) holds %d: %v", m.ClientID, m.Host, len(m.Partitions), m.Partitions))
	}
	switch {
	case n == 0:
		f.Conclusion = "No member is consuming: lag only grows until `floe run` starts."
	case n > parts:
		f.Conclusion = fmt.Sprintf("%d members idle: a group uses at most one member per partition.", n-parts)
	case len(r.UnassignedPartitions) > 0:
		f.Conclusion = fmt.Sprintf("Partitions %v are assigned to no member (a rebalance in progress, or members subscribed before the partitions were added).", r.UnassignedPartitions)
	default:
		f.Conclusion = fmt.Sprintf("%s; up to %d members can share the work.", spread(n, parts), parts)
	}
	r.Findings = append(r.Findings, f)
}

// partitionHazard reports partitions added after ingestion began: keys
// moved. The commits record the partition count they saw, and maintenance
// carries those expiry drops (counts); the smallest one is the count
// ingestion began with. Tables written before
// floe recorded counts fall back to the offset map: partitions above the
// highest one it knows were added (a low-numbered partition missing from
// the map merely never had records).
func (r *LiveReport) partitionHazard(cur Sample, commits []Commit, counts []int) {
	known := 0
	least := func(n int) {
		if n > 0 && (known == 0 || n < known) {
			known = n
		}
	}
	for _, c := range commits {
		least(c.Partitions)
	}
	for _, n := range counts {
		least(n)
	}
	source := "the table's commits recorded"
	if known == 0 {
		if len(cur.Watermarks) == 0 {
			return
		}
		highest := int32(-1)
		for p := range cur.Watermarks {
			highest = max(highest, p)
		}
		known = int(highest) + 1
		source = "the table's offset map reaches"
	}
	var added []int32
	for _, p := range sortedKeys(cur.End) {
		if int(p) >= known {
			added = append(added, p)
		}
	}
	if len(added) == 0 {
		return
	}
	h := fmt.Sprintf("partition count changed: topic %s has %d partitions, %s %d; partitions %v were added after ingestion began. A keyed producer now sends hash(key) %% %d, not %% %d, so sessions that began before the change continue in another partition: their order across the two partitions is not guaranteed (floe verify counts sessions seen in more than one partition).",
		r.Topic, r.TopicPartitions, source, known, added, r.TopicPartitions, known)
	r.Hazards = append(r.Hazards, h)
	r.Findings = append(r.Findings, Finding{Topic: "partitions", Conclusion: "Sessions may be split across partitions after a partition-count change.",
		Math: []string{fmt.Sprintf("%d partitions in the topic − %d %s = %d added: %v", r.TopicPartitions, known, source, len(added), added)}})
}

func (r *LiveReport) commitFinding() {
	f := Finding{Topic: "commits", Math: []string{
		fmt.Sprintf("%d table commits carry the offset map; %s rows committed; %s duplicates skipped by the MERGE (floe.duplicates-skipped)", r.Commits, group(r.RowsCommitted), group(r.DuplicatesSkipped)),
	}}
	if r.Commits == 0 {
		f.Conclusion = "Nothing committed yet."
		r.Findings = append(r.Findings, f)
		return
	}
	rate := fmt.Sprintf("%s commits/min over the last %s of history", num(r.CommitsPerMinute), dur(recentCommits))
	if r.CommitsPerMinute == 0 {
		// One commit within it: no interval to take a rate of ("0
		// commits/min" beside a commit seconds ago).
		rate = fmt.Sprintf("no other commit within %s of it", dur(recentCommits))
	}
	f.Math = append(f.Math, fmt.Sprintf("last commit %s ago; %s", dur(sec(r.LastCommitAgeSeconds)), rate))
	if r.DuplicatesSkipped > 0 {
		f.Conclusion = fmt.Sprintf("%s re-delivered records (rebalances, replays, redone flushes) were skipped by the dedupe MERGE, not duplicated.", group(r.DuplicatesSkipped))
	} else {
		f.Conclusion = "No re-delivered record has reached the table's MERGE."
	}
	r.Findings = append(r.Findings, f)
}

func (r *LiveReport) metricsFindings(in Live, cur Sample) {
	m := cur.Metrics
	if m == nil {
		return
	}
	// A member holding no partition (more members than partitions) has no
	// lag series to export, whatever its version.
	idle := m.Has(MetricAssigned) && m.Values[MetricAssigned] == 0
	for _, name := range []string{MetricLagRecords, MetricLagSeconds, MetricRebalances, MetricDuplicates, MetricConsumed} {
		if idle && (name == MetricLagRecords || name == MetricLagSeconds) {
			continue
		}
		if !m.Has(name) && !(name == MetricRebalances && m.Has(MetricGenerations)) {
			r.MetricsMissing = append(r.MetricsMissing, name)
		}
	}
	var prev *Metrics
	if in.Second != nil {
		prev = in.First.Metrics
	}
	if why := counterReset(prev, m); why != "" {
		// Differences across a restart, or between two members behind one
		// address, are no rates: read the second scrape alone, as without
		// a first.
		prev = nil
		r.Findings = append(r.Findings, Finding{Topic: "metrics", Math: []string{why},
			Conclusion: "The member restarted between the two scrapes, or --metrics-url reached another member: its counters are read from the second scrape alone (since its start)."})
	}

	// Rebalances.
	name := MetricRebalances
	if !m.Has(name) {
		name = MetricGenerations
	}
	if m.Has(name) {
		r.Rebalances = m.Values[name]
		f := Finding{Topic: "rebalances"}
		// The counter includes the member's first join, which is no rebalance
		// of a running job.
		excess := max(r.Rebalances-1, 0)
		if start, ok := m.Values[MetricProcessStart]; ok && start > 0 {
			if up := m.At.Sub(time.Unix(0, int64(start*1e9))); up > 0 {
				r.RebalancesPerHour = excess / up.Hours()
				f.Math = append(f.Math, fmt.Sprintf("%s = %s; minus the first join = %s over %s of uptime = %s per hour", name, num(r.Rebalances), num(excess), dur(up), num(r.RebalancesPerHour)))
			}
		} else {
			f.Math = append(f.Math, fmt.Sprintf("%s = %s", name, num(r.Rebalances)))
		}
		// The sample says what happens now, the average since the start
		// what happened: a member up for a month that rebalances ten times
		// in the sample is in a storm whatever its average.
		var during float64
		if prev != nil {
			during = m.Values[name] - prev.Values[name]
			f.Math = append(f.Math, fmt.Sprintf("+%s during the %s sample", num(during), dur(sec(r.SampleSeconds))))
		}
		switch {
		case during >= 2 && during/(r.SampleSeconds/3600) > 6 || excess >= 2 && r.RebalancesPerHour > 6:
			f.Conclusion = "Rebalancing more than every 10 minutes: every rebalance revokes every partition (eager protocol), flushes and re-seeks; look for members joining and leaving (deploys, crashes, session expiry)."
		case during == 1:
			f.Conclusion = "A rebalance during the sample: a member joined or left (a deploy, a crash, a session expiry); run floe doctor again to see whether it recurs."
		default:
			f.Conclusion = "Rebalances are rare; fetching never waits on enrichment, so no poll deadline can expire a member."
		}
		r.Findings = append(r.Findings, f)
	}
	if added := m.Values[MetricPartitionsAdded]; added > 0 && len(r.Hazards) == 0 {
		r.Hazards = append(r.Hazards, fmt.Sprintf("partition count changed: this member saw %s partitions of %s appear while the table already had offsets for the topic (%s); sessions that began before the change may continue in another partition.", num(added), r.Topic, MetricPartitionsAdded))
	}
	if m.Has(MetricDuplicates) {
		d := Finding{Topic: "duplicates", Math: []string{fmt.Sprintf("%s = %s on this member", MetricDuplicates, num(m.Values[MetricDuplicates]))},
			Conclusion: "Each was a re-delivery the MERGE made harmless."}
		if m.Values[MetricDuplicates] == 0 {
			d.Conclusion = "No re-delivery has reached this member's MERGE."
		}
		r.Findings = append(r.Findings, d)
	}

	// Little's law for enrichment: records in flight = rate × latency.
	if in.Enrich == nil || m.Latency == nil {
		return
	}
	lat, hits, misses := m.Latency, m.Values[MetricCacheHits], m.Values[MetricCacheMisses]
	var rate float64
	window := "since start"
	if prev != nil && prev.Latency != nil {
		rate = (m.Values[MetricConsumed] - prev.Values[MetricConsumed]) / r.SampleSeconds
		hits, misses = hits-prev.Values[MetricCacheHits], misses-prev.Values[MetricCacheMisses]
		if d := m.Latency.Since(prev.Latency); d.Count > 0 {
			lat, window = d, "over the sample"
		}
	} else if start, ok := m.Values[MetricProcessStart]; ok && start > 0 {
		if up := m.At.Sub(time.Unix(0, int64(start*1e9))).Seconds(); up > 0 {
			rate = m.Values[MetricConsumed] / up
		}
	}
	if lat.Count == 0 {
		return
	}
	// Only records whose key misses the cache wait for a lookup.
	share := 1.0
	if hits+misses > 0 {
		share = misses / (hits + misses)
	}
	lanes := m.Values[MetricAssigned]
	if lanes == 0 && len(r.Members) > 0 {
		lanes = math.Ceil(float64(r.TopicPartitions) / float64(len(r.Members)))
	}
	laneCap := lanes * float64(in.Enrich.MaxInFlightRecords)
	reqCap := float64(in.Enrich.MaxInFlightRequests * in.Enrich.KeysPerRequest)
	e := &EnrichLoad{RatePerSecond: rate, MeanLatencySeconds: lat.Mean(), P99LatencySeconds: lat.Quantile(0.99),
		InFlightObserved: m.Values[MetricEnrichInFlight], Capacity: reqCap}
	if laneCap > 0 {
		e.Capacity = min(laneCap, reqCap)
	}
	e.InFlightNeeded = e.RatePerSecond * share * e.MeanLatencySeconds
	if e.Capacity > 0 {
		e.Utilization = max(e.InFlightNeeded, e.InFlightObserved) / e.Capacity
	}
	r.Enrich = e
	f := Finding{Topic: "enrichment", Math: []string{
		fmt.Sprintf("latency %s: mean %s, p99 %s (%s requests)", window, dur(sec(e.MeanLatencySeconds)), dur(sec(e.P99LatencySeconds)), num(lat.Count)),
		fmt.Sprintf("Little's law: %s records/s × %.0f %% cache misses × %s = %s records in flight (observed %s)", num(rate), 100*share, dur(sec(e.MeanLatencySeconds)), num(e.InFlightNeeded), num(e.InFlightObserved)),
		fmt.Sprintf("capacity = min(%s lanes × max_in_flight_records %d, max_in_flight_requests %d × %d keys) = %s → %.0f %% used",
			num(lanes), in.Enrich.MaxInFlightRecords, in.Enrich.MaxInFlightRequests, in.Enrich.KeysPerRequest, num(e.Capacity), 100*e.Utilization),
	}}
	if rate > 0 && share > 0 && e.InFlightObserved > 1.5*e.InFlightNeeded {
		// Little's law backwards: the time a looked-up record really spends
		// in the stage.
		f.Math = append(f.Math, fmt.Sprintf("observed %s in flight / (%s records/s × %.0f %%) = %s per looked-up record in the stage, against %s per request: records wait for in-order release behind slower lookups, or for the buffer downstream",
			num(e.InFlightObserved), num(rate), 100*share, dur(sec(e.InFlightObserved/(rate*share))), dur(sec(e.MeanLatencySeconds))))
	}
	perLookup := e.Capacity / max(e.MeanLatencySeconds, 1e-9)
	switch {
	case e.Utilization >= 0.8 && e.InFlightObserved > 1.5*e.InFlightNeeded:
		f.Conclusion = fmt.Sprintf("The in-flight windows are %.0f %% full and a full lane stops fetching: records stay in the stage far longer than a request takes, held by the latency tail (p99 %s) ahead of them or by slow commits downstream; raise max_in_flight_records, cut the tail (timeout), or look at the commit rate.", 100*e.Utilization, dur(sec(e.P99LatencySeconds)))
	case e.Utilization >= 0.8:
		f.Conclusion = fmt.Sprintf("Enrichment is the bottleneck: lookups are capped near capacity / latency = %s per second; raise max_in_flight_records or batch_size, or make the service faster.", num(perLookup))
	default:
		f.Conclusion = fmt.Sprintf("Enrichment has headroom: it could carry %s lookups/s at this latency.", num(perLookup))
	}
	r.Findings = append(r.Findings, f)
}

// counterReset says why the counters of cur cannot be compared with prev's
// (its process started anew, or a counter went down), "" when they can or
// prev is nil.
func counterReset(prev, cur *Metrics) string {
	if prev == nil {
		return ""
	}
	if a, b := prev.Values[MetricProcessStart], cur.Values[MetricProcessStart]; a > 0 && b > 0 && a != b {
		return fmt.Sprintf("%s %s → %s", MetricProcessStart, time.Unix(0, int64(a*1e9)).UTC().Format(time.RFC3339), time.Unix(0, int64(b*1e9)).UTC().Format(time.RFC3339))
	}
	names := make([]string, 0, len(cur.Values))
	for name := range cur.Values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if before, ok := prev.Values[name]; ok && strings.HasSuffix(name, "_total") && cur.Values[name] < before {
			return fmt.Sprintf("%s %s → %s", name, num(before), num(cur.Values[name]))
		}
	}
	if prev.Latency != nil && cur.Latency != nil && cur.Latency.Count < prev.Latency.Count {
		return fmt.Sprintf("%s_count %s → %s", MetricEnrichLatency, num(prev.Latency.Count), num(cur.Latency.Count))
	}
	return ""
}

func sortedKeys(m map[int32]int64) []int32 {
	ks := make([]int32, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Slice(ks, func(i, j int) bool { return ks[i] < ks[j] })
	return ks
}

func plural(n int, noun string) string {
	if n == 1 {
		return noun
	}
	return noun + "s"
}

func orUnknown(s string) string {
	if s == "" {
		return "state unknown"
	}
	return s
}
