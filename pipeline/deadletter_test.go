package pipeline_test

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// createDeadLetterTopic creates j's dead-letter topic, of one partition,
// with the given max.message.bytes, and returns an admin client of j's
// broker.
func createDeadLetterTopic(t *testing.T, j *job, maxMessageBytes int) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	adm := kadm.NewClient(cl)
	configs := map[string]*string{"max.message.bytes": new(strconv.Itoa(maxMessageBytes))}
	if _, err := adm.CreateTopic(t.Context(), 1, 1, configs, j.cfg.Kafka.DLQTopic); err != nil {
		t.Fatal(err)
	}
	return adm
}

// produceMalformed produces a record to j's topic that is not JSON, then
// small ones of the keys more, and sets j.end past them; it returns where
// the first one landed.
func produceMalformed(t *testing.T, j *job, key, value []byte, more ...string) (partition int32, offset int64) {
	t.Helper()
	landed, err := j.cl.Produce(t.Context(), "clicks", []clickgen.Message{{Key: key, Value: value}})
	if err != nil {
		t.Fatal(err)
	}
	for p, offs := range landed {
		partition, offset = p, offs[0]
	}
	var msgs []clickgen.Message
	for _, k := range more {
		msgs = append(msgs, clickgen.Message{Key: []byte(k), Value: []byte(`{"session_id":`)})
	}
	if _, err := j.cl.Produce(t.Context(), "clicks", msgs); err != nil {
		t.Fatal(err)
	}
	if j.end, err = j.cl.EndOffsets(t.Context(), "clicks"); err != nil {
		t.Fatal(err)
	}
	return partition, offset
}

// TestDeadLetterTooLargeForItsTopicIsWrittenCut: a record whose dead letter
// (50 KB) is over the dead-letter topic's max.message.bytes (20,000) is
// dead-lettered with its key and the first bytes of its value, 4 KiB in
// all, and floe's headers, and so are 100 small ones (together over the
// limit too); a scheduled run commits every other record and ends. Before,
// the broker refused the letters at every attempt: every flush of every
// partition was retried forever, and a scheduled run never ended.
func TestDeadLetterTooLargeForItsTopicIsWrittenCut(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	createDeadLetterTopic(t, j, 20_000)
	key, value := []byte("s-big"), bytes.Repeat([]byte("{"), 50_000)
	more := make([]string, 100)
	for i := range more {
		more[i] = "s-" + strconv.Itoa(i)
	}
	partition, offset := produceMalformed(t, j, key, value, more...)
	m := runScheduled(t, j, "the scheduled run")
	if n := m.Stats().DeadLettersCut.Load(); n != 1 {
		t.Errorf("floe_dead_letters_cut_total %d, want 1: the large record's letter", n)
	}
	if rep := verifyWithDeadLetters(t, j); !rep.OK() || rep.Rows != 200 || rep.DeadLetters != 101 {
		var out strings.Builder
		rep.WriteText(&out)
		t.Fatalf("want 200 rows and 101 dead letters, verified:\n%s", out.String())
	}

	var letter *kgo.Record
	for _, r := range readLetters(t, j, 101) {
		if bytes.Equal(r.Key, key) {
			letter = r
		}
	}
	if letter == nil {
		t.Fatal("the large record's dead letter not read back")
	}
	headers := map[string]string{}
	for _, h := range letter.Headers {
		headers[h.Key] = string(h.Value)
	}
	want := map[string]string{
		pipeline.HeaderReason:          "malformed_json",
		pipeline.HeaderSourceTopic:     "clicks",
		pipeline.HeaderSourcePartition: strconv.Itoa(int(partition)),
		pipeline.HeaderSourceOffset:    strconv.FormatInt(offset, 10),
		pipeline.HeaderValueSize:       "50000",
		pipeline.HeaderTable:           "t.clicks",
	}
	for k, v := range want {
		if headers[k] != v {
			t.Errorf("header %s: %q, want %q", k, headers[k], v)
		}
	}
	if len(letter.Key)+len(letter.Value) != 4<<10 || !bytes.HasPrefix(value, letter.Value) {
		t.Errorf("letter of %d bytes of value; want the value's first %d bytes", len(letter.Value), 4<<10-len(key))
	}
}

