package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go/table"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// interopKafkaVersions are the Apache Kafka releases floe is tested against:
// the 3.6 line of the case studies and the newest 4.x.
var interopKafkaVersions = []string{"3.6.2", "4.4.0"}

// TestInteropKafka runs floe against real Apache Kafka brokers (KRaft, single
// node, from deploy/kafka), one per version: the exactly-once check through a
// broker SIGKILL and restart and a member SIGKILL, input written by Kafka's
// own console producer with every compression codec, and SASL/SCRAM-SHA-512
// over TLS end to end.
func TestInteropKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test with real Apache Kafka skipped in -short mode")
	}
	for _, v := range interopKafkaVersions {
		t.Run("kafka-"+v, func(t *testing.T) {
			k := infra.StartKafka(t, v, infra.WithSASLTLS())
			t.Run("ExactlyOnceBrokerKill", func(t *testing.T) { interopExactlyOnce(t, k) })
			t.Run("ConsoleProducerCodecs", func(t *testing.T) { interopCodecs(t, k) })
			t.Run("SASLSCRAMOverTLS", func(t *testing.T) { interopSASL(t, k, "SCRAM-SHA-512") })
			t.Run("Transactions", func(t *testing.T) { interopTransactions(t, k) })
		})
	}
}

// newKafkaEnv creates topic (and its dead-letter topic) on the real broker
// and writes a floe config pointing at broker with kafkaExtra in its kafka
// section; the checker reads the PLAINTEXT listener.
func newKafkaEnv(t *testing.T, k *infra.Kafka, topic string, partitions int32, broker, kafkaExtra string) *env {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for name, n := range map[string]int32{topic: partitions, topic + ".dlq": 2} {
		res, err := kadm.NewClient(cl).CreateTopic(t.Context(), n, 1, nil, name)
		if err == nil {
			err = res.Err
		}
		if err != nil {
			t.Fatalf("creating topic %s on kafka %s: %v", name, k.Version, err)
		}
	}
	e := &env{t: t, dir: t.TempDir(), brokers: []string{k.Bootstrap}, topic: topic}
	e.config = writeConfig(t, e.dir, broker, "floe-test", "analytics.clicks",
		"  session_timeout: 6s\n  heartbeat_interval: 500ms\n  rebalance_timeout: 15s\n"+kafkaExtra,
		"commit:\n  interval: 500ms\n  max_records: 5000\n  grace: 5s\n")
	return e
}

// floe runs `floe <cmd> --topic <e.topic> args...`.
func (e *env) floe(name, cmd string, args ...string) *proc {
	e.t.Helper()
	return e.start(name, append([]string{cmd, "--topic", e.topic}, args...)...)
}

