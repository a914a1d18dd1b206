package units

import (
	"encoding/json"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

func TestSizeAndDurationSpellings(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    Size
		wantErr bool
	}{
		{"512M", 512 << 20, false}, {"1GiB", 1 << 30, false}, {"100MB", 100 << 20, false}, {"4096", 4096, false},
		{"", 0, true}, {"M", 0, true}, {"1X", 0, true}, {"0.5", 0, true},
	} {
		got, err := ParseSize(tc.in)
		if (err != nil) != tc.wantErr || got != tc.want {
			t.Errorf("ParseSize(%q): got %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
	var v struct {
		S Size     `json:"s" yaml:"s"`
		D Duration `json:"d" yaml:"d"`
	}
	if err := json.Unmarshal([]byte(`{"s":"64K","d":"1m30s"}`), &v); err != nil || v.S != 64<<10 || time.Duration(v.D) != 90*time.Second {
		t.Errorf("JSON: got %+v, %v", v, err)
	}
	if err := yaml.Unmarshal([]byte("s: 2G\nd: 10s\n"), &v); err != nil || v.S != 2<<30 || time.Duration(v.D) != 10*time.Second {
		t.Errorf("YAML: got %+v, %v", v, err)
	}
	if err := yaml.Unmarshal([]byte("d: -1s\n"), &v); err == nil {
		t.Error("YAML: a negative duration was accepted")
	}
	if err := json.Unmarshal([]byte(`{"d":30}`), &v); err == nil {
		t.Error("JSON: a bare number of unknown unit was accepted as a duration")
	}
	if b, _ := json.Marshal(Size(512 << 20)); string(b) != `"512M"` {
		t.Errorf("Size JSON: got %s, want \"512M\"", b)
	}
}
