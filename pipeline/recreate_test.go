package pipeline_test

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestTopicRecreatedWhileRunning: the topic is deleted and created again
// with as many partitions while a long-running member reads it, and
// producers write to it. The member ends with the recreated topic's error
// rather than read on from the table's watermarks once the new log passes
// them: every new record below them would have been skipped, verify OK.
// The reader waited at the watermark, past the new log's end, without a
// word (and its metadata requests created the deleted topic again, with the
// broker's default partition count).
func TestTopicRecreatedWhileRunning(t *testing.T) {
	j := newJob(t, 400, fastCommit, nil)
	_, done := runCaughtUp(t, j)
	before, err := j.tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}

	deleteTopic(t, j)
	time.Sleep(500 * time.Millisecond) // the readers find it gone
	if err := j.cl.CreateTopic(t.Context(), "clicks", 4); err != nil {
		t.Fatalf("creating the topic again: %v (did floe's metadata requests create it?)", err)
	}
	produceToRecreated(t, j, 40)
	wantRecreatedError(t, done, 30*time.Second)
	after, err := j.tbl.Watermarks(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for p, w := range before["clicks"] {
		if got, _ := after.Get("clicks", p); got != w {
			t.Errorf("partition %d: watermark %d, was %d before the topic was recreated", p, got, w)
		}
	}
}

// TestTopicDeletedWhileRunning: the topic stays deleted past the group's
// partition watch (10 s) under a long-running member. The group does not
// rebalance in a loop meanwhile (each generation's partition watcher
// failed to read the missing topic and ended the generation at once:
// hundreds of generations a second), and once the topic is created again
// the member refuses it.
func TestTopicDeletedWhileRunning(t *testing.T) {
	j := newJob(t, 40, fastCommit, nil)
	m, done := runCaughtUp(t, j)
	deleteTopic(t, j)
	time.Sleep(13 * time.Second) // past the partition watch
	g0 := m.Stats().Generations.Load()
	time.Sleep(3 * time.Second)
	if g := m.Stats().Generations.Load() - g0; g > 3 {
		t.Fatalf("%d generations in 3 s while the topic is deleted", g)
	}
	if err := j.cl.CreateTopic(t.Context(), "clicks", 4); err != nil {
		t.Fatal(err)
	}
	produceToRecreated(t, j, 4)
	wantRecreatedError(t, done, 60*time.Second)
}

// produceToRecreated produces n records to j's topic created again, with a
// new producer: the broker's client knows the old topic's id.
func produceToRecreated(t *testing.T, j *job, n int) {
	t.Helper()
	pcl, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...), kgo.DefaultProduceTopic("clicks"))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	g := clickgen.New(clickgen.Config{Sessions: 100, Seed: 9})
	for range n {
		msg := g.Next()
		if err := pcl.ProduceSync(t.Context(), &kgo.Record{Key: msg.Key, Value: msg.Value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// wantRecreatedError waits within for Run (done) to end with the error of
// a recreated topic.
func wantRecreatedError(t *testing.T, done <-chan error, within time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "recreated or truncated") {
			t.Fatalf("Run returned %v, want the recreated topic's error", err)
		}
	case <-time.After(within):
		t.Fatalf("the member read the recreated topic for %s without an error", within)
	}
}

// runCaughtUp runs a long-running member of j until its table holds every
// record produced, and returns it and its Run's outcome; it is stopped when
// the test ends.
func runCaughtUp(t *testing.T, j *job) (*pipeline.Member, <-chan error) {
	t.Helper()
	m, err := pipeline.NewMember(j.cfg, j.tbl, j.sc)
	if err != nil {
		t.Fatal(err)
	}
	done, stop := startRun(m)
	t.Cleanup(stop)
	waitCaughtUp(t, j.tbl, j.end, 60*time.Second)
	return m, done
}

// deleteTopic deletes j's topic.
func deleteTopic(t *testing.T, j *job) {
	t.Helper()
	admin, err := kgo.NewClient(kgo.SeedBrokers(j.cl.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := kadm.NewClient(admin).DeleteTopics(t.Context(), "clicks"); err != nil {
		t.Fatal(err)
	}
}
