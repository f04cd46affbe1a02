package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas"
)

// exitError carries a specific exit status (verify uses 1 for duplicates).
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func exitCode(err error) int {
	var e *exitError
	if errors.As(err, &e) {
		return e.code
	}
	return 2
}

type globalFlags struct {
	config   string
	logLevel string
	logJSON  bool
	brokers  []string
	topic    string
	group    string
	table    string
	cpuProf  string
}

func rootCmd() *cobra.Command {
	g := &globalFlags{}
	root := &cobra.Command{
		Use:           "floe",
		Short:         "Exactly-once Kafka → Apache Iceberg ingestion",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVarP(&g.config, "config", "c", "", "YAML config file (see README); ${ENV} is interpolated")
	pf.StringVar(&g.logLevel, "log-level", "info", "debug | info | warn | error")
	pf.BoolVar(&g.logJSON, "log-json", false, "structured JSON logs (default: text)")
	pf.StringSliceVar(&g.brokers, "brokers", nil, "override kafka.brokers")
	pf.StringVar(&g.topic, "topic", "", "override kafka.topic")
	pf.StringVar(&g.group, "group", "", "override kafka.group")
	pf.StringVar(&g.table, "table", "", "override table.name")
	pf.StringVar(&g.cpuProf, "cpuprofile", "", "write a Go CPU profile to this file")
	_ = pf.MarkHidden("cpuprofile")
	var prof *os.File
	root.PersistentPreRunE = func(*cobra.Command, []string) error {
		if g.cpuProf == "" {
			return nil
		}
		var err error
		if prof, err = os.Create(g.cpuProf); err != nil {
			return err
		}
		return pprof.StartCPUProfile(prof)
	}
	root.PersistentPostRun = func(*cobra.Command, []string) {
		if prof != nil {
			pprof.StopCPUProfile()
			prof.Close()
		}
	}
	root.AddCommand(runCmd(g), replayCmd(g), verifyCmd(g), demoCmd(g), enrichdCmd(g), doctorCmd(g), maintainCmd(g))
	return root
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if g.logJSON {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
}

// job is what every table command works with.
type job struct {
	log *slog.Logger
	cfg pipeline.Config
	tbl *lakehouse.Table
	sc  *schemas.Schema
}

// open loads the configuration, applies its memory limit and opens the
// schema and table. The caller closes j.tbl.
func (g *globalFlags) open(ctx context.Context) (*job, error) {
	log, err := g.logger()
	if err != nil {
		return nil, err
	}
	cfg, err := g.loadConfig()
	if err != nil {
		return nil, err
	}
	if cfg.MemoryLimit > 0 {
		debug.SetMemoryLimit(int64(cfg.MemoryLimit))
	}
	tbl, sc, err := openTable(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	return &job{log: log, cfg: cfg, tbl: tbl, sc: sc}, nil
}

// loadConfig reads --config, applies flag overrides, defaults and validation.
func (g *globalFlags) loadConfig() (pipeline.Config, error) {
	if g.config == "" {
		return pipeline.Config{}, errors.New("--config is required")
	}
	cfg, err := pipeline.LoadConfig(g.config)
	if err != nil {
		return cfg, err
	}
	if len(g.brokers) > 0 {
		cfg.Kafka.Brokers = g.brokers
	}
	if g.topic != "" {
		cfg.Kafka.Topic = g.topic
	}
	if g.group != "" {
		cfg.Kafka.Group = g.group
	}
	if g.table != "" {
		cfg.Table.Name = g.table
	}
	if err := cfg.Finish(); err != nil {
		return cfg, fmt.Errorf("config %s:\n  %s", g.config, strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	return cfg, nil
}

// openTable opens the configured schema and table.
func openTable(ctx context.Context, cfg pipeline.Config, log *slog.Logger) (*lakehouse.Table, *schemas.Schema, error) {
	sc, err := schemas.Lookup(cfg.Schema)
	if err != nil {
		return nil, nil, err
	}
	if sc, err = pipeline.WithEnrichment(sc, cfg.Enrich); err != nil {
		return nil, nil, err
	}
	tbl, err := lakehouse.Open(ctx, lakehouse.Config{
		Table:           cfg.Table.Name,
		Catalog:         cfg.Table.Catalog,
		Group:           cfg.Kafka.Group,
		TargetFileBytes: int64(cfg.Table.TargetFileBytes),
		Logger:          log,
	}, sc)
	return tbl, sc, err
}
