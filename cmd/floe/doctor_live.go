package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/internal/redact"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/pipeline/doctor"
)

// diagnoseLive gathers what `floe doctor` reads — group state, end and start
// offsets, the table's watermarks and commit history, metrics — and hands
// it to doctor.DiagnoseLive.
func diagnoseLive(ctx context.Context, g *globalFlags, every time.Duration, metricsURL string) (*doctor.LiveReport, error) {
	j, err := g.open(ctx, false)
	if err != nil {
		return nil, err
	}
	defer j.tbl.Close()
	cfg := j.cfg
	// As verify: a misspelt --topic or --group was diagnosed as a job that
	// has committed nothing, the whole topic its lag (or another topic's
	// numbers shown).
	if err := j.tbl.CheckOffsets(ctx, cfg.Kafka.Topic); err != nil {
		return nil, err
	}
	in := doctor.Live{Topic: cfg.Kafka.Topic, GroupID: cfg.Kafka.Group, Table: cfg.Table.Name}
	if e := cfg.Enrich; e != nil {
		keys := e.BatchSize
		if e.Mode != enrich.ModeBatch {
			keys = 1
		}
		in.Enrich = &doctor.EnrichLimits{MaxInFlightRecords: e.MaxInFlightRecords, MaxInFlightRequests: e.MaxInFlightRequests, KeysPerRequest: keys}
	}
	// With the job's TLS and SASL settings, as every request of floe run.
	kc, closeClient, err := cfg.Kafka.Client()
	if err != nil {
		return nil, err
	}
	defer closeClient()
	take := func() (doctor.Sample, error) {
		s := doctor.Sample{At: time.Now()}
		var err error
		if s.End, err = pipeline.HighWatermarks(ctx, cfg.Kafka); err != nil {
			return s, err
		}
		if s.Start, err = pipeline.FirstOffsets(ctx, cfg.Kafka); err != nil {
			return s, err
		}
		wm, err := j.tbl.Watermarks(ctx)
		if err != nil {
			return s, err
		}
		s.Watermarks = wm[cfg.Kafka.Topic]
		var outside []int
		for p := range s.End {
			if _, ok := s.Watermarks[p]; !ok {
				outside = append(outside, int(p))
			}
		}
		if len(outside) > 0 {
			// floe run reads these from the group's offsets when it has
			// some: where start_offset latest resolved.
			if s.Group, err = pipeline.GroupOffsets(ctx, cfg.Kafka, outside); err != nil {
				return s, err
			}
		}
		if metricsURL != "" {
			if s.Metrics, err = scrape(ctx, metricsURL, cfg.Kafka.Topic, cfg.Table.Name); err != nil {
				return s, err
			}
		}
		return s, nil
	}
	if in.First, err = take(); err != nil {
		return nil, err
	}
	if every > 0 {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(every):
		}
		second, err := take()
		if err != nil {
			return nil, err
		}
		in.Second = &second
	}
	if in.GroupState, in.Members, err = describeGroup(ctx, kc, cfg.Kafka.Group, cfg.Kafka.Topic); err != nil {
		return nil, err
	}
	if in.Commits, in.PartitionCounts, err = commitHistory(ctx, j.tbl, cfg.Kafka.Group, cfg.Kafka.Topic); err != nil {
		return nil, err
	}
	return doctor.DiagnoseLive(in)
}

// describeGroup returns the group's state and its members with the
// partitions of topic each one holds.
func describeGroup(ctx context.Context, kc *kafka.Client, group, topic string) (string, []doctor.GroupMember, error) {
	res, err := kc.DescribeGroups(ctx, &kafka.DescribeGroupsRequest{GroupIDs: []string{group}})
	if err != nil {
		return "", nil, fmt.Errorf("describing group %s: %w", group, err)
	}
	if len(res.Groups) != 1 {
		return "", nil, fmt.Errorf("describing group %s: %d groups in the answer", group, len(res.Groups))
	}
	gr := res.Groups[0]
	if gr.Error != nil {
		return "", nil, fmt.Errorf("describing group %s: %w", group, gr.Error)
	}
	var members []doctor.GroupMember
	for _, m := range gr.Members {
		gm := doctor.GroupMember{ID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost, Partitions: []int32{}}
		for _, t := range m.MemberAssignments.Topics {
			if t.Topic != topic {
				continue
			}
			for _, p := range t.Partitions {
				gm.Partitions = append(gm.Partitions, int32(p))
			}
		}
		sort.Slice(gm.Partitions, func(a, b int) bool { return gm.Partitions[a] < gm.Partitions[b] })
		members = append(members, gm)
	}
	sort.Slice(members, func(a, b int) bool { return members[a].ID < members[b].ID })
	return gr.GroupState, members, nil
}

