package doctor

import (
	"fmt"
	"io"
	"strings"
)

// WriteText renders the calculator's report: each finding with its
// arithmetic, then the ranked remedies and what to avoid.
func (r *ConsumerReport) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	c := r.Input
	ew.printf("classic consumer: max.poll.records=%d max.poll.interval.ms=%d session.timeout.ms=%d heartbeat.interval.ms=%d, %s per record",
		c.MaxPollRecords, c.MaxPollInterval.Milliseconds(), c.SessionTimeout.Milliseconds(), c.Heartbeat.Milliseconds(), dur(c.PerRecord))
	if c.P99 > 0 {
		ew.printf(" (p99 %s)", dur(c.P99))
	}
	ew.printf("\nverdict: %s\n", strings.ToUpper(r.Verdict))
	writeFindings(ew, r.Findings)
	ew.printf("\nwhat to change, in order:\n")
	for _, m := range r.Remedies {
		ew.printf("  %d. %s\n     effect: %s\n     cost:   %s\n", m.Rank, m.Action, m.Effect, m.Constraint)
	}
	if len(r.Avoid) > 0 {
		ew.printf("\navoid:\n")
		for _, a := range r.Avoid {
			ew.printf("  - %s\n", a)
		}
	}
	return ew.err
}

func writeFindings(ew *errWriter, fs []Finding) {
	for _, f := range fs {
		ew.printf("\n%s\n", f.Topic)
		for _, m := range f.Math {
			ew.printf("  %s\n", m)
		}
		ew.printf("  → %s\n", f.Conclusion)
	}
}

// errWriter keeps the first write error so rendering code stays linear.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}

// WriteText renders the live diagnosis: the per-partition lag table, then
// each finding with its arithmetic, then hazards.
func (r *LiveReport) WriteText(w io.Writer) error {
	ew := &errWriter{w: w}
	ew.printf("topic %s, group %s, table %s\n\n", r.Topic, r.Group, r.Table)
	ew.printf("%9s %12s %12s %10s %10s", "partition", "end", "watermark", "lag", "trend/s")
	if r.MetricsScraped {
		ew.printf(" %10s", "lag (s)")
	}
	ew.printf("\n")
	for _, p := range r.Partitions {
		wm := group(p.Watermark)
		if !p.InTable {
			wm = "-"
		}
		trend := "?"
		if r.SampleSeconds > 0 {
			trend = num(p.Trend)
		}
		ew.printf("%9d %12s %12s %10s %10s", p.Partition, group(p.End), wm, group(p.Lag), trend)
		if r.MetricsScraped {
			lagSeconds := "-"
			if p.LagSeconds != nil {
				lagSeconds = num(*p.LagSeconds)
			}
			ew.printf(" %10s", lagSeconds)
		}
		ew.printf("\n")
	}
	writeFindings(ew, r.Findings)
	for _, h := range r.Hazards {
		ew.printf("\nHAZARD: %s\n", h)
	}
	if len(r.MetricsMissing) > 0 {
		ew.printf("\nnot exported by this floe: %s\n", strings.Join(r.MetricsMissing, ", "))
	}
	return ew.err
}
