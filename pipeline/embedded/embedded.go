// Package embedded runs an in-process Kafka-protocol broker (franz-go's kfake)
// for `floe demo`, the tests and the benchmarks, and feeds it clickstream
// messages.
//
// floe itself talks to this broker exactly as it talks to Apache Kafka: over
// TCP on 127.0.0.1, with segmentio/kafka-go. Only the helpers here (topic
// creation, producing, end offsets) use franz-go's own client, so that a
// broker or protocol quirk cannot hide behind a shared code path.
//
// Messages are partitioned by key with Kafka's default murmur2 partitioner,
// the one the Java producer uses, so all messages of a session land in one
// partition, the same one they would land in on a real cluster.
//
// # kafka-go against kfake
//
// compat_test.go checks the following with the exact kafka-go v0.4.51 APIs
// floe uses, and logs the versions and rebalance times it observes; rerun it
// after upgrading either library.
//
//   - kfake serves every request version kafka-go sends: ApiVersions v0,
//     FindCoordinator v0, JoinGroup v2, SyncGroup v0, Heartbeat v0,
//     LeaveGroup v0, OffsetCommit v2, OffsetFetch v1, Metadata v6 (v8 from
//     kafka.Writer), ListOffsets v1, Fetch v10, Produce v8 (kafka.Writer).
//     No workaround is needed.
//   - Like Kafka (group.min.session.timeout.ms), kfake rejects a session
//     timeout below 6 s with INVALID_SESSION_TIMEOUT; kafka-go then reports
//     the error from ConsumerGroup.Next and retries after JoinGroupBackoff,
//     forever. kfake.GroupMinSessionTimeout lowers the floor, but a test
//     relying on that would not pass against a real broker.
//   - A join or a clean leave (Close) rebalances in about one
//     HeartbeatInterval: the other members learn of it from their next
//     heartbeat (REBALANCE_IN_PROGRESS), which ends their generation. A
//     member that vanishes without leaving is expired after SessionTimeout,
//     plus up to one HeartbeatInterval.
//   - A generation ends only once every function passed to
//     Generation.Start has returned, and kafka.Reader.Close on a caught-up
//     partition waits for the fetch in flight, up to the Reader's MaxWait
//     (default 10 s). Readers inside a generation need a small MaxWait, or
//     every rebalance waits that long.
package embedded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// requestTimeout bounds the admin requests (CreateTopic, EndOffsets) when the
// caller's context has no deadline; the broker is in-process, so anything
// slower than this is a hang, not load.
const requestTimeout = 30 * time.Second

// Cluster is a running in-process broker plus the franz-go client used to
// administer and feed it. Its methods are safe for concurrent use.
type Cluster struct {
	kf     *kfake.Cluster
	cl     *kgo.Client
	addrs  []string
	closed sync.Once
}

// Start starts kfake with the given number of brokers (>= 1) listening on
// 127.0.0.1 at random ports. opts are applied after the defaults, so they
// win: the defaults are the broker count and automatic topic creation (so a
// kafka.Writer with AllowAutoTopicCreation can create a dead-letter topic,
// as it may on a real cluster; such topics get kfake's default partition
// count, 10, unless kfake.DefaultNumPartitions says otherwise). The caller
// must Close the cluster.
func Start(brokers int, opts ...kfake.Opt) (*Cluster, error) {
	if brokers < 1 {
		return nil, fmt.Errorf("starting embedded kafka: brokers must be >= 1, got %d", brokers)
	}
	all := append([]kfake.Opt{
		kfake.NumBrokers(brokers),
		kfake.AllowAutoTopicCreation(),
	}, opts...)
	kf, err := kfake.NewCluster(all...)
	if err != nil {
		return nil, fmt.Errorf("starting embedded kafka: %w", err)
	}
	addrs := kf.ListenAddrs()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(addrs...),
		// Explicit rather than relying on kgo's default, which also
		// hashes keys with murmur2 today: the partition a key lands in
		// is part of what tests assert.
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		// Snappy, kgo's default, is what production producers
		// typically use, and it halves what kfake keeps in memory.
		kgo.ProducerBatchCompression(kgo.SnappyCompression()),
		// Keep a dead broker from hanging Produce forever.
		kgo.RecordDeliveryTimeout(time.Minute),
	)
	if err != nil {
		kf.Close()
		return nil, fmt.Errorf("starting embedded kafka client: %w", err)
	}
	return &Cluster{kf: kf, cl: cl, addrs: addrs}, nil
}

// Addrs returns the brokers' host:port addresses, to hand to kafka-go as
// seed brokers.
func (c *Cluster) Addrs() []string { return append([]string(nil), c.addrs...) }

// Kfake returns the underlying kfake cluster so that tests can inject faults
// (ControlKey, MoveTopicPartition, RemoveNode, …).
func (c *Cluster) Kfake() *kfake.Cluster { return c.kf }

