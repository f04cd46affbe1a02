// Package pipeline is floe's Kafka side: consumer-group membership through
// kafka-go's ConsumerGroup/Generation API, one worker per assigned partition,
// the bounded buffer between fetching and committing, the dead-letter writer,
// and the flush/commit loop that drives lakehouse.Table.Commit.
//
// Orderings that matter (each guards exactly-once):
//   - a worker seeks to the table's watermark W(p), never to Kafka's
//     committed offset when the table has one;
//   - dead letters of a segment are acknowledged before the table commit
//     that covers their offsets;
//   - Kafka offsets are committed only after the table commit, and their
//     failure is logged, never fatal;
//   - on revocation or shutdown the final flush is bounded by commit.grace;
//     whatever it cannot commit is dropped, and the fence in the table makes
//     the next owner's redo safe.
package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"golang.org/x/sync/errgroup"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/schemas"
)

// Member is one consumer-group member: it owns the partitions the group
// assigns it and commits them to the table.
type Member struct {
	cfg    Config
	table  *lakehouse.Table
	log    *slog.Logger
	stats  *Stats
	until  map[int32]int64
	idle   sync.Map    // partitions with nothing to read before until: int32 → true
	done   atomic.Bool // Run returned because the table reached until
	dialer *kafka.Dialer
	reg    prometheus.Registerer
	stage  *enrich.Stage // nil without enrichment
	evo    *evolver      // the table's schema evolutions and the newest schema
	// joinPartitions is how many partitions the topic had before the
	// member last joined (start_offset latest only; 0 unknown): see
	// jobStart.
	joinPartitions int
}

// Option configures a Member.
type Option func(*Member)

// WithLogger sets the logger (default: discard).
func WithLogger(l *slog.Logger) Option { return func(m *Member) { m.log = l } }

// WithRegisterer registers the member's enrichment metrics (default: none);
// pass the registry given to ListenMetrics.
func WithRegisterer(reg prometheus.Registerer) Option { return func(m *Member) { m.reg = reg } }

// UntilOffsets makes Run return once the table's offset map reaches these
// end offsets for every partition: scheduled (--until-caught-up) mode.
func UntilOffsets(end map[int32]int64) Option { return func(m *Member) { m.until = end } }

// CaughtUp reports whether Run returned because the table's offset map
// reached the UntilOffsets. It may have after ctx was cancelled: a stop
// that lands during the flush committing the last end offsets caught up
// all the same.
func (m *Member) CaughtUp() bool { return m.done.Load() }

// NewMember returns a member that writes to tbl. cfg must have been
// Finish()ed, and sc extended by WithEnrichment when cfg.Enrich is set.
func NewMember(cfg Config, tbl *lakehouse.Table, sc *schemas.Schema, opts ...Option) (*Member, error) {
	dialer, err := cfg.Kafka.dialer()
	if err != nil {
		return nil, err
	}
	if sc, err = sc.WithFormat(cfg.SchemaFormat()); err != nil {
		return nil, err
	}
	dd, err := cfg.DedupeFor(sc)
	if err == nil {
		err = tbl.SetDedupe(dd)
	}
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, table: tbl, dialer: dialer}
	m.evo = &evolver{table: tbl, current: sc.Evolving()}
	tbl.SetRouting(cfg.Kafka.Topic, cfg.RoutingFingerprint()) // for CheckStart
	for _, o := range opts {
		o(m)
	}
	if m.log == nil {
		m.log = slog.New(slog.DiscardHandler)
	}
	cfg.Kafka.warnInsecure(m.log)
	cfg.warnTiny(m.log)
	if m.stats == nil {
		m.stats = newStats(cfg.Kafka.Topic)
	}
	if cfg.Enrich != nil {
		st, err := enrich.NewStage(*cfg.Enrich, m.reg, m.log)
		if err != nil {
			return nil, err
		}
		m.stage = st
	}
	return m, nil
}

// Stats returns the member's counters.
func (m *Member) Stats() *Stats { return m.stats }

// leaveTimeout bounds leaving the group on stop.
const leaveTimeout = 10 * time.Second

// StopOverhead is how long a graceful stop may take beyond commit.grace
// when every service it talks to hangs: an interrupted commit learning its
// outcome (lakehouse.OutcomeTimeout), leaving the group (leaveTimeout) and
// closing the dead-letter writer (dlqCloseTimeout), one after another;
// with the table's files on HDFS, a call in progress adds up to
// hdfs.io-timeout. A supervisor's kill grace period (Kubernetes'
// terminationGracePeriodSeconds, compose's stop_grace_period) must be
// longer, or it may SIGKILL floe before the enrichment cache is saved.
const StopOverhead = lakehouse.OutcomeTimeout + leaveTimeout + dlqCloseTimeout

// errCaughtUp ends a generation once the until-offsets are committed;
// errPartitionStopped ends a scheduled run whose partition cannot go on;
// errLogBehind ends the run: the log is behind the table (beyondEnd).
var (
	errCaughtUp = errors.New("caught up")
	// errPinLost ends a scheduled run caught up whose start_offset latest
	// pins could not be committed.
	errPinLost          = errors.New("scheduled run caught up, but its start was not recorded")
	errPartitionStopped = errors.New("partition stopped")
	errLogBehind        = errors.New("the topic's log ends below where floe resumes it")
)

