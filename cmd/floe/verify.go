package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
)

func verifyCmd(g *globalFlags) *cobra.Command {
	var asJSON, noDLQ bool
	cmd := &cobra.Command{
		Use:   "verify",
		Short: "Reconcile the table with its offsets and the dead-letter topic",
		Long: `Reads the table and the dead-letter topic (--no-dlq: not it) and reports rows, distinct ids,
duplicate ids, per-partition offset gaps below the watermark, and sessions seen in more than one
Kafka partition; with a dedupe key (schema floe.dedupe-key or the dedupe section), also
duplicate business keys with the coordinates of their copies. Exit status 1 when duplicates
(or other invariant violations) exist.
With routes it verifies every route's table (--table: one, and a field route with its siblings);
the tables of a topic routed by field are checked together: per partition, every offset below the least of their watermarks is a row of exactly one
of them or a dead letter.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			jobs, err := g.openJobs(ctx, true, false)
			if err != nil {
				return err
			}
			defer func() {
				for _, j := range jobs {
					j.tbl.Close()
				}
			}()
			if !jobs[0].routed {
				j := jobs[0]
				var read dlqRead
				rep, err := j.tbl.Verify(ctx, j.cfg.Kafka.Topic, deadLetterReader(noDLQ, j.log, []string{j.cfg.Table.Name}, &read, j.cfg.Kafka))
				if err != nil {
					return err
				}
				rep.MissingDeadLetterTopics, rep.TrimmedDeadLetters = read.missing, read.trimmed
				return printReport(rep, asJSON)
			}
			return verifyRoutes(ctx, jobs, noDLQ, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&noDLQ, "no-dlq", false, "do not read the dead-letter topic")
	return cmd
}

// dlqRead is what a deadLetterReader notes of the dead-letter topics it
// read: Report.MissingDeadLetterTopics and Report.TrimmedDeadLetters.
type dlqRead struct{ missing, trimmed []string }

// deadLetterReader returns the reader of the dead-letter topics of ks for
// their topic, which Verify calls once it has loaded the tables, or nil (not
// read) with --no-dlq; the reader fails when they cannot be read (naming
// kafka.brokers when those do not answer at all), and logs to log the read
// errors it retries. Only the dead letters of tables count
// (and those written without a table header): routes of one topic share
// its dead-letter topic by default. The reader notes in read, for the
// report, the topics that do not exist (they hold no dead letters, but said
// nothing, and a misspelt dlq_topic read as gaps without a word why) and
// the partitions that lost letters to retention.
func deadLetterReader(noDLQ bool, log *slog.Logger, tables []string, read *dlqRead, ks ...pipeline.KafkaConfig) lakehouse.DeadLetterReader {
	if noDLQ {
		return nil
	}
	return func(ctx context.Context) (lakehouse.DeadLetters, error) {
		out := lakehouse.DeadLetters{}
		seen, reached := map[string]bool{}, map[string]bool{}
		for _, k := range ks {
			if seen[k.DLQTopic] {
				continue
			}
			seen[k.DLQTopic] = true
			if b := strings.Join(k.Brokers, ","); !reached[b] {
				// Brokers out of reach are not the dead-letter topic's
				// fault, and --no-dlq would not help: every dead letter a
				// gap, status 1 for a healthy table.
				if err := pipeline.CheckBrokers(ctx, k); err != nil {
					return nil, err
				}
				reached[b] = true
			}
			t, err := pipeline.ReadDeadLetterTopic(ctx, k, log, tables...)
			if err != nil {
				// Its dead letters would be gaps: status 1, a table that
				// does not reconcile, for a topic the brokers would not
				// let it read.
				return nil, fmt.Errorf("dead-letter topic %s not read, so gaps cannot be told from dead letters (--no-dlq verifies without it): %w", k.DLQTopic, err)
			}
			if !t.Exists {
				read.missing = append(read.missing, k.DLQTopic)
			}
			for _, p := range slices.Sorted(maps.Keys(t.Trimmed)) {
				read.trimmed = append(read.trimmed, fmt.Sprintf("%s/%d below offset %d", k.DLQTopic, p, t.Trimmed[p]))
			}
			for p, offs := range t.Letters {
				for o, reason := range offs {
					out.Add(p, o, reason)
				}
			}
		}
		return out, nil
	}
}

// routesVerdict is what `floe verify --json` prints for a job with routes.
type routesVerdict struct {
	// Tables are the reports of the routes that take every record of their
	// topic, one per table.
	Tables []*lakehouse.Report `json:"tables"`
	// FieldRoutes are the reports of the topics routed by field, each across
	// its tables.
	FieldRoutes []*lakehouse.RoutesReport `json:"field_routes"`
}

// verifyRoutes verifies every route's table: a route that takes its whole
// topic on its own, the tables of a topic routed by field together (every
// offset in exactly one of them or the dead-letter topic).
func verifyRoutes(ctx context.Context, jobs []*job, noDLQ, asJSON bool) error {
	var v routesVerdict
	byTopic := map[string][]*job{}
	var topics []string
	for _, j := range jobs {
		if !j.cfg.FieldRouted() {
			var read dlqRead
			rep, err := j.tbl.Verify(ctx, j.cfg.Kafka.Topic, deadLetterReader(noDLQ, j.log, []string{j.cfg.Table.Name}, &read, j.cfg.Kafka))
			if err != nil {
				return fmt.Errorf("verifying %s: %w", j.cfg.Table.Name, err)
			}
			rep.MissingDeadLetterTopics, rep.TrimmedDeadLetters = read.missing, read.trimmed
			v.Tables = append(v.Tables, rep)
			continue
		}
		t := j.cfg.Kafka.Topic
		if byTopic[t] == nil {
			topics = append(topics, t)
		}
		byTopic[t] = append(byTopic[t], j)
	}
	for _, t := range topics {
		siblings := byTopic[t]
		tables := make([]*lakehouse.Table, len(siblings))
		ks := make([]pipeline.KafkaConfig, len(siblings))
		names := make([]string, len(siblings))
		for i, j := range siblings {
			tables[i], ks[i], names[i] = j.tbl, j.cfg.Kafka, j.cfg.Table.Name
		}
		var read dlqRead
		rep, err := lakehouse.VerifyRoutes(ctx, t, tables, deadLetterReader(noDLQ, siblings[0].base, names, &read, ks...))
		if err != nil {
			return fmt.Errorf("verifying the routes of topic %s: %w", t, err)
		}
		rep.MissingDeadLetterTopics, rep.TrimmedDeadLetters = read.missing, read.trimmed
		v.FieldRoutes = append(v.FieldRoutes, rep)
	}
	var failed []string
	for _, r := range v.Tables {
		if !r.OK() {
			failed = append(failed, r.Table)
		}
	}
	for _, r := range v.FieldRoutes {
		if !r.OK() {
			failed = append(failed, "the routes of topic "+r.Topic)
		}
	}
	if asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(v); err != nil {
			return err
		}
	} else {
		for i, r := range v.Tables {
			if i > 0 {
				fmt.Println()
			}
			if err := r.WriteText(os.Stdout); err != nil {
				return err
			}
		}
		for i, r := range v.FieldRoutes {
			if i > 0 || len(v.Tables) > 0 {
				fmt.Println()
			}
			if err := r.WriteText(os.Stdout); err != nil {
				return err
			}
		}
	}
	if len(failed) > 0 {
		return &exitError{code: 1, err: fmt.Errorf("verify: %s failed reconciliation", strings.Join(failed, ", "))}
	}
	return nil
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
