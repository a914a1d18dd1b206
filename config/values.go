package config

import (
	"fmt"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/units"
)

// FreeSpace is a free-space threshold: a size (256M) or a percentage of the
// filesystem (1%); 0 turns the check it guards off.
type FreeSpace struct {
	Bytes   Size
	Percent float64
	set     bool // decoded from the file (so an explicit 0 is not replaced by the default)
}

// ParseFreeSpace parses "256M", "1%" or "0".
func ParseFreeSpace(s string) (FreeSpace, error) {
	t := strings.TrimSpace(s)
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || !(v >= 0 && v <= 100) {
			return FreeSpace{}, fmt.Errorf("free space %q: want a percentage between 0%% and 100%%, or a size such as 256M", s)
		}
		return FreeSpace{Percent: v, set: true}, nil
	}
	b, err := ParseSize(t)
	if err != nil {
		return FreeSpace{}, fmt.Errorf("free space %q: want a size such as 256M or a percentage such as 1%%", s)
	}
	return FreeSpace{Bytes: b, set: true}, nil
}

// Of is the threshold in bytes on a filesystem of total bytes.
func (f FreeSpace) Of(total uint64) uint64 {
	if f.Percent > 0 {
		return uint64(float64(total) * f.Percent / 100)
	}
	return uint64(f.Bytes)
}

func (f FreeSpace) String() string {
	if f.Percent > 0 {
		return strconv.FormatFloat(f.Percent, 'f', -1, 64) + "%"
	}
	return f.Bytes.String()
}

// Set implements pflag.Value.
func (f *FreeSpace) Set(v string) error {
	p, err := ParseFreeSpace(v)
	if err != nil {
		return err
	}
	*f = p
	return nil
}

// Type implements pflag.Value.
func (f *FreeSpace) Type() string { return "size-or-percent" }

// UnmarshalText lets JSON use the same spellings as YAML.
func (f *FreeSpace) UnmarshalText(b []byte) error { return f.Set(string(b)) }

// UnmarshalYAML accepts a size, a number or a percentage.
func (f *FreeSpace) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: free space must be a scalar like 256M or 1%%", n.Line)
	}
	if err := f.Set(n.Value); err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	return nil
}

// Size is a byte count written with an optional unit (units.Size).
type Size = units.Size

// Duration is a time.Duration written as 30s, 10m, 1h (units.Duration).
type Duration = units.Duration

// ParseSize parses a Size, naming the problem on error.
func ParseSize(s string) (Size, error) { return units.ParseSize(s) }
