package pipeline

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
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