// FailOffsetCommits answers the next n OffsetCommit requests with a
// RebalanceInProgress error for every partition, as a coordinator busy
// rebalancing does, and returns how many it has failed so far.
func (c *Cluster) FailOffsetCommits(n int) (failed func() int) {
	var count atomic.Int32
	c.kf.ControlKey(kmsg.OffsetCommit.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		if count.Add(1) < int32(n) {
			c.kf.KeepControl()
		}
		req := r.(*kmsg.OffsetCommitRequest)
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.RebalanceInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	return func() int { return int(count.Load()) }
}

// Close shuts the client and the broker down. Clients still connected see
// their connections fail. Close is idempotent.
func (c *Cluster) Close() {
	c.closed.Do(func() {
		c.cl.Close()
		c.kf.Close()
	})
}

// withTimeout applies requestTimeout when ctx has no deadline of its own.
func withTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, requestTimeout)
}

// StartTopic is Start with one broker and topic created with the given
// number of partitions: what most tests and the demo begin with. The caller
// must Close the cluster.
func StartTopic(ctx context.Context, topic string, partitions int) (*Cluster, error) {
	c, err := Start(1)
	if err != nil {
		return nil, err
	}
	if err := c.CreateTopic(ctx, topic, partitions); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// CreateTopic creates topic with the given number of partitions. An existing
// topic is an error wrapping kerr.TopicAlreadyExists, so a test never
// silently reuses a topic with a different partition count.
func (c *Cluster) CreateTopic(ctx context.Context, topic string, partitions int) error {
	if partitions < 1 {
		return fmt.Errorf("creating topic %s: partitions must be >= 1, got %d", topic, partitions)
	}
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	t := kmsg.NewCreateTopicsRequestTopic()
	t.Topic = topic
	t.NumPartitions = int32(partitions)
	t.ReplicationFactor = 1
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = int32(requestTimeout / time.Millisecond)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("creating topic %s: %d topics in response", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return fmt.Errorf("creating topic %s: %w", topic, err)
	}
	return nil
}

// AddPartitions grows topic to total partitions, as
// kafka-topics.sh --alter --partitions does.
func (c *Cluster) AddPartitions(ctx context.Context, topic string, total int) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req := kmsg.NewPtrCreatePartitionsRequest()
	t := kmsg.NewCreatePartitionsRequestTopic()
	t.Topic = topic
	t.Count = int32(total)
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = int32(requestTimeout / time.Millisecond)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("adding partitions to %s: %w", topic, err)
	}
	if len(resp.Topics) != 1 {
		return fmt.Errorf("adding partitions to %s: %d topics in response", topic, len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return fmt.Errorf("adding partitions to %s: %w", topic, err)
	}
	// Producing partitions by the new count needs fresh metadata; the
	// refresh is asynchronous.
	c.cl.ForceMetadataRefresh()
	return nil
}

// DeleteRecords deletes the records of topic's partitions below the given
// offsets, as retention (or kafka-delete-records.sh) does: each
// partition's log then starts there.
func (c *Cluster) DeleteRecords(ctx context.Context, topic string, before map[int32]int64) error {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req := kmsg.NewPtrDeleteRecordsRequest()
	t := kmsg.NewDeleteRecordsRequestTopic()
	t.Topic = topic
	for p, off := range before {
		rp := kmsg.NewDeleteRecordsRequestTopicPartition()
		rp.Partition, rp.Offset = p, off
		t.Partitions = append(t.Partitions, rp)
	}
	req.Topics = append(req.Topics, t)
	req.TimeoutMillis = int32(requestTimeout / time.Millisecond)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return fmt.Errorf("deleting records of %s: %w", topic, err)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if err := kerr.ErrorForCode(rp.ErrorCode); err != nil {
				return fmt.Errorf("deleting records of %s/%d: %w", topic, rp.Partition, err)
			}
		}
	}
	return nil
}

// Produce writes msgs to topic, keyed, and returns once every one is
// acknowledged by the broker. It returns, per partition, the offsets
// assigned: the i-th offset of partition p belongs to the i-th message of
// msgs that was partitioned to p, so a test knows exactly where each message
// landed. Records are pipelined and batched, not sent one by one; msgs must
// not be modified until Produce returns. On error the map is nil and some
// messages may have been written.
func (c *Cluster) Produce(ctx context.Context, topic string, msgs []clickgen.Message) (map[int32][]int64, error) {
	type landing struct {
		partition int32
		offset    int64
	}
	if _, err := c.partitions(ctx, topic); err != nil {
		return nil, fmt.Errorf("producing %d messages to %s: %w", len(msgs), topic, err)
	}
	var (
		wg       sync.WaitGroup
		firstErr atomic.Pointer[error]
		landed   = make([]landing, len(msgs))
		slab     []kgo.Record
	)
	wg.Add(len(msgs))
	for i, m := range msgs {
		// Records are allocated in slabs to keep a large Produce from
		// costing one allocation per message.
		if len(slab) == 0 {
			slab = make([]kgo.Record, min(len(msgs)-i, 4096))
		}
		r := &slab[0]
		slab = slab[1:]
		r.Topic, r.Key, r.Value = topic, m.Key, m.Value
		c.cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				firstErr.CompareAndSwap(nil, &err)
			} else {
				landed[i] = landing{r.Partition, r.Offset}
			}
			wg.Done()
		})
	}
	wg.Wait()
	if err := firstErr.Load(); err != nil {
		return nil, fmt.Errorf("producing %d messages to %s: %w", len(msgs), topic, *err)
	}
	out := make(map[int32][]int64)
	for _, l := range landed {
		out[l.partition] = append(out[l.partition], l.offset)
	}
	return out, nil
}

