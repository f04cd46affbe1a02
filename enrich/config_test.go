package enrich_test

import (
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/enrich"
)

func decode(t *testing.T, src string) (enrich.Config, error) {
	t.Helper()
	var cfg enrich.Config
	dec := yaml.NewDecoder(strings.NewReader(src))
	dec.KnownFields(true)
	err := dec.Decode(&cfg)
	return cfg, err
}

const minimalYAML = `
url: http://127.0.0.1:8081/lookup
key: user_id
fields:
  - {name: segment, type: string}
  - {name: signup, type: timestamp, attribute: signup_ts}
`

func TestConfigDefaults(t *testing.T) {
	cfg, err := decode(t, minimalYAML)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	want := enrich.Config{
		URL: "http://127.0.0.1:8081/lookup", Mode: "batch", Key: "user_id",
		Fields: []enrich.Field{
			{Name: "segment", Type: "string", Attribute: "segment"},
			{Name: "signup", Type: "timestamp", Attribute: "signup_ts"},
		},
		BatchSize: 500, Linger: enrich.Duration(5 * time.Millisecond),
		MaxInFlightRecords: 100000, MaxInFlightRequests: 256,
		Timeout: enrich.Duration(5 * time.Second), Retries: 3, BackoffMin: enrich.Duration(100 * time.Millisecond), BackoffMax: enrich.Duration(2 * time.Second),
		CacheSize: 200_000, CacheTTL: enrich.Duration(10 * time.Minute), NegativeCacheTTL: enrich.Duration(time.Minute),
		Breaker: enrich.BreakerConfig{Policy: "pause", FailureRatio: 0.5, MinRequests: 10,
			OpenTimeout: enrich.Duration(5 * time.Second), Interval: enrich.Duration(56 * time.Second)}, // 2 × 4 × (5s + 2s)
	}
	if cfg.String() != want.String() {
		t.Fatalf("defaults:\n got %v\nwant %v", cfg, want)
	}
	// Finish is idempotent.
	again := cfg
	if err := again.Finish(); err != nil || again.String() != cfg.String() {
		t.Fatalf("second Finish: %v\n%v", err, again)
	}
}

func TestConfigYAMLDurations(t *testing.T) {
	cfg, err := decode(t, minimalYAML+`
mode: batch
batch_size: 100
linger: 2ms
timeout: 1.5s
backoff_min: 50ms
backoff_max: 1s
cache_ttl: 1h
negative_cache_ttl: 30s
max_in_flight_records: 5000
max_in_flight_requests: 64
retries: -1
cache_size: -1
auth_header: "X-Api-Key: abc"
tls: {ca_file: /etc/ca.pem, insecure_skip_verify: false}
breaker: {policy: dlq, failure_ratio: 0.25, min_requests: 20, open_timeout: 30s, interval: 1m}
`)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if cfg.Linger.D() != 2*time.Millisecond || cfg.Timeout.D() != 1500*time.Millisecond || cfg.CacheTTL.D() != time.Hour ||
		cfg.Breaker.OpenTimeout.D() != 30*time.Second || cfg.Breaker.Interval.D() != time.Minute || cfg.Retries != -1 ||
		cfg.CacheSize != -1 || cfg.Breaker.Policy != enrich.PolicyDLQ || cfg.TLS.CAFile != "/etc/ca.pem" {
		t.Fatalf("decoded %v", cfg)
	}
	// A bare number is not a duration (yaml.v3 would otherwise read 5 as 5ns).
	if _, err := decode(t, minimalYAML+"timeout: 5\n"); err == nil {
		t.Fatal("timeout: 5 accepted")
	}
	if _, err := decode(t, minimalYAML+"linger_ms: 5\n"); err == nil {
		t.Fatal("an unknown key was accepted")
	}
	// linger: -1 sends partial batches at once; it is not the default.
	cfg, err = decode(t, minimalYAML+"linger: -1\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil || cfg.Linger != -1 {
		t.Fatalf("linger: -1: %v, %s", err, cfg.Linger)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"no url", "key: k\nfields: [{name: a, type: string}]", "enrich.url: required"},
		{"relative url", "url: /lookup\nkey: k\nfields: [{name: a, type: string}]", "enrich.url:"},
		{"single without {key}", minimalYAML + "mode: single", "enrich.url: mode single needs {key}"},
		{"batch with {key}", strings.Replace(minimalYAML, "/lookup", "/lookup/{key}", 1), "enrich.url: contains {key}"},
		{"mode", minimalYAML + "mode: stream", `enrich.mode: "stream"`},
		{"no key", "url: http://h/lookup\nfields: [{name: a, type: string}]", "enrich.key: required"},
		{"no fields", "url: http://h/lookup\nkey: k", "enrich.fields: at least one"},
		{"field type", "url: http://h/lookup\nkey: k\nfields: [{name: a, type: int}]", `enrich.fields[0].type: "int"`},
		{"field without type", "url: http://h/lookup\nkey: k\nfields: [{name: a}]", "enrich.fields[0].type: required"},
		{"duplicate field", "url: http://h/lookup\nkey: k\nfields: [{name: a, type: long}, {name: a, type: double}]", `enrich.fields[1].name: "a" appears twice`},
		{"batch size", minimalYAML + "batch_size: -5", "enrich.batch_size"},
		{"linger", minimalYAML + "linger: -2ms", "enrich.linger: -2ms: want a duration, or -1 for none"},
		{"backoff", minimalYAML + "backoff_min: 3s\nbackoff_max: 1s", "enrich.backoff_max: 1s is below enrich.backoff_min 3s"},
		{"retries", minimalYAML + "retries: -3", "enrich.retries"},
		{"cache size", minimalYAML + "cache_size: -2", "enrich.cache_size"},
		{"cache file without cache", minimalYAML + "cache_size: -1\ncache_file: /tmp/enrich.cache", "enrich.cache_file: needs the cache"},
		{"auth header", minimalYAML + "auth_header: Bearer-only", "enrich.auth_header"},
		{"tls pair", minimalYAML + "tls: {cert_file: c.pem}", "enrich.tls.cert_file"},
		{"policy", minimalYAML + "breaker: {policy: drop}", `enrich.breaker.policy: "drop"`},
		{"ratio", minimalYAML + "breaker: {failure_ratio: 1.5}", "enrich.breaker.failure_ratio"},
		{"in flight", minimalYAML + "max_in_flight_records: -1", "enrich.max_in_flight_records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := decode(t, tc.yaml)
			if err != nil {
				t.Fatal(err)
			}
			err = cfg.Finish()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Finish: %v\nwant an error containing %q", err, tc.want)
			}
		})
	}
}

