package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/deploy/infra"
	"github.com/floe-dev/floe/lakehouse/hdfsio"
	"github.com/floe-dev/floe/schemas/clickgen"
)

// securityKafkaVersion is the Apache Kafka release the SASL mechanisms other
// than SCRAM-SHA-512 and mutual TLS are tested against (SCRAM-SHA-512 runs
// against every version in TestInteropKafka).
const securityKafkaVersion = "4.4.0"

// TestInteropKafkaSASLTLS runs floe against one real Apache Kafka broker
// with a SASL_SSL listener (PLAIN, SCRAM-SHA-256) and an SSL listener that
// requires a client certificate: each way in must commit every record
// exactly once, and a wrong password or a missing client certificate must
// end `floe run` with a clear error that reveals no secret. It runs beside
// TestInteropHDFSKerberos: each mostly waits for its JVMs to start.
func TestInteropKafkaSASLTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test with real Apache Kafka skipped in -short mode")
	}
	t.Parallel()
	k := infra.StartKafka(t, securityKafkaVersion, infra.WithSASLTLS())
	for _, mech := range []string{"PLAIN", "SCRAM-SHA-256"} {
		t.Run("SASL-"+mech, func(t *testing.T) {
			t.Parallel()
			interopSASL(t, k, mech)
		})
	}
	t.Run("MutualTLS", func(t *testing.T) {
		t.Parallel()
		interopMTLS(t, k)
	})
}

// interopMTLS: floe against the SSL listener with ssl.client.auth=required,
// authenticating with the client certificate and key start.sh made: every
// record becomes a row or a dead letter exactly once. Without a client
// certificate the broker refuses the connection and `floe run` ends with
// status 2 and a TLS error; the key's content never appears in the output.
func interopMTLS(t *testing.T, k *infra.Kafka) {
	began := time.Now()
	m := k.MTLS
	if m == nil {
		t.Fatal("the broker was started without WithSASLTLS")
	}
	security := fmt.Sprintf("  tls:\n    ca_file: %s\n    cert_file: %s\n    key_file: %s\n", m.CAFile, m.CertFile, m.KeyFile)
	const topic, group = "secure-mtls", "floe-secure-mtls"
	e := newKafkaEnv(t, k, topic, 3, m.Bootstrap, security)
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 100, MalformedRate: 0.02, Seed: 11})
	if err := produceKafka(ctx, e.brokers, e.topic, gen, 3000, 0); err != nil {
		t.Fatal(err)
	}
	end, err := e.endOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	run := e.floe("mtls", "run", "--until-caught-up", "--group", group)
	if err := run.wait(t, 120*time.Second); err != nil {
		t.Fatalf("floe run over mutual TLS: %v", err)
	}
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	if rows+dead != 3000 || dead == 0 {
		t.Fatalf("over mutual TLS: %d rows + %d dead letters, want 3000 with some dead letters", rows, dead)
	}
	// floe doctor reads the group and the offsets with the same TLS
	// settings (it used to connect in plain text, and fail).
	if out, rep := e.doctor(t, "--json", "--sample", "0", "--topic", topic, "--group", group); rep.TotalLag != 0 || len(rep.Partitions) != 3 {
		t.Fatalf("floe doctor over mutual TLS: lag %d over %d partitions, want 0 over 3\n%s", rep.TotalLag, len(rep.Partitions), out)
	}
	key, err := os.ReadFile(m.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	keyBody := keyMaterial(string(key))

	// The CA but no client certificate: the broker must refuse.
	bare := fmt.Sprintf("  tls:\n    ca_file: %s\n", m.CAFile)
	e.config = writeConfig(t, t.TempDir(), m.Bootstrap, "floe-test", "analytics.clicks", bare, "")
	p := e.floe("no-client-cert", "run", "--group", group)
	err = p.wait(t, 60*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("floe run without a client certificate: %v, want exit status 2\n%s", err, p.output())
	}
	out := p.output()
	if !strings.Contains(out, "tls") || !strings.Contains(out, "certificate") {
		t.Fatalf("the error does not say the TLS handshake wanted a certificate:\n%s", out)
	}
	if strings.Contains(run.output()+out, keyBody) {
		t.Fatal("floe's output contains the client key")
	}
	t.Logf("kafka %s: mutual TLS %d rows, %d dead letters; without a client certificate: %s (%s)", k.Version, rows, dead,
		strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), time.Since(began).Round(time.Millisecond))
}

