package units

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// MarshalJSON writes a Size as its string spelling ("512M"), which
// UnmarshalJSON reads back.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts the config file's spellings ("512M", "1GiB") or a
// JSON number of bytes.
func (s *Size) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var str string
		if err := json.Unmarshal(b, &str); err != nil {
			return err
		}
		return s.Set(str)
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil || f < 0 || f != math.Trunc(f) || f > math.MaxInt64/2 {
		return fmt.Errorf("size %s: want a whole number of bytes or a string like \"512M\"", b)
	}
	*s = Size(f)
	return nil
}

// MarshalJSON writes a Duration as its Go spelling ("1m30s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts a Go duration string ("30s", "10m"); a bare number is
// refused because its unit would be a guess.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || b[0] != '"' {
		return fmt.Errorf("duration %s: want a string like \"30s\", \"10m\"", b)
	}
	var str string
	if err := json.Unmarshal(b, &str); err != nil {
		return err
	}
	return d.Set(str)
}
