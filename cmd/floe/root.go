package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"strings"

	"github.com/go-sql-driver/mysql"
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
	memProf  string
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
	pf.StringVar(&g.table, "table", "", "override table.name; with routes, the route (table) to work on")
	pf.StringVar(&g.cpuProf, "cpuprofile", "", "write a Go CPU profile to this file")
	_ = pf.MarkHidden("cpuprofile")
	pf.StringVar(&g.memProf, "memprofile", "", "write a Go allocation profile to this file on exit")
	_ = pf.MarkHidden("memprofile")
	var prof *os.File
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := refuseEmptyFlags(cmd); err != nil {
			return err
		}
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
		if g.memProf != "" {
			if err := writeAllocProfile(g.memProf); err != nil {
				fmt.Fprintln(os.Stderr, "floe: --memprofile:", err)
			}
		}
	}
	root.AddCommand(runCmd(g), replayCmd(g), verifyCmd(g), demoCmd(g), enrichdCmd(g), doctorCmd(g), maintainCmd(g))
	return root
}

// configFlags are the root's flags that name or override configuration.
var configFlags = []string{"config", "brokers", "topic", "group", "table"}

// refuseEmptyFlags returns an error naming a configuration flag given an
// empty value (--table "$ROUTE" with ROUTE unset): an empty value is what
// "not given" looks like to the command, which then worked on the config
// file's topic, group or table (every route, for --table) without a word.
func refuseEmptyFlags(cmd *cobra.Command) error {
	for _, name := range configFlags {
		f := cmd.Flags().Lookup(name)
		if f == nil || !f.Changed {
			continue
		}
		if v := strings.Trim(f.Value.String(), "[] "); v == "" {
			return fmt.Errorf("--%s: empty value", name)
		}
	}
	return nil
}

// refuseConfigFlags returns an error naming the root's configuration flag
// set on cmd, a command that reads no configuration: it inherits them, and
// ran as if they were not given (floe demo --config floe.yaml ran the
// embedded demo without a word).
func refuseConfigFlags(cmd *cobra.Command) error {
	for _, name := range configFlags {
		if cmd.Flags().Changed(name) {
			return fmt.Errorf("--%s: %s reads no configuration", name, cmd.CommandPath())
		}
	}
	return nil
}

func (g *globalFlags) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", g.logLevel)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	var l *slog.Logger
	if g.logJSON {
		l = slog.New(slog.NewJSONHandler(os.Stderr, opts))
	} else {
		l = slog.New(slog.NewTextHandler(os.Stderr, opts))
	}
	// Libraries that log through the standard library's log package (bun's
	// "can't discover MySQL version") or a logger of their own (the MySQL
	// driver's "[mysql] packets.go:58 unexpected EOF") log through l too,
	// as JSON under --log-json.
	slog.SetDefault(l)
	// At WARN: what libraries print through the log package is warnings
	// (iceberg-go's legacy catalog schema), shown under --log-level warn.
	slog.SetLogLoggerLevel(slog.LevelWarn)
	_ = mysql.SetLogger(driverLog{l})
	return l, nil
}

// driverLog is the MySQL driver's logger: its lines are warnings, as it
// logs only connections it gives up.
type driverLog struct{ l *slog.Logger }

func (d driverLog) Print(v ...any) {
	d.l.Warn(strings.TrimSpace(fmt.Sprint(v...)), "from", "mysql driver")
}

// job is what every table command works with: one table, and with routes
// one route of the configuration.
type job struct {
	log *slog.Logger
	cfg pipeline.Config
	tbl *lakehouse.Table
	sc  *schemas.Schema
	// dedupe is the job's business-key setting, checked against sc.
	dedupe lakehouse.Dedupe
	// routed is set when the configuration has routes: metrics then carry a
	// table label, and log names the table (base is the job-wide logger).
	routed bool
	base   *slog.Logger
}

