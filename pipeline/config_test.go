package pipeline_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/enrich"
	"github.com/floe-dev/floe/lakehouse"
	"github.com/floe-dev/floe/pipeline"
	"github.com/floe-dev/floe/schemas"
)

const validConfig = `
kafka:
  brokers: [127.0.0.1:9092]
  topic: clicks
  group: floe-clicks
table:
  name: analytics.clicks
  catalog:
    type: sql
    uri: file:/tmp/catalog.db
    sql.dialect: sqlite
    sql.driver: sqlite
    warehouse: file:///tmp/warehouse
`

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "floe.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := pipeline.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.DLQTopic != "clicks.dlq" || cfg.Kafka.StartOffset != "earliest" || cfg.Schema != "clickstream" {
		t.Fatalf("defaults: dlq %q start %q schema %q", cfg.Kafka.DLQTopic, cfg.Kafka.StartOffset, cfg.Schema)
	}
	if cfg.Commit.Interval.D() != 10*time.Second || cfg.Commit.MaxRecords != 500000 || cfg.Commit.MaxBytes != 128<<20 {
		t.Fatalf("commit defaults: %+v", cfg.Commit)
	}
}

func TestMaintainConfig(t *testing.T) {
	cfg, err := pipeline.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	want := pipeline.MaintainConfig{ExpireOlderThan: pipeline.Duration(168 * time.Hour), RetainLast: 1,
		OrphanOlderThan: pipeline.Duration(72 * time.Hour)}
	if cfg.Maintain != want {
		t.Fatalf("maintain defaults %+v, want %+v (interval 0: off)", cfg.Maintain, want)
	}
	cfg, err = pipeline.LoadConfig(writeConfig(t, validConfig+`maintain:
  interval: 1h
  target_file_bytes: 64MiB
  expire_older_than: 24h
  retain_last: 10
  orphan_older_than: 6h
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	want = pipeline.MaintainConfig{Interval: pipeline.Duration(time.Hour), TargetFileBytes: 64 << 20,
		ExpireOlderThan: pipeline.Duration(24 * time.Hour), RetainLast: 10, OrphanOlderThan: pipeline.Duration(6 * time.Hour)}
	if cfg.Maintain != want {
		t.Fatalf("maintain %+v, want %+v", cfg.Maintain, want)
	}
}

func TestConfigInterpolatesEnvironment(t *testing.T) {
	t.Setenv("FLOE_TEST_BROKER", "10.0.0.1:9093")
	body := strings.Replace(validConfig, "127.0.0.1:9092", "${FLOE_TEST_BROKER}", 1)
	body = strings.Replace(body, "group: floe-clicks", "group: ${FLOE_TEST_UNSET_GROUP:-fallback}", 1)
	cfg, err := pipeline.LoadConfig(writeConfig(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Brokers[0] != "10.0.0.1:9093" || cfg.Kafka.Group != "fallback" {
		t.Fatalf("brokers %v group %q", cfg.Kafka.Brokers, cfg.Kafka.Group)
	}
	_, err = pipeline.LoadConfig(writeConfig(t, strings.Replace(validConfig, "clicks\n", "${FLOE_TEST_NOT_SET}\n", 1)))
	if err == nil || !strings.Contains(err.Error(), "FLOE_TEST_NOT_SET") {
		t.Fatalf("unset variable: %v, want an error naming it", err)
	}
	// Named once however often it is referenced (it was listed once per
	// reference: "PW, PW, PW").
	twice := strings.Replace(validConfig, "clicks\n", "${FLOE_TEST_NOT_SET}\n", 1)
	twice = strings.Replace(twice, "group: floe-clicks", "group: ${FLOE_TEST_NOT_SET}-${FLOE_TEST_NOT_SET_2}", 1)
	_, err = pipeline.LoadConfig(writeConfig(t, twice))
	if err == nil || !strings.HasSuffix(err.Error(), "environment variables not set: FLOE_TEST_NOT_SET, FLOE_TEST_NOT_SET_2") {
		t.Fatalf("variables unset, one referenced twice: %v, want each named once", err)
	}
}

// TestConfigBrokersListInOneEntry: a broker entry holding a
// comma-separated list, as ${KAFKA_BROKERS} usually does, is that list.
// It passed validation as one address, and kafka-go crashed on it.
func TestConfigBrokersListInOneEntry(t *testing.T) {
	t.Setenv("FLOE_TEST_BROKERS", "h1:9092, h2:9092,")
	cfg, err := pipeline.LoadConfig(writeConfig(t, strings.Replace(validConfig, "127.0.0.1:9092", "${FLOE_TEST_BROKERS}", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"h1:9092", "h2:9092"}; !slices.Equal(cfg.Kafka.Brokers, want) {
		t.Fatalf("brokers %q, want %q", cfg.Kafka.Brokers, want)
	}
}

// TestConfigRefusesASecondDocument: a config file of two YAML documents
// is refused; the second (after ---) was dropped without a word.
func TestConfigRefusesASecondDocument(t *testing.T) {
	for _, more := range []string{"---\ncommit: {interval: 1s}\n", "---\n---\ncommit: {interval: 1s}\n", "--- null\n---\ncommit: {interval: 1s}\n"} {
		_, err := pipeline.LoadConfig(writeConfig(t, validConfig+more))
		if err == nil || !strings.Contains(err.Error(), "more than one YAML document") {
			t.Fatalf("a config followed by %q: %v", more, err)
		}
	}
	for _, body := range []string{"", "# only a comment\n", "---\n" + validConfig, validConfig + "---\n", validConfig + "---\n# commit: {interval: 1s}\n"} {
		if _, err := pipeline.LoadConfig(writeConfig(t, body)); err != nil {
			t.Errorf("%q: %v", body, err)
		}
	}
}

// TestConfigInterpolationIsNotYAML: a variable's value is never read as
// YAML syntax — a password holding " #", a leading "!" or "*", quotes or
// backslashes reaches its key whole (it used to be cut at the comment, read
// as a tag, or printed in an "unknown anchor" error) — while a reference
// still parses where it is written (a flow sequence, a quoted string), a
// plain one may be a number, an empty variable takes the default, and a
// reference in a comment is ignored.
func TestConfigInterpolationIsNotYAML(t *testing.T) {
	for _, pw := range []string{"abc #tail", "!s3cr3t x", "*s3cr3tValue", `a\tb"c'd`, "&anchor: {x}", "- [1, 2]"} {
		t.Setenv("FLOE_TEST_PW", pw)
		t.Setenv("FLOE_TEST_BROKER", "10.0.0.1:9093")
		t.Setenv("FLOE_TEST_N", "5000")
		t.Setenv("FLOE_TEST_EMPTY", "")
		body := strings.Replace(validConfig, "[127.0.0.1:9092]", "[${FLOE_TEST_BROKER}] # not ${FLOE_TEST_UNSET_IN_COMMENT}", 1)
		body = strings.Replace(body, "  group: floe-clicks", `  group: ${FLOE_TEST_EMPTY:-fallback}
  sasl:
    mechanism: PLAIN
    username: floe
    password: ${FLOE_TEST_PW}
  tls: {ca_file: "/ca/${FLOE_TEST_PW}.pem"}`, 1)
		body = strings.Replace(body, "table:", "commit:\n  max_records: ${FLOE_TEST_N}\ntable:", 1)
		cfg, err := pipeline.LoadConfig(writeConfig(t, body))
		if err != nil {
			t.Fatalf("password %q: %v", pw, err)
		}
		if string(cfg.Kafka.SASL.Password) != pw || cfg.Kafka.TLS.CAFile != "/ca/"+pw+".pem" {
			t.Fatalf("password %q read as %q, ca_file %q", pw, cfg.Kafka.SASL.Password, cfg.Kafka.TLS.CAFile)
		}
		if cfg.Kafka.Brokers[0] != "10.0.0.1:9093" || cfg.Kafka.Group != "fallback" || cfg.Commit.MaxRecords != 5000 {
			t.Fatalf("brokers %v, group %q, max_records %d", cfg.Kafka.Brokers, cfg.Kafka.Group, cfg.Commit.MaxRecords)
		}
	}
}

// TestConfigRefusesMalformedReference: a ${ that starts no reference floe
// replaces (a shell form it does not know, a dash in the name, spaces)
// reached its key as the literal text, without a word: the group, password
// or URL was the string "${...}". It is refused with its line and text;
// $${ writes a literal ${, and a variable's value may hold one.
func TestConfigRefusesMalformedReference(t *testing.T) {
	t.Setenv("FLOE_TEST_GROUP", "real-group")
	for _, ref := range []string{"${FLOE_TEST_GROUP-fallback}", "${FLOE_TEST_GROUP:=fallback}", "${FLOE-TEST-GROUP}", "${ FLOE_TEST_GROUP }", "x-${FLOE_TEST_GROUP"} {
		body := strings.Replace(validConfig, "group: floe-clicks", "group: "+ref, 1)
		_, err := pipeline.LoadConfig(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), "line 5: "+strings.TrimPrefix(ref, "x-")) {
			t.Errorf("group: %s: error %v, want one naming line 5 and the reference", ref, err)
		}
	}
	// A reference in a default (the shell's ${A:-${B}}) was read as the
	// default text ${B, then a brace.
	body := strings.Replace(validConfig, "group: floe-clicks", "group: ${FLOE_TEST_UNSET:-${FLOE_TEST_GROUP}}", 1)
	if _, err := pipeline.LoadConfig(writeConfig(t, body)); err == nil || !strings.Contains(err.Error(), "line 5: ${FLOE_TEST_UNSET:-${FLOE_TEST_GROUP}") {
		t.Errorf("a reference in a default: error %v, want one naming line 5 and the reference", err)
	}

	t.Setenv("FLOE_TEST_PW", "a${b")
	body = strings.Replace(validConfig, "group: floe-clicks", `group: $${FLOE_TEST_GROUP}-${FLOE_TEST_GROUP}
  sasl: {mechanism: PLAIN, username: floe, password: "${FLOE_TEST_PW}"}`, 1)
	cfg, err := pipeline.LoadConfig(writeConfig(t, body))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Kafka.Group != "${FLOE_TEST_GROUP}-real-group" || string(cfg.Kafka.SASL.Password) != "a${b" {
		t.Errorf("group %q, password %q; want ${FLOE_TEST_GROUP}-real-group and a${b", cfg.Kafka.Group, cfg.Kafka.SASL.Password)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"unknown key", "  group: floe-clicks", "  group: floe-clicks\n  grup: x", "grup"},
		{"bad duration", "table:", "commit:\n  interval: often\ntable:", "not a duration"},
		{"bad size", "table:", "commit:\n  max_bytes: lots\ntable:", "not a byte size"},
		{"no brokers", "  brokers: [127.0.0.1:9092]", "  brokers: []", "kafka.brokers"},
		{"broker without port", "127.0.0.1:9092", "localhost", "kafka.brokers"},
		{"no topic", "  topic: clicks", "", "kafka.topic"},
		{"start offset", "  group: floe-clicks", "  group: floe-clicks\n  start_offset: middle", "kafka.start_offset"},
		{"dlq is the topic", "  group: floe-clicks", "  group: floe-clicks\n  dlq_topic: clicks", "kafka.dlq_topic"},
		{"heartbeat", "  group: floe-clicks", "  group: floe-clicks\n  heartbeat_interval: 40s", "kafka.heartbeat_interval"},
		{"table name", "name: analytics.clicks", "name: clicks", "table.name"},
		{"catalog type", "    type: sql\n", "", "table.catalog.type"},
		{"grace", "table:", "commit:\n  grace: 90s\ntable:", "commit.grace"},
		{"max bytes", "table:", "commit:\n  max_bytes: 2GiB\ntable:", "commit.max_bytes"},
		{"maintain interval", "table:", "maintain:\n  interval: -1m\ntable:", "maintain.interval"},
		{"maintain retain", "table:", "maintain:\n  retain_last: -2\ntable:", "maintain.retain_last"},
		{"maintain orphans", "table:", "maintain:\n  orphan_older_than: 10m\ntable:", "maintain.orphan_older_than"},
		{"maintain expiry", "table:", "maintain:\n  expire_older_than: -1h\ntable:", "maintain.expire_older_than"},
		{"maintain unknown key", "table:", "maintain:\n  every: 1h\ntable:", "every"},
		{"format", "table:", "format: xml\ntable:", `format: "xml": want json, avro or protobuf`},
		{"protobuf without registry", "table:", "format: protobuf\ntable:", "format: protobuf values need their message type"},
		{"json with registry", "table:", "registry: {url: http://127.0.0.1:8081}\ntable:", "registry: JSON values do not use a schema registry"},
		{"registry without url", "table:", "format: avro\nregistry: {basic_auth: a:b}\ntable:", "registry.url: required"},
		{"registry unknown key", "table:", "format: avro\nregistry: {uri: http://x}\ntable:", "uri"},
		{"metrics listen without port", "table:", "metrics: {listen: bogus}\ntable:", `metrics.listen: "bogus": want host:port`},
		{"metrics listen port", "table:", "metrics: {listen: \":99999\"}\ntable:", `metrics.listen: ":99999": address 99999: invalid port`},
		{"enrich with avro", "table:", "format: avro\nenrich:\n  url: http://127.0.0.1:8081/lookup\n  key: user_id\ntable:", "enrich: the lookup key is read from JSON values"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := strings.Replace(validConfig, tc.from, tc.to, 1)
			if body == validConfig {
				t.Fatalf("test case does not change the config")
			}
			cfg, err := pipeline.LoadConfig(writeConfig(t, body))
			if err == nil {
				err = cfg.Finish()
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestConfigRefusesCatalogWithoutURI: a catalog type that connects to a
// uri is refused without one, naming table.catalog.uri. Before, only
// table.catalog.type was required: a sql catalog without uri ran, with its
// catalog in a SQLite file named "?_pragma=busy_timeout…" in the working
// directory. A warehouse is not required (see lakehouse's
// TestSQLCatalogWithoutWarehouse).
func TestConfigRefusesCatalogWithoutURI(t *testing.T) {
	for _, tc := range []struct {
		name, catalog, want string
	}{
		{"sql without uri", "{type: sql, sql.dialect: sqlite, sql.driver: sqlite, warehouse: file:///tmp/w}", "table.catalog.uri: required for catalog type sql"},
		{"sql without warehouse", "{type: sql, uri: file:/tmp/c.db, sql.dialect: sqlite, sql.driver: sqlite}", ""},
		{"rest without uri", "{type: rest, warehouse: analytics}", "table.catalog.uri: required for catalog type rest"},
		{"hive without uri", "{type: hive}", "table.catalog.uri: required for catalog type hive"},
		{"glue", "{type: glue}", ""},
		{"rest", "{type: rest, uri: http://catalog:8181}", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			body := validConfig[:strings.Index(validConfig, "  catalog:")] + "  catalog: " + tc.catalog + "\n"
			cfg, err := pipeline.LoadConfig(writeConfig(t, body))
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Finish()
			if tc.want == "" && err != nil {
				t.Fatalf("refused: %v", err)
			}
			if tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestConfigRefusesNonPositiveTimeouts: a negative commit.grace was
// accepted and cancelled the final flush at once (SIGTERM dropped the
// buffer and exited 0); a negative kafka.heartbeat_interval passed too and
// failed in kafka-go after the table was created, naming no key; negative
// session and rebalance timeouts surfaced only as commit.grace errors.
func TestConfigRefusesNonPositiveTimeouts(t *testing.T) {
	for _, tc := range []struct{ kafka, commit, want, notWant string }{
		{commit: "  grace: -1s\n", want: "commit.grace: -1s: must be positive"},
		{kafka: "  heartbeat_interval: -1s\n", want: "kafka.heartbeat_interval: -1s: want a positive duration"},
		{kafka: "  session_timeout: -30s\n", want: "kafka.session_timeout: -30s", notWant: "commit.grace"},
		{kafka: "  rebalance_timeout: -1m\n", want: "kafka.rebalance_timeout: -1m0s", notWant: "commit.grace"},
		{kafka: "  session_timeout: 600h\n", want: "kafka.session_timeout: 600h0m0s: want a positive duration below"},
	} {
		body := strings.Replace(validConfig, "  group: floe-clicks\n", "  group: floe-clicks\n"+tc.kafka, 1) + "commit:\n  interval: 1s\n" + tc.commit
		cfg, err := pipeline.LoadConfig(writeConfig(t, body))
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Finish()
		if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.notWant != "" && strings.Contains(err.Error(), tc.notWant)) {
			t.Errorf("%s%s: error %v; want one containing %q (and not %q)", tc.kafka, tc.commit, err, tc.want, tc.notWant)
		}
	}
}

// TestConfigBoundsFetchMaxBytes: kafka.fetch_max_bytes of 2GiB or more was
// accepted, and kafka-go refused every fetch of that size, its reader
// retrying without end and without a word: run, replay and verify waited
// for ever. Above 1GiB it is refused, naming the key.
func TestConfigBoundsFetchMaxBytes(t *testing.T) {
	for size, ok := range map[string]bool{"1GiB": true, "1073741825": false, "2GiB": false, "3GiB": false} {
		body := strings.Replace(validConfig, "  group: floe-clicks\n", "  group: floe-clicks\n  fetch_max_bytes: "+size+"\n", 1)
		cfg, err := pipeline.LoadConfig(writeConfig(t, body))
		if err != nil {
			t.Fatal(err)
		}
		err = cfg.Finish()
		if ok && err != nil {
			t.Errorf("fetch_max_bytes %s: %v", size, err)
		}
		if !ok && (err == nil || !strings.Contains(err.Error(), "kafka.fetch_max_bytes")) {
			t.Errorf("fetch_max_bytes %s: error %v, want one naming kafka.fetch_max_bytes", size, err)
		}
	}
}

func TestConfigSchemaFormat(t *testing.T) {
	cfg, err := pipeline.LoadConfig(writeConfig(t, validConfig+`format: avro
registry:
  url: https://registry.example:8081
  basic_auth: "floe:${FLOE_TEST_SR_PASSWORD:-secret}"
  tls: {ca_file: /etc/ca.pem}
`))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	f := cfg.SchemaFormat()
	if f.Kind != "avro" || f.Registry == nil || f.Registry.URL != "https://registry.example:8081" ||
		f.Registry.BasicAuth != "floe:secret" || f.Registry.TLS.CAFile != "/etc/ca.pem" {
		t.Fatalf("format %+v registry %+v", f, f.Registry)
	}
	cfg, err = pipeline.LoadConfig(writeConfig(t, validConfig))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if f := cfg.SchemaFormat(); f.Kind != "json" || f.Registry != nil {
		t.Fatalf("default format %+v, want json without a registry", f)
	}
}

func TestExampleConfigLoads(t *testing.T) {
	cfg, err := pipeline.LoadConfig("../deploy/floe.example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if cfg.Enrich == nil || len(cfg.Enrich.Fields) != 6 || cfg.Kafka.Brokers[0] != "127.0.0.1:9092" {
		t.Fatalf("example config: enrich %+v brokers %v", cfg.Enrich, cfg.Kafka.Brokers)
	}
}

// TestReadmeReferenceConfigLoads: the reference block of README.md's
// "Configuration" section loads, with hedge_after 0 (adaptive) as shown and
// -1 (never) as documented. It did not: enrich's durations were
// time.Durations, which yaml.v3 refuses as bare numbers. Only decoding is
// checked: the block shows every section at once (registry with format
// json), which Finish refuses.
func TestReadmeReferenceConfigLoads(t *testing.T) {
	raw, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(raw), "Every key with its default")
	if ok {
		_, block, ok = strings.Cut(block, "```yaml\n")
	}
	if ok {
		block, _, ok = strings.Cut(block, "```")
	}
	if !ok {
		t.Fatal("README.md: no yaml block after \"Every key with its default\"")
	}
	t.Setenv("KAFKA_PASSWORD", "secret")
	t.Setenv("SR_PASSWORD", "secret")
	t.Setenv("LOOKUP_TOKEN", "secret")
	for hedge, want := range map[string]time.Duration{"0": 0, "-1": -1} {
		body := strings.Replace(block, "hedge_after: 0 ", "hedge_after: "+hedge+" ", 1)
		cfg, err := pipeline.LoadConfig(writeConfig(t, body))
		if err != nil {
			t.Fatalf("hedge_after: %s: %v", hedge, err)
		}
		e := cfg.Enrich
		if e == nil || e.HedgeAfter.D() != want || e.Timeout.D() != 5*time.Second || e.Retries != 3 ||
			e.Breaker.Interval.D() != 56*time.Second || cfg.Commit.Grace.D() != 15*time.Second {
			t.Fatalf("hedge_after: %s: decoded %+v, commit %+v", hedge, e, cfg.Commit)
		}
	}
}

// securityConfig returns validConfig with kafkaExtra appended to its kafka
// section.
func securityConfig(kafkaExtra string) string {
	return strings.Replace(validConfig, "  group: floe-clicks\n", "  group: floe-clicks\n"+kafkaExtra, 1)
}

// writePEM writes a self-signed certificate and its key as PEM files.
func writePEM(t *testing.T) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "floe test"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

func TestConfigKafkaSecurity(t *testing.T) {
	cert, key := writePEM(t)
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "password")
	if err := os.WriteFile(pwFile, []byte("s3cret-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	const secret = "pa55-w0rd-in-yaml"
	sasl := func(mech, rest string) string {
		return "  sasl:\n    mechanism: " + mech + "\n    username: floe\n" + rest
	}
	for _, tc := range []struct {
		name, extra, want string // want "": valid
	}{
		{"scram-512 password", sasl("SCRAM-SHA-512", "    password: "+secret+"\n"), ""},
		{"scram-256 password file", sasl("SCRAM-SHA-256", "    password_file: "+pwFile+"\n"), ""},
		{"plain over tls", sasl("PLAIN", "    password: "+secret+"\n") + "  tls:\n    ca_file: " + cert + "\n", ""},
		{"mutual tls", "  tls:\n    ca_file: " + cert + "\n    cert_file: " + cert + "\n    key_file: " + key + "\n    server_name: kafka.internal\n", ""},
		{"tls with system roots", "  tls: {}\n", ""},
		{"password SCRAM rejects", sasl("SCRAM-SHA-512", "    password: \"\\x07"+secret+"\"\n"), "SASLprep"},
		{"unknown mechanism", sasl("GSSAPI", "    password: "+secret+"\n"), "kafka.sasl.mechanism"},
		{"no password", sasl("SCRAM-SHA-512", ""), "kafka.sasl.password"},
		{"both passwords", sasl("SCRAM-SHA-512", "    password: "+secret+"\n    password_file: "+pwFile+"\n"), "kafka.sasl.password"},
		{"missing password file", sasl("SCRAM-SHA-512", "    password_file: "+dir+"/nope\n"), "kafka.sasl.password_file"},
		{"empty password file", sasl("SCRAM-SHA-512", "    password_file: "+empty+"\n"), "kafka.sasl.password_file"},
		{"no username", "  sasl:\n    mechanism: PLAIN\n    password: " + secret + "\n", "kafka.sasl.username"},
		{"unknown sasl key", sasl("PLAIN", "    pasword: "+secret+"\n"), "pasword"},
		{"missing ca", "  tls:\n    ca_file: " + dir + "/nope.pem\n", "kafka.tls.ca_file"},
		{"ca not pem", "  tls:\n    ca_file: " + pwFile + "\n", "kafka.tls.ca_file"},
		{"cert without key", "  tls:\n    cert_file: " + cert + "\n", "kafka.tls.cert_file"},
		{"key is not the cert's", "  tls:\n    cert_file: " + cert + "\n    key_file: " + pwFile + "\n", "kafka.tls.cert_file"},
		// Every setting commented out: read as no TLS at all, plaintext.
		{"tls without a value", "  tls:\n    # ca_file: " + cert + "\n", "kafka.tls has no value: write tls: {}"},
		// Likewise: read as no SASL, the job connected unauthenticated.
		{"sasl without a value", "  sasl:\n    # mechanism: PLAIN\n    # username: floe\n", "kafka.sasl has no value: write its mechanism, username and password"},
		{"sasl null", "  sasl: null\n", "kafka.sasl has no value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := pipeline.LoadConfig(writeConfig(t, securityConfig(tc.extra)))
			if err == nil {
				err = cfg.Finish()
			}
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid config rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			case err != nil && (strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "s3cret-from-file")):
				t.Fatalf("the error reveals the password: %v", err)
			}
			// A config dumped into a log does not reveal the password.
			for _, f := range []string{"%v", "%+v", "%#v"} {
				if s := fmt.Sprintf(f, cfg); strings.Contains(s, secret) {
					t.Fatalf("%s of the config shows the password: %s", f, s)
				}
				if cfg.Kafka.SASL == nil {
					continue
				}
				s := fmt.Sprintf(f, *cfg.Kafka.SASL)
				if strings.Contains(s, secret) {
					t.Fatalf("%s of kafka.sasl shows the password: %s", f, s)
				}
				if cfg.Kafka.SASL.Password != "" && !strings.Contains(s, "[redacted]") {
					t.Fatalf("%s of kafka.sasl does not say the password is redacted: %s", f, s)
				}
			}
		})
	}
}

// TestConfigBrokerAddresses: a broker address is host:port, the port a
// number from 1 to 65535, and no URL. "host:" and "kafka://host:9092"
// passed a check for a colon and failed only when the member connected.
func TestConfigBrokerAddresses(t *testing.T) {
	for addr, want := range map[string]string{
		"localhost:9092":         "",
		"[::1]:9092":             "",
		"kafka-0.kafka:29092":    "",
		"localhost":              `"localhost": no port`,
		"localhost:":             `port "" is not a number`,
		":9092":                  `":9092": no host`,
		"localhost:99999":        `port "99999" is not a number from 1 to 65535`,
		"kafka://localhost:9092": `"kafka://localhost:9092": not an address (no scheme such as kafka://)`,
	} {
		cfg, err := pipeline.LoadConfig(writeConfig(t, strings.Replace(validConfig, "127.0.0.1:9092", `"`+addr+`"`, 1)))
		if err == nil {
			err = cfg.Finish()
		}
		switch {
		case want == "" && err != nil:
			t.Errorf("broker %s: %v, want it accepted", addr, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), "kafka.brokers: ") || !strings.Contains(err.Error(), want)):
			t.Errorf("broker %s: %v, want kafka.brokers refused: %s", addr, err, want)
		}
	}
}

