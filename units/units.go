package units

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Size is a byte count written with an optional unit: 512, 64K, 512M, 100MB, 1G,
// 1GiB (binary multiples in every spelling, as memory limits are).
type Size int64

// ParseSize parses a Size, naming the problem on error.
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("size %q: empty", s)
	}
	i := 0
	for i < len(t) && (t[i] >= '0' && t[i] <= '9' || t[i] == '.') {
		i++
	}
	num, unit := t[:i], strings.ToUpper(strings.TrimSpace(t[i:]))
	if num == "" {
		return 0, fmt.Errorf("size %q: no number (want e.g. 512M, 1G)", s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: bad number", s)
	}
	mult := map[string]float64{"": 1, "B": 1,
		"K": 1 << 10, "KB": 1 << 10, "KIB": 1 << 10,
		"M": 1 << 20, "MB": 1 << 20, "MIB": 1 << 20,
		"G": 1 << 30, "GB": 1 << 30, "GIB": 1 << 30,
		"T": 1 << 40, "TB": 1 << 40, "TIB": 1 << 40}[unit]
	if mult == 0 {
		return 0, fmt.Errorf("size %q: unknown unit %q (want K, M, G or T)", s, unit)
	}
	v := f * mult
	if v > math.MaxInt64/2 {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	// A fraction of a byte would be cut off, and "0.5" would become 0,
	// which means "the default" to every limit: refuse what would not be
	// enforced as written.
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("size %q: not a whole number of bytes (%.1f)", s, v)
	}
	return Size(v), nil
}

func (s Size) String() string {
	switch {
	case s >= 1<<30 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s>>30), 10) + "G"
	case s >= 1<<20 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s>>20), 10) + "M"
	case s >= 1<<10 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s>>10), 10) + "K"
	}
	return strconv.FormatInt(int64(s), 10)
}

// Set implements pflag.Value so flags share the parser.
func (s *Size) Set(v string) error {
	p, err := ParseSize(v)
	if err != nil {
		return err
	}
	*s = p
	return nil
}

// Type implements pflag.Value.
func (s *Size) Type() string { return "size" }

// UnmarshalText lets JSON (the daemon API) use the same spellings as YAML.
func (s *Size) UnmarshalText(b []byte) error { return s.Set(string(b)) }

// UnmarshalYAML accepts a number or a string with a unit.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: size must be a scalar like 512M", n.Line)
	}
	p, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = p
	return nil
}

// Duration is a time.Duration written as 30s, 10m, 1h.
type Duration time.Duration

func (d Duration) String() string { return time.Duration(d).String() }

// Set implements pflag.Value.
func (d *Duration) Set(v string) error {
	p, err := time.ParseDuration(v)
	if err != nil {
		return fmt.Errorf("duration %q: want e.g. 30s, 10m, 1h", v)
	}
	if p < 0 {
		return fmt.Errorf("duration %q: negative", v)
	}
	// "0.4ns" parses to 0, which means "the default" to every timeout:
	// refuse a duration that is not zero as written but is as parsed.
	if p == 0 && strings.ContainsAny(v, "123456789") {
		return fmt.Errorf("duration %q: under a nanosecond (write 0 for the default)", v)
	}
	*d = Duration(p)
	return nil
}

// Type implements pflag.Value.
func (d *Duration) Type() string { return "duration" }

// UnmarshalText lets JSON (the daemon API) use the same spellings as YAML.
func (d *Duration) UnmarshalText(b []byte) error { return d.Set(string(b)) }

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: duration must be a scalar like 30s", n.Line)
	}
	if err := d.Set(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}
