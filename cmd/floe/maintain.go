package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/internal/bytesize"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
)

func maintainCmd(g *globalFlags) *cobra.Command {
	var (
		target         string
		expire, orphan time.Duration
		retain         int
		dryRun, asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "maintain",
		Short: "Compact small files, rewrite manifests, expire snapshots, remove orphan files",
		Long: `Table maintenance, safe while floe run commits to the table: compacts small data files
(per table partition and Kafka partition) toward the target size, merges manifests, expires
snapshots older than --expire-older-than (always keeping --retain-last and the newest snapshot
carrying each group's offset map), and deletes unreferenced files older than --orphan-older-than.
Flags default to the config's maintain section. Prints before/after counts.
With routes, --table picks the route's table.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			// The flags are checked before the table is loaded: a bad one
			// was reported only once the catalog had answered.
			j, err := g.job()
			if err != nil {
				return err
			}
			opts := maintainOptions(j.cfg.Maintain)
			f := cmd.Flags()
			if f.Changed("target-file-size") {
				size, err := bytesize.Parse(target)
				if err != nil {
					return fmt.Errorf("--target-file-size: %w", err)
				}
				opts.TargetFileBytes = int64(size)
			}
			if f.Changed("expire-older-than") {
				if expire <= 0 {
					return fmt.Errorf("--expire-older-than %s: must be positive", expire)
				}
				opts.ExpireOlderThan = expire
			}
			if f.Changed("retain-last") {
				if retain < 1 {
					return fmt.Errorf("--retain-last %d: at least 1 snapshot is always kept", retain)
				}
				opts.RetainLast = retain
			}
			if f.Changed("orphan-older-than") {
				if orphan < lakehouse.MinOrphanOlderThan {
					return fmt.Errorf("--orphan-older-than %s: at least %s; younger unreferenced files may belong to a commit in flight", orphan, lakehouse.MinOrphanOlderThan)
				}
				opts.OrphanOlderThan = orphan
			}
			opts.DryRun = dryRun
			if err := j.open(ctx, false); err != nil {
				return err
			}
			defer j.tbl.Close()
			if !dryRun {
				if err := j.tbl.CheckWrite(ctx); err != nil {
					return err
				}
			}
			// What a run that failed in part did (failed groups,
			// contended steps, the steps before one that failed) is
			// reported before its error.
			rep, err := j.tbl.Maintain(ctx, opts)
			if rep == nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return errors.Join(enc.Encode(rep), err)
			}
			return errors.Join(rep.WriteText(os.Stdout), err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target-file-size", "", "compacted file size, e.g. 128MiB (default: maintain.target_file_bytes, else the table's write.target-file-size-bytes, else 128MiB)")
	f.DurationVar(&expire, "expire-older-than", 0, "expire snapshots older than this (default: maintain.expire_older_than, 168h)")
	f.IntVar(&retain, "retain-last", 0, "always keep this many snapshots (default: maintain.retain_last, 1)")
	f.DurationVar(&orphan, "orphan-older-than", 0, "delete unreferenced files older than this, at least 1h (default: maintain.orphan_older_than, 72h)")
	f.BoolVar(&dryRun, "dry-run", false, "plan and report only; write and delete nothing")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

// maintainOptions maps the config's maintain section onto the library's options.
func maintainOptions(c pipeline.MaintainConfig) lakehouse.MaintainOptions {
	return lakehouse.MaintainOptions{
		TargetFileBytes: int64(c.TargetFileBytes),
		ExpireOlderThan: c.ExpireOlderThan.D(),
		RetainLast:      c.RetainLast,
		OrphanOlderThan: c.OrphanOlderThan.D(),
	}
}

// scheduleMaintenance runs table maintenance every c.Interval (none when it
// is 0) until ctx ends or stop is called; stop waits for a run in progress to
// end. A failed run is logged and never stops ingestion: maintenance commits
// only ever make ingestion commits retry.
func scheduleMaintenance(ctx context.Context, log *slog.Logger, tbl *lakehouse.Table, c pipeline.MaintainConfig) (stop func()) {
	if c.Interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(c.Interval.D())
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := tbl.Maintain(ctx, maintainOptions(c)); err != nil && ctx.Err() == nil {
				log.Warn("table maintenance failed; retried at the next interval", "table", tbl.Name(), "err", err)
			}
		}
	}()
	log.Info("table maintenance scheduled", "table", tbl.Name(), "interval", c.Interval.D())
	return func() {
		cancel()
		wg.Wait()
	}
}
