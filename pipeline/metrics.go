package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Register exposes s on reg under the floe_ prefix.
func (s *Stats) Register(reg prometheus.Registerer) error {
	counter := func(name, help string, v func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "floe_" + name, Help: help}, func() float64 { return float64(v()) })
	}
	for _, c := range []prometheus.Collector{
		counter("records_consumed_total", "Records fetched and decoded or dead-lettered.", s.Consumed.Load),
		counter("records_dead_lettered_total", "Records that could not become rows, counted when read (a flush redone after a failure counts its records again).", s.DeadLettered.Load),
		counter("dead_letters_cut_total", "Dead letters written cut to 4 KiB of key and value: the dead-letter topic refused them whole, alone (its max.message.bytes or segment.bytes).", s.DeadLettersCut.Load),
		counter("records_filtered_total", "Records of the topic another route takes (routes with where): covered offsets, not rows.", s.Filtered.Load),
		counter("rows_committed_total", "Rows committed to the table.", s.Rows.Load),
		counter("duplicates_skipped_total", "Rows the dedupe MERGE found already in the table.", s.Skipped.Load),
		counter("business_duplicates_skipped_total", "Rows the business-key MERGE skipped: their dedupe key was already in the table or earlier in the flush.", s.BusinessDuplicates.Load),
		counter("commits_total", "Table commits.", s.Commits.Load),
		counter("commit_attempts_total", "Catalog commit attempts, including retries after conflicts.", s.CommitAttempts.Load),
		counter("zombie_fences_total", "Flushes refused because another member advanced a watermark.", s.Fenced.Load),
		counter("rebalances_total", "Consumer-group generations joined: one per rebalance this member took part in.", s.Generations.Load),
		counter("commit_conflicts_total", "Catalog commits retried because another writer committed first (attempts after the first of each commit).",
			s.CommitConflicts.Load),
		counter("partitions_added_total", "Topic partitions this member saw appear while the table already had offsets for the topic (every member that sees the change counts it: take the max over members): keys may now map to other partitions.", s.PartitionsAdded.Load),
		counter("kafka_offset_commit_errors_total", "Advisory Kafka offset commits that failed.", s.KafkaCommitErrors.Load),
		counter("flush_retries_total", "Failed dead-letter writes or table commits retried in place.", s.FlushRetries.Load),
		counter("offset_gaps_total", "Offsets the log skipped: deleted by retention before they were read, or compacted.", s.OffsetGaps.Load),
		counter("transaction_offsets_skipped_total", "Offsets of transaction markers and of aborted transactions' records: covered, no rows.", s.TransactionSkipped.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_assigned_partitions", Help: "Partitions assigned to this member."},
			func() float64 { return float64(s.Assigned.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_last_commit_duration_seconds", Help: "Duration of the last table commit."},
			func() float64 { return time.Duration(s.LastCommitNanos.Load()).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_freshness_seconds",
			Help: "End-to-end delay at the newest commit: its time minus the Kafka timestamp of the oldest record it made queryable."},
			func() float64 { return time.Duration(s.FreshnessNanos.Load()).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_topic_partitions", Help: "Partitions of the topic at the newest rebalance."},
			func() float64 { return float64(s.TopicPartitions.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_stalled", Help: "1 while a dead-letter write or table commit is failing and being retried."},
			func() float64 {
				if s.Stalled.Load() {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_partitions_stopped",
			Help: "Partitions held after a record or fetch failed (e.g. an incompatible writer schema), retried in place with backoff."},
			func() float64 { return float64(s.StoppedPartitions.Load()) }),
		lagCollector{s},
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	if s.flushRows != nil {
		for _, h := range []prometheus.Collector{s.flushRows, s.flushBytes} {
			if err := reg.Register(h); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	lagRecordsDesc = prometheus.NewDesc("floe_consumer_lag_records",
		"Records in the partition not yet committed to the table: the log end offset of the newest fetch minus the table's watermark.",
		[]string{"topic", "partition"}, nil)
	lagSecondsDesc = prometheus.NewDesc("floe_consumer_lag_seconds",
		"Age of the oldest record not yet committed (its Kafka timestamp; while it is still unread, that of the newest committed record); 0 without lag.",
		[]string{"topic", "partition"}, nil)
)

// lagCollector reports the lag of the partitions assigned to this member;
// revoked partitions disappear from it.
type lagCollector struct{ s *Stats }

func (c lagCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- lagRecordsDesc
	ch <- lagSecondsDesc
}

func (c lagCollector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	c.s.partitions.Range(func(k, v any) bool {
		p := strconv.Itoa(int(k.(int32)))
		records, seconds := v.(*partitionStats).lag(now)
		ch <- prometheus.MustNewConstMetric(lagRecordsDesc, prometheus.GaugeValue, float64(records), c.s.topic, p)
		ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, seconds, c.s.topic, p)
		return true
	})
}

// ListenMetrics binds addr (so a taken port fails start-up) and returns the
// function that serves reg's metrics, s's and the Go runtime's on /metrics,
// and /livez and /readyz, until ctx ends. /readyz answers 200 only while
// partitions are assigned and commits succeed.
func ListenMetrics(ctx context.Context, addr string, reg *prometheus.Registry, s *Stats) (serve func() error, err error) {
	if err := s.Register(reg); err != nil {
		return nil, err
	}
	return listenMetrics(ctx, addr, reg, func() string { return notReady(s) })
}

// RouteRegisterer is the registerer of one route of a job with routes: its
// metrics carry a table label, so the members of one process do not collide.
// Pass it to WithRegisterer; ListenRouteMetrics labels the Stats the same way.
func RouteRegisterer(reg prometheus.Registerer, table string) prometheus.Registerer {
	return prometheus.WrapRegistererWith(prometheus.Labels{"table": table}, reg)
}

// ListenRouteMetrics is ListenMetrics for a job with routes: stats maps each
// route's table name to its member's Stats, registered with a table label.
// /readyz answers 200 only while every route is ready, and otherwise names
// the tables that are not.
func ListenRouteMetrics(ctx context.Context, addr string, reg *prometheus.Registry, stats map[string]*Stats) (serve func() error, err error) {
	tables := slices.Sorted(maps.Keys(stats))
	for _, t := range tables {
		if err := stats[t].Register(RouteRegisterer(reg, t)); err != nil {
			return nil, fmt.Errorf("metrics of table %s: %w", t, err)
		}
	}
	return listenMetrics(ctx, addr, reg, func() string {
		var why []string
		for _, t := range tables {
			if r := notReady(stats[t]); r != "" {
				why = append(why, t+": "+r)
			}
		}
		return strings.Join(why, "; ")
	})
}

// notReady says why a member is not ready, or "" when it is.
func notReady(s *Stats) string {
	switch {
	case s.Stopping.Load():
		return "stopping: flushing what it holds before it exits"
	case s.Assigned.Load() == 0:
		return "no partitions assigned"
	case s.Stalled.Load():
		return "commits or watermark reads are failing (retrying in place)"
	case s.StoppedPartitions.Load() > 0:
		return "a partition is stopped on a record it cannot take (retrying in place; see the log)"
	}
	return ""
}

// listenMetrics serves reg and the Go runtime's metrics; /readyz answers 503
// with notReady's reason while it is not "".
func listenMetrics(ctx context.Context, addr string, reg *prometheus.Registry, notReady func() string) (serve func() error, err error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := notReady(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen %s: %w", addr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	return func() error {
		go func() {
			<-ctx.Done()
			shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			defer cancel()
			_ = srv.Shutdown(shutdown)
		}()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}, nil
}
