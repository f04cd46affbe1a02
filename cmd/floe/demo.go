package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

type demoFlags struct {
	dir        string
	records    int
	rate       int
	sessions   int
	malformed  float64
	partitions int
	interval   time.Duration
	maintain   time.Duration
	asJSON     bool
	noEnrich   bool
	p50, p99   time.Duration
}

func demoCmd(g *globalFlags) *cobra.Command {
	d := &demoFlags{}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole pipeline on an embedded broker, catalog and warehouse",
		Long: `Starts an in-process Kafka-protocol broker (kfake), a clickstream generator, a SQLite
Iceberg catalog and a local warehouse under --dir, and runs floe on them with a live progress
line. With --records N it stops once N records are committed and prints the verify summary.
Each run starts from an empty table: --dir's catalog.db and warehouse/ are replaced when a
previous demo wrote them (its .floe-demo file marks them); any others are refused, not deleted.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseConfigFlags(cmd); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			return runDemo(cmd.Context(), d, log)
		},
	}
	f := cmd.Flags()
	f.StringVar(&d.dir, "dir", "./floe-demo", "directory for the catalog and warehouse")
	f.IntVar(&d.records, "records", 0, "stop after this many records are committed (0: run until interrupted)")
	f.IntVar(&d.rate, "rate", 50000, "records per second the generator produces (0: as fast as possible)")
	f.IntVar(&d.sessions, "sessions", 10000, "distinct session ids")
	f.Float64Var(&d.malformed, "malformed", 0.002, "share of malformed records (they go to the dead-letter topic)")
	f.IntVar(&d.partitions, "partitions", 12, "partitions of the demo topic")
	f.DurationVar(&d.interval, "commit-interval", 2*time.Second, "commit.interval")
	f.DurationVar(&d.maintain, "maintain-interval", 5*time.Minute, "maintain.interval: compaction and snapshot expiry while the demo runs (0: none)")
	f.BoolVar(&d.asJSON, "json", false, "print the verify summary as JSON")
	f.BoolVar(&d.noEnrich, "no-enrich", false, "run without the enrichment stage")
	f.DurationVar(&d.p50, "enrich-p50", 600*time.Millisecond, "median latency of the reference enrichment server (0: none)")
	f.DurationVar(&d.p99, "enrich-p99", 2800*time.Millisecond, "99th percentile latency of the reference enrichment server (at least --enrich-p50; equal: a fixed latency)")
	return cmd
}

func runDemo(ctx context.Context, d *demoFlags, log *slog.Logger) error {
	p50, p99, err := serverLatency(d.p50, d.p99, "--enrich-p50", "--enrich-p99")
	if err != nil {
		return err
	}
	// Checked here, not by clickgen.Config.Validate, whose errors name the
	// generator's fields rather than the flags.
	if d.sessions < 0 {
		return fmt.Errorf("--sessions %d: want 0 (the generator's default, %d) or more", d.sessions, clickgen.DefaultSessions)
	}
	if math.IsNaN(d.malformed) || d.malformed < 0 || d.malformed > 1 {
		return fmt.Errorf("--malformed %v: want a share within [0, 1]", d.malformed)
	}
	gcfg := clickgen.Config{Sessions: d.sessions, MalformedRate: d.malformed, Seed: time.Now().UnixNano()}
	if d.records < 0 || d.rate < 0 || d.partitions < 1 {
		return errors.New("--records and --rate must be >= 0, --partitions >= 1")
	}
	// Before the previous demo's table is emptied, and naming the flags
	// (commit.interval and maintain.interval, which Finish checks, are
	// the user's flags here).
	if d.interval <= 0 {
		return fmt.Errorf("--commit-interval %s: must be positive", d.interval)
	}
	if d.maintain < 0 {
		return fmt.Errorf("--maintain-interval %s: must be positive, or 0 for no maintenance", d.maintain)
	}
	if err := emptyDemoDir(d.dir); err != nil {
		return err
	}
	abs, err := filepath.Abs(d.dir)
	if err != nil {
		return err
	}

	const topic = "clicks"
	cluster, err := embedded.StartTopic(ctx, topic, d.partitions)
	if err != nil {
		return err
	}
	defer cluster.Close()
	if err := cluster.CreateTopic(ctx, topic+".dlq", 1); err != nil {
		return err
	}

	cfg := pipeline.Config{
		Kafka:  pipeline.KafkaConfig{Brokers: cluster.Addrs(), Topic: topic, Group: "floe-demo"},
		Schema: "clickstream",
		Table: pipeline.TableConfig{Name: "demo.clicks", Catalog: map[string]string{
			"type": "sql", "uri": "file:" + filepath.Join(abs, "catalog.db"),
			"sql.dialect": "sqlite", "sql.driver": "sqlite",
			"warehouse": "file://" + filepath.Join(abs, "warehouse"),
		}},
		Commit:   pipeline.CommitConfig{Interval: pipeline.Duration(d.interval)},
		Maintain: pipeline.MaintainConfig{Interval: pipeline.Duration(d.maintain)},
	}
	enrichment := "off"
	if !d.noEnrich {
		srv := enrich.NewServer(enrich.ServerConfig{P50: p50, P99: p99, MissRate: 0.05})
		url, err := srv.Start("127.0.0.1:0")
		if err != nil {
			return err
		}
		defer srv.Close()
		cfg.Enrich = demoEnrichConfig(url + "/lookup")
		enrichment = fmt.Sprintf("%s/lookup (p50 %s, p99 %s)", url, d.p50, d.p99)
	}
	if err := cfg.Finish(); err != nil {
		return err
	}
	sc, dedupe, err := checkTable(cfg)
	if err != nil {
		return err
	}
	tbl, err := openTable(ctx, cfg, log, sc, dedupe, true)
	if err != nil {
		return err
	}
	defer tbl.Close()
	fmt.Fprintf(os.Stderr, "floe demo: broker %v, table demo.clicks in %s, %d partitions, generator at %d rec/s, enrichment %s\n",
		cluster.Addrs(), abs, d.partitions, d.rate, enrichment)

	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	produced := make(chan error, 1)
	go func() {
		_, err := cluster.ProduceRate(runCtx, topic, clickgen.New(gcfg), d.records, d.rate)
		produced <- err
	}()
	m, err := pipeline.NewMember(cfg, tbl, sc, pipeline.WithLogger(log))
	if err != nil {
		return err
	}
	ran := make(chan error, 1)
	go func() { ran <- m.Run(runCtx) }()
	// A demo left running commits every --commit-interval: without
	// compaction, planning each flush's scan over ever more small files
	// took most of its CPU after half an hour.
	stopMaintenance := scheduleMaintenance(runCtx, log, tbl, cfg.Maintain)
	defer stopMaintenance()
	// halt stops the member and maintenance and waits for the member's
	// final flush, which must end before the deferred closes of the table,
	// the service and the broker.
	halt := func() error {
		stopRun()
		stopMaintenance()
		return <-ran
	}

	// On a terminal the progress line rewrites itself; elsewhere (CI, logs)
	// each tick is a line of its own.
	lineStart := "\n"
	if fi, err := os.Stderr.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
		lineStart = "\r"
	}
	started := time.Now()
	var end map[int32]int64 // set once the generator is done
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastCommitted int64
	lastAt := started
	for {
		select {
		case err := <-ran:
			if err != nil {
				return err
			}
			return errors.New("pipeline stopped unexpectedly")
		case err := <-produced:
			if err != nil && runCtx.Err() == nil {
				halt()
				return fmt.Errorf("generator: %w", err)
			}
			if end, err = cluster.EndOffsets(ctx, topic); err != nil {
				halt()
				return err
			}
			produced = nil
		case <-ctx.Done():
			halt()
			fmt.Fprintln(os.Stderr)
			return nil
		case now := <-tick.C:
			hw, err := cluster.EndOffsets(ctx, topic)
			if err != nil {
				continue
			}
			wm := m.Stats().Offsets()
			committed, lag := progress(wm, topic, hw)
			rate := float64(committed-lastCommitted) / now.Sub(lastAt).Seconds()
			lastCommitted, lastAt = committed, now
			s := m.Stats()
			fmt.Fprintf(os.Stderr, "%s%6.0fs  committed %9d  %8.0f rec/s  lag %8d  commits %4d  dead-lettered %6d  ",
				lineStart, now.Sub(started).Seconds(), committed, rate, lag, s.Commits.Load(), s.DeadLettered.Load())
			if end != nil && reached(wm, topic, end) {
				fmt.Fprintln(os.Stderr)
				if err := halt(); err != nil {
					return err
				}
				return demoVerify(ctx, cfg, tbl, log, d.asJSON)
			}
		}
	}
}

// demoMarker is the file floe demo leaves in its --dir, marking the catalog
// and warehouse beside it as a demo's, which the next demo may replace.
const demoMarker = ".floe-demo"

// emptyDemoDir prepares dir for a demo that starts from an empty table: the
// embedded broker is new each run, so a previous run's watermarks would
// point past its end. It deletes only what a previous demo left: a
// catalog.db or warehouse without the marker may be a real job's (README's
// example keeps both in /var/lib/floe), so dir is refused instead.
func emptyDemoDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	demoFiles := []string{"catalog.db", "catalog.db-wal", "catalog.db-shm", "warehouse"}
	marker := filepath.Join(dir, demoMarker)
	if _, err := os.Stat(marker); errors.Is(err, fs.ErrNotExist) {
		var found []string
		for _, p := range demoFiles {
			// Anything but a clear absence (a permission error too) is
			// kept: refusing costs the user a --dir, deleting their data.
			if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, fs.ErrNotExist) {
				found = append(found, p)
			}
		}
		if len(found) > 0 {
			return fmt.Errorf("--dir %s holds %s without the %s file a floe demo leaves beside them (another job's, or a demo's from before floe wrote it); floe demo replaces them, so choose a new or empty --dir, or remove them yourself",
				dir, strings.Join(found, ", "), demoMarker)
		}
		if err := os.WriteFile(marker, []byte("floe demo: the next floe demo --dir here replaces catalog.db and warehouse/\n"), 0o644); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	for _, p := range demoFiles {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			return err
		}
	}
	return nil
}

// demoEnrichConfig looks user_id up in the reference server and keeps all
// of its attributes as typed columns.
func demoEnrichConfig(url string) *enrich.Config {
	return &enrich.Config{URL: url, Key: "user_id", Fields: []enrich.Field{
		{Name: "segment", Type: enrich.TypeString},
		{Name: "country", Type: enrich.TypeString},
		{Name: "score", Type: enrich.TypeDouble},
		{Name: "visits", Type: enrich.TypeLong},
		{Name: "vip", Type: enrich.TypeBoolean},
		{Name: "signup_ts", Type: enrich.TypeTimestamp},
	}}
}

// progress sums committed offsets and lag over partitions.
func progress(wm lakehouse.Offsets, topic string, hw map[int32]int64) (committed, lag int64) {
	for p, end := range hw {
		w, _ := wm.Get(topic, p)
		committed += w
		lag += end - w
	}
	return committed, lag
}

func reached(wm lakehouse.Offsets, topic string, end map[int32]int64) bool {
	for p, e := range end {
		if w, _ := wm.Get(topic, p); w < e {
			return false
		}
	}
	return true
}

func demoVerify(ctx context.Context, cfg pipeline.Config, tbl *lakehouse.Table, log *slog.Logger, asJSON bool) error {
	rep, err := tbl.Verify(ctx, cfg.Kafka.Topic, func(ctx context.Context) (lakehouse.DeadLetters, error) {
		return pipeline.ReadDeadLetters(ctx, cfg.Kafka, log)
	})
	if err != nil {
		return err
	}
	return printReport(rep, asJSON)
}
