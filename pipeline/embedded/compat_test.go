package embedded_test

// These tests prove that kfake serves the exact kafka-go APIs floe's source
// and dead-letter writer use: ConsumerGroup/Generation (join, sync,
// heartbeat, offset fetch and commit, leave), per-partition Readers without
// a GroupID positioned with SetOffset, and a Writer with RequiredAcks:
// RequireAll. They also record which request versions kafka-go sends, and
// log how long rebalances take with the group timings below.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// Group timings that work well against kfake in tests. SessionTimeout is
// the minimum kfake (like Kafka's group.min.session.timeout.ms) accepts.
// A rebalance costs about one HeartbeatInterval: that is how long a member
// takes to learn that another member joined or left.
const (
	testSessionTimeout   = 6 * time.Second
	testHeartbeat        = 250 * time.Millisecond
	testRebalanceTimeout = 5 * time.Second
	testJoinBackoff      = 250 * time.Millisecond
)

// versionLog records the (API key, version) pairs the broker receives.
type versionLog struct {
	mu   sync.Mutex
	seen map[int16]map[int16]bool
}

func recordVersions(c *embedded.Cluster) *versionLog {
	v := &versionLog{seen: map[int16]map[int16]bool{}}
	c.Kfake().Control(func(req kmsg.Request) (kmsg.Response, error, bool) {
		v.mu.Lock()
		defer v.mu.Unlock()
		k := req.Key()
		if v.seen[k] == nil {
			v.seen[k] = map[int16]bool{}
		}
		v.seen[k][req.GetVersion()] = true
		return nil, nil, false // observe only
	})
	return v
}

func (v *versionLog) String() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b bytes.Buffer
	for _, k := range slices.Sorted(maps.Keys(v.seen)) {
		name := kmsg.NameForKey(k)
		fmt.Fprintf(&b, " %s%v", name, slices.Sorted(maps.Keys(v.seen[k])))
	}
	return b.String()
}

func (v *versionLog) has(key int16) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.seen[key]) > 0
}

// record is one message as a consumer saw it.
type record struct {
	partition int
	offset    int64
	key       []byte
	value     []byte
}

// expectation says, per partition, which messages must be read, in order.
type expectation map[int][]clickgen.Message

// expect groups msgs by the partition Kafka's Java producer would choose,
// computed with kafka-go's murmur2 port, independent of the producer used.
func expect(msgs []clickgen.Message, partitions int) expectation {
	all := make([]int, partitions)
	for i := range all {
		all[i] = i
	}
	bal := kafka.Murmur2Balancer{Consistent: true}
	out := expectation{}
	for _, m := range msgs {
		p := bal.Balance(kafka.Message{Key: m.Key}, all...)
		out[p] = append(out[p], m)
	}
	return out
}

func newGroup(t *testing.T, c *embedded.Cluster, group, topic string) *kafka.ConsumerGroup {
	t.Helper()
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                group,
		Brokers:           c.Addrs(),
		Topics:            []string{topic},
		SessionTimeout:    testSessionTimeout,
		HeartbeatInterval: testHeartbeat,
		RebalanceTimeout:  testRebalanceTimeout,
		JoinGroupBackoff:  testJoinBackoff,
		StartOffset:       kafka.FirstOffset,
		ErrorLogger:       kafka.LoggerFunc(t.Logf),
	})
	if err != nil {
		t.Fatal(err)
	}
	return cg
}

// next waits for cg's next generation, skipping the transient errors a
// member reports while a rebalance is under way.
func next(ctx context.Context, t *testing.T, cg *kafka.ConsumerGroup) *kafka.Generation {
	t.Helper()
	for {
		gen, err := cg.Next(ctx)
		if err == nil {
			return gen
		}
		if ctx.Err() != nil || errors.Is(err, kafka.ErrGroupClosed) {
			t.Fatalf("waiting for a generation: %v", err)
		}
		t.Logf("generation not ready yet: %v", err)
	}
}

func partitionsOf(gen *kafka.Generation, topic string) map[int]int64 {
	out := map[int]int64{}
	for _, a := range gen.Assignments[topic] {
		out[a.ID] = a.Offset
	}
	return out
}

