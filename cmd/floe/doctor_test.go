package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/floe-dev/floe/schemas/clickgen"
)

// runFloe runs the binary to completion and returns its stdout+stderr.
func runFloe(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(floeBinary(t), args...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func wantContains(t *testing.T, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

// TestDoctorConsumerCaseStudies runs the calculator on both case studies
// and checks it reaches their worked answers' conclusions and numbers.
func TestDoctorConsumerCaseStudies(t *testing.T) {
	// Seed 000: 12 partitions, 45,000 msg/s, six NiFi consumers, 600 ms
	// synchronous lookups, 2.1 M lag, a rebalance every ~8 minutes.
	out, err := runFloe(t, "doctor", "consumer", "--max-poll-records", "500", "--max-poll-interval", "300s",
		"--session-timeout", "10s", "--heartbeat", "3s", "--per-record", "600ms",
		"--partitions", "12", "--members", "6", "--rate", "45000", "--lag", "2100000", "--rebalance-every", "8m")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	wantContains(t, out,
		"verdict: REBALANCES",
		"500 × 600ms = 300s", "300s ≥ max.poll.interval.ms=300000",
		"480s = 300s poll deadline + 180s of rebalance, rejoin and catch-up: consistent",
		"session.timeout.ms (10s) is not the cause", "tight for GC pauses and network jitter",
		"1 / 600ms = 1.67 records/s", "6 active consumers × 1.67 = 10 records/s",
		"arrivals 45,000 − capacity 10 = lag grows by 44,990 records/s", "lag 2,100,000 never drains",
		"45,000 records/s × 600ms = 27,000 records in processing at once",
		"500 × 6 = 3,000 records processed but not committed",
		"1. Lower max.poll.records to 50", "50 × 600ms = 30s at the mean",
		"Raise max.poll.interval.ms to 600000", "session.timeout.ms=30000 and heartbeat.interval.ms=10000",
		"Add consumers: 6 → 12", "Make the sink idempotent", "Adding partitions beyond 12 without an ordering plan")

	// Seed 001: 24 partitions, 8 instances, p50 700 ms / p99 2.8 s, Java
	// defaults; session.timeout.ms already raised to 120000 without effect.
	out, err = runFloe(t, "doctor", "consumer", "--per-record", "700ms", "--p99", "2.8s", "--session-timeout", "120s",
		"--partitions", "24", "--members", "8", "--json")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	var rep struct {
		Verdict         string  `json:"verdict"`
		PollLoop        float64 `json:"poll_loop_seconds"`
		PollLoopTail    float64 `json:"poll_loop_tail_seconds"`
		SessionIsCause  bool    `json:"session_is_cause"`
		MaxPollRecords  int     `json:"recommended_max_poll_records"`
		MaxPollInterval float64 `json:"recommended_max_poll_interval_seconds"`
		Input           struct {
			MaxPollIntervalSeconds float64 `json:"max_poll_interval_seconds"`
		} `json:"input"`
		Remedies []struct {
			Rank   int    `json:"rank"`
			Action string `json:"action"`
			Effect string `json:"effect"`
		} `json:"remedies"`
		Avoid []string `json:"avoid"`
	}
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("doctor consumer --json: %v\n%s", err, out)
	}
	if rep.Verdict != "rebalances" || rep.PollLoop != 350 || rep.PollLoopTail != 1400 || rep.SessionIsCause || rep.Input.MaxPollIntervalSeconds != 300 {
		t.Fatalf("seed 001: %+v; want rebalances, 500 × 0.7 = 350 s > the default 300 s, session not the cause", rep)
	}
	if rep.MaxPollRecords != 50 || rep.MaxPollInterval != 900 {
		t.Fatalf("seed 001: recommends max.poll.records %d, max.poll.interval %vs; want 50 and 900", rep.MaxPollRecords, rep.MaxPollInterval)
	}
	wantRanks := []string{"Lower max.poll.records to 50", "Decouple polling from processing", "Raise max.poll.interval.ms to 900000", "Reduce the call cost", "Make the sink idempotent"}
	if len(rep.Remedies) != len(wantRanks) {
		t.Fatalf("seed 001 remedies: %+v", rep.Remedies)
	}
	for i, w := range wantRanks {
		if !strings.HasPrefix(rep.Remedies[i].Action, w) || rep.Remedies[i].Rank != i+1 {
			t.Errorf("remedy %d is %q, want %q", i+1, rep.Remedies[i].Action, w)
		}
	}
	if !strings.Contains(rep.Remedies[0].Effect, "50 × 2.8s = 140s at the tail") {
		t.Errorf("shrinking the batch: %q, want the 140 s worst case at p99", rep.Remedies[0].Effect)
	}
	if !strings.Contains(strings.Join(rep.Avoid, "\n"), "Adding instances: 8 consumers already fit within 24 partitions") {
		t.Errorf("seed 001 must advise against adding instances: %v", rep.Avoid)
	}

	// Bad input exits 2 and names the flag.
	out, err = runFloe(t, "doctor", "consumer", "--per-record", "600ms", "--heartbeat", "20s", "--session-timeout", "10s")
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out, "--heartbeat") {
		t.Fatalf("heartbeat above the session: %v\n%s", err, out)
	}
}

type liveReport struct {
	TotalLag   int64 `json:"total_lag"`
	Partitions []struct {
		Partition int32 `json:"partition"`
		End       int64 `json:"end"`
		Watermark int64 `json:"watermark"`
		Lag       int64 `json:"lag"`
	} `json:"partitions"`
	Trend      string `json:"trend"`
	GroupState string `json:"group_state"`
	Members    []struct {
		Partitions []int32 `json:"partitions"`
	} `json:"members"`
	TopicPartitions int      `json:"topic_partitions"`
	Commits         int      `json:"commits"`
	RowsCommitted   int64    `json:"rows_committed"`
	Rebalances      float64  `json:"rebalances"`
	MetricsScraped  bool     `json:"metrics_scraped"`
	Hazards         []string `json:"hazards"`
}

func (e *env) doctor(t *testing.T, args ...string) (string, liveReport) {
	t.Helper()
	out, err := runFloe(t, append([]string{"doctor", "--config", e.config, "--log-level", "warn"}, args...)...)
	if err != nil {
		t.Fatalf("floe doctor %v: %v\n%s", args, err, out)
	}
	var rep liveReport
	for _, a := range args {
		if a == "--json" {
			if err := json.Unmarshal([]byte(out[strings.Index(out, "{"):]), &rep); err != nil {
				t.Fatalf("doctor --json: %v\n%s", err, out)
			}
		}
	}
	return out, rep
}

// TestDoctorLive: `floe doctor` against a kfake broker and a table written
// by real `floe run` processes reports the lag records produced after the
// last commit, members versus partitions, and partitions added later.
func TestDoctorLive(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ln.Addr().String()
	ln.Close()
	e := newEnv(t, 4, "metrics:\n  listen: "+metricsAddr+"\n")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 300, Seed: 11})
	produce := func(n int) map[int32][]int64 {
		msgs := make([]clickgen.Message, n)
		for i := range msgs {
			msgs[i] = gen.Next()
		}
		landed, err := e.cluster.Produce(ctx, e.topic, msgs)
		if err != nil {
			t.Fatal(err)
		}
		return landed
	}
	produce(2000)
	if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}

	// 300 more records after the scheduled run stopped: lag is exactly those.
	landed := produce(300)
	out, rep := e.doctor(t, "--json", "--sample", "1s")
	if rep.TotalLag != 300 || rep.Trend != "steady" || rep.GroupState != "Empty" || len(rep.Members) != 0 || rep.TopicPartitions != 4 {
		t.Fatalf("after 300 more records: lag %d, trend %s, group %s with %d members, %d partitions; want 300, steady, Empty with 0, 4\n%s",
			rep.TotalLag, rep.Trend, rep.GroupState, len(rep.Members), rep.TopicPartitions, out)
	}
	if rep.Commits == 0 || rep.RowsCommitted != 2000 {
		t.Fatalf("commit history: %d commits, %d rows; want some commits holding 2000 rows", rep.Commits, rep.RowsCommitted)
	}
	// A replay's commit is not one of the job's: it moves no watermark.
	w0 := strconv.FormatInt(rep.Partitions[0].Watermark, 10)
	if out, err := runFloe(t, "replay", "--config", e.config, "--partition", strconv.Itoa(int(rep.Partitions[0].Partition)), "--from", "0", "--to", w0); err != nil {
		t.Fatalf("floe replay: %v\n%s", err, out)
	}
	if _, again := e.doctor(t, "--json", "--sample", "0"); again.Commits != rep.Commits {
		t.Fatalf("after a replay: %d commits, want the job's %d", again.Commits, rep.Commits)
	}
	for _, p := range rep.Partitions {
		if want := int64(len(landed[p.Partition])); p.Lag != want || p.End-p.Watermark != want {
			t.Errorf("partition %d: lag %d (end %d − watermark %d), produced %d after the last commit", p.Partition, p.Lag, p.End, p.Watermark, want)
		}
	}
	out, _ = e.doctor(t, "--sample", "0")
	wantContains(t, out, "= 300 records", "members vs partitions: 0 members, 4 partitions (group Empty)", "No member is consuming")

	// A running member: caught up, one member holding all 4 partitions, and
	// its metrics scraped.
	member := e.start("member", "run")
	end, err := e.cluster.EndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	e.waitCommitted(end, 60*time.Second)
	url := fmt.Sprintf("http://%s/metrics", metricsAddr)
	var stable liveReport
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if out, stable = e.doctor(t, "--json", "--sample", "500ms", "--metrics-url", url); stable.GroupState == "Stable" {
			break
		}
	}
	if stable.TotalLag != 0 || stable.Trend != "caught-up" || len(stable.Members) != 1 || len(stable.Members[0].Partitions) != 4 || !stable.MetricsScraped || stable.Rebalances < 1 {
		t.Fatalf("with a running member: %+v\n%s", stable, out)
	}
	out, _ = e.doctor(t, "--sample", "0", "--metrics-url", url)
	wantContains(t, out, "members vs partitions: 1 member, 4 partitions (group Stable)", "4 partitions per member", "rebalances", "lag (s)")
	member.signal(t, syscall.SIGTERM)
	if err := member.wait(t, 30*time.Second); err != nil {
		t.Fatalf("member exit after SIGTERM: %v", err)
	}

	// Two partitions added after ingestion began: the ordering hazard.
	adm := kadm.NewClient(mustClient(t, e))
	if _, err := adm.CreatePartitions(ctx, 2, e.topic); err != nil {
		t.Fatal(err)
	}
	produce(100)
	out, rep = e.doctor(t, "--json", "--sample", "0")
	if len(rep.Hazards) != 1 || !strings.Contains(rep.Hazards[0], "partitions [4 5] were added") || rep.TopicPartitions != 6 {
		t.Fatalf("after adding 2 partitions: %d partitions, hazards %v\n%s", rep.TopicPartitions, rep.Hazards, out)
	}
	if rep.TotalLag != 100 {
		t.Fatalf("lag %d after 100 more records (new partitions count from their log start)", rep.TotalLag)
	}
	// Once the new partitions are committed the offset map covers them; the
	// partition counts the commits recorded still show the change.
	if err := e.start("after-growth", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	out, rep = e.doctor(t, "--json", "--sample", "0")
	if rep.TotalLag != 0 || len(rep.Hazards) != 1 || !strings.Contains(rep.Hazards[0], "commits recorded 4; partitions [4 5] were added") {
		t.Fatalf("after committing the new partitions: lag %d, hazards %v\n%s", rep.TotalLag, rep.Hazards, out)
	}
}

