package main

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
)

func runCmd(g *globalFlags) *cobra.Command {
	var untilCaughtUp bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Consume the topic and commit it to the table until stopped",
		Long: `Joins the consumer group and commits records to the Iceberg table, exactly once.
SIGTERM or SIGINT flushes what is buffered (within commit.grace), commits it and leaves the group.
With --until-caught-up it stops once the end offsets seen at start are committed (scheduled mode).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			j, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer j.tbl.Close()
			log, cfg, tbl, sc := j.log, j.cfg, j.tbl, j.sc
			reg := prometheus.NewRegistry()
			opts := []pipeline.Option{pipeline.WithLogger(log), pipeline.WithRegisterer(reg)}
			var end map[int32]int64
			var start lakehouse.Offsets
			if untilCaughtUp {
				endCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
				end, err = pipeline.EndOffsets(endCtx, cfg.Kafka)
				cancel()
				if err != nil {
					return err
				}
				if start, err = tbl.Watermarks(ctx); err != nil {
					return err
				}
				opts = append(opts, pipeline.UntilOffsets(end))
				log.Info("scheduled run: stopping once these end offsets are committed", "end_offsets", end)
			}
			m, err := pipeline.NewMember(cfg, tbl, sc, opts...)
			if err != nil {
				return err
			}
			if untilCaughtUp {
				topic := cfg.Kafka.Topic
				stop := reportProgress(log, "catching up", committedSince(topic, start, end, nil), func() int64 {
					at := m.Stats().Offsets()
					if at == nil {
						at = start
					}
					return committedSince(topic, start, end, at)
				})
				defer stop()
			}
			if cfg.Metrics.Listen != "" {
				serve, err := pipeline.ListenMetrics(ctx, cfg.Metrics.Listen, reg, m.Stats())
				if err != nil {
					return err
				}
				go func() {
					if err := serve(); err != nil {
						log.Error("metrics endpoint stopped", "err", err)
					}
				}()
			}
			started := time.Now()
			stopMaintenance := scheduleMaintenance(ctx, log, tbl, cfg.Maintain)
			defer stopMaintenance()
			if err := m.Run(ctx); err != nil {
				return err
			}
			s := m.Stats()
			log.Info("stopped", "rows", s.Rows.Load(), "dead_lettered", s.DeadLettered.Load(),
				"commits", s.Commits.Load(), "elapsed", time.Since(started).Round(time.Millisecond))
			if untilCaughtUp && ctx.Err() != nil {
				return &exitError{code: 3, err: fmt.Errorf("interrupted before catching up")}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&untilCaughtUp, "until-caught-up", false, "stop once the end offsets seen at start are committed")
	return cmd
}

// committedSince sums, over the partitions of end, how far the offsets at
// have moved from start towards end: the records a scheduled run has
// committed so far. With at == nil it is what the run must commit.
func committedSince(topic string, start lakehouse.Offsets, end map[int32]int64, at lakehouse.Offsets) int64 {
	var n int64
	for p, e := range end {
		from, ok := start.Get(topic, p)
		if !ok {
			from = 0
		}
		to, ok := at.Get(topic, p)
		switch {
		case at == nil:
			to = e
		case !ok:
			to = from
		}
		n += max(0, min(to, e)-from)
	}
	return n
}
