package duration_test

import (
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/internal/duration"
)

func TestUnmarshal(t *testing.T) {
	for in, want := range map[string]time.Duration{"10s": 10 * time.Second, "1.5s": 1500 * time.Millisecond, "1m30s": 90 * time.Second,
		"0": 0, "-1": -1, "-1s": -time.Second, `"0"`: 0} {
		var d duration.Duration
		if err := yaml.Unmarshal([]byte(in), &d); err != nil || d.D() != want {
			t.Errorf("%s: got %s, %v; want %s", in, d, err, want)
		}
	}
	for _, bad := range []string{"5", "-2", "often", "10 s", "''"} {
		var d duration.Duration
		if err := yaml.Unmarshal([]byte(bad), &d); err == nil {
			t.Errorf("%s accepted as %s", bad, d)
		}
	}
}