// TestDoctorStartOffsetLatest: a job started with start_offset latest on a
// topic with history reads none of it: where latest resolved is pinned in
// the group's Kafka offsets, and the table has no watermark until records
// arrive. `floe doctor` counts its lag from the pins. It counted from the
// log start: a caught-up job was reported the topic's whole history behind.
func TestDoctorStartOffsetLatest(t *testing.T) {
	e := newEnv(t, 4, "")
	e.config = writeConfig(t, e.dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks",
		"  session_timeout: 6s\n  heartbeat_interval: 500ms\n  rebalance_timeout: 15s\n  start_offset: latest\n",
		"commit:\n  interval: 500ms\n  max_records: 5000\n  grace: 5s\n")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 300, Seed: 11})
	history := make([]clickgen.Message, 2000)
	for i := range history {
		history[i] = gen.Next()
	}
	if _, err := e.cluster.Produce(ctx, e.topic, history); err != nil {
		t.Fatal(err)
	}
	member := e.start("member", "run")
	adm := kadm.NewClient(mustClient(t, e))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if res, err := adm.FetchOffsets(ctx, "floe-test"); err == nil && len(res[e.topic]) == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the member did not pin where latest resolved in the group's offsets")
		}
	}
	out, rep := e.doctor(t, "--json", "--sample", "0")
	if rep.TotalLag != 0 {
		t.Fatalf("a job started at latest with nothing produced since: lag %d, want 0\n%s", rep.TotalLag, out)
	}
	out, _ = e.doctor(t, "--sample", "0")
	wantContains(t, out, "partitions [0 1 2 3] are not in the table's offset map: counted from the group's Kafka offset")
	member.signal(t, syscall.SIGTERM)
	if err := member.wait(t, 30*time.Second); err != nil {
		t.Fatalf("member exit after SIGTERM: %v", err)
	}
}

