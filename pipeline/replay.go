package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// ReplayRange is a block of offsets [From, To) of one partition to backfill.
type ReplayRange struct {
	Partition int32 `json:"partition"`
	From      int64 `json:"from"`
	To        int64 `json:"to"`
}

// ReplayOptions modify a replay.
type ReplayOptions struct {
	// Reenrich replaces rows stored with _enrich_status skipped or miss by
	// their re-enriched version when it is better (lakehouse.Reenrich).
	Reenrich bool
	// Read, if set, is added the offsets of the ranges replayed as their
	// records are, transaction markers and offsets the log no longer holds
	// included, so that it ends at the ranges' total (a progress count).
	Read *atomic.Int64
}

// ReplayResult counts what a replay did.
type ReplayResult struct {
	Ranges   []ReplayRange `json:"ranges"`
	Read     int64         `json:"read"`     // records read from Kafka
	Inserted int64         `json:"inserted"` // rows the MERGE added
	Skipped  int64         `json:"skipped"`  // rows already in the table
	// BusinessDuplicates are copies of a business key the table holds
	// already (dedupe.key), not inserted.
	BusinessDuplicates int64 `json:"business_duplicates"`
	Replaced           int64 `json:"replaced"`      // of the Skipped, rows replaced by their re-enriched version
	DeadLettered       int64 `json:"dead_lettered"` // records sent to the dead-letter topic
	Commits            int64 `json:"commits"`
}

// Replay re-reads each range from Kafka and commits it with the dedupe
// MERGE only: rows already in the table are skipped, missing ones inserted,
// and no watermark moves, so it is safe while the live job runs. With an
// enrich section the records pass through the enrichment stage as in the
// live job; with opts.Reenrich, stored rows that were skipped or missed are
// replaced by better re-enriched ones. It commits every commit.max_records
// records. Records that cannot be decoded are dead-lettered again (verify
// counts distinct source offsets).
func Replay(ctx context.Context, cfg Config, tbl *lakehouse.Table, sc *schemas.Schema, ranges []ReplayRange, opts ReplayOptions, log *slog.Logger) (ReplayResult, error) {
	res := ReplayResult{Ranges: ranges}
	if len(ranges) == 0 {
		return res, fmt.Errorf("replay: no range to replay")
	}
	if err := CheckReplay(ctx, cfg, sc, ranges, opts); err != nil {
		return res, err
	}
	k := cfg.Kafka
	if err := checkReplayRouting(ctx, cfg, tbl, ranges); err != nil {
		return res, err
	}
	loaded, err := tbl.Load(ctx)
	if err != nil {
		return res, err
	}
	groups, err := lakehouse.OffsetMapsOf(loaded)
	if err != nil {
		return res, fmt.Errorf("table %s: %w", cfg.Table.Name, err)
	}
	if err := tableBeyondLog(ctx, k, groups); err != nil {
		return res, fmt.Errorf("replay: table %s: %w", cfg.Table.Name, err)
	}
	wm, err := tbl.Watermarks(ctx)
	if err != nil {
		return res, err
	}
	for _, r := range ranges {
		w, ok := wm.Get(k.Topic, r.Partition)
		if ok && r.To <= w {
			continue
		}
		if cfg.FieldRouted() {
			// A routing change applies from the routes' watermarks: rows
			// a replay put above them could then be taken by another
			// route's table too.
			return res, fmt.Errorf("replay: to %d is above what table %s, routed by field, has committed of %s/%d (%s): floe run ingests the offsets from there; a replay of a field route re-reads committed ranges only",
				r.To, cfg.Table.Name, k.Topic, r.Partition, watermarkText(w, ok))
		}
		if opts.Reenrich {
			log.Warn("re-enrichment: part of the range is not committed yet; its rows are inserted, not replaced",
				"partition", r.Partition, "to", r.To, "watermark", w)
		}
	}
	// As the live job does: the table's columns (some may have been added
	// since the schema was read), and the table evolved for a writer
	// schema that needs it, or the rows would lose those columns' values.
	if sc, err = tbl.EvolveTo(ctx, sc); err != nil {
		return res, err
	}
	if sc, err = sc.WithFormat(cfg.SchemaFormat()); err != nil {
		return res, err
	}
	rp := &replayer{cfg: cfg, tbl: tbl, evo: &evolver{table: tbl, current: sc.Evolving()}, opts: opts, log: log, res: &res}
	if rp.dialer, err = k.dialer(); err != nil {
		return res, err
	}
	tr, err := k.transport()
	if err != nil {
		return res, err
	}
	defer tr.CloseIdleConnections()
	rp.dlq = newDeadLetterWriter(k, cfg.Table.Name, tr)
	defer func() {
		if err := rp.dlq.close(); err != nil {
			log.Warn("closing the dead-letter writer", "err", err)
		}
	}()
	if ecfg := replayEnrich(cfg.Enrich); ecfg != nil {
		st, err := enrich.NewStage(*ecfg, nil, log)
		if err != nil {
			return res, err
		}
		stageCtx, stop := context.WithCancel(ctx)
		stageDone := make(chan error, 1)
		go func() { stageDone <- st.Run(stageCtx) }()
		defer func() { stop(); <-stageDone }()
		rp.stage = st
	}
	for _, r := range ranges {
		if err := rp.replay(ctx, r); err != nil {
			return res, err
		}
	}
	return res, nil
}

