package pipeline

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// SASLConfig authenticates floe to the brokers (kafka.sasl). The password
// comes from the YAML (usually as ${ENV}) or from PasswordFile, never both;
// it is never logged and never part of an error.
type SASLConfig struct {
	// Mechanism is SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN.
	Mechanism string `yaml:"mechanism"`
	Username  string `yaml:"username"`
	Password  Secret `yaml:"password"`
	// PasswordFile holds the password (one trailing newline is ignored), as
	// mounted from a Kubernetes Secret; it is read at start-up.
	PasswordFile string `yaml:"password_file"`
}

// TLSConfig encrypts the connections to the brokers (kafka.tls). Present but
// empty means TLS with the system's roots.
type TLSConfig struct {
	// CAFile is a PEM bundle of the CAs that sign the brokers' certificates.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and key (mutual TLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// InsecureSkipVerify accepts any broker certificate; for tests only.
	InsecureSkipVerify bool `yaml:"insecure_skip_verify"`
	// ServerName overrides the name checked in the broker's certificate
	// (default: the host of the address dialed).
	ServerName string `yaml:"server_name"`
}

// Secret is a string that prints as "[redacted]" (fmt, %+v of a config,
// slog), so a configuration dumped into a log does not leak it.
type Secret string

// String redacts the secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString redacts the secret in %#v.
func (s Secret) GoString() string { return `"` + s.String() + `"` }

// LogValue redacts the secret in slog records.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// security is the resolved kafka.sasl and kafka.tls: what every kafka-go
// dialer, transport and client of floe is built with.
type security struct {
	mech sasl.Mechanism // nil: no SASL
	tls  *tls.Config    // nil: plaintext
}

// security reads the files kafka.sasl and kafka.tls name and builds the SASL
// mechanism and TLS configuration. Errors name the key and the file, never
// the secret.
func (k KafkaConfig) security() (security, error) {
	var sec security
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, args...)))
	}
	if s := k.SASL; s != nil {
		password := string(s.Password)
		switch {
		case s.Password != "" && s.PasswordFile != "":
			bad("kafka.sasl.password", "set either password or password_file, not both")
		case s.PasswordFile != "":
			raw, err := os.ReadFile(s.PasswordFile)
			switch {
			case errors.Is(err, fs.ErrNotExist) && (!strings.ContainsRune(s.PasswordFile, filepath.Separator) ||
				!isDir(filepath.Dir(s.PasswordFile)) || filepath.Dir(s.PasswordFile) == string(filepath.Separator)):
				// Not named: a value without a directory, in one that does
				// not exist, or in the root, that names no file may be the
				// password itself, written in place of its file's path
				// (base64 holds '/' too, first once in 64).
				bad("kafka.sasl.password_file", "no such file (the value is not shown: it names no existing directory, so it may be the password itself; give the file's path)")
			case err != nil:
				bad("kafka.sasl.password_file", "%v", err)
			}
			password = strings.TrimSuffix(strings.TrimSuffix(string(raw), "\n"), "\r")
			if err == nil && password == "" {
				bad("kafka.sasl.password_file", "%s is empty", s.PasswordFile)
			}
		case s.Password == "":
			bad("kafka.sasl.password", "required (or password_file)")
		}
		if s.Username == "" {
			bad("kafka.sasl.username", "required")
		}
		switch s.Mechanism {
		case "SCRAM-SHA-256", "SCRAM-SHA-512":
			algo := scram.SHA256
			if s.Mechanism == "SCRAM-SHA-512" {
				algo = scram.SHA512
			}
			m, err := scram.Mechanism(algo, s.Username, password)
			if err != nil {
				// SASLprep rejected a character; its error quotes the
				// password, so it is not passed on.
				bad("kafka.sasl", "the username or password holds a character SCRAM does not allow (SASLprep, RFC 4013)")
			}
			sec.mech = m
		case "PLAIN":
			sec.mech = plain.Mechanism{Username: s.Username, Password: password}
		default:
			bad("kafka.sasl.mechanism", "%q: want SCRAM-SHA-256, SCRAM-SHA-512 or PLAIN", s.Mechanism)
		}
	}
	if t := k.TLS; t != nil {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName, InsecureSkipVerify: t.InsecureSkipVerify}
		if t.CAFile != "" {
			pem, err := os.ReadFile(t.CAFile)
			if err != nil {
				bad("kafka.tls.ca_file", "%v", err)
			} else {
				cfg.RootCAs = x509.NewCertPool()
				if !cfg.RootCAs.AppendCertsFromPEM(pem) {
					bad("kafka.tls.ca_file", "%s holds no PEM certificate", t.CAFile)
				}
			}
		}
		switch {
		case (t.CertFile == "") != (t.KeyFile == ""):
			bad("kafka.tls.cert_file", "cert_file and key_file go together")
		case t.CertFile != "":
			cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
			if err != nil {
				bad("kafka.tls.cert_file", "loading the client certificate %s and key %s: %v", t.CertFile, t.KeyFile, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		sec.tls = cfg
	}
	return sec, errors.Join(errs...)
}

// dialer returns the kafka-go Dialer floe's readers, consumer group and
// connections use.
func (k KafkaConfig) dialer() (*kafka.Dialer, error) {
	sec, err := k.security()
	if err != nil {
		return nil, err
	}
	return &kafka.Dialer{Timeout: 10 * time.Second, DualStack: true, ClientID: k.ClientID, TLS: sec.tls, SASLMechanism: sec.mech}, nil
}

// transport returns the kafka-go Transport floe's writers and clients use.
// Callers close its idle connections when done with it.
func (k KafkaConfig) transport() (*kafka.Transport, error) {
	sec, err := k.security()
	if err != nil {
		return nil, err
	}
	return &kafka.Transport{DialTimeout: 10 * time.Second, ClientID: k.ClientID, TLS: sec.tls, SASL: sec.mech}, nil
}

// Client returns a kafka-go client of k's brokers with k's TLS and SASL
// settings, for the admin requests of tools (floe doctor). Call done when
// done with it.
func (k KafkaConfig) Client() (c *kafka.Client, done func(), err error) {
	tr, err := k.transport()
	if err != nil {
		return nil, nil, err
	}
	return &kafka.Client{Addr: kafka.TCP(k.Brokers...), Timeout: 10 * time.Second, Transport: tr}, tr.CloseIdleConnections, nil
}

// warnInsecure logs, once at start-up, a SASL password that would cross the
// network in clear text, and brokers whose certificates are not checked:
// whoever answers the TLS handshake then reads every record, and with PLAIN
// the password too.
func (k KafkaConfig) warnInsecure(log *slog.Logger) {
	plain := k.SASL != nil && k.SASL.Mechanism == "PLAIN"
	switch {
	case plain && k.TLS == nil:
		log.Warn("kafka.sasl PLAIN without kafka.tls sends the password in clear text")
	case k.TLS != nil && k.TLS.InsecureSkipVerify && plain:
		log.Warn("kafka.tls.insecure_skip_verify is on with kafka.sasl PLAIN: the brokers' certificates are not checked, so whoever answers the TLS handshake receives the password (and every record)")
	case k.TLS != nil && k.TLS.InsecureSkipVerify:
		log.Warn("kafka.tls.insecure_skip_verify is on: the brokers' certificates are not checked, so whoever answers the TLS handshake reads every record")
	}
}

// isDir reports whether path is a directory.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}
