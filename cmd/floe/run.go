package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
)

func runCmd(g *globalFlags) *cobra.Command {
	var untilCaughtUp bool
	var accept pipeline.StartOverrides
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Consume the topic(s) and commit them to the table(s) until stopped",
		Long: `Joins the consumer group and commits records to the Iceberg table, exactly once.
SIGTERM or SIGINT flushes what is buffered (within commit.grace), commits it and leaves the group.
With --until-caught-up it stops once the end offsets seen at start are committed (scheduled mode).
With routes every route runs concurrently (--table runs one); SIGTERM stops them all, and a route
that fails stops the others cleanly and makes the run fail.
It refuses to start when a table holds another group's offsets of its topic and none of its own
(a renamed group, or a job moved into routes: set the group it names), or when the routing of a
topic changed while its routes are not at a common offset (see README, Routing).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			ctx := cmd.Context()
			// A SIGTERM during start-up, which fails whatever it
			// interrupts, is a stop like one after it.
			starting := true
			defer func() {
				if err != nil && starting && ctx.Err() != nil {
					err = interrupted(untilCaughtUp)
				}
			}()
			// The field routes --table picks come with their siblings for
			// the start-up checks; only the picked one runs.
			all, err := g.openJobs(ctx, true, true)
			if err != nil {
				return err
			}
			defer func() {
				for _, j := range all {
					j.tbl.Close()
				}
			}()
			checked := make([]pipeline.StartTable, len(all))
			var jobs []*job
			for i, j := range all {
				checked[i] = pipeline.StartTable{Config: j.cfg, Table: j.tbl}
				if g.runs(j) {
					jobs = append(jobs, j)
				}
			}
			// Loading a table needs only read access: a job that cannot
			// write its files would start and fail every flush.
			for _, j := range jobs {
				if err := j.tbl.CheckWrite(ctx); err != nil {
					return err
				}
			}
			if err := pipeline.CheckStart(ctx, checked, accept, all[0].base); err != nil {
				return err
			}
			log := jobs[0].base
			reg := prometheus.NewRegistry()
			members := make([]*pipeline.Member, len(jobs))
			progress := make([]func() (done, total int64), len(jobs))
			for i, j := range jobs {
				m, track, err := newRunMember(ctx, j, reg, untilCaughtUp)
				if err != nil {
					return err
				}
				members[i], progress[i] = m, track
			}
			if untilCaughtUp {
				var total int64
				for _, p := range progress {
					_, t := p()
					total += t
				}
				stop := reportProgress(log, "catching up", total, func() int64 {
					var done int64
					for _, p := range progress {
						d, _ := p()
						done += d
					}
					return done
				})
				defer stop()
			}
			if listen := jobs[0].cfg.Metrics.Listen; listen != "" {
				// Served until the run returns, not until the signal: the
				// final flush's commits and /readyz's "stopping" are seen.
				serveCtx, stopServing := context.WithCancel(context.WithoutCancel(ctx))
				defer stopServing()
				var serve func() error
				if jobs[0].routed {
					stats := make(map[string]*pipeline.Stats, len(jobs))
					for i, j := range jobs {
						stats[j.cfg.Table.Name] = members[i].Stats()
					}
					serve, err = pipeline.ListenRouteMetrics(serveCtx, listen, reg, stats)
				} else {
					serve, err = pipeline.ListenMetrics(serveCtx, listen, reg, members[0].Stats())
				}
				if err != nil {
					return err
				}
				go func() {
					if err := serve(); err != nil {
						log.Error("metrics endpoint stopped", "err", err)
					}
				}()
			}
			starting = false
			started := time.Now()
			for _, j := range jobs {
				stopMaintenance := scheduleMaintenance(ctx, j.log, j.tbl, j.cfg.Maintain)
				defer stopMaintenance()
			}
			// Routes run concurrently; the first that fails stops the others
			// cleanly (each flushes and leaves its group), and its error is
			// the run's.
			eg, egCtx := errgroup.WithContext(ctx)
			for i, m := range members {
				eg.Go(func() error {
					err := m.Run(egCtx)
					if err == nil {
						s := m.Stats()
						jobs[i].log.Info("stopped", "rows", s.Rows.Load(), "dead_lettered", s.DeadLettered.Load(),
							"filtered", s.Filtered.Load(), "commits", s.Commits.Load(), "elapsed", time.Since(started).Round(time.Millisecond))
						return nil
					}
					if jobs[i].routed {
						err = fmt.Errorf("route of table %s: %w", jobs[i].cfg.Table.Name, err)
						jobs[i].log.Error("route failed; stopping the others", "err", err)
					}
					return err
				})
			}
			if err := eg.Wait(); err != nil {
				return err
			}
			if ctx.Err() != nil {
				// A stop during the flush that commits a route's last end
				// offsets does not interrupt it: its Run says it caught up.
				for _, m := range members {
					if !m.CaughtUp() {
						return interrupted(untilCaughtUp)
					}
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&untilCaughtUp, "until-caught-up", false, "stop once the end offsets seen at start are committed")
	cmd.Flags().BoolVar(&accept.RoutingChange, "accept-routing-change", false,
		"start although a topic's routing changed while its routes are not at a common offset (records between them may land in no table or in two)")
	cmd.Flags().BoolVar(&accept.GroupChange, "accept-group-change", false,
		"start although the table holds another group's offsets of the topic and none of this group's")
	return cmd
}

// newRunMember returns the member of one job (route) of `floe run`, with
// its metrics on reg (labelled by table with routes). In scheduled mode it
// is given the end offsets seen now, and track reports the records it has
// committed since and the total it must commit.
func newRunMember(ctx context.Context, j *job, reg *prometheus.Registry, untilCaughtUp bool) (m *pipeline.Member, track func() (done, total int64), err error) {
	var r prometheus.Registerer = reg
	if j.routed {
		r = pipeline.RouteRegisterer(reg, j.cfg.Table.Name)
	}
	opts := []pipeline.Option{pipeline.WithLogger(j.log), pipeline.WithRegisterer(r)}
	var end map[int32]int64
	var start lakehouse.Offsets
	if untilCaughtUp {
		endCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
		end, err = pipeline.EndOffsets(endCtx, j.cfg.Kafka)
		cancel()
		if err != nil {
			return nil, nil, fmt.Errorf("kafka %v: %w", j.cfg.Kafka.Brokers, err)
		}
		if start, err = j.tbl.Watermarks(ctx); err != nil {
			return nil, nil, err
		}
		start = progressBase(ctx, j.cfg.Kafka, start, end)
		opts = append(opts, pipeline.UntilOffsets(end))
		j.log.Info("scheduled run: stopping once these end offsets are committed", "topic", j.cfg.Kafka.Topic, "end_offsets", end)
	}
	// A schema file that gained optional fields or wider types since the
	// table was created evolves the table now (logged).
	sc, err := j.tbl.EvolveTo(ctx, j.sc)
	if err != nil {
		return nil, nil, err
	}
	if r := j.cfg.Registry; r != nil {
		r.WarnInsecure(j.log)
	}
	if m, err = pipeline.NewMember(j.cfg, j.tbl, sc, opts...); err != nil {
		return nil, nil, err
	}
	topic := j.cfg.Kafka.Topic
	total := committedSince(topic, start, end, nil)
	return m, func() (int64, int64) {
		at := m.Stats().Offsets()
		if at == nil {
			at = start
		}
		return committedSince(topic, start, end, at), total
	}, nil
}

// progressBase returns start with, for each partition of end the table has
// no watermark of, where the run reads it from: the group's Kafka offset
// (or the log start, if retention deleted past it), else the log start
// (start_offset earliest, or a partition added to the topic since the
// job first started) or the end (latest). Counted from 0, a run over
// a log retention had trimmed, or under a group whose offsets were at the
// end already, ended its progress at a few percent. Best effort: offsets
// that cannot be read leave a partition counted from 0.
func progressBase(ctx context.Context, k pipeline.KafkaConfig, start lakehouse.Offsets, end map[int32]int64) lakehouse.Offsets {
	var missing []int
	for p := range end {
		if _, ok := start.Get(k.Topic, p); !ok {
			missing = append(missing, int(p))
		}
	}
	if len(missing) == 0 {
		return start
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	group, started, gerr := pipeline.GroupStart(ctx, k, missing)
	first, ferr := pipeline.FirstOffsets(ctx, k)
	base := lakehouse.Offsets{}
	for t, ps := range start {
		for p, o := range ps {
			base.Set(t, p, o)
		}
	}
	for _, p := range missing {
		from, ok := first[int32(p)]
		if ferr != nil {
			ok = false
		}
		if g, known := group[int32(p)]; gerr == nil && known {
			from, ok = max(g, from), true
		} else if k.StartOffset == "latest" && len(start[k.Topic]) == 0 && (started == 0 || p < started) {
			// Read from where "latest" resolves. With watermarks of other
			// partitions, or at or above the partition count the group's
			// pins recorded, one without a group offset was added to the
			// topic since the job first started: read from its log start.
			from, ok = end[int32(p)], true
		}
		if ok {
			base.Set(k.Topic, int32(p), from)
		}
	}
	return base
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

// interrupted is the outcome of a run stopped by a signal: nil, or for a
// scheduled run that had not caught up, status 3.
func interrupted(untilCaughtUp bool) error {
	if untilCaughtUp {
		return &exitError{code: 3, err: errors.New("interrupted before catching up")}
	}
	return nil
}