// ProduceRate feeds topic from gen at about ratePerSec messages per second
// (0 = as fast as the broker takes them) until n messages are acknowledged
// (0 = no limit) or ctx is done, to model a live topic while floe drains a
// backlog. It returns how many messages were acknowledged, and ctx.Err() if
// it stopped because ctx ended. gen is used from this goroutine only and must
// not be shared while ProduceRate runs.
func (c *Cluster) ProduceRate(ctx context.Context, topic string, gen *clickgen.Generator, n int, ratePerSec int) (int, error) {
	if n < 0 || ratePerSec < 0 {
		return 0, fmt.Errorf("producing to %s: n and ratePerSec must be >= 0, got %d and %d", topic, n, ratePerSec)
	}
	if _, err := c.partitions(ctx, topic); err != nil {
		return 0, fmt.Errorf("producing to %s: %w", topic, err)
	}
	var (
		wg       sync.WaitGroup
		acked    atomic.Int64
		firstErr atomic.Pointer[error]
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			firstErr.CompareAndSwap(nil, &err)
		} else {
			acked.Add(1)
		}
		wg.Done()
	}
	// Pace in ticks rather than per message: the target count follows
	// elapsed time, so a slow tick is caught up on the next one.
	const tick = 5 * time.Millisecond
	start := time.Now()
	var ticker *time.Ticker
	if ratePerSec > 0 {
		ticker = time.NewTicker(tick)
		defer ticker.Stop()
	}
	sent := 0
	var stopErr error
produce:
	for n == 0 || sent < n {
		target := n
		if ratePerSec > 0 {
			target = int(time.Since(start).Seconds()*float64(ratePerSec)) + 1
			if n > 0 {
				target = min(target, n)
			}
		} else if n == 0 {
			target = sent + 1024
		}
		for ; sent < target; sent++ {
			if ctx.Err() != nil || firstErr.Load() != nil {
				break produce
			}
			m := gen.Next()
			wg.Add(1)
			c.cl.Produce(ctx, &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value}, promise)
		}
		if ticker != nil && (n == 0 || sent < n) {
			select {
			case <-ctx.Done():
				break produce
			case <-ticker.C:
			}
		}
	}
	stopErr = ctx.Err()
	wg.Wait()
	if err := firstErr.Load(); err != nil && !errors.Is(*err, context.Canceled) && !errors.Is(*err, context.DeadlineExceeded) {
		return int(acked.Load()), fmt.Errorf("producing to %s: %w", topic, *err)
	}
	return int(acked.Load()), stopErr
}

// partitions returns the partition ids of topic, or an error wrapping
// kerr.UnknownTopicOrPartition. Producing checks this first: kgo would
// otherwise retry an unknown topic for about 20 s before failing.
func (c *Cluster) partitions(ctx context.Context, topic string) ([]int32, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	rt := kmsg.NewMetadataRequestTopic()
	rt.Topic = kmsg.StringPtr(topic)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, err
	}
	if len(resp.Topics) != 1 {
		return nil, fmt.Errorf("%d topics in metadata", len(resp.Topics))
	}
	if err := kerr.ErrorForCode(resp.Topics[0].ErrorCode); err != nil {
		return nil, err
	}
	ps := make([]int32, 0, len(resp.Topics[0].Partitions))
	for _, p := range resp.Topics[0].Partitions {
		ps = append(ps, p.Partition)
	}
	return ps, nil
}

// EndOffsets returns the high watermark of every partition of topic: the
// offset the next produced message will get, and the point a consumer that
// has caught up has reached.
func (c *Cluster) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	ctx, cancel := withTimeout(ctx)
	defer cancel()
	parts, err := c.partitions(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("reading end offsets of %s: %w", topic, err)
	}
	req := kmsg.NewPtrListOffsetsRequest()
	rt := kmsg.NewListOffsetsRequestTopic()
	rt.Topic = topic
	for _, p := range parts {
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Partition = p
		rp.Timestamp = -1 // latest
		rt.Partitions = append(rt.Partitions, rp)
	}
	req.Topics = append(req.Topics, rt)
	// kgo splits the request by partition leader and merges the answers.
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return nil, fmt.Errorf("reading end offsets of %s: %w", topic, err)
	}
	out := make(map[int32]int64, len(rt.Partitions))
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
				return nil, fmt.Errorf("reading end offset of %s/%d: %w", topic, p.Partition, err)
			}
			out[p.Partition] = p.Offset
		}
	}
	if len(out) != len(rt.Partitions) {
		return nil, fmt.Errorf("reading end offsets of %s: %d of %d partitions answered", topic, len(out), len(rt.Partitions))
	}
	return out, nil
}
