package pipeline

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestKafkaInsecureSettingsWarned: each setting that exposes the SASL
// password or the records is warned about at start-up, and a safe one is
// not. Before, kafka.tls.insecure_skip_verify was never warned about,
// with SASL PLAIN (whose password then goes to whoever answers the TLS
// handshake) or without.
func TestKafkaInsecureSettingsWarned(t *testing.T) {
	plain := &SASLConfig{Mechanism: "PLAIN", Username: "floe", Password: "pw"}
	for _, tc := range []struct {
		name string
		k    KafkaConfig
		want string // "" = no warning
	}{
		{"PLAIN without TLS", KafkaConfig{SASL: plain}, "sends the password in clear text"},
		{"PLAIN with insecure_skip_verify", KafkaConfig{SASL: plain, TLS: &TLSConfig{InsecureSkipVerify: true}}, "receives the password"},
		{"insecure_skip_verify alone", KafkaConfig{TLS: &TLSConfig{InsecureSkipVerify: true}}, "kafka.tls.insecure_skip_verify is on"},
		{"PLAIN with TLS", KafkaConfig{SASL: plain, TLS: &TLSConfig{}}, ""},
	} {
		var logs bytes.Buffer
		tc.k.warnInsecure(slog.New(slog.NewTextHandler(&logs, nil)))
		if got := logs.String(); (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%s: logged %q, want a warning with %q", tc.name, got, tc.want)
		}
	}
}