// Run joins the group and processes generations until ctx is cancelled
// (then it flushes within commit.grace, commits and leaves the group), or
// until caught up in scheduled mode. It returns nil on a clean stop.
func (m *Member) Run(ctx context.Context) error {
	k := m.cfg.Kafka
	defer context.AfterFunc(ctx, func() { m.stats.Stopping.Store(true) })()
	// Fail fast and clearly on an unreachable cluster or a missing topic;
	// once running, such errors are retried.
	checkCtx, cancel := context.WithTimeout(ctx, checkSourceTimeout)
	_, err := EndOffsets(checkCtx, k)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	m.warnLogAppendTime(ctx)
	if err := m.skipEmptied(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if m.until != nil {
		// A scheduled run the table is already caught up for has nothing
		// to do: it would join the group only to rebalance the members
		// that own the partitions. (A failed read is retried later.)
		if wm, err := m.table.Watermarks(ctx); err == nil {
			// The end offsets read after the watermarks (other members
			// may have committed past those read above meanwhile).
			if ends, err := HighWatermarks(ctx, k); err == nil {
				if err := beyondEnd(k.Topic, wm, ends); err != nil {
					return err
				}
			}
			m.markPinned(ctx, wm)
			if m.caughtUp(wm) {
				// Pins due for a refresh need none while the group has
				// members (a long-running job beside the scheduled runs):
				// joining would rebalance them twice for nothing.
				started, repin := m.started(ctx, wm)
				if !started && repin > 0 {
					started, _ = groupHasMembers(ctx, k)
				}
				if started {
					m.log.Info("scheduled run: the table holds every end offset already")
					m.done.Store(true)
					return nil
				}
			}
		}
	}
	start := kafka.FirstOffset
	if k.StartOffset == "latest" {
		start = kafka.LastOffset
	}
	tr, err := k.transport()
	if err != nil {
		return err
	}
	defer tr.CloseIdleConnections()
	// Closed after the group is left (defers run last-registered first):
	// an abandoned write that the broker does not answer must not keep the
	// partitions from their next owner.
	dlq := newDeadLetterWriter(k, m.cfg.Table.Name, tr)
	dlq.cut = &m.stats.DeadLettersCut
	defer func() {
		if err := dlq.close(); err != nil {
			m.log.Warn("closing the dead-letter writer", "err", err)
		}
	}()
	if err := dlq.checkTopic(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while starting
		}
		return err
	}

	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                     k.Group,
		Brokers:                k.Brokers,
		Dialer:                 m.dialer,
		Topics:                 []string{k.Topic},
		SessionTimeout:         k.SessionTimeout.D(),
		RebalanceTimeout:       k.RebalanceTimeout.D(),
		HeartbeatInterval:      k.HeartbeatInterval.D(),
		JoinGroupBackoff:       time.Second,
		WatchPartitionChanges:  true,
		PartitionWatchInterval: 10 * time.Second,
		StartOffset:            start,
		// A JoinGroup is held by the coordinator until every member rejoins,
		// up to the rebalance timeout; a shorter network timeout makes the
		// member give up and rejoin forever (Java clients use the same bound).
		Timeout:     k.RebalanceTimeout.D() + 5*time.Second,
		ErrorLogger: kafka.LoggerFunc(func(f string, a ...any) { m.log.Debug(fmt.Sprintf(f, a...)) }),
	})
	if err != nil {
		return fmt.Errorf("kafka: %w", err)
	}
	// Close leaves the group once no generation function is running. When a
	// rebalance is under way it first waits out kafka-go's pending JoinGroup
	// (up to rebalance_timeout): bounded here, so that a stop never hangs;
	// the coordinator then drops this member after session_timeout.
	defer func() {
		closed := make(chan struct{})
		go func() { cg.Close(); close(closed) }()
		select {
		case <-closed:
		case <-time.After(leaveTimeout):
			m.log.Warn("leaving the group timed out during a rebalance; the coordinator drops this member after session_timeout",
				"after", leaveTimeout)
		}
	}()

	if m.stage != nil {
		stageCtx, stopStage := context.WithCancel(context.WithoutCancel(ctx))
		stageDone := make(chan error, 1)
		go func() { stageDone <- m.stage.Run(stageCtx) }()
		// The stage outlives the generations' final flushes; it stops last.
		defer func() { stopStage(); <-stageDone }()
	}

	var joinFailed warnOnce // a broker down for an hour made it 3,600 WARN lines
	for {
		if k.StartOffset == "latest" {
			m.joinPartitions = m.partitionsNow(ctx)
		}
		gen, err := cg.Next(ctx)
		if ctx.Err() != nil {
			// Between generations (joining, or a rebalance under way):
			// the last one's final flush has run, nothing is buffered.
			m.log.Info("stopping between generations: nothing buffered, leaving the group", stopCause(ctx)...)
			return nil
		}
		if err := joinRefused(err, k); err != nil {
			return err
		}
		if err != nil {
			m.log.Log(ctx, joinFailed.level(), "joining group", "group", k.Group, "err", err)
			continue
		}
		joinFailed.reset()
		m.stats.Generations.Add(1)
		done := make(chan error, 1)
		gen.Start(func(genCtx context.Context) {
			done <- m.generation(ctx, genCtx, gen, dlq)
		})
		err = <-done
		switch {
		case errors.Is(err, errCaughtUp):
			m.done.Store(true)
			return nil
		case errors.Is(err, errPartitionStopped), errors.Is(err, errLogBehind),
			m.until != nil && (lakehouse.Denied(err) || errors.Is(err, errDeadLettersRefused) || errors.Is(err, errPinLost)): // see retry
			return err
		case ctx.Err() != nil:
			attrs := stopCause(ctx)
			switch {
			case errors.Is(err, errFinalFlush):
				m.log.Warn("stopping: the final flush failed; the next owner redoes its records", append(attrs, "err", err)...)
			case err != nil:
				m.log.Warn("stopping: the generation ended with an error; the next owner redoes what was not committed", append(attrs, "err", err)...)
			default:
				m.log.Info("stopping: buffers committed, leaving the group", attrs...)
			}
			return nil
		case errors.Is(err, lakehouse.ErrFenced):
			m.stats.Fenced.Add(1)
			m.log.Warn("fenced: dropping buffers and re-seeking from the table", "err", err)
		case err != nil:
			m.log.Warn("generation ended", "generation", gen.ID, "err", err)
		}
	}
}

// stopCause is the log attribute naming the signal that stopped floe, when
// one did (none for a plain cancellation).
func stopCause(ctx context.Context) []any {
	if why := context.Cause(ctx); why != context.Canceled {
		return []any{"cause", why}
	}
	return nil
}

// errFinalFlush wraps the error of a generation's final flush.
var errFinalFlush = errors.New("final flush")

// idleCaughtUp reports whether the owners of a scheduled run's partitions
// have committed its end offsets, for a member assigned none. The catalog
// and the group are asked under a context the generation's end cancels
// too: kafka-go rejoins only once the generation function returns, so a
// slow catalog would hold up the rebalance.
func (m *Member) idleCaughtUp(ctx, genCtx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(genCtx, cancel)()
	wm, err := m.table.Watermarks(ctx)
	if err != nil {
		return false
	}
	m.markPinned(ctx, wm)
	return m.caughtUp(wm)
}

