package infra

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Kafka is a single-node Apache Kafka in KRaft mode (combined broker and
// controller) run by deploy/kafka/start.sh; it is stopped when the test ends.
type Kafka struct {
	// Bootstrap is the PLAINTEXT listener, "127.0.0.1:port".
	Bootstrap string
	// Dir holds the broker's data, configuration and kafka.log.
	Dir string
	// Version is the Apache Kafka release, e.g. "3.6.2".
	Version string
	// Lib is the directory of the broker's jars (the console tools are there).
	Lib string
	// SASL is the SASL_SSL listener; nil unless started WithSASLTLS.
	SASL *KafkaSASL
	// MTLS is the SSL listener requiring a client certificate; nil unless
	// started WithSASLTLS.
	MTLS *KafkaMTLS

	tb   testing.TB
	args []string
}

// KafkaSASL describes the SASL_SSL listener: PLAIN, SCRAM-SHA-256 and
// SCRAM-SHA-512 over TLS with a certificate for 127.0.0.1 signed by a CA made
// at start; one user and password work with each mechanism.
type KafkaSASL struct {
	Bootstrap string // "127.0.0.1:port"
	CAFile    string // PEM of the CA that signed the broker's certificate
	Mechanism string // SCRAM-SHA-512, the one ClientProperties uses
	// Mechanisms are all the mechanisms the listener accepts.
	Mechanisms []string
	Username   string
	Password   string
	// ClientProperties is a Java client configuration for this listener.
	ClientProperties string
}

// KafkaMTLS describes the SSL listener with ssl.client.auth=required: the
// broker accepts only clients presenting a certificate signed by its CA.
type KafkaMTLS struct {
	Bootstrap string // "127.0.0.1:port"
	CAFile    string // PEM of the CA that signed the broker's and the client's certificates
	CertFile  string // PEM client certificate (CN=floe-client)
	KeyFile   string // PEM (PKCS#8) key of CertFile
	// ClientProperties is a Java client configuration for this listener.
	ClientProperties string
}

// KafkaOption configures StartKafka.
type KafkaOption func(*[]string)

// WithSASLTLS adds a SASL_SSL listener (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)
// and an SSL listener requiring a client certificate.
func WithSASLTLS() KafkaOption { return func(a *[]string) { *a = append(*a, "--sasl-tls") } }

// StartKafka starts Apache Kafka version (3.x or 4.x) with its data in a
// temporary directory, waits until it answers metadata requests (the start
// script checks with the Java Admin client, this with franz-go), and stops
// it when tb ends. The first start of a version downloads its jars.
func StartKafka(tb testing.TB, version string, opts ...KafkaOption) *Kafka {
	tb.Helper()
	k := &Kafka{Version: version, tb: tb, args: []string{version}}
	for _, o := range opts {
		o(&k.args)
	}
	dir, kv := Start(tb, "kafka", k.args...)
	k.Dir = dir
	k.apply(kv)
	return k
}

func (k *Kafka) apply(kv map[string]string) {
	k.tb.Helper()
	k.Bootstrap, k.Lib = kv["BOOTSTRAP"], kv["LIB"]
	if k.Bootstrap == "" || k.Lib == "" {
		k.tb.Fatalf("kafka start.sh printed no BOOTSTRAP or LIB: %v", kv)
	}
	if kv["SASL_BOOTSTRAP"] != "" {
		k.SASL = &KafkaSASL{
			Bootstrap: kv["SASL_BOOTSTRAP"], CAFile: kv["CA_FILE"], Mechanism: kv["SASL_MECHANISM"],
			Mechanisms: strings.Split(kv["SASL_MECHANISMS"], ","),
			Username:   kv["SASL_USERNAME"], Password: kv["SASL_PASSWORD"], ClientProperties: kv["CLIENT_PROPERTIES"],
		}
	}
	if kv["SSL_BOOTSTRAP"] != "" {
		k.MTLS = &KafkaMTLS{
			Bootstrap: kv["SSL_BOOTSTRAP"], CAFile: kv["CA_FILE"], CertFile: kv["CLIENT_CERT_FILE"],
			KeyFile: kv["CLIENT_KEY_FILE"], ClientProperties: kv["SSL_CLIENT_PROPERTIES"],
		}
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Bootstrap))
	if err != nil {
		k.tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.Ping(ctx); err != nil {
		k.tb.Fatalf("kafka %s at %s started but franz-go cannot reach it: %v", k.Version, k.Bootstrap, err)
	}
}

// In returns the same broker with Kill and Restart failing tb: use it in a
// subtest, which must not fail the test that started the broker.
func (k *Kafka) In(tb testing.TB) *Kafka {
	c := *k
	c.tb = tb
	return &c
}

// pid returns the broker JVM's process id.
func (k *Kafka) pid() int {
	k.tb.Helper()
	raw, err := os.ReadFile(filepath.Join(k.Dir, "kafka.pid"))
	if err != nil {
		k.tb.Fatalf("kafka %s: %v", k.Version, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		k.tb.Fatalf("kafka %s: pid file: %v", k.Version, err)
	}
	return pid
}

// Kill SIGKILLs the broker JVM (no controlled shutdown, no flush) and waits
// until it is gone.
func (k *Kafka) Kill() {
	k.tb.Helper()
	pid := k.pid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		k.tb.Fatalf("kafka %s: SIGKILL %d: %v", k.Version, pid, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			k.tb.Fatalf("kafka %s: pid %d still alive 30s after SIGKILL", k.Version, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// alive reports whether pid runs; a zombie waiting for init counts as gone.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// Restart starts the broker again after Kill (or stop.sh): same port, same
// data directory, same credentials.
func (k *Kafka) Restart() {
	k.tb.Helper()
	start := time.Now()
	out, err := run(filepath.Join(Dir(), "kafka", "start.sh"), append([]string{k.Dir}, k.args...)...)
	if err != nil {
		k.tb.Fatalf("restarting kafka %s: %v\n%s", k.Version, err, out)
	}
	k.tb.Logf("kafka %s restarted in %s", k.Version, time.Since(start).Round(time.Millisecond))
	k.apply(parse(out))
}

// Java returns a command running mainClass from the broker's jars (for the
// console tools), logging only warnings to stderr.
func (k *Kafka) Java(mainClass string, args ...string) *exec.Cmd {
	log := filepath.Join(k.Dir, "tools-log4j.properties")
	if _, err := os.Stat(log); err != nil {
		_ = os.WriteFile(log, []byte("log4j.rootLogger=WARN, stderr\n"+
			"log4j.appender.stderr=org.apache.log4j.ConsoleAppender\n"+
			"log4j.appender.stderr.Target=System.err\n"+
			"log4j.appender.stderr.layout=org.apache.log4j.PatternLayout\n"+
			"log4j.appender.stderr.layout.ConversionPattern=%p %m (%c)%n\n"), 0o644)
	}
	jvm := []string{"-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Dlog4j.configuration=file:" + log, "-Dlog4j2.level=WARN",
		"-cp", filepath.Join(k.Lib, "*"), mainClass}
	return exec.Command("java", append(jvm, args...)...)
}

// ConsoleProducer produces the lines of input ("key<TAB>value") to topic
// with Apache Kafka's own console producer and the given compression codec
// (none, gzip, snappy, lz4, zstd), acks=all.
func (k *Kafka) ConsoleProducer(topic, codec string, input io.Reader) error {
	main := "org.apache.kafka.tools.ConsoleProducer"
	if strings.HasPrefix(k.Version, "3.") {
		main = "kafka.tools.ConsoleProducer"
	}
	cmd := k.Java(main, "--bootstrap-server", k.Bootstrap, "--topic", topic,
		// --compression-codec, not compression.type: the tool overwrites
		// the producer property with its own option (default none).
		"--compression-codec", codec, "--producer-property", "acks=all",
		"--producer-property", "linger.ms=5",
		"--property", "parse.key=true", "--property", "key.separator=\t")
	cmd.Stdin = input
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("console producer (%s, %s): %v\n%s", main, codec, err, out)
	}
	return nil
}
