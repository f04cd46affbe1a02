package main

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/enrich"
)

func enrichdCmd(g *globalFlags) *cobra.Command {
	var (
		listen   string
		cfg      enrich.ServerConfig
		p50, p99 time.Duration
		outages  []string
	)
	cmd := &cobra.Command{
		Use:   "enrichd",
		Short: "Run the reference enrichment server (the lookup contract, with configurable latency and failures)",
		Long: `Serves the lookup contract floe's enrichment speaks: POST /lookup {"keys":[...]} and
GET /lookup/{key}. Latency is lognormal with the given p50/p99 (default 600ms/2.8s, the case
studies' service; --p50 0 answers at once, --p99 equal to --p50 is a fixed latency); --error-rate answers a share of requests 503; --outage START-END (from start,
e.g. 30s-60s) answers everything 503 in that window; --fail-key K answers 500 to every request that
asks for K (a key the service cannot answer).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := refuseConfigFlags(cmd); err != nil {
				return err
			}
			var err error
			if cfg.P50, cfg.P99, err = serverLatency(p50, p99, "--p50", "--p99"); err != nil {
				return err
			}
			log, err := g.logger()
			if err != nil {
				return err
			}
			for _, o := range outages {
				a, b, ok := strings.Cut(o, "-")
				start, err1 := time.ParseDuration(a)
				end, err2 := time.ParseDuration(b)
				if !ok || err1 != nil || err2 != nil || end <= start {
					return fmt.Errorf("--outage %q: want START-END durations, e.g. 30s-60s", o)
				}
				cfg.Outages = append(cfg.Outages, enrich.Outage{Start: start, End: end})
			}
			if err := cfg.Check(); err != nil {
				return fmt.Errorf("enrichd: %w", err)
			}
			srv := enrich.NewServer(cfg)
			url, err := srv.Start(listen)
			if err != nil {
				return err
			}
			defer srv.Close()
			fmt.Fprintf(os.Stdout, "enrichd: batch lookups at %s/lookup, single at %s/lookup/{key}\n", url, url)
			log.Info("enrichd serving", "url", url, "p50", p50, "p99", p99, "error_rate", cfg.ErrorRate)
			<-cmd.Context().Done()
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8081", "address to listen on")
	f.DurationVar(&p50, "p50", 600*time.Millisecond, "median latency per request (0: none)")
	f.DurationVar(&p99, "p99", 2800*time.Millisecond, "99th percentile latency per request (at least --p50; equal: a fixed latency)")
	f.Float64Var(&cfg.ErrorRate, "error-rate", 0, "share of requests answered 503")
	f.Float64Var(&cfg.MissRate, "miss-rate", 0, "share of keys the server does not know")
	f.StringArrayVar(&outages, "outage", nil, "START-END window (from start) answered 503; repeatable")
	f.StringArrayVar(&cfg.FailKeys, "fail-key", nil, "key whose requests are answered 500; repeatable")
	f.StringVar(&cfg.RequireHeader, "require-header", "", `"Name: value" every request must carry`)
	f.Int64Var(&cfg.Seed, "seed", 1, "seed of the latency and error draws")
	return cmd
}

// serverLatency returns the reference server's P50 and P99 for the latency
// flags named p50Flag and p99Flag. The server reads a P50 of 0 as its
// default 600ms and a P99 below the P50 as a fixed latency, so --p50 0
// served 600ms and a --p99 below --p50 a latency other than asked, without
// a word: 0 is no latency here, and a P99 below the P50 is refused.
func serverLatency(p50, p99 time.Duration, p50Flag, p99Flag string) (time.Duration, time.Duration, error) {
	switch {
	case p50 < 0:
		return 0, 0, fmt.Errorf("%s %s: want 0 (no latency) or more", p50Flag, p50)
	case p50 == 0:
		return enrich.NoLatency, 0, nil
	case p99 < p50:
		return 0, 0, fmt.Errorf("%s %s: below %s %s; want at least it (equal: a fixed latency)", p99Flag, p99, p50Flag, p50)
	}
	return p50, p99, nil
}
