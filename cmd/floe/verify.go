package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
)

func verifyCmd(g *globalFlags) *cobra.Command {
	var asJSON, noDLQ bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Reconcile the table with its offsets and the dead-letter topic",
		Long: `Reads the table (and the dead-letter topic when reachable) and reports rows, distinct ids,
duplicate ids, per-partition offset gaps below the watermark, and sessions seen in more than one
Kafka partition. Exit status 1 when duplicates (or other invariant violations) exist.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			j, err := g.open(ctx)
			if err != nil {
				return err
			}
			defer j.tbl.Close()
			log, cfg, tbl := j.log, j.cfg, j.tbl
			var dl lakehouse.DeadLetters
			if !noDLQ {
				if dl, err = pipeline.ReadDeadLetters(ctx, cfg.Kafka); err != nil {
					log.Warn("dead-letter topic not read; gaps may be dead letters", "err", err)
					dl = nil
				}
			}
			rep, err := tbl.Verify(ctx, cfg.Kafka.Topic, dl)
			if err != nil {
				return err
			}
			return printReport(rep, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&noDLQ, "no-dlq", false, "do not read the dead-letter topic")
	return cmd
}

func printReport(rep *lakehouse.Report, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else if err := rep.WriteText(os.Stdout); err != nil {
		return err
	}
	if !rep.OK() {
		return &exitError{code: 1, err: fmt.Errorf("verify: table %s failed reconciliation", rep.Table)}
	}
	return nil
}