// TestConfigPasswordInPlaceOfItsFile: a password written in place of its
// file's path (password_file: the password) is refused without showing it;
// before, the error quoted it ("open pa55-w0rd: no such file or
// directory"). A path in a directory that exists is still named.
func TestConfigPasswordInPlaceOfItsFile(t *testing.T) {
	const secret = "pa55-w0rd-in-yaml"
	for value, want := range map[string]string{
		secret:                    "kafka.sasl.password_file: no such file (the value is not shown",
		"Zk9vY/mFyQmF6+cXV4":      "kafka.sasl.password_file: no such file (the value is not shown", // base64 holds '/'
		"/Zk9vYmFyQmF6+cXV4==":    "kafka.sasl.password_file: no such file (the value is not shown", // first, too: its directory is the root
		os.TempDir() + "/nope.pw": "kafka.sasl.password_file: open " + os.TempDir() + "/nope.pw: no such file or directory",
	} {
		cfg, err := pipeline.LoadConfig(writeConfig(t, securityConfig("  sasl:\n    mechanism: SCRAM-SHA-512\n    username: floe\n    password_file: "+value+"\n")))
		if err == nil {
			err = cfg.Finish()
		}
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Zk9vY") {
			t.Errorf("password_file %s: %v, want %q", value, err, want)
		}
	}
}