// generation runs one generation's workers and flusher. It returns when the
// generation ends (genCtx), ctx is cancelled, a fence fails or a worker fails.
func (m *Member) generation(ctx, genCtx context.Context, gen *kafka.Generation, dlq *deadLetterWriter) error {
	k := m.cfg.Kafka
	assigned := gen.Assignments[k.Topic]
	sort.Slice(assigned, func(i, j int) bool { return assigned[i].ID < assigned[j].ID })
	m.log.Info("assigned", "generation", gen.ID, "member", gen.MemberID, "partitions", partitionIDs(assigned))
	m.stats.Assigned.Store(int32(len(assigned)))
	defer m.stats.Assigned.Store(0)
	// Nor their lag: until the next generation assigns partitions (up to
	// rebalance_timeout) their new owners report it, and sums counted it
	// twice.
	defer m.stats.assign(nil)
	if len(assigned) == 0 {
		// Idle member (more members than partitions): wait for the next
		// rebalance, reporting no partition's lag (their owners do). A
		// scheduled run ends once the owners have committed its end
		// offsets: beside a long-running job owning every partition it
		// waited for ever.
		m.stats.assign(nil)
		var tick <-chan time.Time
		if m.until != nil {
			t := time.NewTicker(m.cfg.Commit.Interval.D())
			defer t.Stop()
			tick = t.C
		}
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-genCtx.Done():
				return nil
			case <-tick:
				if m.idleCaughtUp(ctx, genCtx) {
					return errCaughtUp
				}
			}
		}
	}

	// stop ends fetching: generation over, shutdown, or a failed worker.
	stopCtx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	go func() {
		select {
		case <-genCtx.Done():
			stop(errors.New("generation ended"))
		case <-stopCtx.Done():
		}
	}()

	wm, err := m.watermarks(stopCtx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped before anything was fetched
		}
		return err
	}
	// Read after the watermarks: a log that ends below one lost the
	// records the table holds, then got new ones at the same offsets.
	ends, endsErr := HighWatermarks(stopCtx, k)
	if endsErr == nil {
		if err := beyondEnd(k.Topic, wm, ends); err != nil {
			return err
		}
	}
	// repin: the partition count of pins this caught-up run commits again
	// for their age (see started).
	repin := 0
	if m.caughtUp(wm) {
		started, n := m.started(stopCtx, wm)
		if started {
			return errCaughtUp
		}
		if repin = n; repin > 0 {
			m.log.Info("committing the start_offset latest pins again: the brokers delete an empty group's offsets (offsets.retention.minutes after its last member left)",
				"group", k.Group, "topic", k.Topic)
		}
	}
	committed := make(map[int32]int64, len(assigned))
	for _, a := range assigned {
		w, ok := wm.Get(k.Topic, int32(a.ID))
		if !ok {
			w = lakehouse.NoWatermark
		}
		committed[int32(a.ID)] = w
	}
	lag := m.stats.assign(committed)
	if endsErr != nil {
		m.log.Warn("reading end offsets for the lag gauges", "err", endsErr)
	} else {
		for p, e := range ends {
			if ps := lag[p]; ps != nil {
				ps.highWater.Store(e)
			}
		}
		m.notePartitionCount(stopCtx, len(ends))
	}

	win := newWindow(m.cfg.Commit.MaxRecords, int(m.cfg.Commit.MaxBytes))
	go win.wakeOn(stopCtx)
	bufs := make([]*partitionBuffer, len(assigned))
	workers, wctx := errgroup.WithContext(stopCtx)
	// In scheduled mode, the last partition to reach its end offset asks
	// for the final flush instead of waiting for the interval.
	var behind atomic.Int32
	// pinned: where start_offset "latest" resolved, for the group's Kafka
	// offsets (see below), and the group's pins committed again for their
	// age (repin); firstPins: it holds some of the former.
	pinned := map[int]int64{}
	firstPins := false
	// firsts: the log start offsets, read at most once per generation, for
	// the lag gauges of partitions read from the log start.
	var firsts map[int32]int64
	// stable: the last stable offsets, where start_offset "latest" starts,
	// and started: how many partitions the topic had when the job first
	// started; both read (by jobStart) only when a partition has neither a
	// watermark nor a group offset while the table has no offset of the
	// topic.
	var stable map[int32]int64
	started := 0
	for _, a := range assigned {
		if _, ok := wm.Get(k.Topic, int32(a.ID)); !ok && a.Offset == kafka.LastOffset && len(wm[k.Topic]) == 0 {
			if started, stable, err = m.jobStart(stopCtx); err != nil {
				if ctx.Err() != nil {
					return nil // stopped before anything was fetched
				}
				return err
			}
			break
		}
	}
	// fromStart: partitions read from their log start for want of a
	// watermark and a group offset, where start_offset "latest" would
	// skip records (logged).
	var fromStart []int32
	for i, a := range assigned {
		p := int32(a.ID)
		resume, ok := wm.Get(k.Topic, p)
		seek := resume
		if !ok {
			resume, seek = lakehouse.NoWatermark, a.Offset
			if seek == kafka.LastOffset && (len(wm[k.Topic]) > 0 || int(p) >= started) {
				// A partition added to the topic since the job first
				// started: start_offset "latest" would skip what
				// producers wrote to it before this rebalance. The table
				// has offsets for the topic, so the job started long ago
				// (and a partition without a group offset was added, or
				// its pin below expired); or it has none yet, and the
				// group's pins say how many partitions the topic had
				// when the job first started (jobStart). That the group
				// has pins is not enough: members of the job's first
				// generation pin their partitions each at its own pace.
				seek = kafka.FirstOffset
				fromStart = append(fromStart, p)
			}
			if e, ok := stable[p]; ok && seek == kafka.LastOffset {
				// "latest" is where the job first started, not where
				// each start finds the log: the resolved offset goes to
				// the group's Kafka offsets, where the next generation
				// (or scheduled run) starts a partition that had nothing
				// to commit meanwhile. Without it, a restart read such a
				// partition from its start (the rule above), and a
				// rebalance before the table's first commit skipped what
				// was written since the last. The last stable offset,
				// not the high watermark: a transaction open at the start
				// commits its records below the latter, as does what
				// others wrote after it began. The pin's metadata
				// records how many partitions the topic had when the job
				// first started (pinMetadata).
				seek = e
				pinned[int(p)] = e
				firstPins = true
			} else if seek >= 0 && int(p) < repin {
				pinned[int(p)] = seek // committed again, for its age
			}
			base := seek
			if seek == kafka.FirstOffset && (lag[p] != nil || m.until != nil) {
				// From the log start, not 0: a partition retention
				// emptied has nothing to fetch and so no commit to move
				// the base, and counted its deleted history as lag for
				// good.
				if firsts == nil {
					var ferr error
					if firsts, ferr = FirstOffsets(stopCtx, k); ferr != nil {
						m.log.Warn("reading log start offsets for the lag gauges", "err", ferr)
						firsts = map[int32]int64{}
					}
				}
				if f, ok := firsts[p]; ok {
					base = f
				}
			}
			if ps := lag[p]; ps != nil && base >= 0 {
				// Lag counts from where this job reads, not the log's
				// start (the whole history, for a job started latest).
				ps.committed.Store(base)
			}
		}
		warned := false
		bufs[i] = newPartitionBuffer(m.evo.schema(), k.Topic, p, resume, int(k.MaxMessageBytes), func(from, to int64) {
			m.stats.OffsetGaps.Add(to - from)
			if !warned {
				warned = true
				m.log.Warn("offsets skipped by the log: deleted by retention before they were read, or compacted",
					"topic", k.Topic, "partition", p, "from", from, "to", to)
			}
		})
		b := bufs[i]
		b.lag = lag[p]
		b.evolve = func(from *schemas.Schema, req *schemas.EvolveRequest) (*schemas.Schema, error) {
			return m.evo.evolve(stopCtx, from, req)
		}
		end, scheduled := m.until[p]
		_, emptied := m.idle.Load(p) // skipEmptied
		switch {
		case !scheduled || emptied:
			end = -1
		case seek == kafka.LastOffset || (seek >= 0 && seek >= end):
			// Nothing to read before the end seen at start.
			m.idle.Store(p, true)
			end = -1
		case seek == kafka.FirstOffset && resume < 0 && firsts[p] >= end:
			// Retention deleted every record below the end since the run
			// looked (skipEmptied): nothing to read, and no watermark to
			// move, for want of a record.
			m.idle.Store(p, true)
			end = -1
		case end > max(resume, 0):
			behind.Add(1)
		default:
			end = -1
		}
		fetch := m.fetch
		if m.stage != nil {
			fetch = m.fetchEnriched
		}
		reached := func() {
			if behind.Add(-1) == 0 {
				win.kick()
			}
		}
		workers.Go(func() error {
			return m.work(wctx, b, seek, func(seek int64) error {
				return fetch(wctx, b, seek, win, end, reached)
			})
		})
	}
	defer func() {
		for _, b := range bufs {
			b.release()
		}
	}()
	if len(fromStart) > 0 {
		m.log.Info("partitions without a watermark or a group offset read from their log start, whatever start_offset says: "+
			"added to the topic since the job first started (or their start_offset latest pin expired)",
			"topic", k.Topic, "partitions", fromStart)
	}

	go func() {
		// A failed worker (only in scheduled mode: see work) ends the
		// generation; the others stop with it.
		if err := workers.Wait(); err != nil {
			stop(err)
		}
	}()
	// Flushes do not stop with fetching: a flush in progress at revocation or
	// shutdown finishes, and so does the final one, until commit.grace after
	// the stop. Then they are cancelled and the buffer is dropped.
	flushCtx, cancelFlush := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelFlush()
	stopGrace := context.AfterFunc(stopCtx, func() {
		t := time.AfterFunc(m.cfg.Commit.Grace.D(), cancelFlush)
		context.AfterFunc(flushCtx, func() { t.Stop() })
	})
	defer stopGrace()

	// The Kafka offsets of the flushes go out in the background, the last
	// ones after the final flush, until commit.grace.
	kafkaOffsets := newOffsetCommitter(gen, k.Topic, func(err error) {
		m.stats.KafkaCommitErrors.Add(1)
		m.log.Warn("kafka offset commit failed (retried with the next; the table holds every committed offset, but a partition it has nothing of would start from start_offset again, or from the log start if the table holds others of the topic)", "err", err)
	})
	flushed, flushesDone := context.WithCancel(context.WithoutCancel(ctx))
	go kafkaOffsets.run(flushed, flushCtx)
	if len(pinned) > 0 {
		if started == 0 {
			started = repin
		}
		kafkaOffsets.addWith(pinned, pinMetadata(started, time.Now()))
	}
	defer func() {
		flushesDone()
		kafkaOffsets.close(flushCtx)
	}()
	f := &flusher{m: m, offsets: kafkaOffsets, dlq: dlq, bufs: bufs, win: win}
	// A scheduled run is caught up once its pins are committed too: the
	// next run starts from them (see offsetCommitter.run). Asked after
	// stop, which starts commit.grace, until which they are retried.
	caughtUp := func(err error) error {
		if !errors.Is(err, errCaughtUp) {
			return err
		}
		kafkaOffsets.retryPins.Store(true)
		flushesDone()
		kafkaOffsets.close(flushCtx)
		lost := kafkaOffsets.pinsLost()
		if lost != nil && !firstPins {
			// Only the group's pins, committed again for their age:
			// losing them loses nothing yet.
			m.log.Warn("committing the start_offset latest pins again failed until commit.grace; the next run tries again", "err", lost)
			return err
		}
		if lost != nil {
			return fmt.Errorf("%w: committing where start_offset latest first started to the group's Kafka offsets failed until commit.grace: %w; the next run would start from the end and skip what is written until then", errPinLost, lost)
		}
		return err
	}
	ferr := f.loop(stopCtx, flushCtx)
	stop(ferr)
	werr := workers.Wait()
	if ferr != nil {
		return caughtUp(ferr)
	}
	// Final flush: fetching has stopped, so what is buffered is complete.
	if err := f.flush(flushCtx); err != nil {
		return fmt.Errorf("%w: %w", errFinalFlush, err)
	}
	if f.caughtUp {
		return caughtUp(errCaughtUp)
	}
	if werr != nil && !errors.Is(werr, context.Canceled) {
		return werr
	}
	return nil
}