// consume starts, within gen, one kafka-go Reader per assigned partition,
// positioned with SetOffset at the generation's offset. Each reads until it
// reaches end[p], committing as it goes, then idles until the generation
// ends: a function passed to Generation.Start that returns ends the
// generation. The returned function waits for all partitions to reach their
// end and returns what was read.
func consume(t *testing.T, c *embedded.Cluster, gen *kafka.Generation, topic string, end map[int32]int64) func() []record {
	var (
		mu   sync.Mutex
		recs []record
		errs []error
		wg   sync.WaitGroup
	)
	for _, a := range gen.Assignments[topic] {
		wg.Add(1)
		gen.Start(func(ctx context.Context) {
			reachedEnd := sync.OnceFunc(wg.Done)
			defer reachedEnd()
			fail := func(err error) {
				mu.Lock()
				errs = append(errs, fmt.Errorf("partition %d: %w", a.ID, err))
				mu.Unlock()
			}
			r := kafka.NewReader(kafka.ReaderConfig{
				Brokers:   c.Addrs(),
				Topic:     topic,
				Partition: a.ID,
				MinBytes:  1,
				MaxBytes:  1 << 20,
				MaxWait:   100 * time.Millisecond,
			})
			defer r.Close()
			if err := r.SetOffset(a.Offset); err != nil {
				fail(err)
				return
			}
			stop := end[int32(a.ID)]
			pos := a.Offset
			if pos < 0 { // FirstOffset: nothing committed yet
				pos = 0
			}
			for pos < stop {
				m, err := r.FetchMessage(ctx)
				if err != nil {
					if ctx.Err() == nil {
						fail(err)
					}
					return
				}
				if m.Offset != pos {
					fail(fmt.Errorf("read offset %d, expected %d", m.Offset, pos))
					return
				}
				pos = m.Offset + 1
				mu.Lock()
				recs = append(recs, record{a.ID, m.Offset, m.Key, m.Value})
				mu.Unlock()
				if pos%50 == 0 || pos == stop {
					if err := gen.CommitOffsets(map[string]map[int]int64{topic: {a.ID: pos}}); err != nil {
						fail(fmt.Errorf("committing %d: %w", pos, err))
						return
					}
				}
			}
			reachedEnd()
			<-ctx.Done()
		})
	}
	return func() []record {
		t.Helper()
		done := make(chan struct{})
		go func() { wg.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("readers did not reach the end offsets")
		}
		mu.Lock()
		defer mu.Unlock()
		for _, err := range errs {
			t.Error(err)
		}
		return recs
	}
}

// check verifies that recs are exactly the expected messages, each at the
// expected offset of its partition, starting at from[p].
func check(t *testing.T, recs []record, want expectation, from map[int32]int64) {
	t.Helper()
	got := map[int][]record{}
	for _, r := range recs {
		got[r.partition] = append(got[r.partition], r)
	}
	for p, w := range want {
		g := got[p]
		sort.Slice(g, func(i, j int) bool { return g[i].offset < g[j].offset })
		if len(g) != len(w) {
			t.Errorf("partition %d: read %d records, want %d", p, len(g), len(w))
			continue
		}
		for i := range w {
			if g[i].offset != from[int32(p)]+int64(i) || !bytes.Equal(g[i].key, w[i].Key) || !bytes.Equal(g[i].value, w[i].Value) {
				t.Errorf("partition %d: record %d is offset %d key %s, want offset %d key %s",
					p, i, g[i].offset, g[i].key, from[int32(p)]+int64(i), w[i].Key)
				break
			}
		}
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			t.Errorf("partition %d: %d unexpected records", p, len(got[p]))
		}
	}
}

// TestKafkaGoConsumerGroup drives two kafka-go ConsumerGroup members through
// a 12-partition topic: they split the partitions, read them with
// per-partition Readers and commit; when one member closes, the other takes
// all 12 partitions at the committed offsets; and a member joining after
// both have gone starts where the last one committed.
func TestKafkaGoConsumerGroup(t *testing.T) {
	for _, brokers := range []int{1, 3} {
		t.Run(fmt.Sprintf("brokers=%d", brokers), func(t *testing.T) {
			testConsumerGroup(t, brokers)
		})
	}
}