// produceKafka produces n generated records to topic with franz-go
// (idempotent, acks=all, retrying through a broker restart), at rate per
// second (0: as fast as possible).
func produceKafka(ctx context.Context, brokers []string, topic string, gen *clickgen.Generator, n, rate int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ProducerLinger(5*time.Millisecond),
		kgo.RecordDeliveryTimeout(3*time.Minute))
	if err != nil {
		return err
	}
	defer cl.Close()
	start := time.Now()
	errc := make(chan error, 1) // the first failed record
	for sent := 0; sent < n; {
		target := n
		if rate > 0 {
			target = min(n, int(time.Since(start).Seconds()*float64(rate))+1)
		}
		for ; sent < target; sent++ {
			m := gen.Next()
			cl.Produce(ctx, &kgo.Record{Topic: topic, Key: m.Key, Value: m.Value}, func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case errc <- err:
					default:
					}
				}
			})
		}
		select {
		case err := <-errc:
			return fmt.Errorf("producing to %s: %w", topic, err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	if err := cl.Flush(ctx); err != nil {
		return err
	}
	select {
	case err := <-errc:
		return fmt.Errorf("producing to %s: %w", topic, err)
	default:
		return nil
	}
}

// interopExactlyOnce: two members on 12 partitions while the topic is
// produced to; the broker is SIGKILLed and restarted (same port, same data)
// mid-stream, then a member is SIGKILLed and another added. Every produced
// offset must end up a row or a dead letter exactly once, in session order.
func interopExactlyOnce(t *testing.T, k *infra.Kafka) {
	k = k.In(t)
	began := time.Now()
	e := newKafkaEnv(t, k, "clicks", 12, k.Bootstrap, "")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 1000, MalformedRate: 0.01, Seed: 42})
	if err := produceKafka(ctx, e.brokers, e.topic, gen, 15000, 0); err != nil {
		t.Fatal(err)
	}
	produced := make(chan error, 1)
	go func() { produced <- produceKafka(ctx, e.brokers, e.topic, gen, 15000, 1500) }()

	a := e.floe("a", "run")
	b := e.floe("b", "run")
	e.waitProgress(5000, 60*time.Second)

	k.Kill() // no controlled shutdown: members, producer and coordinator lose the broker
	t.Logf("broker killed after %s", time.Since(began).Round(time.Millisecond))
	k.Restart()

	e.waitProgress(18000, 90*time.Second)
	a.signal(t, syscall.SIGKILL) // a member killed without flushing or leaving
	c := e.floe("c", "run")
	c.waitLog(t, "msg=assigned", 60*time.Second) // c takes over a's partitions

	end := e.drain(t, produced, b, c)
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	var total int64
	for _, o := range end {
		total += o
	}
	if total != 30000 || rows+dead != total {
		t.Fatalf("produced 30000, the topic holds %d: %d rows + %d dead letters", total, rows, dead)
	}
	t.Logf("kafka %s: %d offsets → %d rows, %d dead letters, exactly once, through a broker SIGKILL and a member SIGKILL in %s",
		k.Version, total, rows, dead, time.Since(began).Round(time.Millisecond))
}

