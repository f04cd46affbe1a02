// Package bytesize reads the byte sizes of floe's configuration: 1048576,
// "512KiB", "4MiB" or "1GiB".
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// Size is a size written as 1048576, "512KiB", "4MiB" or "1GiB" in YAML.
type Size int64

// UnmarshalYAML parses a plain number or a number with a binary unit.
func (b *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := Parse(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*b = v
	return nil
}

// Parse parses "1048576", "512KiB", "4MiB", "1GiB" (KB/MB/GB are taken as
// binary units too). Errors quote in as written, unit and all.
func Parse(in string) (Size, error) {
	s := strings.TrimSpace(in)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"B", 1}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	// Base 0, as YAML reads an integer: 16_777_216 and 0x1000000 too.
	v, err := strconv.ParseInt(s, 0, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("%q is not a byte size (e.g. 1048576, 512KiB, 4MiB)", in)
	}
	if v > math.MaxInt64/mult {
		return 0, fmt.Errorf("%q is too large a byte size", in)
	}
	return Size(v * mult), nil
}

// Bound is a Size that may also be -1: no bound.
type Bound int64

// UnmarshalYAML parses -1 or a Size.
func (b *Bound) UnmarshalYAML(n *yaml.Node) error {
	if strings.TrimSpace(n.Value) == "-1" {
		*b = -1
		return nil
	}
	var s Size
	if err := s.UnmarshalYAML(n); err != nil {
		return err
	}
	*b = Bound(s)
	return nil
}