func testConsumerGroup(t *testing.T, brokers int) {
	const (
		topic = "clicks"
		group = "floe-clicks"
		parts = 12
	)
	ctx := testContext(t)
	c := startCluster(t, brokers)
	if err := c.CreateTopic(ctx, topic, parts); err != nil {
		t.Fatal(err)
	}
	// Both batches are produced up front so that, from here on, only
	// kafka-go talks to the broker and the version log is kafka-go's.
	msgs := generate(11, 3000)
	batchA, batchB := msgs[:2000], msgs[2000:]
	if _, err := c.Produce(ctx, topic, batchA); err != nil {
		t.Fatal(err)
	}
	endA, err := c.EndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Produce(ctx, topic, batchB); err != nil {
		t.Fatal(err)
	}
	endB, err := c.EndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	versions := recordVersions(c)

	// Member 1 joins alone and gets everything.
	cg1 := newGroup(t, c, group, topic)
	defer cg1.Close()
	start := time.Now()
	gen1 := next(ctx, t, cg1)
	if n := len(gen1.Assignments[topic]); n != parts {
		t.Fatalf("a lone member got %d partitions", n)
	}
	t.Logf("first join: generation %d after %v", gen1.ID, time.Since(start))

	// Member 2 joins: both must end up in one new generation with
	// disjoint assignments covering the topic. Member 1 learns of the
	// rebalance from its heartbeat, which ends gen1 by itself.
	cg2 := newGroup(t, c, group, topic)
	defer cg2.Close()
	start = time.Now()
	gen2b := next(ctx, t, cg2)
	gen2a := next(ctx, t, cg1)
	t.Logf("second member joined: generation %d after %v", gen2b.ID, time.Since(start))
	if gen2a.ID != gen2b.ID || gen2a.ID <= gen1.ID {
		t.Fatalf("generations %d and %d after %d", gen2a.ID, gen2b.ID, gen1.ID)
	}
	pa, pb := partitionsOf(gen2a, topic), partitionsOf(gen2b, topic)
	if len(pa) == 0 || len(pb) == 0 || len(pa)+len(pb) != parts {
		t.Fatalf("assignments %v and %v do not split %d partitions", pa, pb, parts)
	}
	for p, off := range pa {
		if _, ok := pb[p]; ok {
			t.Fatalf("partition %d assigned to both members", p)
		}
		if off != kafka.FirstOffset {
			t.Fatalf("partition %d starts at %d with nothing committed", p, off)
		}
	}
	for p := range parts {
		if _, ok := pa[p]; !ok {
			if _, ok := pb[p]; !ok {
				t.Fatalf("partition %d unassigned", p)
			}
		}
	}

	waitA := consume(t, c, gen2a, topic, endA)
	waitB := consume(t, c, gen2b, topic, endA)
	zero := map[int32]int64{}
	check(t, append(waitA(), waitB()...), expect(batchA, parts), zero)

	// Member 1 leaves: member 2 must get all partitions, at the offsets
	// committed in generation 2.
	start = time.Now()
	cg1.Close()
	closed := time.Since(start)
	gen3 := next(ctx, t, cg2)
	t.Logf("member left: Close took %v, generation %d after %v", closed, gen3.ID, time.Since(start))
	if gen3.ID <= gen2b.ID {
		t.Fatalf("generation %d after %d", gen3.ID, gen2b.ID)
	}
	p3 := partitionsOf(gen3, topic)
	if len(p3) != parts {
		t.Fatalf("remaining member got %d partitions: %v", len(p3), p3)
	}
	for p, off := range p3 {
		if off != endA[int32(p)] {
			t.Errorf("partition %d resumes at %d, committed %d", p, off, endA[int32(p)])
		}
	}
	check(t, consume(t, c, gen3, topic, endB)(), expect(batchB, parts), endA)
	cg2.Close()

	// A fresh member resumes from the last commit.
	cg3 := newGroup(t, c, group, topic)
	defer cg3.Close()
	gen4 := next(ctx, t, cg3)
	for p, off := range partitionsOf(gen4, topic) {
		if off != endB[int32(p)] {
			t.Errorf("after restart partition %d resumes at %d, committed %d", p, off, endB[int32(p)])
		}
	}
	cg3.Close()

	t.Logf("request versions kafka-go sent:%s", versions)
	for _, k := range []kmsg.Key{kmsg.FindCoordinator, kmsg.JoinGroup, kmsg.SyncGroup, kmsg.Heartbeat,
		kmsg.LeaveGroup, kmsg.OffsetCommit, kmsg.OffsetFetch, kmsg.Metadata, kmsg.Fetch} {
		if !versions.has(int16(k)) {
			t.Errorf("no %s request seen", k.Name())
		}
	}
}