// commitHistory returns the table snapshots that carry the group's offset
// map, oldest first, with the topic's summed watermarks, rows and skipped
// duplicates, and the topic's partition counts the table recorded
// (lakehouse.PartitionCountsOf).
func commitHistory(ctx context.Context, t *lakehouse.Table, group, topic string) ([]doctor.Commit, []int, error) {
	tbl, err := t.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	key := lakehouse.OffsetsKeyPrefix + group
	var out []doctor.Commit
	for _, s := range tbl.Metadata().Snapshots() {
		if s.Summary == nil {
			continue
		}
		raw, ok := s.Summary.Properties[key]
		if _, flush := s.Summary.Properties[lakehouse.RowsKey]; !ok || !flush {
			// Maintenance and re-enrichment snapshots carry the map too, but
			// commit nothing from Kafka (replays: see below).
			continue
		}
		var o lakehouse.Offsets
		if err := json.Unmarshal([]byte(raw), &o); err != nil {
			return nil, nil, fmt.Errorf("snapshot %d: decoding %s: %w", s.SnapshotID, key, err)
		}
		c := doctor.Commit{At: time.UnixMilli(s.TimestampMs)}
		for _, off := range o[topic] {
			c.Offsets += off
		}
		c.Rows, _ = strconv.ParseInt(s.Summary.Properties[lakehouse.RowsKey], 10, 64)
		c.Duplicates, _ = strconv.ParseInt(s.Summary.Properties[lakehouse.DuplicatesKey], 10, 64)
		c.Partitions, _ = strconv.Atoi(s.Summary.Properties[lakehouse.PartitionsKeyPrefix+topic])
		out = append(out, c)
	}
	sort.Slice(out, func(a, b int) bool { return out[a].At.Before(out[b].At) })
	// A replay's snapshot carries the rows key and the offset map it
	// found: a flush always moves a watermark, a replay none. Counted,
	// replays made a stopped job look alive.
	live := out[:0]
	for _, c := range out {
		if len(live) == 0 || c.Offsets > live[len(live)-1].Offsets {
			live = append(live, c)
		}
	}
	return live, lakehouse.PartitionCountsOf(tbl, topic), nil
}

// maxScrape bounds what scrape reads of an answer: a floe member's
// /metrics is a few KB per partition, while a wrong port or a federation
// endpoint may answer without end, and the text parser holds a line whole.
const maxScrape = 64 << 20

// scrape reads a floe member's /metrics.
func scrape(ctx context.Context, url, topic, table string) (*doctor.Metrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url %w", redact.ParseError(url, err))
	}
	// A scrape endpoint may sit behind basic auth or take a token in the
	// query: every message names the URL redacted.
	shown := redact.URL(url)
	req.Header.Set("Accept", "text/plain; version=0.0.4")
	// No redirect is followed: net/http would send the URL it left, query
	// token and all, as the Referer to whatever host a redirect names
	// (its error names the target, redacted below).
	cl := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error {
		return errors.New("redirect not followed: it would send the URL's credentials there; set --metrics-url to where it points")
	}}
	resp, err := cl.Do(req)
	if err != nil {
		return nil, fmt.Errorf("--metrics-url: scraping %s: %w", shown, redact.RequestError(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("--metrics-url: scraping %s: %s", shown, resp.Status)
	}
	body := &io.LimitedReader{R: resp.Body, N: maxScrape + 1}
	m, err := doctor.ParseMetrics(body, topic, table, time.Now())
	if body.N == 0 {
		// Whatever the parser made of the first 64 MiB, the answer is cut.
		return nil, fmt.Errorf("--metrics-url %s: answer larger than %d MiB: not a floe /metrics endpoint?", shown, maxScrape>>20)
	}
	if err != nil {
		return nil, fmt.Errorf("--metrics-url %s: %w", shown, err)
	}
	return m, nil
}
