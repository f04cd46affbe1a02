// Package duration reads the durations of floe's configuration: Go
// duration strings ("10s", "1m30s"), and 0 and -1 without a unit.
package duration

import (
	"fmt"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Duration is a time.Duration written as "10s" or "500ms" in YAML. 0 and
// -1 (the "never" of settings that have one) need no unit; any other bare
// number is refused, as yaml.v3 refuses every bare number for a
// time.Duration, rather than read as nanoseconds.
type Duration time.Duration

// UnmarshalYAML parses Go duration syntax, or -1.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if strings.TrimSpace(n.Value) == "-1" {
		*d = -1
		return nil
	}
	v, err := time.ParseDuration(strings.TrimSpace(n.Value))
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration (e.g. 10s, 500ms)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// D returns the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats the value as time.Duration does ("1m30s").
func (d Duration) String() string { return time.Duration(d).String() }
