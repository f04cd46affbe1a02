package main

import (
	"context"
	"errors"
	"io"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/catalog"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/floe-dev/floe/internal/unwritable"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// TestSigtermDuringStartup: a SIGTERM (the command's context cancelled, as
// signal.NotifyContext does) while `floe run` waits on a broker at start-up
// is a stop like one after it: status 0, and 3 ("interrupted before
// catching up") for a scheduled run, where it was status 2 and "context
// canceled".
func TestSigtermDuringStartup(t *testing.T) {
	broker, _ := blackHole(t) // accepts connections and never answers
	for _, tc := range []struct {
		args   []string
		status int
	}{
		{[]string{"run"}, 0},
		{[]string{"run", "--until-caught-up"}, 3},
	} {
		dir := t.TempDir()
		cfg := writeConfig(t, dir, broker, "floe-test", "analytics.clicks", "", "")
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(time.Second, cancel) // the SIGTERM
		root := rootCmd()
		root.SetArgs(append(tc.args, "--config", cfg, "--log-level", "error"))
		err := root.ExecuteContext(ctx)
		cancel()
		status := 0
		if err != nil {
			status = exitCode(err)
		}
		if status != tc.status {
			t.Errorf("floe %v stopped during start-up: %v, status %d; want status %d", tc.args, err, status, tc.status)
		}
	}
}

// TestRecreatedTopicIsRefused: a topic deleted and created again restarts
// its offsets at 0, below the table's watermarks. A scheduled run took
// itself for caught up and exited 0, a long-running one resumed past the
// new log's end and skipped every record below the old watermark, and
// nothing said so; now the run ends with status 2 naming the partitions
// and what to do.
func TestRecreatedTopicIsRefused(t *testing.T) {
	e := newEnv(t, 2, "")
	ctx := t.Context()
	if _, err := e.cluster.ProduceRate(ctx, e.topic, clickgen.New(clickgen.Config{Seed: 1}), 600, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("first", "run", "--until-caught-up").wait(t, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := kadm.NewClient(mustClient(t, e)).DeleteTopics(ctx, e.topic); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	if err := e.cluster.CreateTopic(ctx, e.topic, 2); err != nil {
		t.Fatal(err)
	}
	// A fresh client: the cluster's own caches the old topic id.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(e.cluster.Addrs()...), kgo.DefaultProduceTopic(e.topic))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	g := clickgen.New(clickgen.Config{Seed: 2})
	for range 300 {
		m := g.Next()
		if err := pcl.ProduceSync(ctx, &kgo.Record{Key: m.Key, Value: m.Value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"run", "--until-caught-up"}, {"run"}} {
		p := e.start("after the recreation", args...)
		err := p.wait(t, 60*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(p.output(), "the topic was recreated or truncated") {
			t.Fatalf("floe %s on the recreated topic: %v, want status 2 naming the cause\n%s", strings.Join(args, " "), err, p.output())
		}
	}
	// Nor under a new group, nor by a replay: the table holds the old
	// topic's rows at the offsets the new records reuse, which the offset
	// dedupe skipped as copies — the new group's watermarks passed them, and
	// verify said OK. (A new group was the advice.)
	e.config = writeConfig(t, e.dir, e.cluster.Addrs()[0], "floe-new", "analytics.clicks", "", "")
	for _, args := range [][]string{{"run", "--until-caught-up", "--accept-group-change"}, {"replay", "--partition", "0", "--from", "0", "--to", "10"}} {
		p := e.start("on the old table", args...)
		err := p.wait(t, 60*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(p.output(), "ingest it into a new table") {
			t.Fatalf("floe %s of the recreated topic into the old table: %v, want status 2 naming the cause\n%s", strings.Join(args, " "), err, p.output())
		}
	}
}

// TestTableItCannotWriteIsRefusedAtStart: a table whose data location the
// job's user cannot write (a changed ACL, a wrong hdfs.user) is refused at
// start-up by the commands that write it — status 2 naming the location —,
// while verify, which only reads, still runs. Nothing checked write access
// before: `floe run --until-caught-up` started, failed every flush and
// never exited.
func TestTableItCannotWriteIsRefusedAtStart(t *testing.T) {
	e := newEnv(t, 2, "")
	gen := clickgen.New(clickgen.Config{Seed: 1})
	if _, err := e.cluster.ProduceRate(t.Context(), e.topic, gen, 300, 0); err != nil {
		t.Fatal(err)
	}
	if err := e.start("first", "run", "--until-caught-up").wait(t, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	tbl, err := e.loadTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	data := strings.TrimPrefix(tbl.Location(), "file://") + "/data"
	unwritable.Dir(t, data)
	if _, err := e.cluster.ProduceRate(t.Context(), e.topic, gen, 300, 0); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"run", "--until-caught-up"},
		{"run"},
		{"replay", "--partition", "0", "--from", "0", "--to", "10"},
		{"maintain"},
	} {
		p := e.start(args[0], args...)
		err := p.wait(t, 30*time.Second)
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 2 ||
			!strings.Contains(p.output(), "cannot write its data files under "+tbl.Location()+"/data") {
			t.Fatalf("floe %s on a table it cannot write: %v; want status 2 naming its data location\n%s",
				strings.Join(args, " "), err, tail(p.output(), 3000))
		}
	}
	if err := e.start("verify", "verify").wait(t, 30*time.Second); err != nil {
		t.Fatalf("floe verify of a table it cannot write: %v", err)
	}
}

// TestSigtermBeforeTheFlushThatCatchesUp: a scheduled run stopped while it
// holds every record up to its end offsets, not yet committed, commits them
// in its final flush and so has caught up: status 0. It exited 3
// ("interrupted before catching up") although the table held every end
// offset.
func TestSigtermBeforeTheFlushThatCatchesUp(t *testing.T) {
	metrics := freeAddr(t)
	e := newEnv(t, 2, "")
	// No flush before the stop: every record waits in the buffers.
	e.config = writeConfig(t, e.dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks",
		"  session_timeout: 6s\n  heartbeat_interval: 500ms\n  rebalance_timeout: 15s\n",
		"commit:\n  interval: 1h\n  max_records: 100000\n  grace: 5s\nmetrics:\n  listen: "+metrics+"\n")
	ctx := t.Context()
	if _, err := e.cluster.ProduceRate(ctx, e.topic, clickgen.New(clickgen.Config{Seed: 5}), 500, 0); err != nil {
		t.Fatal(err)
	}
	end, err := e.endOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	p := e.start("scheduled", "run", "--until-caught-up")
	consumed := func() bool {
		resp, err := http.Get("http://" + metrics + "/metrics")
		if err != nil {
			return false // not listening yet
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strings.Contains(string(b), "\nfloe_records_consumed_total 500\n")
	}
	for deadline := time.Now().Add(60 * time.Second); !consumed(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the scheduled run has not fetched the 500 records within 60 s")
		}
	}
	p.signal(t, syscall.SIGTERM)
	err = p.wait(t, 60*time.Second)
	if wm := e.watermarks(ctx); !maps.Equal(wm, end) {
		t.Fatalf("after the final flush the table's watermarks are %v, want the end offsets %v", wm, end)
	}
	if err != nil {
		t.Fatalf("the run whose final flush committed every end offset %v exited with %v\n%s", end, err, tail(p.output(), 2000))
	}
}

// TestSecondSignalKillsAHungStop: the first SIGTERM asks floe to stop
// gracefully; a second one, for a stop held up by a call that cannot be
// interrupted (a NameNode that accepts and never answers, waited on for up
// to hdfs.io-timeout), kills it at once. The second signal was caught and
// ignored like the first, leaving only SIGKILL.
func TestSecondSignalKillsAHungStop(t *testing.T) {
	namenode, accepted := blackHole(t)
	// A broker with the topics: run checks them before it creates the
	// table, the call that hangs here.
	e := newEnv(t, 1, "")
	dir := t.TempDir()
	cat := sqliteCatalog(dir)
	cat["warehouse"] = "hdfs://" + namenode + "/warehouse"
	cat["hdfs.user"] = "floe"
	cat["hdfs.io-timeout"] = "2m"
	e.dir, e.config = dir, writeConfigCatalog(t, dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks", cat, "", "")
	p := e.start("floe run", "run")
	p.signalOnceHung(t, accepted)
	time.Sleep(500 * time.Millisecond)
	p.signal(t, syscall.SIGTERM)
	err := p.wait(t, 10*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGTERM {
		t.Fatalf("floe run after a second SIGTERM: %v; want killed by it", err)
	}
}

// TestSignalledCommandSaysSo: a replay stopped by SIGTERM while it waits on
// a broker says the signal stopped it; it ended with "floe: context
// canceled", which reads as a failure of its own.
func TestSignalledCommandSaysSo(t *testing.T) {
	broker, accepted := blackHole(t)
	dir := t.TempDir()
	e := &env{t: t, dir: dir, config: writeConfig(t, dir, broker, "floe-test", "analytics.clicks", "", "")}
	p := e.start("floe replay", "replay", "--partition", "0", "--from", "0", "--to", "10")
	p.signalOnceHung(t, accepted)
	var exit *exec.ExitError
	if err := p.wait(t, 30*time.Second); !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("floe replay after SIGTERM: %v; want status 2", err)
	}
	if out := p.output(); !strings.Contains(out, "floe: terminated signal received: stopped before it finished") {
		t.Fatalf("floe replay stopped by SIGTERM does not say so:\n%s", tail(out, 2000))
	}
}

// blackHole listens on a local port that accepts connections and never
// answers (a broker or NameNode that hangs); accepted gets a value once a
// connection came.
func blackHole(t *testing.T) (addr string, accepted <-chan struct{}) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	came := make(chan struct{}, 1)
	go func() {
		var conns []net.Conn
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
			select {
			case came <- struct{}{}:
			default:
			}
		}
	}()
	return ln.Addr().String(), came
}

// signalOnceHung sends p SIGTERM once it has connected to a black hole
// (accepted) and is waiting on it.
func (p *proc) signalOnceHung(t *testing.T, accepted <-chan struct{}) {
	t.Helper()
	select {
	case <-accepted:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s did not connect within 30 s", p.name)
	}
	time.Sleep(200 * time.Millisecond)
	p.signal(t, syscall.SIGTERM)
}

// TestRegistryCredentialsOverHTTPWarned: `floe run` with registry
// credentials sent to an http:// registry.url warns at start-up, naming
// none of them, as it does for the catalog's and the enrichment service's.
// Before, nothing was said.
func TestRegistryCredentialsOverHTTPWarned(t *testing.T) {
	const secret = "sr-s3cret-pa55word"
	reg := srfake.New()
	t.Cleanup(reg.Close)
	e := newEnv(t, 1, "format: avro\nregistry:\n  url: "+reg.URL()+"\n  basic_auth: \"floe:"+secret+"\"\n")
	p := e.start("run", "run", "--until-caught-up")
	if err := p.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe run: %v\n%s", err, tail(p.output(), 3000))
	}
	if out := p.output(); !strings.Contains(out, "registry credentials (basic_auth, bearer_token or the url's user info) are sent over plain http") ||
		strings.Contains(out, secret) {
		t.Errorf("want the registry's credentials over http warned about, without them:\n%s", tail(out, 3000))
	}
}

// TestRefusedMemberSettingsCreateNoTable: `floe run` and `floe replay`
// refused for a setting only the member (or the replay) used to check —
// the registry's url, basic_auth or on_incompatible, the proto file, the
// enrichment's TLS files and cache file, metrics.listen (malformed, or
// an address in use) — create no table.
// They were checked when the member built its decoder, enrichment stage or
// metrics endpoint, after the table was created, so the refusal left an
// empty table behind.
func TestRefusedMemberSettingsCreateNoTable(t *testing.T) {
	e := newEnv(t, 1, "")
	ctx := t.Context()
	if _, err := e.cluster.Produce(ctx, e.topic, []clickgen.Message{clickgen.New(clickgen.Config{Seed: 1}).Next()}); err != nil {
		t.Fatal(err)
	}
	payments, err := filepath.Abs("../../schemas/examples/payments.avsc")
	if err != nil {
		t.Fatal(err)
	}
	avro := "schema: " + payments + "\nformat: avro\n"
	enrich := "enrich:\n  url: http://127.0.0.1:1/lookup\n  key: user_id\n  fields: [{name: segment, type: string}]\n"
	missing := filepath.Join(t.TempDir(), "missing")
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	for _, tc := range []struct {
		name, extra, want string
		replay            bool // replay refuses it too
	}{
		{"registry url", avro + "registry: {url: ftp://127.0.0.1:1}\n", "registry.url", true},
		{"registry basic_auth", avro + "registry: {url: http://127.0.0.1:1, basic_auth: nocolon}\n", "registry.basic_auth", true},
		{"registry on_incompatible", avro + "registry: {url: http://127.0.0.1:1, on_incompatible: skip}\n", "registry.on_incompatible", true},
		{"proto file", "schema: " + payments + "\nformat: protobuf\nproto: {file: " + missing + "/p.proto, message: a.B}\n", "proto.file", true},
		{"enrich tls", enrich + "  tls: {ca_file: " + missing + "/ca.pem}\n", "enrich.tls.ca_file", true},
		{"enrich cache_file", enrich + "  cache_file: " + missing + "/enrich.cache\n", "enrich.cache_file", false},
		{"metrics listen", "metrics: {listen: bogus}\n", "metrics.listen", true},
		{"metrics listen taken", "metrics: {listen: '" + taken.Addr().String() + "'}\n", "address already in use", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeConfig(t, dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks", "", tc.extra)
			cmds := [][]string{{"run", "--until-caught-up"}}
			if tc.replay {
				cmds = append(cmds, []string{"replay", "--partition", "0", "--from", "0", "--to", "1"})
			}
			for _, args := range cmds {
				root := rootCmd()
				root.SetArgs(append(args, "--config", cfg, "--log-level", "error"))
				err := root.ExecuteContext(ctx)
				if err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
					t.Errorf("floe %v: %v (status %d), want status 2 naming %q", args, err, exitCode(err), tc.want)
				}
			}
			cat, err := catalog.Load(ctx, "floe", iceberg.Properties(sqliteCatalog(dir)))
			if err != nil {
				t.Fatal(err)
			}
			if _, lerr := cat.LoadTable(ctx, []string{"analytics", "clicks"}); !errors.Is(lerr, catalog.ErrNoSuchTable) {
				t.Errorf("the refused configuration created table analytics.clicks (%v)", lerr)
			}
		})
	}
}

// TestMisspeltTopicCreatesNothing: `floe run` with a kafka.topic the
// brokers do not have, or with brokers out of reach, is refused before it
// creates the table or asks for the dead-letter topic, naming kafka.topic or
// kafka.brokers. It created the table, and on a broker that creates topics
// on request (kfake here, as auto.create.topics.enable=true does) a
// dead-letter topic named after the misspelling, before the member refused
// the topic.
func TestMisspeltTopicCreatesNothing(t *testing.T) {
	e := newEnv(t, 1, "")
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		args []string
		want string
		dlq  string // the dead-letter topic that must not be created
	}{
		{"misspelt topic", []string{"--topic", "clickz"}, "kafka.topic clickz (kafka.brokers " + e.cluster.Addrs()[0] + ")", "clickz.dlq"},
		{"brokers out of reach", []string{"--brokers", "127.0.0.1:1"}, "kafka.brokers 127.0.0.1:1: ", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeConfig(t, dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks", "", "")
			root := rootCmd()
			root.SetArgs(append([]string{"run", "--until-caught-up", "--config", cfg, "--log-level", "error"}, tc.args...))
			if err := root.ExecuteContext(ctx); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("floe run %v: %v (status %d), want status 2 naming %q", tc.args, err, exitCode(err), tc.want)
			}
			cat, err := catalog.Load(ctx, "floe", iceberg.Properties(sqliteCatalog(dir)))
			if err != nil {
				t.Fatal(err)
			}
			if _, lerr := cat.LoadTable(ctx, []string{"analytics", "clicks"}); !errors.Is(lerr, catalog.ErrNoSuchTable) {
				t.Errorf("the refused run created table analytics.clicks (%v)", lerr)
			}
			if tc.dlq == "" {
				return
			}
			topics, err := kadm.NewClient(mustClient(t, e)).ListTopics(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if topics.Has(tc.dlq) {
				t.Errorf("the refused run created dead-letter topic %s", tc.dlq)
			}
		})
	}
}

// TestMissingDeadLetterTopicCreatesNoTable: `floe run` refused because its
// dead-letter topic does not exist and the broker does not create it (the
// answer of Apache Kafka with auto.create.topics.enable=false, which kfake
// is made to give) creates no table: the check ran when the member
// started, after the table was created.
func TestMissingDeadLetterTopicCreatesNoTable(t *testing.T) {
	e := newEnv(t, 1, "")
	ctx := t.Context()
	dlq := e.topic + ".dlq"
	e.cluster.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Metadata}, Topic: dlq, Err: kerr.UnknownTopicOrPartition, Count: -1})
	dir := t.TempDir()
	cfg := writeConfig(t, dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks", "", "")
	root := rootCmd()
	root.SetArgs([]string{"run", "--until-caught-up", "--config", cfg, "--log-level", "error"})
	if err := root.ExecuteContext(ctx); err == nil || exitCode(err) != 2 || !strings.Contains(err.Error(), "dead-letter topic "+dlq+" does not exist") {
		t.Fatalf("floe run with no dead-letter topic: %v (status %d), want status 2 naming the topic", err, exitCode(err))
	}
	cat, err := catalog.Load(ctx, "floe", iceberg.Properties(sqliteCatalog(dir)))
	if err != nil {
		t.Fatal(err)
	}
	if _, lerr := cat.LoadTable(ctx, []string{"analytics", "clicks"}); !errors.Is(lerr, catalog.ErrNoSuchTable) {
		t.Errorf("the refused run created table analytics.clicks (%v)", lerr)
	}
}