// TestConfigRefusesEmptySections: an enrich, registry or dedupe key (at
// the top level or in a route) or a routes key written without a value
// (its settings commented out, a template that rendered nothing) is
// refused, naming it: YAML reads it as absent, and the job ran without
// enrichment, read plain values, kept the schema's business key or read
// kafka.topic. Written with values, or as {} where that means something,
// they load.
func TestConfigRefusesEmptySections(t *testing.T) {
	const route = "routes:\n  - topic: clicks\n    table: {name: a.clicks}\n"
	for _, tc := range []struct {
		name, extra, want string // want "": loads
	}{
		{"enrich commented out", "enrich:\n#  url: http://127.0.0.1:8081/lookup\n", "enrich has no value: write its url, key and fields, or remove the key for no enrichment"},
		{"enrich null", "enrich: null\n", "enrich has no value"},
		{"registry", "format: avro\nregistry:\n", "registry has no value: write its url, or remove the key for plain values"},
		{"dedupe", "dedupe:\n", "dedupe has no value: write its key (and window), or remove the key for the schema's floe.dedupe-key"},
		{"routes", "routes:\n", "routes has no value: list the routes"},
		{"enrich in a route", route + "    enrich:\n", "routes[0].enrich has no value: write its url, key and fields, or remove the key for the top level's enrich"},
		{"registry in a route", route + "    registry: ~\n", "routes[0].registry has no value"},
		{"dedupe in a route", route + "    dedupe:\n", "routes[0].dedupe has no value"},
		{"dedupe {}", "dedupe: {}\n", ""},
		{"enrich set", "enrich: {url: http://127.0.0.1:8081/lookup, key: user_id, fields: [{name: segment, type: string}]}\n", ""},
		{"a route", route, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pipeline.LoadConfig(writeConfig(t, validConfig+tc.extra))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("valid config rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestDedupeConfig: the dedupe section overrides the schema's business key
// and window; mistakes name the key and the problem.
func TestDedupeConfig(t *testing.T) {
	payments := filepath.Join("..", "schemas", "examples", "payments.avsc")
	noTime := filepath.Join(t.TempDir(), "ids.avsc")
	if err := os.WriteFile(noTime, []byte(`{"type":"record","name":"Id","fields":[{"name":"id","type":"string"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		schema, section string
		want            lakehouse.Dedupe
		err             string
	}{
		{schema: "clickstream", want: lakehouse.Dedupe{}},
		{schema: "clickstream", section: "dedupe: {key: event_id}", want: lakehouse.Dedupe{Key: "event_id", Window: 168 * time.Hour}},
		{schema: payments, want: lakehouse.Dedupe{Key: "payment_id", Window: 168 * time.Hour}},
		{schema: payments, section: "dedupe: {window: 72h}", want: lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}},
		{schema: payments, section: "dedupe: {key: payment_id, window: 72h}", want: lakehouse.Dedupe{Key: "payment_id", Window: 72 * time.Hour}},
		{schema: noTime, section: "dedupe: {key: id}", want: lakehouse.Dedupe{Key: "id"}},
		// 0 is no window (it was the default, 168h, and no window could be
		// asked for when the schema has an event-time column).
		{schema: payments, section: "dedupe: {window: 0}", want: lakehouse.Dedupe{Key: "payment_id"}},
		{schema: noTime, section: "dedupe: {key: id, window: 0s}", want: lakehouse.Dedupe{Key: "id"}},
		{schema: "clickstream", section: "dedupe: {window: 1h}", err: "dedupe.key: required: schema clickstream declares no floe.dedupe-key"},
		{schema: "clickstream", section: "dedupe: {key: eventid}", err: `dedupe.key: "eventid" is not a top-level column of schema clickstream`},
		{schema: payments, section: "dedupe: {key: account.id}", err: `dedupe.key: "account.id" is not a top-level column`},
		{schema: payments, section: "dedupe: {key: account}", err: `dedupe.key: column "account" is a struct`},
		{schema: noTime, section: "dedupe: {key: id, window: 24h}", err: `dedupe.window: 24h0m0s bounds the search for key "id" in event time, but schema ` + noTime + ` declares no event-time column`},
	} {
		cfg, err := pipeline.LoadConfig(writeConfig(t, validConfig+"schema: "+c.schema+"\n"+c.section+"\n"))
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Finish(); err != nil {
			t.Fatal(err)
		}
		sc, err := schemas.Lookup(cfg.Schema)
		if err != nil {
			t.Fatal(err)
		}
		got, err := cfg.DedupeFor(sc)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s %q: error %v, want %q", c.schema, c.section, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%s %q: %+v, %v; want %+v", c.schema, c.section, got, err, c.want)
		}
	}
	cfg, err := pipeline.LoadConfig(writeConfig(t, validConfig+"dedupe: {key: event_id, window: -1h}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err == nil || !strings.Contains(err.Error(), "dedupe.window: must be positive") {
		t.Fatalf("negative window: %v", err)
	}
}

// TestDedupeKeyMustBeARecordField: a column floe adds to every row (Kafka
// metadata, _enrich_status) or an enrichment column is refused as
// dedupe.key. Many records share its value, so the MERGE kept one row per
// value and skipped the others as business duplicates, silently.
func TestDedupeKeyMustBeARecordField(t *testing.T) {
	base, err := schemas.Lookup("clickstream")
	if err != nil {
		t.Fatal(err)
	}
	sc, err := pipeline.WithEnrichment(base, &enrich.Config{Fields: []enrich.Field{{Name: "segment", Type: enrich.TypeString}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ key, want string }{
		{"_kafka_topic", `dedupe.key: "_kafka_topic" is a metadata column floe adds to every row, not a field of the record`},
		{"_kafka_partition", `dedupe.key: "_kafka_partition" is a metadata column`},
		{"_kafka_offset", `dedupe.key: "_kafka_offset" is a metadata column`},
		{"_kafka_timestamp", `dedupe.key: "_kafka_timestamp" is a metadata column`},
		{"_enrich_status", `dedupe.key: "_enrich_status" is a metadata column`},
		{"segment", `dedupe.key: "segment" is an enrichment column, not a field of the record`},
		{"event_id", ""},
	} {
		cfg := pipeline.Config{Dedupe: &pipeline.DedupeConfig{Key: c.key}}
		d, err := cfg.DedupeFor(sc)
		switch {
		case c.want == "" && (err != nil || d.Key != c.key):
			t.Errorf("dedupe.key %s: %+v, %v", c.key, d, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("dedupe.key %s: error %v, want %q", c.key, err, c.want)
		}
	}
}