// TestDoctorRefusesMisspeltGroupAndTopic: `floe doctor` refuses, as `floe
// verify` does (status 2, the same messages), a --group the table holds no
// offsets of while another group holds the topic's, and a --topic it holds
// no offsets of while it holds another's; a new job (a table without
// offsets, whatever its group) is still diagnosed. Doctor diagnosed both
// misspellings, status 0: "0 rows committed … Nothing committed yet" with
// the whole topic counted as lag, or another topic's numbers.
func TestDoctorRefusesMisspeltGroupAndTopic(t *testing.T) {
	e := newEnv(t, 4, "")
	// A new job: its table created, nothing committed by any group.
	if err := e.start("empty", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up on an empty topic: %v", err)
	}
	if out, err := runFloe(t, "doctor", "--config", e.config, "--sample", "0", "--group", "floe-tset"); err != nil || !strings.Contains(out, "Nothing committed yet") {
		t.Fatalf("doctor of a new job under another group: %v, want status 0 and nothing committed yet\n%s", err, out)
	}

	gen := clickgen.New(clickgen.Config{Sessions: 100, Seed: 7})
	msgs := make([]clickgen.Message, 500)
	for i := range msgs {
		msgs[i] = gen.Next()
	}
	if _, err := e.cluster.Produce(t.Context(), e.topic, msgs); err != nil {
		t.Fatal(err)
	}
	if err := e.start("scheduled", "run", "--until-caught-up").wait(t, 90*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	if _, rep := e.doctor(t, "--json", "--sample", "0"); rep.RowsCommitted != 500 || rep.TotalLag != 0 {
		t.Fatalf("doctor of the job: %d rows committed, lag %d; want 500, 0", rep.RowsCommitted, rep.TotalLag)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--group", "floe-tset"}, `table analytics.clicks holds no offsets of topic clicks under group "floe-tset", only under floe-test`},
		{[]string{"--topic", e.topic + ".dlq"}, `table analytics.clicks holds no offsets of topic "clicks.dlq", only of clicks`},
	} {
		for _, cmd := range [][]string{{"verify"}, {"doctor", "--sample", "0"}} {
			args := append(append(cmd, "--config", e.config, "--log-level", "warn"), c.args...)
			out, err := runFloe(t, args...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(out, c.want) {
				t.Errorf("floe %v: %v, want status 2 and %q\n%s", args, err, c.want, out)
			}
		}
	}
}

// TestDoctorScrapeRedirectNotFollowed: a metrics endpoint that redirects
// elsewhere fails the scrape, naming the target redacted, and the target
// receives nothing. Before, doctor followed it to any host, sending the
// --metrics-url it left, query token included, as the Referer.
func TestDoctorScrapeRedirectNotFollowed(t *testing.T) {
	const secret = "sCr4pe-s3cret"
	var reached atomic.Value
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Store(r.Header.Get("Referer"))
		http.NotFound(w, r)
	}))
	t.Cleanup(other.Close)
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+"/metrics?sig="+secret, http.StatusFound)
	}))
	t.Cleanup(redirecting.Close)
	_, err := scrape(context.Background(), redirecting.URL+"/metrics?token="+secret, "t", "x.y")
	if err == nil || !strings.Contains(err.Error(), `"`+other.URL+`/metrics?sig=REDACTED": redirect not followed`) {
		t.Errorf("got %v, want the redirect to %s refused", err, other.URL)
	}
	if err != nil && strings.Contains(err.Error(), secret) {
		t.Errorf("a credential leaked: %v", err)
	}
	if got := reached.Load(); got != nil {
		t.Errorf("the redirect's target got a request (Referer %q)", got)
	}
}

