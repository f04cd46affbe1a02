package pipeline_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floe-dev/floe/pipeline"
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

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]pipeline.ByteSize{"1048576": 1 << 20, "512KiB": 512 << 10, "4MiB": 4 << 20, "1GiB": 1 << 30, "64MB": 64 << 20} {
		got, err := pipeline.ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("ParseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5MiB", "12XB"} {
		if _, err := pipeline.ParseByteSize(bad); err == nil {
			t.Errorf("ParseByteSize(%q) accepted", bad)
		}
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
