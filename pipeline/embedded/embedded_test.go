package embedded_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/floe-dev/floe/pipeline/embedded"
	"github.com/floe-dev/floe/schemas/clickgen"
)

func TestStart(t *testing.T) {
	if _, err := embedded.Start(0); err == nil {
		t.Fatal("Start(0) succeeded")
	}
	c := startCluster(t, 3)
	if got := len(c.Addrs()); got != 3 {
		t.Fatalf("%d addresses for 3 brokers", got)
	}
	if c.Kfake() == nil {
		t.Fatal("Kfake() is nil")
	}
	c.Close()
	c.Close() // idempotent
}

func TestCreateTopic(t *testing.T) {
	ctx := testContext(t)
	c := startCluster(t, 1)
	if err := c.CreateTopic(ctx, "t", 12); err != nil {
		t.Fatal(err)
	}
	ends, err := c.EndOffsets(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(ends) != 12 {
		t.Fatalf("%d partitions, want 12", len(ends))
	}
	if err := c.CreateTopic(ctx, "t", 12); !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatalf("creating an existing topic: %v, want TopicAlreadyExists", err)
	}
	if err := c.CreateTopic(ctx, "u", 0); err == nil {
		t.Fatal("created a topic with 0 partitions")
	}
	if _, err := c.EndOffsets(ctx, "missing"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("end offsets of a missing topic: %v", err)
	}
}

// TestProduce checks that Produce reports where each message landed, that
// the partition is the one Kafka's Java producer would choose (checked with
// kafka-go's independent murmur2 port), and that the broker agrees.
func TestProduce(t *testing.T) {
	for _, brokers := range []int{1, 3} {
		ctx := testContext(t)
		c := startCluster(t, brokers)
		const parts = 12
		if err := c.CreateTopic(ctx, "clicks", parts); err != nil {
			t.Fatal(err)
		}
		msgs := generate(1, 20000)
		got, err := c.Produce(ctx, "clicks", msgs)
		if err != nil {
			t.Fatal(err)
		}
		want := map[int32]int{}
		bal := kafka.Murmur2Balancer{Consistent: true}
		all := make([]int, parts)
		for i := range all {
			all[i] = i
		}
		for _, m := range msgs {
			want[int32(bal.Balance(kafka.Message{Key: m.Key}, all...))]++
		}
		ends, err := c.EndOffsets(ctx, "clicks")
		if err != nil {
			t.Fatal(err)
		}
		for p := range int32(parts) {
			offs := got[p]
			if len(offs) != want[p] {
				t.Errorf("brokers=%d partition %d: %d messages, murmur2 says %d", brokers, p, len(offs), want[p])
			}
			for i, o := range offs {
				if o != int64(i) {
					t.Fatalf("brokers=%d partition %d: offset #%d is %d", brokers, p, i, o)
				}
			}
			if ends[p] != int64(len(offs)) {
				t.Errorf("brokers=%d partition %d: end offset %d, produced %d", brokers, p, ends[p], len(offs))
			}
		}
		// A second call continues where the first ended.
		more, err := c.Produce(ctx, "clicks", msgs[:100])
		if err != nil {
			t.Fatal(err)
		}
		for p, offs := range more {
			if offs[0] != ends[p] {
				t.Errorf("partition %d: second produce starts at %d, end was %d", p, offs[0], ends[p])
			}
		}
		if _, err := c.Produce(ctx, "missing", msgs[:1]); err == nil {
			t.Error("produced to a missing topic")
		}
	}
}

func TestProduceRate(t *testing.T) {
	ctx := testContext(t)
	c := startCluster(t, 1)
	if err := c.CreateTopic(ctx, "clicks", 12); err != nil {
		t.Fatal(err)
	}
	sum := func() int64 {
		ends, err := c.EndOffsets(ctx, "clicks")
		if err != nil {
			t.Fatal(err)
		}
		var n int64
		for _, e := range ends {
			n += e
		}
		return n
	}

	gen := clickgen.New(clickgen.Config{Seed: 2})
	start := time.Now()
	n, err := c.ProduceRate(ctx, "clicks", gen, 1000, 4000)
	if err != nil || n != 1000 {
		t.Fatalf("bounded: %d, %v", n, err)
	}
	if el := time.Since(start); el < 200*time.Millisecond || el > 2*time.Second {
		t.Errorf("1000 messages at 4000/s took %v", el)
	}
	if s := sum(); s != 1000 {
		t.Fatalf("broker holds %d messages", s)
	}

	n, err = c.ProduceRate(ctx, "clicks", gen, 5000, 0)
	if err != nil || n != 5000 {
		t.Fatalf("unpaced: %d, %v", n, err)
	}

	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	n, err = c.ProduceRate(short, "clicks", gen, 0, 0)
	if !errors.Is(err, context.DeadlineExceeded) || n == 0 {
		t.Fatalf("unbounded: %d, %v", n, err)
	}
	if s := sum(); s != int64(6000+n) {
		t.Fatalf("broker holds %d messages, ProduceRate acknowledged %d", s, 6000+n)
	}
	if _, err := c.ProduceRate(ctx, "clicks", gen, -1, 0); err == nil {
		t.Fatal("accepted n < 0")
	}
}