// open loads the configuration, applies its memory limit and opens the
// schema and table: the configuration's, or with routes the one --table
// picks; with create, a table the catalog lacks is created, else it is an
// error. The caller closes j.tbl.
func (g *globalFlags) open(ctx context.Context, create bool) (*job, error) {
	j, err := g.job()
	if err != nil {
		return nil, err
	}
	if err := j.open(ctx, create); err != nil {
		return nil, err
	}
	return j, nil
}

// job is open up to the table: j.tbl stays nil until j.open, so that a
// command can check its flags against the configuration before it creates
// a table (a refused replay left a misspelt one behind, and with routes but
// no --table every route's table was opened, even created, before the
// refusal).
func (g *globalFlags) job() (*job, error) {
	jobs, err := g.jobs(false)
	if err != nil {
		return nil, err
	}
	if len(jobs) > 1 {
		names := make([]string, len(jobs))
		for i, j := range jobs {
			names[i] = j.cfg.Table.Name
		}
		return nil, fmt.Errorf("the configuration has %d routes: pick one with --table (%s)", len(jobs), strings.Join(names, ", "))
	}
	return jobs[0], nil
}

// runs reports whether floe run runs j: every route, unless --table picks
// one (a field route's siblings then only come along for the checks).
func (g *globalFlags) runs(j *job) bool {
	return !j.routed || g.table == "" || j.cfg.Table.Name == g.table
}

// openJobs is open for every route of the configuration (only the one
// --table picks, when given; with siblings, a field route comes with the
// other routes of its topic, which together take each record once). With
// create, for floe run, every job that runs is first checked as its member
// will be (pipeline.Config.CheckMember, pipeline.CheckSourceTopic, then
// pipeline.CheckDeadLetterTopic, which a broker that creates topics answers
// by creating it): the member is built once the tables are open, and a
// configuration it refused left them created. The caller closes each j.tbl.
func (g *globalFlags) openJobs(ctx context.Context, siblings, create bool) ([]*job, error) {
	jobs, err := g.jobs(siblings)
	if err != nil {
		return nil, err
	}
	if create {
		// The metrics endpoint's address must be free: found taken only
		// when the member serves it, it left an empty table behind.
		if l := jobs[0].cfg.Metrics.Listen; l != "" {
			ln, err := net.Listen("tcp", l)
			if err != nil {
				return nil, fmt.Errorf("metrics.listen %s: %w", l, err)
			}
			ln.Close()
		}
		sources, dlqs := map[string]bool{}, map[string]bool{} // routes of a topic share them
		for _, j := range jobs {
			// Only the routes that run: a sibling comes along for the
			// routing checks, and its files (a cache file, TLS files)
			// are on the hosts that run it.
			if !g.runs(j) {
				continue
			}
			if err := j.cfg.CheckMember(j.sc); err != nil {
				return nil, j.wrap(err)
			}
			k := j.cfg.Kafka
			// The source first: a misspelt topic must not leave a
			// dead-letter topic named after it.
			if src := strings.Join(k.Brokers, ",") + " " + k.Topic; !sources[src] {
				sources[src] = true
				if err := pipeline.CheckSourceTopic(ctx, k); err != nil {
					return nil, j.wrap(err)
				}
			}
			if dlq := strings.Join(k.Brokers, ",") + " " + k.DLQTopic; !dlqs[dlq] {
				dlqs[dlq] = true
				if err := pipeline.CheckDeadLetterTopic(ctx, k); err != nil {
					return nil, j.wrap(err)
				}
			}
		}
	}
	for i, j := range jobs {
		if err := j.open(ctx, create); err != nil {
			for _, j := range jobs[:i] {
				j.tbl.Close()
			}
			return nil, err
		}
	}
	return jobs, nil
}

// jobs loads the configuration, applies its memory limit and returns the
// jobs openJobs opens, checked (checkTable) but their tables not opened
// yet: every job is checked before any table is created, as a bad dedupe
// key or a later route's missing schema file was found only after the
// tables before it were.
func (g *globalFlags) jobs(siblings bool) ([]*job, error) {
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
	cfgs := cfg.Jobs()
	if cfg.Routed() && g.table != "" {
		if cfgs, err = pickRoute(cfgs, g.table, siblings); err != nil {
			return nil, err
		}
	}
	jobs := make([]*job, len(cfgs))
	for i, c := range cfgs {
		jlog := log
		if cfg.Routed() {
			jlog = log.With("route", c.Table.Name)
		}
		j := &job{log: jlog, cfg: c, routed: cfg.Routed(), base: log}
		if j.sc, j.dedupe, err = checkTable(c); err != nil {
			return nil, j.wrap(err)
		}
		jobs[i] = j
	}
	return jobs, nil
}