// verifyWithDeadLetters verifies j's table against its dead-letter topic.
func verifyWithDeadLetters(t *testing.T, j *job) *lakehouse.Report {
	t.Helper()
	dl, err := pipeline.ReadDeadLetters(t.Context(), j.cfg.Kafka, nil)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := j.tbl.Verify(t.Context(), "clicks", dl.Read)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// readLetters reads n records of j's dead-letter topic, failing the test
// when they are not there within 30 s.
func readLetters(t *testing.T, j *job, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.ConsumeTopics(j.cfg.Kafka.DLQTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	var out []*kgo.Record
	for len(out) < n && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r) })
	}
	if len(out) < n {
		t.Fatalf("%d dead letters read back within 30 s, want %d", len(out), n)
	}
	return out
}

// TestDeadLettersThatFitAloneAreNotCut: letters of 160 KB each fit the
// dead-letter topic's max.message.bytes (300,000) alone, not two in a
// batch: the broker refuses the batch, each letter as too large, and each
// is written again alone, whole. They were all written cut to 4 KiB.
func TestDeadLettersThatFitAloneAreNotCut(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	createDeadLetterTopic(t, j, 300_000)
	value := bytes.Repeat([]byte("{"), 160_000)
	big := clickgen.Message{Key: []byte("s-big"), Value: value} // one partition
	if _, err := j.cl.Produce(t.Context(), "clicks", []clickgen.Message{big, big, big}); err != nil {
		t.Fatal(err)
	}
	if n := runScheduled(t, j, "the scheduled run").Stats().DeadLettersCut.Load(); n != 0 {
		t.Errorf("floe_dead_letters_cut_total %d, want 0", n)
	}
	for i, r := range readLetters(t, j, 3) {
		if len(r.Value) != len(value) {
			t.Errorf("letter %d keeps %d bytes of its %d-byte value, though it fits the topic alone", i, len(r.Value), len(value))
		}
	}
}

// TestDeadLetterTopicRefusingForGoodEndsAScheduledRun: a dead-letter topic
// that refuses a letter in a way no retry clears — the job may not write to
// it, or even the letter cut is over its max.message.bytes — ends a
// scheduled run with an error naming the topic, while the long-running job
// retries, logging an error, and commits once the topic's ACL or
// configuration is fixed. The scheduled run retried it (and every other
// partition's records with it) forever.
func TestDeadLetterTopicRefusingForGoodEndsAScheduledRun(t *testing.T) {
	for _, c := range []struct {
		name   string
		refuse func(*testing.T, *job) (fix func())
	}{
		{"unauthorized", func(t *testing.T, j *job) func() {
			h := j.cl.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: j.cfg.Kafka.DLQTopic,
				Err: kerr.TopicAuthorizationFailed, Count: -1})
			return h.Remove
		}},
		{"even a cut letter too large", func(t *testing.T, j *job) func() {
			adm := createDeadLetterTopic(t, j, 100)
			return func() {
				set := []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "max.message.bytes", Value: new("1048588")}}
				if _, err := adm.AlterTopicConfigs(t.Context(), set, j.cfg.Kafka.DLQTopic); err != nil {
					t.Error(err)
				}
			}
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := newJob(t, 200, fastCommit, nil)
			fix := c.refuse(t, j)
			produceMalformed(t, j, []byte("s-bad"), []byte("{"))

			endsScheduledRetriesLong(t, j, func(err error) bool {
				return err != nil && strings.Contains(err.Error(), "dead-letter topic "+j.cfg.Kafka.DLQTopic)
			}, "an error naming the dead-letter topic", "dead-letter topic refuses", fix)
		})
	}
}

