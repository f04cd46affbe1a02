package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/pipeline/doctor"
)

func doctorCmd(g *globalFlags) *cobra.Command {
	var (
		asJSON     bool
		sample     time.Duration
		metricsURL string
	)
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Diagnose the job from its group, table and metrics, showing the arithmetic",
		Long: `Reads the consumer group's state, the topic's end offsets, the table's watermarks and commit
history, and (with --metrics-url) a member's Prometheus metrics, twice --sample apart, and prints a
diagnosis with its arithmetic: lag per partition (end offset − table watermark) and its trend, time
to drain, commit and rebalance rates, duplicates skipped by the MERGE, enrichment latency × rate
versus in-flight capacity (Little's law), members versus partitions, and partitions added after
ingestion began (sessions may then be split across partitions).

'floe doctor consumer' is a calculator for classic Java consumers.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sample < 0 {
				return fmt.Errorf("--sample %s: must not be negative", sample)
			}
			rep, err := diagnoseLive(cmd.Context(), g, sample, metricsURL)
			if err != nil {
				return err
			}
			return writeReport(os.Stdout, rep, asJSON)
		},
	}
	f := cmd.Flags()
	f.BoolVar(&asJSON, "json", false, "print the diagnosis as JSON")
	f.DurationVar(&sample, "sample", 5*time.Second, "time between the two samples that give trends (0: one sample)")
	f.StringVar(&metricsURL, "metrics-url", "", "a floe member's metrics, e.g. http://127.0.0.1:9464/metrics")
	cmd.AddCommand(doctorConsumerCmd())
	return cmd
}

func doctorConsumerCmd() *cobra.Command {
	var (
		c      doctor.Consumer
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "consumer --per-record D [flags]",
		Short: "Will a classic Java consumer group rebalance, and what to change",
		Long: `Explains with its arithmetic whether a KafkaConsumer that processes each poll's records one at
a time will rebalance and why: the poll loop (max.poll.records × per-record time) against
max.poll.interval.ms, the heartbeat thread against session.timeout.ms, the p99 tail, throughput per
member against the arrival rate (lag growth, time to drain, Little's law), and the duplicates a
rebalance re-delivers; then ranks the remedies. Defaults are the Java client's.`,
		Example: `  floe doctor consumer --max-poll-records 500 --max-poll-interval 300s --session-timeout 10s \
    --heartbeat 3s --per-record 600ms --partitions 12 --members 6 --rate 45000 --lag 2100000`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseConfigFlags(cmd); err != nil {
				return err
			}
			rep, err := doctor.DiagnoseConsumer(c)
			if err != nil {
				return err
			}
			return writeReport(os.Stdout, rep, asJSON)
		},
	}
	f := cmd.Flags()
	f.IntVar(&c.MaxPollRecords, "max-poll-records", 500, "max.poll.records")
	f.DurationVar(&c.MaxPollInterval, "max-poll-interval", 300*time.Second, "max.poll.interval.ms")
	f.DurationVar(&c.SessionTimeout, "session-timeout", 45*time.Second, "session.timeout.ms")
	f.DurationVar(&c.Heartbeat, "heartbeat", 3*time.Second, "heartbeat.interval.ms")
	f.DurationVar(&c.PerRecord, "per-record", 0, "mean processing time of one record (required)")
	f.DurationVar(&c.P99, "p99", 0, "p99 of the per-record time (default: 5 × the mean)")
	f.IntVar(&c.Partitions, "partitions", 0, "partitions of the topic")
	f.IntVar(&c.Members, "members", 0, "consumers in the group")
	f.Float64Var(&c.Rate, "rate", 0, "arrival rate, records per second")
	f.Int64Var(&c.Lag, "lag", 0, "current lag, records")
	f.DurationVar(&c.ObservedRebalanceEvery, "rebalance-every", 0, "observed time between rebalances")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	_ = cmd.MarkFlagRequired("per-record")
	return cmd
}

// report is what both doctor commands print.
type report interface {
	WriteText(io.Writer) error
}

func writeReport(w io.Writer, r report, asJSON bool) error {
	if !asJSON {
		return r.WriteText(w)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