// TestDoctorScrapeAnswerBounded: a --metrics-url that answers without end
// (a wrong port, a download, a federation endpoint) fails the scrape once
// 64 MiB are read. Before, the whole answer was parsed: a 256 MiB body
// without a newline cost doctor 512 MiB of heap.
func TestDoctorScrapeAnswerBounded(t *testing.T) {
	line := bytes.Repeat([]byte("a"), 1<<20)
	big := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 80 { // MiB
			if _, err := w.Write(line); err != nil {
				return
			}
		}
	}))
	t.Cleanup(big.Close)
	_, err := scrape(context.Background(), big.URL+"/metrics", "t", "x.y")
	if err == nil || !strings.Contains(err.Error(), "answer larger than 64 MiB: not a floe /metrics endpoint?") {
		t.Fatalf("got %.200v, want the answer refused as larger than 64 MiB", err)
	}
}

// TestDoctorMetricsURLCredentialsNotShown: --metrics-url's password and
// query token stay out of doctor's errors, whether the scrape fails, is
// refused or the URL does not parse. Before, each message quoted the URL
// as given.
func TestDoctorMetricsURLCredentialsNotShown(t *testing.T) {
	const secret = "sCr4pe-s3cret"
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	_ = ln.Close()
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusUnauthorized)
	}))
	t.Cleanup(refusing.Close)
	for _, u := range []string{
		"http://prom:" + secret + "@" + closed + "/metrics?token=" + secret,
		strings.Replace(refusing.URL, "http://", "http://prom:"+secret+"@", 1) + "/metrics?token=" + secret,
		"http://prom:pa%ss-" + secret + "@" + closed + "/metrics",
	} {
		_, err := scrape(context.Background(), u, "t", "x.y")
		if err == nil || !strings.Contains(err.Error(), "--metrics-url") {
			t.Fatalf("%s: got %v, want a --metrics-url error", u, err)
		}
		if strings.Contains(err.Error(), secret) {
			t.Errorf("a credential leaked: %v", err)
		}
	}
}