// TestMissingDeadLetterTopicFailsTheStart: a dead-letter topic the broker
// neither has nor creates (Apache Kafka with auto.create.topics.enable=false
// answers the metadata request for it with UNKNOWN_TOPIC_OR_PARTITION, which
// kfake is made to answer here) stops a member and a replay at start-up,
// with an error naming the topic. The member used to start, and the first
// flush holding a dead letter was retried for as long as it ran. Once the
// topic can be created, the same job runs and catches up.
func TestMissingDeadLetterTopicFailsTheStart(t *testing.T) {
	pipeline.SetCheckTopicAgain(t, 20*time.Millisecond)
	j := newJob(t, 200, fastCommit, nil)
	h := j.cl.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: j.cfg.Kafka.DLQTopic,
		Err: kerr.UnknownTopicOrPartition, Count: -1})
	want := "dead-letter topic " + j.cfg.Kafka.DLQTopic + " does not exist"

	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	says := func(err error) bool { return err != nil && strings.Contains(err.Error(), want) }
	runFails(t, m, 45*time.Second, "member", says, "an error saying "+want)
	_, err = pipeline.Replay(t.Context(), j.cfg, j.tbl, j.sc, []pipeline.ReplayRange{{Partition: 0, From: 0, To: 1}},
		pipeline.ReplayOptions{}, slog.New(slog.DiscardHandler))
	if !says(err) {
		t.Fatalf("replay: %v, want an error saying %q", err, want)
	}
	if wm, err := j.tbl.Watermarks(t.Context()); err != nil || len(wm) != 0 {
		t.Fatalf("watermarks %v (%v), want none: nothing may be committed", wm, err)
	}

	h.Remove()
	runUntilCaughtUp(t, j)
}

// TestDeadLetterTopicCreatedAfterAnUnknownAnswerStarts: a broker that
// creates the dead-letter topic when asked but first answers
// UNKNOWN_TOPIC_OR_PARTITION — a KRaft broker (every Kafka 4) answers so
// while its controller creates the topic, and any broker while another
// client's creation of it is under way — lets the member start once the
// topic exists. The start-up check took the first answer for a broker that
// does not create topics, and every first start on KRaft failed.
func TestDeadLetterTopicCreatedAfterAnUnknownAnswerStarts(t *testing.T) {
	pipeline.SetCheckTopicAgain(t, 50*time.Millisecond)
	j := newJob(t, 200, fastCommit, nil)
	dlq := j.cfg.Kafka.DLQTopic
	var asked atomic.Int32
	created := make(chan error, 1)
	j.cl.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: dlq, Err: kerr.UnknownTopicOrPartition, Count: 3,
		When: func(r kmsg.Request) bool {
			if !r.(*kmsg.MetadataRequest).AllowAutoTopicCreation {
				return false
			}
			if asked.Add(1) == 1 {
				// What the KRaft controller does once the broker forwarded
				// the creation (not on kfake's goroutine, which answers the
				// admin client too).
				go func() { created <- j.cl.CreateTopic(context.Background(), dlq, 1) }()
			}
			return true
		}})
	runUntilCaughtUp(t, j)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if asked.Load() == 0 {
		t.Fatal("the broker never answered UNKNOWN_TOPIC_OR_PARTITION: the test tested nothing")
	}
}

// TestDeadLettersKeysCountInTheWindow: a dead letter holds its whole record
// (key, value, headers) until its flush, but the window counted only its
// value: 20 undecodable records with 512 KiB keys (10 MiB held) and
// commit.max_bytes 1 MiB made no flush, and nothing stopped fetching.
func TestDeadLettersKeysCountInTheWindow(t *testing.T) {
	j := newJob(t, 0, pipeline.CommitConfig{Interval: pipeline.Duration(time.Hour), MaxBytes: 1 << 20}, nil)
	var msgs []clickgen.Message
	for i := range 20 {
		msgs = append(msgs, clickgen.Message{Key: bytes.Repeat([]byte{byte('a' + i)}, 512<<10), Value: []byte("x")})
	}
	if _, err := j.cl.Produce(t.Context(), "clicks", msgs); err != nil {
		t.Fatal(err)
	}
	m := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 30*time.Second, "not all consumed", func() bool { return m.Stats().Consumed.Load() == 20 })
	waitFor(t, 10*time.Second, "20 dead letters holding 10 MiB of keys, commit.max_bytes 1 MiB: no flush",
		func() bool { return m.Stats().Commits.Load() > 0 })
}