// TestKafkaGoWriter writes dead-letter records the way floe does, with a
// kafka.Writer requiring all acks, to a topic the write itself creates, and
// reads them back with per-partition Readers.
func TestKafkaGoWriter(t *testing.T) {
	ctx := testContext(t)
	c := startCluster(t, 3)
	const topic = "clicks.dlq"
	versions := recordVersions(c)
	tr := &kafka.Transport{}
	defer tr.CloseIdleConnections()
	w := &kafka.Writer{
		Addr:                   kafka.TCP(c.Addrs()...),
		Topic:                  topic,
		RequiredAcks:           kafka.RequireAll,
		AllowAutoTopicCreation: true,
		Balancer:               &kafka.Murmur2Balancer{Consistent: true},
		BatchTimeout:           time.Millisecond,
		Transport:              tr,
	}
	var sent []kafka.Message
	for i, m := range generate(5, 50) {
		sent = append(sent, kafka.Message{
			Key:   m.Key,
			Value: m.Value,
			Headers: []kafka.Header{
				{Key: "floe.reason", Value: []byte("missing ts")},
				{Key: "floe.source", Value: fmt.Appendf(nil, "clicks/%d/%d", i%12, i)},
			},
		})
	}
	// The first write may race the topic's creation; kafka-go reports
	// that as a retriable error.
	var err error
	for range 20 {
		if err = w.WriteMessages(ctx, sent...); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("writing: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	t.Logf("request versions kafka.Writer sent:%s", versions)

	ends, err := c.EndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string]kafka.Message{}
	for _, m := range sent {
		byKey[string(m.Key)+string(m.Value)] = m
	}
	read := 0
	for p, end := range ends {
		if end == 0 {
			continue
		}
		r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.Addrs(), Topic: topic, Partition: int(p), MaxWait: 100 * time.Millisecond})
		if err := r.SetOffset(kafka.FirstOffset); err != nil {
			t.Fatal(err)
		}
		for i := int64(0); i < end; i++ {
			m, err := r.ReadMessage(ctx)
			if err != nil {
				t.Fatalf("partition %d: %v", p, err)
			}
			want, ok := byKey[string(m.Key)+string(m.Value)]
			if !ok {
				t.Fatalf("partition %d offset %d: unexpected message", p, m.Offset)
			}
			if len(m.Headers) != 2 || !bytes.Equal(m.Headers[1].Value, want.Headers[1].Value) {
				t.Fatalf("headers %v, want %v", m.Headers, want.Headers)
			}
			read++
		}
		r.Close()
	}
	if read != len(sent) {
		t.Fatalf("read %d of %d", read, len(sent))
	}
}

// TestKafkaGoSessionExpiry shows that a member that disappears without
// leaving (a crash, or a pause past the session timeout) is expired by the
// broker after SessionTimeout, and the survivor takes its partitions.
func TestKafkaGoSessionExpiry(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for a session timeout")
	}
	const topic, group = "clicks", "floe-clicks"
	ctx := testContext(t)
	c := startCluster(t, 1)
	if err := c.CreateTopic(ctx, topic, 12); err != nil {
		t.Fatal(err)
	}
	cg1 := newGroup(t, c, group, topic)
	defer cg1.Close()
	next(ctx, t, cg1)
	cg2 := newGroup(t, c, group, topic)
	defer cg2.Close()
	gen := next(ctx, t, cg2)
	next(ctx, t, cg1)
	if n := len(gen.Assignments[topic]); n != 6 {
		t.Fatalf("member 2 got %d partitions", n)
	}

	// Drop member 1's LeaveGroup by closing its connection: to the
	// broker, member 1 just stops heartbeating.
	c.Kfake().ControlKey(int16(kmsg.LeaveGroup), func(kmsg.Request) (kmsg.Response, error, bool) {
		return nil, errors.New("simulated crash"), true
	})
	start := time.Now()
	cg1.Close()
	gen = next(ctx, t, cg2)
	took := time.Since(start)
	t.Logf("crashed member expired: generation %d after %v", gen.ID, took)
	if n := len(gen.Assignments[topic]); n != 12 {
		t.Fatalf("survivor got %d partitions", n)
	}
	// The broker's session timer runs from member 1's last heartbeat, up
	// to one heartbeat interval before start.
	if took < testSessionTimeout-testHeartbeat {
		t.Fatalf("rebalanced after %v, before the %v session timeout (less one %v heartbeat interval)", took, testSessionTimeout, testHeartbeat)
	}
	cg2.Close()
}

// TestKafkaGoSessionTimeoutFloor pins down what a too-small session timeout
// does: the broker refuses the join and kafka-go surfaces the error from
// Next (then keeps retrying after JoinGroupBackoff).
func TestKafkaGoSessionTimeoutFloor(t *testing.T) {
	ctx := testContext(t)
	c := startCluster(t, 1)
	if err := c.CreateTopic(ctx, "clicks", 1); err != nil {
		t.Fatal(err)
	}
	cg, err := kafka.NewConsumerGroup(kafka.ConsumerGroupConfig{
		ID:                "g",
		Brokers:           c.Addrs(),
		Topics:            []string{"clicks"},
		SessionTimeout:    testSessionTimeout - time.Millisecond,
		HeartbeatInterval: testHeartbeat,
		JoinGroupBackoff:  testJoinBackoff,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Close()
	if _, err := cg.Next(ctx); !errors.Is(err, kafka.InvalidSessionTimeout) {
		t.Fatalf("joining with a %v session: %v, want InvalidSessionTimeout", testSessionTimeout-time.Millisecond, err)
	}
}
