package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestVerifyWithoutItsDeadLetterTopic: `floe verify` whose dead-letter
// topic the brokers answer for but will not let it read exits 2 naming it,
// as for any unreachable service, and points at --no-dlq, which verifies
// without it (also with the brokers down). It warned and counted the dead
// letters as gaps: status 1, a table that does not reconcile.
func TestVerifyWithoutItsDeadLetterTopic(t *testing.T) {
	e := newEnv(t, 1, "")
	if _, err := e.cluster.ProduceRate(t.Context(), e.topic, clickgen.New(clickgen.Config{Seed: 1}), 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	dlq := e.topic + ".dlq"
	kf := e.cluster.Kfake()
	kf.ControlKey(kmsg.ListOffsets.Int16(), func(r kmsg.Request) (kmsg.Response, error, bool) {
		kf.KeepControl()
		req := r.(*kmsg.ListOffsetsRequest)
		if !slices.ContainsFunc(req.Topics, func(rt kmsg.ListOffsetsRequestTopic) bool { return rt.Topic == dlq }) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ListOffsetsResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewListOffsetsResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewListOffsetsResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.TopicAuthorizationFailed.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	p := e.start("verify", "verify")
	var exit *exec.ExitError
	if err := p.wait(t, 60*time.Second); !errors.As(err, &exit) || exit.ExitCode() != 2 ||
		!strings.Contains(p.output(), "dead-letter topic clicks.dlq not read, so gaps cannot be told from dead letters (--no-dlq verifies without it)") {
		t.Fatalf("verify with its dead-letter topic unreadable: %v, want status 2 naming the dead-letter topic\n%s", err, p.output())
	}
	if p := e.start("verify without it", "verify", "--no-dlq"); p.wait(t, 60*time.Second) != nil {
		t.Fatalf("verify --no-dlq failed:\n%s", p.output())
	}
	if p := e.start("verify offline", "verify", "--brokers", "127.0.0.1:1", "--no-dlq"); p.wait(t, 60*time.Second) != nil {
		t.Fatalf("verify --no-dlq with the broker down failed:\n%s", p.output())
	}
}

// TestVerifyNamesUnreachableBrokers: `floe verify` that cannot reach
// kafka.brokers (a wrong --brokers) exits 2 naming them unreachable, as
// other commands name kafka.brokers, without pointing at --no-dlq. It said
// the dead-letter topic could not be read and suggested --no-dlq, which
// on this healthy table with dead letters reports each of them as a gap:
// NOT OK, status 1.
func TestVerifyNamesUnreachableBrokers(t *testing.T) {
	e := newEnv(t, 1, "")
	gen := clickgen.New(clickgen.Config{Seed: 2, MalformedRate: 0.2})
	if _, err := e.cluster.ProduceRate(t.Context(), e.topic, gen, 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	if p := e.start("verify", "verify"); p.wait(t, 60*time.Second) != nil {
		t.Fatalf("verify of the job's table failed:\n%s", p.output())
	}
	p := e.start("verify elsewhere", "verify", "--brokers", "127.0.0.1:1")
	var exit *exec.ExitError
	err := p.wait(t, 60*time.Second)
	if out := p.output(); !errors.As(err, &exit) || exit.ExitCode() != 2 ||
		!strings.Contains(out, "kafka.brokers 127.0.0.1:1: unreachable: ") || strings.Contains(out, "--no-dlq") {
		t.Fatalf("verify with --brokers 127.0.0.1:1: %v, want status 2 naming kafka.brokers unreachable, not --no-dlq\n%s", err, out)
	}
}

// TestVerifyNamesAMissingDeadLetterTopic: `floe verify` whose dead-letter
// topic does not exist says so, in the text and in --json, and goes on: the
// job's writer creates the topic with its first dead letter, so a table
// without dead letters verifies OK, and one whose dead letters went to
// another topic (a misspelt dlq_topic) fails on their gaps with the reason
// beside them. Verify read a missing topic as an empty one without a word.
func TestVerifyNamesAMissingDeadLetterTopic(t *testing.T) {
	e := newEnv(t, 1, "")
	ctx := t.Context()
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	misspelt := filepath.Join(e.dir, "misspelt.yaml")
	cfg = []byte(strings.Replace(string(cfg), "  group: floe-test\n", "  group: floe-test\n  dlq_topic: clicks.dlqq\n", 1))
	if err := os.WriteFile(misspelt, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		malformed float64
		status    int
	}{{0, 0}, {0.2, 1}} {
		gen := clickgen.New(clickgen.Config{Seed: int64(i + 1), MalformedRate: c.malformed})
		if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 100, 0); err != nil {
			t.Fatal(err)
		}
		if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
			t.Fatalf("floe run --until-caught-up: %v", err)
		}
		for _, args := range [][]string{{"verify"}, {"verify", "--json"}} {
			out, err := runFloe(t, append(args, "--config", misspelt, "--log-level", "error")...)
			status := 0
			var exit *exec.ExitError
			if errors.As(err, &exit) {
				status = exit.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			want := "dead-letter topic clicks.dlqq does not exist"
			if args[len(args)-1] == "--json" {
				want = `"missing_dead_letter_topics": [
    "clicks.dlqq"
  ]`
			}
			if status != c.status || !strings.Contains(out, want) {
				t.Fatalf("floe %v with malformed rate %v: status %d, want %d and %q\n%s", args, c.malformed, status, c.status, want, out)
			}
		}
	}
}

// TestVerifyAfterTheDeadLetterTopicsRetention: once retention deletes old
// dead letters (Kafka's default retention.ms is 7 days), `floe verify`
// names the dead-letter partitions that no longer start at 0 and counts
// the offsets it cannot tell from their deleted letters as not checked,
// in the text and in --json, and exits 0. It reported a healthy table's
// every dead-lettered offset as a gap, status 1, without a word why.
func TestVerifyAfterTheDeadLetterTopicsRetention(t *testing.T) {
	e := newEnv(t, 1, "")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Seed: 3, MalformedRate: 0.2})
	if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 100, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	if out, err := runFloe(t, "verify", "--config", e.config, "--log-level", "error"); err != nil {
		t.Fatalf("floe verify before retention: %v\n%s", err, out)
	}
	end, err := e.cluster.EndOffsets(ctx, e.topic+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.cluster.DeleteRecords(ctx, e.topic+".dlq", end); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"verify"}, {"verify", "--json"}} {
		out, err := runFloe(t, append(args, "--config", e.config, "--log-level", "error")...)
		want := "retention deleted dead letters, so "
		if args[len(args)-1] == "--json" {
			want = `"trimmed_dead_letters": [`
		}
		if err != nil || !strings.Contains(out, want) || !strings.Contains(out, "clicks.dlq/") {
			t.Fatalf("floe %v after the dead-letter topic's retention: %v, want status 0 and %q naming its partitions\n%s", args, err, want, out)
		}
	}
}