// TestDeadLettersNotDuplicatedByAFlushRetriedInPlace: one partition of the
// dead-letter topic refuses produce requests for a while
// (NOT_ENOUGH_REPLICAS: a broker of its ISR is down) and the member retries
// the flush in place until it answers. Each source offset is in the topic
// once: every retry wrote again the letters the other partition had
// taken (60 copies of 40 letters after 3 retries; an hour's outage, ~120
// copies of each).
func TestDeadLettersNotDuplicatedByAFlushRetriedInPlace(t *testing.T) {
	j := newJob(t, 0, fastCommit, nil)
	if err := j.cl.CreateTopic(t.Context(), j.cfg.Kafka.DLQTopic, 2); err != nil {
		t.Fatal(err)
	}
	more := make([]string, 39)
	for i := range more {
		more[i] = "k-" + strconv.Itoa(i)
	}
	h := j.cl.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: j.cfg.Kafka.DLQTopic,
		Partitions: []int32{1}, Err: kerr.NotEnoughReplicas, Count: -1})
	produceMalformed(t, j, []byte("k-first"), []byte("{"), more...)

	m := runMember(t, j.cfg, j.tbl, j.sc)
	waitFor(t, 60*time.Second, "the flush was not retried 3 times", func() bool { return m.Stats().FlushRetries.Load() >= 3 })
	h.Remove()
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)

	letters := readAllLetters(t, j)
	copies := map[string]int{}
	perPartition := map[int32]int{}
	for _, r := range letters {
		var sp, so string
		for _, hd := range r.Headers {
			switch hd.Key {
			case pipeline.HeaderSourcePartition:
				sp = string(hd.Value)
			case pipeline.HeaderSourceOffset:
				so = string(hd.Value)
			}
		}
		copies[sp+"@"+so]++
		perPartition[r.Partition]++
	}
	dup := 0
	for _, n := range copies {
		dup += n - 1
	}
	t.Logf("flush retries %d; %d letters in the dead-letter topic for %d source offsets (per dead-letter partition %v)",
		m.Stats().FlushRetries.Load(), len(letters), len(copies), perPartition)
	if len(copies) != 40 {
		t.Fatalf("%d source offsets dead-lettered, want 40", len(copies))
	}
	if dup > 0 {
		t.Fatalf("%d duplicate dead letters: every retry of the flush wrote again the letters already acknowledged (%v)",
			dup, perPartition)
	}
}

// readAllLetters reads every record of j's dead-letter topic (it stops once
// nothing new came for 2 s).
func readAllLetters(t *testing.T, j *job) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.ConsumeTopics(j.cfg.Kafka.DLQTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []*kgo.Record
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		n := 0
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { out = append(out, r); n++ })
		cancel()
		if n == 0 {
			return out
		}
	}
}

// TestDeadLetterTopicGoneMidRunEndsAScheduledRun: a dead-letter topic
// deleted while a scheduled run reads (after its start-up check), on
// brokers that do not create topics, ends the run with an error naming it,
// as at start-up; the flush was retried for ever and the run never ended.
// The brokers answer every produce and metadata request for it
// UNKNOWN_TOPIC_OR_PARTITION once the start-up check found it.
func TestDeadLetterTopicGoneMidRunEndsAScheduledRun(t *testing.T) {
	j := newJob(t, 200, fastCommit, nil)
	p, off := produceMalformed(t, j, []byte("s-bad"), []byte("{"))
	end := maps.Clone(j.end)
	end[p] = max(end[p], off+1)
	// The first metadata request for the topic is the start-up check's,
	// which finds it; from then on it is gone.
	var asked atomic.Int32
	j.cl.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce, kmsg.Metadata}, Topic: j.cfg.Kafka.DLQTopic,
		Err: kerr.UnknownTopicOrPartition, Count: -1, When: func(req kmsg.Request) bool {
			if _, ok := req.(*kmsg.MetadataRequest); ok && asked.Add(1) == 1 {
				return false
			}
			return asked.Load() > 0
		}})
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc, pipeline.UntilOffsets(end))
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	defer stop()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "dead-letter topic "+j.cfg.Kafka.DLQTopic+" does not exist") {
			t.Fatalf("the scheduled run ended with %v, want an error naming the dead-letter topic gone", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the scheduled run still running after 60 s (%d flush retries): the dead letter's flush is retried for ever",
			m.Stats().FlushRetries.Load())
	}
}