// warnLogAppendTime warns once when the topic stamps records with the
// broker's time (message.timestamp.type LogAppendTime): kafka-go ignores
// the batch's timestamp type and gives every record its producer's
// CreateTime, so _kafka_timestamp, floe_consumer_lag_seconds and
// floe_freshness_seconds follow the producers' clocks, not the log's. A
// broker that refuses to describe the topic's configs (no DescribeConfigs
// ACL) only costs the warning: logged at debug.
func (m *Member) warnLogAppendTime(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	typ, err := timestampType(ctx, m.cfg.Kafka)
	switch {
	case err != nil:
		m.log.Debug("reading the topic's timestamp type", "topic", m.cfg.Kafka.Topic, "err", err)
	case typ == "LogAppendTime":
		m.log.Warn("the topic stamps records with the broker's time (message.timestamp.type LogAppendTime), but kafka-go reads the producer's: _kafka_timestamp, floe_consumer_lag_seconds and floe_freshness_seconds follow the producers' clocks",
			"topic", m.cfg.Kafka.Topic)
	}
}

// notePartitionCount compares the topic's partition count n with the one the
// table recorded and records n for later commits. Growth changes which
// partition a key hashes to: a session that straddles the change is split
// across two partitions, whose relative order nothing preserves. It is
// logged once per change and counted (floe_partitions_added_total); `floe
// verify` lists the split sessions.
func (m *Member) notePartitionCount(ctx context.Context, n int) {
	topic := m.cfg.Kafka.Topic
	prev := m.stats.TopicPartitions.Swap(int32(n))
	if int(prev) == n {
		return
	}
	recorded, ok, err := m.table.PartitionCount(ctx, topic)
	if err != nil {
		m.log.Warn("reading the recorded partition count", "err", err)
	}
	if ok && n > recorded {
		m.stats.PartitionsAdded.Add(int64(n - recorded))
		m.log.Warn("topic partitions added: keys may now hash to other partitions, so a session that straddles the change "+
			"is split across partitions and its order across them is not preserved; `floe verify` lists split sessions",
			"topic", topic, "was", recorded, "now", n)
	}
	m.table.SetPartitionCount(topic, n)
}

