package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"github.com/apache/iceberg-go/catalog"
	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/pipeline"
)

func replayCmd(g *globalFlags) *cobra.Command {
	var (
		partitions       []int32
		from, to         int64
		fromTime, toTime string
		opts             pipeline.ReplayOptions
		asJSON           bool
	)
	cmd := &cobra.Command{
		Use:   "replay (--partition P[,P...] --from A --to B | [--partition P[,P...]] --from-time T1 --to-time T2) [--reenrich]",
		Short: "Backfill offset or time ranges; the dedupe MERGE makes it idempotent",
		Long: `Re-reads offsets [A, B) of the given partitions, or the records with timestamps in [T1, T2) of the
given partitions (all when none are given; resolved through Kafka's offsets-for-times), and commits
them with the dedupe MERGE only: rows already in the table are skipped, missing ones inserted.
Watermarks never move, so a replay may run while the live job runs. With an enrich section records
are enriched as in the live job; --reenrich also replaces rows stored with _enrich_status skipped,
error or miss by their re-enriched version when it is better (repairing a passthrough outage).
With routes, --table picks the route; a route with where replays only the records it takes.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			byOffset := cmd.Flags().Changed("from") || cmd.Flags().Changed("to")
			byTime := fromTime != "" || toTime != ""
			switch {
			case byOffset && byTime:
				return errors.New("give either --from/--to (offsets) or --from-time/--to-time, not both")
			case byOffset && (!cmd.Flags().Changed("from") || !cmd.Flags().Changed("to")):
				return errors.New("--from and --to go together")
			case byOffset && len(partitions) == 0:
				return errors.New("--from/--to need --partition")
			case byTime && (fromTime == "" || toTime == ""):
				return errors.New("--from-time and --to-time go together")
			case !byOffset && !byTime:
				return errors.New("give a range: --partition P --from A --to B, or --from-time T1 --to-time T2")
			}
			// Each range would be replayed once per mention (read twice,
			// counted twice).
			for i, p := range partitions {
				if slices.Contains(partitions[:i], p) {
					return fmt.Errorf("--partition: partition %d is given twice", p)
				}
			}
			var t1, t2 time.Time
			if byTime {
				var err error
				if t1, err = time.Parse(time.RFC3339, fromTime); err != nil {
					return fmt.Errorf("--from-time: want RFC 3339 (2026-11-29T10:00:00Z): %w", err)
				}
				if t2, err = time.Parse(time.RFC3339, toTime); err != nil {
					return fmt.Errorf("--to-time: want RFC 3339 (2026-11-29T11:00:00Z): %w", err)
				}
			}
			ctx := cmd.Context()
			// The table is opened once the ranges are checked: a refused
			// replay (with a misspelt --table) created an empty table.
			j, err := g.job()
			if err != nil {
				return err
			}
			cfg := j.cfg
			var ranges []pipeline.ReplayRange
			if byOffset {
				for _, p := range partitions {
					ranges = append(ranges, pipeline.ReplayRange{Partition: p, From: from, To: to})
				}
			} else {
				var trimmed []pipeline.TrimmedStart
				if ranges, trimmed, err = pipeline.ResolveTimes(ctx, cfg.Kafka, partitions, t1, t2); err != nil {
					return err
				}
				for _, tr := range trimmed {
					j.log.Warn("the time range starts at the partition's log start: retention deleted the records below it, which may have been of the range; they cannot be replayed",
						"partition", tr.Partition, "log_start", tr.LogStart, "from", fromTime)
				}
				if len(ranges) == 0 {
					j.log.Info("no records in the time range", "from", fromTime, "to", toTime)
				}
				for _, r := range ranges {
					j.log.Info("time range resolved", "partition", r.Partition, "from", r.From, "to", r.To)
				}
			}
			if len(ranges) > 0 {
				if err := pipeline.CheckReplay(ctx, cfg, j.sc, ranges, opts); err != nil {
					return err
				}
			}
			if len(ranges) == 0 { // nothing to read, and no table to open or create
				return printReplay(asJSON, cfg.Kafka.Topic, pipeline.ReplayResult{Ranges: ranges})
			}
			// A backfill may come first, so the table is created; not a
			// field route's, whose replay re-reads what its table committed.
			create := !cfg.FieldRouted()
			if err := j.open(ctx, create); err != nil {
				if !create && errors.Is(err, catalog.ErrNoSuchTable) {
					return fmt.Errorf("replay: table %s, routed by field, does not exist, so it has committed nothing of %s: floe run ingests the topic into it; a replay of a field route re-reads committed ranges only", cfg.Table.Name, cfg.Kafka.Topic)
				}
				return err
			}
			defer j.tbl.Close()
			var total int64
			for _, r := range ranges {
				total += r.To - r.From
			}
			if err := j.tbl.CheckWrite(ctx); err != nil {
				return err
			}
			if r := cfg.Registry; r != nil {
				r.WarnInsecure(j.log)
			}
			var read atomic.Int64
			opts.Read = &read
			stop := reportProgress(j.log, "replaying", total, read.Load)
			res, err := pipeline.Replay(ctx, cfg, j.tbl, j.sc, ranges, opts, j.log)
			stop()
			if err != nil {
				return err
			}
			return printReplay(asJSON, cfg.Kafka.Topic, res)
		},
	}
	f := cmd.Flags()
	f.Int32SliceVar(&partitions, "partition", nil, "partitions to replay (repeat or comma-separate)")
	f.Int64Var(&from, "from", -1, "first offset")
	f.Int64Var(&to, "to", -1, "end offset (exclusive)")
	f.StringVar(&fromTime, "from-time", "", "first record timestamp, RFC 3339")
	f.StringVar(&toTime, "to-time", "", "end record timestamp (exclusive), RFC 3339")
	f.BoolVar(&opts.Reenrich, "reenrich", false, "replace rows stored skipped, error or miss by their re-enriched version")
	f.BoolVar(&asJSON, "json", false, "print the summary as JSON")
	return cmd
}

// printReplay prints the summary of a replay of topic, as JSON with asJSON.
func printReplay(asJSON bool, topic string, res pipeline.ReplayResult) error {
	if asJSON {
		return json.NewEncoder(os.Stdout).Encode(res)
	}
	fmt.Printf("replayed %d range(s) of %s: read %d, inserted %d, skipped %d (already present; %d of them replaced by their re-enriched version), %d business-key duplicates, dead-lettered %d, %d commits\n",
		len(res.Ranges), topic, res.Read, res.Inserted, res.Skipped, res.Replaced, res.BusinessDuplicates, res.DeadLettered, res.Commits)
	return nil
}
