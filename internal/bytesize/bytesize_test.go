package bytesize_test

import (
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
