package pipeline

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestTinyCommitSettingsWarned: a commit.max_bytes below 1MiB (128 meant
// as MiB is 128 bytes) or a commit.max_records below 100 is warned about
// at start-up, naming the key and its value; the defaults and ordinary
// values are not. Such settings were accepted silently and made a table
// commit per record or so.
func TestTinyCommitSettingsWarned(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    CommitConfig
		want []string // "" = no warning
	}{
		{"max_bytes 128", CommitConfig{MaxBytes: 128, MaxRecords: 500000}, []string{"commit.max_bytes is below 1MiB", "commit.max_bytes=128"}},
		{"max_bytes 1MiB-1", CommitConfig{MaxBytes: 1<<20 - 1, MaxRecords: 500000}, []string{"commit.max_bytes=1048575"}},
		{"max_records 10", CommitConfig{MaxBytes: 128 << 20, MaxRecords: 10}, []string{"commit.max_records is below 100", "commit.max_records=10"}},
		{"both", CommitConfig{MaxBytes: 4096, MaxRecords: 1}, []string{"commit.max_bytes=4096", "commit.max_records=1"}},
		{"defaults", CommitConfig{MaxBytes: 128 << 20, MaxRecords: 500000}, nil},
		{"at the bounds", CommitConfig{MaxBytes: 1 << 20, MaxRecords: 100}, nil},
	} {
		var logs bytes.Buffer
		tc.c.warnTiny(slog.New(slog.NewTextHandler(&logs, nil)))
		got := logs.String()
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: logged %q, want nothing", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) || !strings.Contains(got, "level=WARN") {
				t.Errorf("%s: logged %q, want a warning with %q", tc.name, got, w)
			}
		}
	}
}

// TestTinySizesWarned: memory_limit, kafka.max_message_bytes, the target
// file sizes and kafka.heartbeat_interval so small they are usually a unit
// left off are warned about at start-up, naming the key and its value;
// ordinary values and unset ones (0) are not. They were accepted silently:
// memory_limit: 1 kept the collector running without pause,
// max_message_bytes: 1 dead-lettered every record.
func TestTinySizesWarned(t *testing.T) {
	ordinary := Config{MemoryLimit: 900 << 20, Kafka: KafkaConfig{MaxMessageBytes: 1 << 20, HeartbeatInterval: Duration(3 * time.Second)},
		Table: TableConfig{TargetFileBytes: 256 << 20}, Maintain: MaintainConfig{TargetFileBytes: 128 << 20},
		Commit: CommitConfig{MaxBytes: 128 << 20, MaxRecords: 500000}}
	for _, tc := range []struct {
		name string
		set  func(*Config)
		want []string // nil: no warning
	}{
		{"ordinary", func(*Config) {}, nil},
		{"unset", func(c *Config) { *c = Config{} }, nil},
		{"memory_limit 1", func(c *Config) { c.MemoryLimit = 1 }, []string{"memory_limit is below 64MiB", "memory_limit=1"}},
		{"max_message_bytes 1", func(c *Config) { c.Kafka.MaxMessageBytes = 1 }, []string{"kafka.max_message_bytes is below 1KiB", "kafka.max_message_bytes=1"}},
		{"table.target_file_bytes 256", func(c *Config) { c.Table.TargetFileBytes = 256 }, []string{"table.target_file_bytes is below 1MiB", "table.target_file_bytes=256"}},
		{"maintain.target_file_bytes 128", func(c *Config) { c.Maintain.TargetFileBytes = 128 }, []string{"maintain.target_file_bytes=128"}},
		{"heartbeat 1us", func(c *Config) { c.Kafka.HeartbeatInterval = Duration(time.Microsecond) }, []string{"kafka.heartbeat_interval is below 100ms", "kafka.heartbeat_interval=1"}},
	} {
		c := ordinary
		tc.set(&c)
		var logs bytes.Buffer
		c.warnTiny(slog.New(slog.NewTextHandler(&logs, nil)))
		got := logs.String()
		if len(tc.want) == 0 && got != "" {
			t.Errorf("%s: logged %q, want nothing", tc.name, got)
		}
		for _, w := range tc.want {
			if !strings.Contains(got, w) || strings.Count(got, "level=WARN") != 1 {
				t.Errorf("%s: logged %q, want one warning with %q", tc.name, got, w)
			}
		}
	}
}