// watermarks reads the table's offset map, retrying while the catalog is
// unreachable: giving up would only rejoin the group and rebalance everyone.
func (m *Member) watermarks(ctx context.Context) (lakehouse.Offsets, error) {
	backoff := 200 * time.Millisecond
	// Nothing is fetched or committed meanwhile: not ready (/readyz, it
	// answered ready with the catalog down).
	defer m.stats.Stalled.Store(false)
	for {
		wm, err := m.table.Watermarks(ctx)
		if err == nil {
			return wm, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		m.stats.Stalled.Store(true)
		m.log.Warn("reading watermarks", "err", err)
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// skipEmptied marks idle, in scheduled mode, the partitions whose log
// starts at or after their end offset: retention deleted every record
// before the end, so nothing can be fetched to reach it, and the run would
// wait for one forever.
func (m *Member) skipEmptied(ctx context.Context) error {
	if m.until == nil {
		return nil
	}
	firstCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	first, err := FirstOffsets(firstCtx, m.cfg.Kafka)
	if err != nil {
		return fmt.Errorf("kafka %v: %w", m.cfg.Kafka.Brokers, err)
	}
	for p, end := range m.until {
		if f, ok := first[p]; ok && end > 0 && f >= end {
			m.idle.Store(p, true)
			m.log.Info("scheduled run: nothing left to read before the end offset (retention deleted it)",
				"topic", m.cfg.Kafka.Topic, "partition", p, "log_start", f, "end_offset", end)
		}
	}
	return nil
}

// beyondEnd fails with errLogBehind, naming the partitions, when the log
// of a partition ends below the table's watermark for it: the topic was
// deleted and created again (or truncated), its offsets restarting at 0.
// Resuming at the watermark skipped every new record below it, and a
// scheduled run took itself for caught up: no error anywhere.
func beyondEnd(topic string, wm lakehouse.Offsets, ends map[int32]int64) error {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(ends)) {
		if w, ok := wm.Get(topic, p); ok && w > ends[p] {
			parts = append(parts, fmt.Sprintf("%s/%d ends at %d, the table's watermark is %d", topic, p, ends[p], w))
		}
	}
	if parts == nil {
		return nil
	}
	return fmt.Errorf("%w: %s — the topic was recreated or truncated: the table holds the old topic's rows at offsets the new one "+
		"reuses, whose records the offset dedupe would skip as copies; ingest it into a new table (table.name)",
		errLogBehind, strings.Join(parts, "; "))
}

// tableBeyondLog is beyondEnd for every group whose offsets of k's topic
// groups (the table's offset maps) holds: a job under a new group, or a
// replay, on a table that holds rows of an earlier incarnation of the topic
// would have the new records skipped as copies of the rows at their
// offsets, and the new group's watermarks would pass them: lost, and
// verify OK.
func tableBeyondLog(ctx context.Context, k KafkaConfig, groups map[string]lakehouse.Offsets) error {
	held := false
	for _, o := range groups {
		held = held || len(o[k.Topic]) > 0
	}
	if !held {
		return nil // no group has offsets of the topic: nothing to compare
	}
	ends, err := HighWatermarks(ctx, k)
	if err != nil {
		return fmt.Errorf("kafka %v: %w", k.Brokers, err)
	}
	for _, g := range slices.Sorted(maps.Keys(groups)) {
		if err := beyondEnd(k.Topic, groups[g], ends); err != nil {
			return fmt.Errorf("under group %s: %w", g, err)
		}
	}
	return nil
}

// joinRefused returns an error naming the setting at fault when err, a
// failed join, is one no retry clears; nil for any other (a coordinator
// moving, a rebalance) and for nil. Retried, these held the member joining
// for ever, a scheduled run included.
func joinRefused(err error, k KafkaConfig) error {
	switch {
	case errors.Is(err, kafka.InvalidSessionTimeout):
		return fmt.Errorf("joining group %s: kafka.session_timeout %s is outside what the broker allows (its group.min.session.timeout.ms and group.max.session.timeout.ms; Kafka's defaults: 6s to 30m): %w",
			k.Group, k.SessionTimeout, err)
	case errors.Is(err, kafka.GroupAuthorizationFailed):
		return fmt.Errorf("joining group %s: not authorized (the broker's ACLs must allow this principal to read the group): %w", k.Group, err)
	case errors.Is(err, kafka.InconsistentGroupProtocol):
		return fmt.Errorf("joining group %s: its members use another protocol (a client other than floe in kafka.group?): %w", k.Group, err)
	}
	return nil
}

// jobStart returns how many partitions the topic had when the job first
// started and the topic's last stable offsets (where start_offset "latest"
// starts), for a generation assigned a partition that has neither a
// watermark nor a group offset while the table has no offset of the topic:
// before the job's first commit, a partition added to the topic since is
// read from its start, the others start at "latest". The count is the one
// the group's pins record (startPartitions), or, when the group has no
// offset of the topic, the topic's partition count before the member
// joined (joinPartitions; now, if unknown): this is the job's first start.
// The count now may hold partitions added since the assignment (while the
// table was read, say), which would be pinned at their end at the next
// rebalance. Retried while the brokers do not answer (a partition
// pinned at its end for want of an answer would skip what was written to
// it before this rebalance), until ctx ends.
func (m *Member) jobStart(ctx context.Context) (int, map[int32]int64, error) {
	k := m.cfg.Kafka
	backoff := 200 * time.Millisecond
	// Nothing is fetched meanwhile: not ready.
	defer m.stats.Stalled.Store(false)
	for {
		stable, err := EndOffsets(ctx, k)
		var commits map[int32]groupCommit
		if err == nil {
			partitions := make([]int, 0, len(stable))
			for p := range stable {
				partitions = append(partitions, int(p))
			}
			commits, err = groupCommits(ctx, k, partitions)
		}
		if err == nil {
			n, ok := startPartitions(commits)
			if !ok {
				n = partitionCount(stable)
				if m.joinPartitions > 0 {
					n = min(n, m.joinPartitions)
				}
			}
			return n, stable, nil
		}
		if ctx.Err() != nil {
			return 0, nil, ctx.Err()
		}
		m.stats.Stalled.Store(true)
		m.log.Warn("reading the topic's last stable offsets and the group's offsets, for start_offset latest; retrying", "err", err)
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// partitionsNow returns how many partitions the topic has, or 0 when the
// brokers do not tell within a few seconds.
func (m *Member) partitionsNow(ctx context.Context) int {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	end, err := EndOffsets(ctx, m.cfg.Kafka)
	if err != nil {
		return 0
	}
	return partitionCount(end)
}

// partitionCount is how many partitions a topic whose offsets are these
// has: one past the highest.
func partitionCount(offsets map[int32]int64) int {
	n := 0
	for p := range offsets {
		n = max(n, int(p)+1)
	}
	return n
}

// started reports whether a scheduled run of a start_offset "latest" job
// that is caught up before it joins (the topic is empty, or retention
// emptied it) may end without joining: the job has started before, so the
// table holds offsets of the topic or the group holds a pin for every
// partition the topic had when the job first started (startPartitions;
// one added since is read from its start, unpinned), and the pins are
// fresh. Else the run joins once, for the generation to pin where the job
// first started: without a pin the next run resolved "latest" anew and
// skipped what was written between the runs. A failed read of the group's
// offsets joins too.
//
// Pins are group offsets, which the brokers delete offsets.retention.minutes
// after the group last became empty: after the last run that joined it. A
// run that does not join does not extend that, so a job whose topic stayed
// empty for a week lost its pins. Once the newest pin is older than half
// that (pinRefreshAfter), the run joins anyway, and its generation commits
// them again (repin: the partition count they record).
func (m *Member) started(ctx context.Context, wm lakehouse.Offsets) (ok bool, repin int) {
	k := m.cfg.Kafka
	if k.StartOffset != "latest" || len(wm[k.Topic]) > 0 {
		return true, 0
	}
	parts := make([]int, 0, len(m.until))
	for p := range m.until {
		parts = append(parts, int(p))
	}
	commits, err := groupCommits(ctx, k, parts)
	if err != nil {
		return false, 0
	}
	// A partition added since the job first started is read from its
	// start (the generation's rule, by the same count): it has no pin to
	// wait for, and a run that joined for it pinned nothing.
	n, ok := startPartitions(commits)
	if !ok {
		return false, 0
	}
	for p := range m.until {
		if _, pinned := commits[p]; !pinned && int(p) < n {
			return false, 0
		}
	}
	if time.Since(lastPinned(commits)) >= pinRefreshAfter(ctx, k) {
		return false, n
	}
	return true, 0
}

// markPinned marks idle, for a scheduled run of a start_offset "latest"
// job, each partition the table has no watermark for whose group offset
// is at or past the run's end: the pin of where the job first started,
// committed by the member that owns the partition, with nothing below it
// to ingest. Only the owner marked it otherwise, so a run that did not own
// it, beside a long-running job that did, waited for ever. A failed read is
// asked again at the next check.
func (m *Member) markPinned(ctx context.Context, wm lakehouse.Offsets) {
	k := m.cfg.Kafka
	if m.until == nil || k.StartOffset != "latest" {
		return
	}
	var unknown []int
	for p, end := range m.until {
		if _, idle := m.idle.Load(p); idle || end <= 0 {
			continue
		}
		if _, ok := wm.Get(k.Topic, p); !ok {
			unknown = append(unknown, int(p))
		}
	}
	if len(unknown) == 0 {
		return
	}
	at, err := GroupOffsets(ctx, k, unknown)
	if err != nil {
		m.log.Warn("reading the group's offsets failed; asking again at the next check", "err", err)
		return
	}
	for p, o := range at {
		if o >= m.until[p] {
			m.idle.Store(p, true)
		}
	}
}

func (m *Member) caughtUp(wm lakehouse.Offsets) bool {
	if m.until == nil {
		return false
	}
	for p, end := range m.until {
		if _, idle := m.idle.Load(p); idle {
			continue
		}
		got, ok := wm.Get(m.cfg.Kafka.Topic, p)
		if end > 0 && (!ok || got < end) {
			return false
		}
	}
	return true
}

// work runs one partition's fetch. When it fails — a record the buffer
// cannot take (an incompatible writer schema under on_incompatible: stop) or
// a fetch error — the partition is held instead of ending the generation:
// ending it would make every member rejoin and then fail on the same record
// again, a rebalance storm. The member stays in the group and commits what
// precedes the record; the partition is retried from its first unbuffered
// offset with a growing backoff (1 s up to 5 min) until the generation
// ends. A passing fetch error heals by itself; a refused writer schema stays
// refused until the producer, the table or on_incompatible is fixed and the
// member restarted — /readyz and floe_partitions_stopped say so meanwhile.
// A scheduled run (UntilOffsets) cannot wait for that: it ends with the
// error, after committing what precedes the record.
func (m *Member) work(ctx context.Context, b *partitionBuffer, seek int64, fetch func(seek int64) error) error {
	backoff := time.Second
	// stopped: counted in StoppedPartitions, from a failure until a retry
	// has fetched for stoppedClearAfter without failing (one failing on
	// the same record again fails at once: the partition stays counted,
	// rather than looking healthy at every retry).
	var stopped atomic.Bool
	clear := func() {
		if stopped.CompareAndSwap(true, false) {
			m.stats.StoppedPartitions.Add(-1)
		}
	}
	defer clear()
	for {
		var cleared *time.Timer
		if stopped.Load() {
			cleared = time.AfterFunc(stoppedClearAfter, clear)
		}
		began := time.Now()
		err := fetch(seek)
		if cleared != nil {
			cleared.Stop()
		}
		if err == nil || ctx.Err() != nil {
			return err
		}
		if errors.Is(err, kafka.OffsetOutOfRange) {
			// The log ends below the offset fetched from (the patched
			// reader's error): waiting there for it to grow back would
			// skip every record written below it since.
			return fmt.Errorf("%w: %w — the topic was recreated or truncated: the table holds the old topic's rows at offsets the new one "+
				"reuses, whose records the offset dedupe would skip as copies; ingest it into a new table (table.name) — or, when the offset "+
				"was the group's (the table holds nothing of the partition), under a new kafka.group", errLogBehind, err)
		}
		if m.until != nil {
			// A scheduled run would otherwise never catch up: it ends.
			return fmt.Errorf("%w: %w", errPartitionStopped, err)
		}
		if time.Since(began) >= stoppedClearAfter {
			// A passing error after fetching fine: not one more of
			// the same failure, so the wait starts over.
			backoff = time.Second
		}
		if stopped.CompareAndSwap(false, true) {
			m.stats.StoppedPartitions.Add(1)
		}
		m.log.Error("partition stopped: staying in the group, retrying from its first uncommitted record",
			"topic", b.topic, "partition", b.partition, "in", backoff, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Minute)
		seek = b.resumeAt(seek)
	}
}

// stoppedClearAfter is how long a retried partition must fetch without
// failing to count as running again. A variable for tests.
var stoppedClearAfter = 10 * time.Second

// fetch reads one partition from seek onwards into b until ctx ends. When
// end >= 0, reached is called once the record before end is buffered.
func (m *Member) fetch(ctx context.Context, b *partitionBuffer, seek int64, win *window, end int64, reached func()) error {
	k := m.cfg.Kafka
	r, err := m.partitionReader(b.partition, seek)
	if err != nil {
		return err
	}
	defer r.Close()
	for {
		if err := win.wait(ctx); err != nil {
			return nil
		}
		msg, err := r.FetchMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("fetching %s/%d: %w", k.Topic, b.partition, err)
		}
		if err := m.buffer(b, msg, offResult, win, end, reached); err != nil {
			return err
		}
	}
}

// buffer appends one record to b and accounts for it: counters, the window,
// and whether the partition reached its scheduled end.
func (m *Member) buffer(b *partitionBuffer, msg kafka.Message, res enrich.Result, win *window, end int64, reached func()) error {
	if msg.Skipped != "" || !m.takes(msg.Value) {
		return m.cover(b, msg, end, reached)
	}
	return m.append(b, msg, res, win, end, reached)
}

// takes reports whether the member's route takes the record with this
// value (every record, without a where).
func (m *Member) takes(value []byte) bool {
	return m.cfg.where == nil || m.cfg.where.takes(value)
}

// append is buffer for a record the route takes.
func (m *Member) append(b *partitionBuffer, msg kafka.Message, res enrich.Result, win *window, end int64, reached func()) error {
	rows, bytes, dead, err := b.appendEnriched(msg, time.Now(), res)
	if err != nil {
		return err
	}
	m.appended(b, msg, rows, bytes, dead, win, end, reached)
	return nil
}

// appended accounts for msg, now buffered as rows and bytes (or a dead
// letter).
func (m *Member) appended(b *partitionBuffer, msg kafka.Message, rows, bytes int, dead bool, win *window, end int64, reached func()) {
	if b.lag != nil {
		b.lag.raise(msg.HighWaterMark)
	}
	m.stats.Consumed.Add(1)
	if dead {
		m.stats.DeadLettered.Add(1)
	}
	win.add(rows, bytes)
	if msg.Offset+1 == end {
		reached()
	}
}

// partitionReader returns a pausingReader of partition p from seek. The
// readers it opens for p share one readErrorLogger.
func (m *Member) partitionReader(p int32, seek int64) (*pausingReader, error) {
	errLog := readErrorLogger(m.log, m.cfg.Kafka.Topic, p)
	return newPausingReader(seek, func(seek int64) (*kafka.Reader, error) {
		return openReader(m.cfg.Kafka, p, m.dialer, seek, errLog)
	})
}

// openReader returns a Reader of one partition positioned at seek (an
// offset, kafka.FirstOffset or kafka.LastOffset) that reports the read
// errors it retries to errLog (nil: nowhere).
func openReader(k KafkaConfig, partition int32, dialer *kafka.Dialer, seek int64, errLog kafka.Logger) (*kafka.Reader, error) {
	rc := ReaderConfig(k, partition, dialer)
	rc.ErrorLogger = errLog
	r := kafka.NewReader(rc)
	if err := r.SetOffset(seek); err != nil {
		r.Close()
		return nil, fmt.Errorf("seeking %s/%d to %d: %w", k.Topic, partition, seek, err)
	}
	return r, nil
}

// ReaderConfig is the per-partition fetch configuration. Benchmarks use it
// for the raw consume baseline so both sides fetch the same way.
func ReaderConfig(k KafkaConfig, partition int32, dialer *kafka.Dialer) kafka.ReaderConfig {
	return kafka.ReaderConfig{
		Brokers:        k.Brokers,
		Topic:          k.Topic,
		Partition:      int(partition),
		Dialer:         dialer,
		MinBytes:       1,
		MaxBytes:       int(k.FetchMaxBytes),
		MaxWait:        250 * time.Millisecond,
		QueueCapacity:  readAheadRecords,
		QueueBytes:     readAheadBytes,
		ReadBackoffMin: 50 * time.Millisecond,
		ReadBackoffMax: time.Second,
		MaxAttempts:    10,
		// Only committed transactions: the reader (patched, see
		// third_party/kafka-go) skips aborted transactions' records and
		// the transactions' markers, each batch of them returned as one
		// kafka.Message.Skipped, whose offsets are covered as absent.
		IsolationLevel: kafka.ReadCommitted,
	}
}

// readErrorLogger returns the ErrorLogger of the readers of one partition.
// kafka-go's reader retries without end a read that fails without a Kafka
// error code, telling only its ErrorLogger: a fetch size it refused held
// run, replay and verify without a word. Such an error (a leader that
// moved, a broker that is down, a fetch from below the log's start) is
// logged at WARN at most once a minute, as a failed join is, and at DEBUG
// in between: a broker down for an hour would be a line a second.
func readErrorLogger(log *slog.Logger, topic string, partition int32) kafka.Logger {
	var failed warnOnce
	return kafka.LoggerFunc(func(format string, args ...any) {
		log.Log(context.Background(), failed.level(), "reading from Kafka, retrying",
			"topic", topic, "partition", partition, "err", fmt.Sprintf(format, args...))
	})
}

// warnOnce is the level of a failure that repeats while it lasts: WARN at
// most once a minute, DEBUG in between. The zero value is ready to use.
type warnOnce struct {
	mu     sync.Mutex
	warned time.Time
}

func (w *warnOnce) level() slog.Level {
	w.mu.Lock()
	defer w.mu.Unlock()
	if time.Since(w.warned) >= time.Minute {
		w.warned = time.Now()
		return slog.LevelWarn
	}
	return slog.LevelDebug
}

// reset makes the next failure a WARN again (the failure ended).
func (w *warnOnce) reset() {
	w.mu.Lock()
	w.warned = time.Time{}
	w.mu.Unlock()
}

func partitionIDs(as []kafka.PartitionAssignment) []int {
	ids := make([]int, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids
}

// flusher takes segments from the buffers and commits them, one flush at a
// time, on the interval, the record count or the byte size.
type flusher struct {
	m        *Member
	offsets  *offsetCommitter
	dlq      *deadLetterWriter
	bufs     []*partitionBuffer
	win      *window
	caughtUp bool
}

// loop flushes on the triggers until stop ends; flushes themselves run on
// flushCtx, which outlives stop by the grace period.
func (f *flusher) loop(stop, flushCtx context.Context) error {
	t := time.NewTicker(f.m.cfg.Commit.Interval.D())
	defer t.Stop()
	for {
		select {
		case <-stop.Done():
			return nil
		case <-t.C:
		case <-f.win.full:
		}
		if err := f.flush(flushCtx); err != nil {
			return err
		}
		if f.caughtUp {
			return errCaughtUp
		}
	}
}

// flush commits everything buffered. Dead letters first (acknowledged), then
// the table, then the advisory Kafka offsets (queued: see offsetCommitter).
func (f *flusher) flush(ctx context.Context) error {
	var segs []segment
	var from []*partitionBuffer // the buffer of each segment
	var took windowCount
	for _, b := range f.bufs {
		if s, ok := b.take(); ok {
			segs = append(segs, s)
			from = append(from, b)
			took.rows += s.held.rows
			took.bytes += s.held.bytes
		}
	}
	f.win.release(took)
	flushRows, flushBytes := took.rows, took.bytes
	m := f.m
	if len(segs) == 0 {
		if m.until != nil {
			// Other members may have committed the last offsets. A failed
			// read is asked again at the next tick: ending the generation
			// for it would rebalance the group.
			wm, err := m.table.Watermarks(ctx)
			if err != nil {
				m.log.Warn("reading the table's watermarks failed; asking again at the next flush", "err", err)
				return nil
			}
			m.markPinned(ctx, wm)
			f.caughtUp = m.caughtUp(wm)
		}
		return nil
	}
	parts := make([]lakehouse.Part, len(segs))
	var letters []deadLetter
	var oldest time.Time
	for i, s := range segs {
		parts[i] = s.part
		letters = append(letters, s.letters...)
		if t := time.Unix(0, s.firstTS); oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	defer releaseParts(parts)
	started := time.Now()
	pending := letters // a retry writes only what the broker has not taken
	if err := m.retry(ctx, "writing dead letters", func() (err error) { pending, err = f.dlq.write(ctx, pending); return err }); err != nil {
		return err
	}
	dlqTook := time.Since(started)
	var res lakehouse.Result
	// One commit id for every attempt: an attempt that applied without
	// knowing it is found by the next instead of fencing it.
	commitID := uuid.NewString()
	err := m.retry(ctx, "committing to "+m.table.Name(), func() error {
		retainParts(parts) // Commit releases what it is given
		var err error
		res, err = m.table.CommitAs(ctx, commitID, parts)
		if err != nil {
			// Its attempts were made all the same (one may even have
			// applied: the next call finds it).
			m.stats.CommitAttempts.Add(int64(res.Attempts))
		}
		return err
	})
	if err != nil {
		return err
	}
	m.stats.recordCommit(res, time.Since(started), flushRows, flushBytes, oldest)
	for i, s := range segs {
		from[i].committed(s)
	}
	offsets := map[int]int64{}
	for _, p := range parts {
		offsets[int(p.Range.Partition)] = p.Range.To
	}
	f.offsets.add(offsets)
	m.log.Debug("committed", "snapshot", res.SnapshotID, "rows", res.Rows, "skipped", res.Skipped, "business_duplicates", res.BusinessDuplicates,
		"files", res.Files, "attempts", res.Attempts, "dead_letters", len(letters),
		"dlq_write", dlqTook.Round(time.Millisecond), "took", time.Since(started).Round(time.Millisecond))
	// Asked again here too: on a busy run every flush commits, so the
	// empty flush's check would never come, and partitions another member
	// pinned after the last read kept the run from its end.
	m.markPinned(ctx, res.Offsets)
	f.caughtUp = m.caughtUp(res.Offsets)
	return nil
}

// retry runs op until it succeeds, is fenced, or ctx ends, backing off up
// to 30 s. An unreachable catalog or broker therefore pauses the member in
// place — the window fills, fetching stops, heartbeats go on — instead of
// ending the generation and rebalancing the whole group. A permission error
// (the table's files not writable by the job's user) and a dead-letter
// topic refusing its letters for good (its ACL, its max.message.bytes) end
// a scheduled run, which would retry them until killed; the long-running
// job retries them, as an operator may fix the access or the topic
// meanwhile, and logs them as errors. So does a REST catalog's 401 or 403
// (lakehouse.Denied).
func (m *Member) retry(ctx context.Context, what string, op func() error) error {
	backoff := 250 * time.Millisecond
	for {
		err := op()
		if err == nil || errors.Is(err, lakehouse.ErrFenced) {
			m.stats.Stalled.Store(false)
			return err
		}
		denied := lakehouse.Denied(err)
		refused := errors.Is(err, errDeadLettersRefused)
		if ctx.Err() != nil || (denied || refused) && m.until != nil {
			// Given up: revoked or commit.grace over (nothing is held
			// back by it any more, and the next flush will tell), or a
			// scheduled run denied access or refused its dead letters
			// (Run ends with it).
			m.stats.Stalled.Store(false)
			return fmt.Errorf("%s: %w", what, err)
		}
		m.stats.Stalled.Store(true)
		m.stats.FlushRetries.Add(1)
		switch {
		case denied:
			m.log.Error("flush failed: access denied to the table's files or its catalog; retrying until access is granted",
				"op", what, "in", backoff, "err", err)
		case refused:
			m.log.Error("flush failed: the dead-letter topic refuses its letters; retrying until its ACL or configuration is fixed",
				"op", what, "in", backoff, "err", err)
		default:
			m.log.Warn("flush failed, retrying", "op", what, "in", backoff, "err", err)
		}
		select {
		case <-ctx.Done():
			m.stats.Stalled.Store(false)
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 30*time.Second)
	}
}

func retainParts(parts []lakehouse.Part) {
	for _, p := range parts {
		if p.Rows != nil {
			p.Rows.Retain()
		}
	}
}

func releaseParts(parts []lakehouse.Part) {
	for _, p := range parts {
		if p.Rows != nil {
			p.Rows.Release()
		}
	}
}
