package pipeline

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
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
		counter("records_dead_lettered_total", "Records sent to the dead-letter topic.", s.DeadLettered.Load),
		counter("rows_committed_total", "Rows committed to the table.", s.Rows.Load),
		counter("duplicates_skipped_total", "Rows the dedupe MERGE found already in the table.", s.Skipped.Load),
		counter("commits_total", "Table commits.", s.Commits.Load),
		counter("commit_attempts_total", "Catalog commit attempts, including retries after conflicts.", s.CommitAttempts.Load),
		counter("zombie_fences_total", "Flushes refused because another member advanced a watermark.", s.Fenced.Load),
		counter("generations_total", "Consumer-group generations joined (rebalances).", s.Generations.Load),
		counter("kafka_offset_commit_errors_total", "Advisory Kafka offset commits that failed.", s.KafkaCommitErrors.Load),
		counter("flush_retries_total", "Failed dead-letter writes or table commits retried in place.", s.FlushRetries.Load),
		counter("offset_gaps_total", "Offsets the log skipped: deleted by retention before they were read, compacted, or transaction markers.", s.OffsetGaps.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_assigned_partitions", Help: "Partitions assigned to this member."},
			func() float64 { return float64(s.Assigned.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "floe_last_commit_duration_seconds", Help: "Duration of the last table commit."},
			func() float64 { return time.Duration(s.LastCommitNanos.Load()).Seconds() }),
	} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// ListenMetrics binds addr (so a taken port fails start-up) and returns the
// function that serves reg's metrics, s's and the Go runtime's on /metrics,
// and /livez and /readyz, until ctx ends. /readyz answers 200 only while
// partitions are assigned.
func ListenMetrics(ctx context.Context, addr string, reg *prometheus.Registry, s *Stats) (serve func() error, err error) {
	if err := s.Register(reg); err != nil {
		return nil, err
	}
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Assigned.Load() == 0 {
			http.Error(w, "no partitions assigned", http.StatusServiceUnavailable)
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