// keyMaterial is the first base64 line of a PEM key: text that appears in
// output only if the key was printed.
func keyMaterial(pem string) string {
	for _, line := range strings.Split(pem, "\n") {
		if line != "" && !strings.HasPrefix(line, "-----") {
			return line
		}
	}
	return pem
}

// TestInteropHDFSKerberos runs `floe run` (kfake as the broker) with the
// table's warehouse on a Kerberized HDFS (deploy/hdfs --kerberos, a real KDC
// from deploy/kdc), floe logging in from a keytab configured in
// table.catalog: every record is committed exactly once, the table's files
// are on HDFS; a principal the keytab and KDC do not have ends `floe run`
// with status 2 and an error naming the principal and the keytab.
func TestInteropHDFSKerberos(t *testing.T) {
	if testing.Short() {
		t.Skip("interop test with a Kerberized HDFS skipped in -short mode")
	}
	t.Parallel()
	began := time.Now()
	kdc := infra.StartKDC(t, append(slices.Clone(infra.HDFSPrincipals), "floe")...)
	h := infra.StartHDFS(t, infra.WithKerberos(kdc))
	e := newEnv(t, 4, "")
	catalog := func(principal string) map[string]string {
		return map[string]string{
			"type": "sql", "uri": "file:" + e.dir + "/catalog.db", "sql.dialect": "sqlite", "sql.driver": "sqlite",
			"warehouse":                       h.URL("/warehouse"),
			hdfsio.PropPrincipal:              principal,
			hdfsio.PropKeytab:                 kdc.Keytab,
			hdfsio.PropKrb5Conf:               kdc.Krb5Conf,
			hdfsio.PropServicePrincipal:       h.Kerberos.NameNodePrincipal,
			hdfsio.PropDataTransferProtection: h.Kerberos.DataTransferProtection,
		}
	}
	e.catalog = catalog("floe@" + kdc.Realm)
	e.config = writeConfigCatalog(t, e.dir, e.cluster.Addrs()[0], "floe-test", "analytics.clicks", e.catalog,
		"  session_timeout: 6s\n  heartbeat_interval: 500ms\n  rebalance_timeout: 15s\n",
		"commit:\n  interval: 500ms\n  max_records: 2000\n  grace: 5s\n")
	ctx := t.Context()
	gen := clickgen.New(clickgen.Config{Sessions: 200, MalformedRate: 0.01, Seed: 21})
	if _, err := e.cluster.ProduceRate(ctx, e.topic, gen, 4000, 0); err != nil {
		t.Fatal(err)
	}
	end, err := e.cluster.EndOffsets(ctx, e.topic)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.start("kerberos", "run", "--until-caught-up").wait(t, 120*time.Second); err != nil {
		t.Fatalf("floe run with the warehouse on Kerberized HDFS: %v", err)
	}
	_, malformed := gen.Counts()
	rows, dead := e.check(end, malformed)
	if rows+dead != 4000 || rows == 0 {
		t.Fatalf("produced 4000: %d rows + %d dead letters", rows, dead)
	}
	tbl, err := e.loadTable(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if loc := tbl.Location(); !strings.HasPrefix(loc, h.URL("/warehouse/")) {
		t.Fatalf("table location %q is not on the Kerberized HDFS", loc)
	}

	// A principal that neither the keytab nor the KDC has.
	bad := catalog("mallory@" + kdc.Realm)
	e.config = writeConfigCatalog(t, t.TempDir(), e.cluster.Addrs()[0], "floe-test", "analytics.clicks", bad, "", "")
	p := e.start("wrong-principal", "run")
	err = p.wait(t, 60*time.Second)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 {
		t.Fatalf("floe run with a wrong principal: %v, want exit status 2\n%s", err, p.output())
	}
	out := p.output()
	for _, want := range []string{"Kerberos: login as mallory@" + kdc.Realm, "keytab " + kdc.Keytab, "KDC_ERR_C_PRINCIPAL_UNKNOWN"} {
		if !strings.Contains(out, want) {
			t.Fatalf("floe run with a wrong principal: the error does not name %q:\n%s", want, out)
		}
	}
	t.Logf("Kerberized HDFS: %d rows, %d dead letters at %s; wrong principal: %s (%s)", rows, dead, tbl.Location(),
		strings.TrimSpace(out[strings.LastIndex(strings.TrimSpace(out), "\n")+1:]), time.Since(began).Round(time.Millisecond))
}
