package learn

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// TestSuggestWithholdsFindingsOnlyHosts: a destination only ever seen
// carrying content findings (an agent posting encoded data to a paste site
// in a report-mode run) is never suggested, and stays denied; one also seen
// clean is suggested as before.
func TestSuggestWithholdsFindingsOnlyHosts(t *testing.T) {
	log := runLog(t, engine(t, ""), []event{
		{in: httpIn("POST", "paste.example", 443, "/new")},
		{in: httpIn("POST", "paste.example", 443, "/new2")},
		{in: httpIn("GET", "docs.example", 443, "/a")},
		{in: httpIn("POST", "docs.example", 443, "/b")},
	})
	// The gateway's records of these requests: findings on every paste one
	// and on docs.example's POST.
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	var out []byte
	for _, line := range bytes.Split(bytes.TrimSpace(raw), []byte("\n")) {
		var r audit.Record
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatal(err)
		}
		if r.Host == "paste.example" || r.Path == "/b" {
			r.Findings = []audit.Finding{{Detector: "path-entropy", Class: "encoded", Where: "url.path", Confidence: "low"}}
		}
		b, _ := json.Marshal(&r)
		out = append(append(out, b...), '\n')
	}
	if err := os.WriteFile(log, out, 0o644); err != nil {
		t.Fatal(err)
	}
	dir, s := suggestFrom(t, log)
	if _, ok := s.Hosts["paste.example"]; ok {
		t.Fatalf("suggested paste.example, only ever seen carrying findings")
	}
	if !slices.Equal(s.Withheld, []string{"paste.example"}) {
		t.Fatalf("withheld: got %v, want [paste.example]", s.Withheld)
	}
	if _, ok := s.Hosts["docs.example"]; !ok {
		t.Fatalf("got hosts %v, want docs.example (also seen clean)", keys(s.Hosts))
	}
	in := httpIn("POST", "paste.example", 443, "/new")
	if d := engine(t, dir).Decide(t.Context(), &in); d.Allowed {
		t.Fatal("the suggested policy allows paste.example")
	}
}