// TestConfigRefusesARequestSpanBeyondAnyDuration: a timeout or retry count
// so large that (retries+1) × (timeout + backoff_max) overflowed made the
// span negative or small: the breaker.interval check, which must exceed
// it, passed, and the interval defaulted to 10s. It is refused naming the
// keys; the largest span that fits still works.
func TestConfigRefusesARequestSpanBeyondAnyDuration(t *testing.T) {
	for _, extra := range []string{"timeout: 2562047h", "timeout: 1h\nretries: 4000000000", "retries: 9223372036854775807", "backoff_max: 2562047h"} {
		cfg, err := decode(t, minimalYAML+extra)
		if err != nil {
			t.Fatal(err)
		}
		if err := cfg.Finish(); err == nil || !strings.Contains(err.Error(), "enrich.timeout and enrich.retries") {
			t.Errorf("%q: Finish: %v (request span %s, breaker.interval %s); want it refused naming enrich.timeout and enrich.retries",
				extra, err, cfg.RequestSpan(), cfg.Breaker.Interval)
		}
	}
	cfg, err := decode(t, minimalYAML+"timeout: 100000h\nretries: 1")
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil || cfg.RequestSpan() != 2*(100000*time.Hour+2*time.Second) || cfg.Breaker.Interval.D() != 2*cfg.RequestSpan() {
		t.Errorf("timeout 100000h, 1 retry: %v, request span %s, breaker.interval %s", err, cfg.RequestSpan(), cfg.Breaker.Interval)
	}
}

func TestConfigRedactsSecrets(t *testing.T) {
	cfg, err := decode(t, strings.Replace(minimalYAML, "http://", "http://user:pa55word@", 1)+`auth_header: "Authorization: Bearer tok3n"`)
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	s := cfg.String()
	if strings.Contains(s, "tok3n") || strings.Contains(s, "pa55word") || !strings.Contains(s, "Authorization: REDACTED") {
		t.Fatalf("String() = %s", s)
	}
	bad := cfg
	bad.AuthHeader = "tok3n-without-a-name"
	if err := bad.Finish(); err == nil || strings.Contains(err.Error(), "tok3n") {
		t.Fatalf("Finish: %v: must fail without echoing the value", err)
	}
}