// interopCodecs: Apache Kafka's console producer writes records with each
// compression codec; the broker keeps the producer's codec, franz-go confirms
// what is stored, and floe (kafka-go) must turn every record into a row.
func interopCodecs(t *testing.T, k *infra.Kafka) {
	began := time.Now()
	e := newKafkaEnv(t, k, "codecs", 4, k.Bootstrap, "")
	ctx := t.Context()
	codecs := []string{"none", "gzip", "snappy", "lz4", "zstd"} // in kgo's CompressionType order
	const perCodec = 800
	codecOf := map[string]string{} // session id → codec
	inputs := make([]*bytes.Buffer, len(codecs))
	for i, codec := range codecs {
		// Each codec's sessions are its own: the generator's ids prefixed
		// with the codec, in the key and in the value.
		gen := clickgen.New(clickgen.Config{Sessions: 40, Seed: int64(1000 + i)})
		inputs[i] = &bytes.Buffer{}
		for range perCodec {
			m := gen.Next()
			session := codec + "-" + string(m.Key)
			value := bytes.Replace(m.Value, []byte(`"session_id":"`+string(m.Key)+`"`), []byte(`"session_id":"`+session+`"`), 1)
			if bytes.Equal(value, m.Value) {
				t.Fatalf("generated record without session_id %s: %s", m.Key, m.Value)
			}
			codecOf[session] = codec
			fmt.Fprintf(inputs[i], "%s\t%s\n", session, value)
		}
	}
	var g errgroup.Group
	for i, codec := range codecs {
		g.Go(func() error { return k.ConsoleProducer(e.topic, codec, inputs[i]) })
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	t.Logf("console producers done in %s", time.Since(began).Round(time.Millisecond))

	// What the broker stores, read independently of floe.
	end, err := e.endOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	stored := storedCodecs(t, e.brokers, e.topic, end)
	for i, codec := range codecs {
		if stored[int8(i)] != perCodec {
			t.Fatalf("the broker holds %d records compressed with %s, the console producer was given %d (by codec id: %v)",
				stored[int8(i)], codec, perCodec, stored)
		}
	}

	run := e.floe("codecs", "run", "--until-caught-up")
	if err := run.wait(t, 120*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v", err)
	}
	rows, _ := e.check(end, 0)
	if rows != int64(perCodec*len(codecs)) {
		t.Fatalf("%d rows, want %d", rows, perCodec*len(codecs))
	}
	perRows := map[string]int{}
	for s, n := range sessionRows(t, e) {
		perRows[codecOf[s]] += n
	}
	for _, codec := range codecs {
		if perRows[codec] != perCodec {
			t.Fatalf("rows by codec %v, want %d each", perRows, perCodec)
		}
	}
	t.Logf("kafka %s: rows by codec %v in %s", k.Version, perRows, time.Since(began).Round(time.Millisecond))
}

// interopTransactions: a transactional producer (franz-go) commits and
// aborts transactions in turn, a plain one writes between them, and one more
// transaction is left open. A scheduled run ingests the committed
// transactions and the plain records only, ends at the open transaction's
// start without waiting for it, and leaves no dead letter (the
// transactions' markers are no records); floe verify finds no gap.
func interopTransactions(t *testing.T, k *infra.Kafka) {
	began := time.Now()
	e := newKafkaEnv(t, k, "txns", 2, k.Bootstrap, "")
	ctx := t.Context()
	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(e.brokers...)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	txn, plain, open := client(kgo.TransactionalID("floe-interop")), client(), client(kgo.TransactionalID("floe-interop-open"))
	const perTxn = 50
	produce := func(cl *kgo.Client, session string, n int) {
		for seq := 1; seq <= n; seq++ {
			v := fmt.Appendf(nil, `{"event_id":"%s-%d","session_id":"%s","user_id":"u","event_type":"click","ts":1700000000000,"seq":%d}`,
				session, seq, session, seq)
			if err := cl.ProduceSync(ctx, &kgo.Record{Topic: e.topic, Key: []byte(session), Value: v}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
	}
	want := map[string]int{}
	for i := range 11 { // the last one committed: the log ends with its marker
		if err := txn.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		session, end := fmt.Sprintf("committed-%d", i), kgo.TryCommit
		if i%2 == 1 {
			session, end = fmt.Sprintf("aborted-%d", i), kgo.TryAbort
		} else {
			want[session] = perTxn
		}
		produce(txn, session, perTxn)
		if err := txn.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
		if i < 10 {
			produce(plain, fmt.Sprintf("plain-%d", i), 1)
			want[fmt.Sprintf("plain-%d", i)] = 1
		}
	}
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(open, "open", 10)
	defer func() {
		if err := open.EndTransaction(context.Background(), kgo.TryAbort); err != nil {
			t.Errorf("aborting the open transaction: %v", err)
		}
	}()

	run := e.floe("txns", "run", "--until-caught-up")
	if err := run.wait(t, 120*time.Second); err != nil {
		t.Fatalf("floe run --until-caught-up: %v\n%s", err, run.output())
	}
	got := sessionRows(t, e)
	if !maps.Equal(got, want) {
		t.Fatalf("rows by session %v, want %v: the committed transactions and the plain records", got, want)
	}
	if dl := e.readDeadLetters(ctx); len(dl) != 0 {
		t.Fatalf("dead letters %v, want none: markers are no records", dl)
	}
	v := e.floe("txns-verify", "verify")
	if err := v.wait(t, 60*time.Second); err != nil {
		t.Fatalf("floe verify: %v\n%s", err, v.output())
	}
	t.Logf("kafka %s: %d sessions of committed transactions and plain records ingested, aborted and open ones not, in %s",
		k.Version, len(want), time.Since(began).Round(time.Millisecond))
}

// storedCodecs reads topic up to end with franz-go and counts the records by
// the compression codec of the batch they are stored in (0 none, 1 gzip,
// 2 snappy, 3 lz4, 4 zstd).
func storedCodecs(t *testing.T, brokers []string, topic string, end map[int32]int64) map[int8]int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var total int64
	for _, o := range end {
		total += o
	}
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	out := map[int8]int{}
	for read := int64(0); read < total; {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("reading %s: %v after %d of %d records", topic, ctx.Err(), read, total)
		}
		fs.EachRecord(func(r *kgo.Record) {
			read++
			out[int8(r.Attrs.CompressionType())]++
		})
	}
	return out
}

// sessionRows counts the table's rows per session_id.
func sessionRows(t *testing.T, e *env) map[string]int {
	t.Helper()
	tbl, err := e.loadTable(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	_, batches, err := tbl.Scan(table.WithSelectedFields("session_id")).ToArrowRecords(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for b, err := range batches {
		if err != nil {
			t.Fatal(err)
		}
		col := b.Column(b.Schema().FieldIndices("session_id")[0]).(*array.String)
		for i := range col.Len() {
			out[col.Value(i)]++
		}
		b.Release()
	}
	return out
}

// interopSASL: floe against the SASL_SSL listener with mechanism (PLAIN,
// SCRAM-SHA-256 or SCRAM-SHA-512; the CA made by start.sh), the password from
// a file: every record becomes a row or a dead letter (written through the
// same listener). A wrong password, from the environment, ends `floe run`
// with a clear authentication error that quotes neither password. Each
// mechanism has its own topic and group, so they may run in parallel on one
// broker.
func interopSASL(t *testing.T, k *infra.Kafka, mechanism string) {
	began := time.Now()
	s := k.SASL
	if s == nil {
		t.Fatal("the broker was started without WithSASLTLS")
	}
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "kafka-password")
	if err := os.WriteFile(pwFile, []byte(s.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	security := fmt.Sprintf("  sasl:\n    mechanism: %s\n    username: %s\n    password_file: %s\n  tls:\n    ca_file: %s\n",
		mechanism, s.Username, pwFile, s.CAFile)
	topic := "secure-" + strings.ToLower(mechanism)
	group := "floe-" + topic
	e := newKafkaEnv(t, k, topic, 3, s.Bootstrap, security)
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 100, MalformedRate: 0.02, Seed: 9})
	if err := produceKafka(ctx, e.brokers, e.topic, gen, 3000, 0); err != nil {
		t.Fatal(err)
	}
	end, err := e.endOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	run := e.floe("sasl", "run", "--until-caught-up", "--group", group)
	if err := run.wait(t, 120*time.Second); err != nil {
		t.Fatalf("floe run over SASL_SSL: %v", err)
	}
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	if rows+dead != 3000 || dead == 0 {
		t.Fatalf("over SASL_SSL (%s): %d rows + %d dead letters, want 3000 with some dead letters", mechanism, rows, dead)
	}
	if strings.Contains(run.output(), s.Password) {
		t.Fatal("floe's log contains the SASL password")
	}

	// The wrong password, from the environment.
	wrong := "wrong-" + s.Password[:8] + "-pw"
	e.procEnv = append(e.procEnv, "FLOE_TEST_KAFKA_PASSWORD="+wrong)
	bad := strings.Replace(security, "password_file: "+pwFile, "password: ${FLOE_TEST_KAFKA_PASSWORD}", 1)
	e.config = writeConfig(t, t.TempDir(), s.Bootstrap, "floe-test", "analytics.clicks", bad, "")
	p := e.floe("wrong-password", "run", "--group", group)
	err = p.wait(t, 60*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("floe run with a wrong password: %v, want exit status 2\n%s", err, p.output())
	}
	out := p.output()
	if !strings.Contains(strings.ToLower(out), "authentication") || !strings.Contains(out, "SASL") {
		t.Fatalf("the error does not say authentication failed:\n%s", out)
	}
	if strings.Contains(out, wrong) || strings.Contains(out, s.Password) {
		t.Fatalf("the error reveals a password:\n%s", out)
	}
	t.Logf("kafka %s: SASL_SSL %s %d rows, %d dead letters; wrong password: %s (%s)", k.Version, mechanism, rows, dead,
		strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), time.Since(began).Round(time.Millisecond))
}
