package bytesize_test

import (
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/floe-dev/floe/internal/bytesize"
)

func TestParse(t *testing.T) {
	for in, want := range map[string]bytesize.Size{"1048576": 1 << 20, "512KiB": 512 << 10, "4MiB": 4 << 20, "1GiB": 1 << 30, "64MB": 64 << 20, "16_777_216": 16 << 20, "0x1000000": 16 << 20} {
		got, err := bytesize.Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "-1", "1.5MiB", "12XB", "17179869184GiB", "9223372036854775808"} {
		if _, err := bytesize.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestParseErrorQuotesTheInput: an error quotes the size as it was
// written. It quoted what was left after the unit was cut off, so
// --target-file-size 10TB was refused as "10T" and 17179869184GiB as too
// large a "17179869184".
func TestParseErrorQuotesTheInput(t *testing.T) {
	for _, bad := range []string{"10TB", "1.5MiB", "17179869184GiB", " 12XB"} {
		_, err := bytesize.Parse(bad)
		if want := fmt.Sprintf("%q", bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q): %v; want an error quoting %s", bad, err, want)
		}
	}
}

func TestBound(t *testing.T) {
	for in, want := range map[string]bytesize.Bound{"-1": -1, "64MiB": 64 << 20, "0": 0, "4096": 4096} {
		var b bytesize.Bound
		if err := yaml.Unmarshal([]byte(in), &b); err != nil || b != want {
			t.Errorf("%q: got %d, %v; want %d", in, b, err, want)
		}
	}
	var b bytesize.Bound
	if err := yaml.Unmarshal([]byte("-2"), &b); err == nil {
		t.Errorf("-2 accepted as %d", b)
	}
}