// open opens the job's table, creating it when the catalog lacks it only
// with create.
func (j *job) open(ctx context.Context, create bool) error {
	tbl, err := openTable(ctx, j.cfg, j.log, j.sc, j.dedupe, create)
	if err != nil {
		return j.wrap(err)
	}
	j.tbl = tbl
	return nil
}

// wrap names the route of an error with routes.
func (j *job) wrap(err error) error {
	if j.routed {
		return fmt.Errorf("route of table %s: %w", j.cfg.Table.Name, err)
	}
	return err
}

// pickRoute returns the route of cfgs that writes table, and with siblings,
// when it routes by field, the other field routes of its topic too.
func pickRoute(cfgs []pipeline.Config, table string, siblings bool) ([]pipeline.Config, error) {
	names := make([]string, len(cfgs))
	for i, c := range cfgs {
		names[i] = c.Table.Name
		if c.Table.Name != table {
			continue
		}
		if !siblings || !c.FieldRouted() {
			return []pipeline.Config{c}, nil
		}
		var out []pipeline.Config
		for _, o := range cfgs {
			if o.FieldRouted() && o.Kafka.Topic == c.Kafka.Topic {
				out = append(out, o)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("--table %s: no route writes it (tables: %s)", table, strings.Join(names, ", "))
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
	if cfg.Routed() && (g.topic != "" || g.group != "") {
		return cfg, fmt.Errorf("config %s has routes: --topic and --group do not apply (set them per route)", g.config)
	}
	if g.topic != "" {
		cfg.Kafka.Topic = g.topic
	}
	if g.group != "" {
		cfg.Kafka.Group = g.group
	}
	if g.table != "" && !cfg.Routed() {
		cfg.Table.Name = g.table
	}
	if err := cfg.Finish(); err != nil {
		return cfg, fmt.Errorf("config %s:\n  %s", g.config, strings.ReplaceAll(err.Error(), "\n", "\n  "))
	}
	return cfg, nil
}

// checkTable returns the configured schema and the job's business-key
// setting (its dedupe section overrides the schema's), checking all that
// opening the table checks without the catalog.
func checkTable(cfg pipeline.Config) (*schemas.Schema, lakehouse.Dedupe, error) {
	sc, err := schemas.Lookup(cfg.Schema)
	if err != nil {
		return nil, lakehouse.Dedupe{}, err
	}
	if sc, err = pipeline.WithEnrichment(sc, cfg.Enrich); err != nil {
		return nil, lakehouse.Dedupe{}, err
	}
	d, err := cfg.DedupeFor(sc)
	if err == nil {
		err = lakehouse.CheckDedupe(sc, d)
	}
	if err != nil {
		return nil, lakehouse.Dedupe{}, err
	}
	return sc, d, nil
}

// openTable opens the configured table with the schema and dedupe setting
// checkTable returned, creating the table when the catalog lacks it only
// with create.
func openTable(ctx context.Context, cfg pipeline.Config, log *slog.Logger, sc *schemas.Schema, d lakehouse.Dedupe, create bool) (*lakehouse.Table, error) {
	tbl, err := lakehouse.Open(ctx, lakehouse.Config{
		Table:           cfg.Table.Name,
		Catalog:         cfg.Table.Catalog,
		Group:           cfg.Kafka.Group,
		TargetFileBytes: int64(cfg.Table.TargetFileBytes),
		Logger:          log,
		Existing:        !create,
	}, sc)
	if err != nil {
		return nil, err
	}
	if err := tbl.SetDedupe(d); err != nil {
		tbl.Close()
		return nil, err
	}
	return tbl, nil
}

// writeAllocProfile writes the allocations since the process started.
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