// replayEnrich returns e, the job's enrichment configuration, as a
// replay's stage uses it: without the cache file, and no dead letters for
// failed lookups (nil without enrichment).
func replayEnrich(e *enrich.Config) *enrich.Config {
	if e == nil {
		return nil
	}
	// A replay looks every key up afresh: it is run to re-enrich rows, and
	// a saved miss would answer for the service.
	ecfg := *e
	ecfg.CacheFile = ""
	// A failed lookup is not the record's fault: under policy dlq a replay
	// would dead-letter records whose rows may be stored already (a record
	// both a row and a dead letter, which verify flags). It stores them as
	// passthrough does, for --reenrich to repair once the service answers.
	if ecfg.Breaker.Policy == enrich.PolicyDLQ {
		ecfg.Breaker.Policy = enrich.PolicyPassthrough
	}
	return &ecfg
}

// CheckReplay refuses what Replay would refuse without reading the table:
// --reenrich without an enrich section, the format's settings and the
// enrichment's files as NewMember would (see Config.CheckMember; a replay
// does not use the cache file), ranges Kafka cannot serve (empty or
// inverted ones, of a partition the topic lacks, past its end offset, or
// from below the log's start), and a dead-letter topic the broker neither
// has nor creates (CheckDeadLetterTopic). sc is the job's schema. Replay
// checks them first; `floe replay` also does before it creates the table
// (a refused replay left a new empty table behind).
func CheckReplay(ctx context.Context, cfg Config, sc *schemas.Schema, ranges []ReplayRange, opts ReplayOptions) error {
	if opts.Reenrich && cfg.Enrich == nil {
		return fmt.Errorf("replay: --reenrich needs an enrich section in the configuration")
	}
	if err := cfg.checkStage(sc, replayEnrich(cfg.Enrich)); err != nil {
		return err
	}
	k := cfg.Kafka
	for _, r := range ranges {
		if r.From < 0 || r.To <= r.From {
			return fmt.Errorf("replay: partition %d: want 0 <= from < to, got [%d, %d)", r.Partition, r.From, r.To)
		}
	}
	end, err := EndOffsets(ctx, k)
	if err != nil {
		return fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	first, err := FirstOffsets(ctx, k)
	if err != nil {
		return fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	for _, r := range ranges {
		last, ok := end[r.Partition]
		if !ok {
			return fmt.Errorf("replay: topic %s has no partition %d", k.Topic, r.Partition)
		}
		if r.To > last {
			why := ""
			if hw, err := HighWatermarks(ctx, k); err == nil && hw[r.Partition] > last {
				why = fmt.Sprintf(": a transaction still open holds the offsets from %d on", last)
			}
			return fmt.Errorf("replay: to %d is beyond the end of %s/%d (%d%s)", r.To, k.Topic, r.Partition, last, why)
		}
		// The reader would start at the log's start instead, silently,
		// or, with nothing left of the range, wait for it.
		if start := first[r.Partition]; r.From < start {
			return fmt.Errorf("replay: %s/%d starts at offset %d (retention deleted what came before): want from >= %d, got %d",
				k.Topic, r.Partition, start, start, r.From)
		}
	}
	return CheckDeadLetterTopic(ctx, k)
}

// replayer replays ranges one after the other.
type replayer struct {
	cfg    Config
	tbl    *lakehouse.Table
	evo    *evolver
	opts   ReplayOptions
	log    *slog.Logger
	dialer *kafka.Dialer
	dlq    *deadLetterWriter
	stage  *enrich.Stage // nil without enrichment
	res    *ReplayResult
}

func (rp *replayer) replay(ctx context.Context, r ReplayRange) error {
	k := rp.cfg.Kafka
	errLog := readErrorLogger(rp.log, k.Topic, r.Partition)
	reader, err := newPausingReader(r.From, func(seek int64) (*kafka.Reader, error) {
		return openReader(k, r.Partition, rp.dialer, seek, errLog)
	})
	if err != nil {
		return err
	}
	defer reader.Close()
	buf := newPartitionBuffer(rp.evo.schema(), k.Topic, r.Partition, lakehouse.Replay, int(k.MaxMessageBytes), nil)
	defer buf.release()
	buf.evolve = func(from *schemas.Schema, req *schemas.EvolveRequest) (*schemas.Schema, error) {
		return rp.evo.evolve(ctx, from, req)
	}
	// skipped warns, once a range, of offsets [from, to) the log did not
	// hold when the replay came to them: their rows cannot be replayed.
	warned := false
	skipped := func(from, to int64, why ...any) {
		if !warned {
			warned = true
			rp.log.Warn("replay: offsets of the range skipped by the log: compacted, or deleted by retention before they were read",
				append([]any{"topic", k.Topic, "partition", r.Partition, "from", from, "to", to}, why...)...)
		}
	}
	// fetch reads the range in offset order and hands each record to emit.
	// It ends after the record before To, at a record past it, or, when
	// none came for replayIdle, once the log holds no more of the range:
	// waiting for a record it no longer held, the replay waited for ever.
	fetch := func(ctx context.Context, emit func(kafka.Message) error) error {
		next := r.From // the range's next offset to read
		for {
			wait, cancel := context.WithTimeout(ctx, replayIdle)
			msg, err := reader.FetchMessage(wait)
			cancel()
			if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				if rp.rangeGone(ctx, r, next, reader) {
					return nil
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("reading %s/%d: %w", k.Topic, r.Partition, err)
			}
			// A batch the reader skipped (kafka.Message.Skipped: a
			// transaction's marker, or an aborted transaction's records)
			// holds nothing to replay, and is no loss; offsets the log
			// itself no longer holds (skippedByLog) are.
			switch {
			case msg.Skipped == "" && msg.Offset > next:
				skipped(next, min(msg.Offset, r.To))
			case skippedByLog(msg) && msg.Offset >= next:
				skipped(next, min(msg.Offset+1, r.To), "why", msg.Skipped)
			}
			if msg.Offset >= r.To {
				return nil
			}
			if msg.Skipped == "" {
				if err := emit(msg); err != nil {
					return err
				}
			}
			if next = msg.Offset + 1; next >= r.To {
				return nil
			}
		}
	}
	// What buf holds since the last commit, counted as the live window
	// counts it: rows and dead letters (each holds its record), and their
	// bytes. The builder's length alone missed the dead letters and the
	// rows carried across a schema switch.
	var rows, bytes int
	// A route with where replays only the records it takes (takes), and
	// looks up only theirs, as the live member does.
	takes := func(msg kafka.Message) bool { return rp.cfg.where == nil || rp.cfg.where.takes(msg.Value) }
	// The offsets of r counted in opts.Read, up to covered: a record's own,
	// and the markers and gaps before it.
	covered := r.From
	progress := func(to int64) {
		if rp.opts.Read != nil && to > covered {
			rp.opts.Read.Add(to - covered)
			covered = to
		}
	}
	// The last commit of r, and its offsets after its last record.
	finish := func() error {
		if err := rp.commit(ctx, buf); err != nil {
			return err
		}
		progress(r.To)
		return nil
	}
	add := func(msg kafka.Message, taken bool, res enrich.Result) error {
		if taken {
			dr, db, _, err := buf.appendEnriched(msg, time.Now(), res)
			if err != nil {
				return err
			}
			rows, bytes = rows+dr, bytes+db
		} else if err := buf.skip(msg); err != nil {
			// Covered, as the live member covers it: left out, the next
			// taken record's offset jumped over it, and the commit
			// recorded another route's records as absent from the log,
			// which verify then took a loss of them for.
			return err
		}
		rp.res.Read++
		progress(msg.Offset + 1)
		if rows >= rp.cfg.Commit.MaxRecords || bytes >= int(rp.cfg.Commit.MaxBytes) {
			rows, bytes = 0, 0
			return rp.commit(ctx, buf)
		}
		return nil
	}
	if rp.stage == nil {
		if err := fetch(ctx, func(msg kafka.Message) error { return add(msg, takes(msg), offResult) }); err != nil {
			return err
		}
		return finish()
	}

	// With enrichment: the fetcher submits to a lane, records leave it in
	// offset order as their lookups complete.
	lane := rp.stage.NewQueue()
	defer lane.Abort()
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fetched := make(chan error, 1)
	ex := &keyExtractor{field: rp.cfg.Enrich.Key}
	go func() {
		err := fetch(fctx, func(msg kafka.Message) error {
			if !takes(msg) {
				// Another route's record: no lookup; it passes the lane
				// only to be counted in order, without its bytes.
				return lane.Pass(fctx, replayItem{msg: kafka.Message{Offset: msg.Offset}}, laneOverhead)
			}
			return lane.SubmitSized(fctx, ex.key(msg.Value), replayItem{msg: msg, taken: true}, recordBytes(&msg)+laneOverhead)
		})
		lane.Close()
		fetched <- err
	}()
	for c := range lane.Out() {
		it := c.Item.(replayItem)
		if err := add(it.msg, it.taken, c.Result); err != nil {
			cancel()
			<-fetched
			return err
		}
	}
	if err := <-fetched; err != nil {
		return err
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return finish()
}

// replayIdle is how long a replay waits for a record before it asks
// whether the log still holds the rest of its range (a variable for tests).
var replayIdle = 3 * time.Second

// rangeGone reports, after a replay of r waited replayIdle for the record
// at next, whether the log holds no more of r, and warns which offsets it
// lacks: retention deleted the rest of the range during the replay (the
// log now starts at or past To), or the log cleaner emptied it (the reader
// read past To). A failed look-up of the log start is left to the next
// wait.
func (rp *replayer) rangeGone(ctx context.Context, r ReplayRange, next int64, reader *pausingReader) bool {
	k := rp.cfg.Kafka
	first, err := FirstOffsets(ctx, k)
	if start, ok := first[r.Partition]; err == nil && ok && start >= r.To {
		rp.log.Warn("replay: retention deleted the rest of the range during the replay, before it was read; what was read is committed",
			"topic", k.Topic, "partition", r.Partition, "from", next, "to", r.To, "log_start", start)
		return true
	}
	if reader.readPast(r.To) {
		rp.log.Warn("replay: the log holds no record of the rest of the range (compacted away); what was read is committed",
			"topic", k.Topic, "partition", r.Partition, "from", next, "to", r.To)
		return true
	}
	return false
}

// replayItem is a record in a replay's enrichment lane; taken is false for
// another route's record, which passes the lane without a lookup.
type replayItem struct {
	msg   kafka.Message
	taken bool
}

// commit writes what buf holds: dead letters first, then the MERGE, then,
// with Reenrich, the replacement of rows that are better enriched now.
func (rp *replayer) commit(ctx context.Context, buf *partitionBuffer) error {
	seg, ok := buf.take()
	if !ok {
		return nil
	}
	seg.part.Resume = lakehouse.Replay
	if _, err := rp.dlq.write(ctx, seg.letters); err != nil {
		releaseParts([]lakehouse.Part{seg.part})
		return err
	}
	rp.res.DeadLettered += int64(len(seg.letters))
	reenrich := rp.opts.Reenrich && seg.part.Rows != nil
	if reenrich {
		seg.part.Rows.Retain() // Commit releases its reference
	}
	c, err := rp.tbl.Commit(ctx, []lakehouse.Part{seg.part})
	if err != nil {
		if reenrich {
			seg.part.Rows.Release()
		}
		return err
	}
	rp.res.Inserted += c.Rows
	rp.res.Skipped += c.Skipped
	rp.res.BusinessDuplicates += c.BusinessDuplicates
	rp.res.Commits++
	var replaced int64
	if reenrich {
		re, err := rp.tbl.Reenrich(ctx, seg.part)
		if err != nil {
			return err
		}
		replaced = re.Replaced
		rp.res.Replaced += replaced
		if replaced > 0 {
			rp.res.Commits++
		}
	}
	rp.log.Info("replay progress", "range", seg.part.Range.String(), "inserted", c.Rows, "skipped", c.Skipped, "replaced", replaced)
	return nil
}

// ResolveTimes turns a time range into offset ranges of the given
// partitions (all of the topic's when none are given) through Kafka's
// offsets-for-times: From is the first offset whose timestamp is at or
// after from, To the first at or after to (the end offset when there is
// none). Partitions with nothing in the range are left out.
//
// trimmed lists the partitions whose range may have lost its first
// records to retention: it starts at the log start, above 0 (an offset
// range below the log start is refused, see CheckReplay; a time range is
// not, since "the last 7 days" of a topic kept 7 days is a usual request,
// but the caller should say so). Whether the records deleted were of the
// range, their times gone, nothing tells: kafka-go's ListOffsets answers
// the time asked, not the found record's.
func ResolveTimes(ctx context.Context, k KafkaConfig, partitions []int32, from, to time.Time) (ranges []ReplayRange, trimmed []TrimmedStart, err error) {
	if !from.Before(to) {
		return nil, nil, fmt.Errorf("replay: --from-time %s is not before --to-time %s", from.Format(time.RFC3339), to.Format(time.RFC3339))
	}
	end, err := EndOffsets(ctx, k)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	first, err := FirstOffsets(ctx, k)
	if err != nil {
		return nil, nil, fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	if len(partitions) == 0 {
		for p := range end {
			partitions = append(partitions, p)
		}
		sort.Slice(partitions, func(i, j int) bool { return partitions[i] < partitions[j] })
	}
	for _, p := range partitions {
		if _, ok := end[p]; !ok {
			return nil, nil, fmt.Errorf("replay: topic %s has no partition %d", k.Topic, p)
		}
	}
	tr, err := k.transport()
	if err != nil {
		return nil, nil, err
	}
	defer tr.CloseIdleConnections()
	c := &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 10 * time.Second, Transport: tr}
	// at returns each partition's first offset at or after t.
	at := func(t time.Time) (map[int32]int64, error) {
		reqs := make([]kafka.OffsetRequest, len(partitions))
		for i, p := range partitions {
			// In milliseconds, not kafka.TimeOffsetOf's nanoseconds, which
			// overflow past 2262 (a --to-time of 9999-12-31 asked for
			// 1816); before 1970, 0: Kafka takes negative times for
			// earliest or latest.
			reqs[i] = kafka.OffsetRequest{Partition: int(p), Timestamp: max(t.UnixMilli(), 0)}
		}
		// Read committed, as replay reads: no offset past the last
		// stable one, where a range would end beyond what it can read.
		resp, err := c.ListOffsets(ctx, &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{k.Topic: reqs},
			IsolationLevel: kafka.ReadCommitted})
		if err != nil {
			return nil, fmt.Errorf("offsets for %s of %s: %w", t.Format(time.RFC3339), k.Topic, err)
		}
		out := map[int32]int64{}
		for _, po := range resp.Topics[k.Topic] {
			if po.Error != nil {
				return nil, fmt.Errorf("offset for %s of %s/%d: %w", t.Format(time.RFC3339), k.Topic, po.Partition, po.Error)
			}
			p := int32(po.Partition)
			out[p] = end[p] // no record at or after t
			for off := range po.Offsets {
				if off >= 0 {
					out[p] = off
				}
			}
		}
		return out, nil
	}
	starts, err := at(from)
	if err != nil {
		return nil, nil, err
	}
	ends, err := at(to)
	if err != nil {
		return nil, nil, err
	}
	for _, p := range partitions {
		if ends[p] > starts[p] {
			ranges = append(ranges, ReplayRange{Partition: p, From: starts[p], To: ends[p]})
		}
		if f := first[p]; f > 0 && starts[p] == f {
			trimmed = append(trimmed, TrimmedStart{Partition: p, LogStart: f})
		}
	}
	return ranges, trimmed, nil
}

// TrimmedStart is a partition whose replayed time range starts at its
// log start, LogStart: retention deleted the records below it, which may
// have been of the range.
type TrimmedStart struct {
	Partition int32
	LogStart  int64
}

// watermarkText describes a partition's watermark w (ok: the table has one).
func watermarkText(w int64, ok bool) string {
	if !ok {
		return "nothing yet"
	}
	return fmt.Sprintf("its watermark %d", w)
}
