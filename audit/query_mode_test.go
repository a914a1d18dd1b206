package audit

import (
	"context"
	"encoding/json"
	"testing"
)

// TestQueryModeReasonLabels pins the filters an auditor asked for: a
// report-mode denial (let through) is told apart from an enforced one, a
// reason id selects its records, and a label selects the records of the
// sandboxes whose creation record carried it, across rotated files and an id
// used again by a sandbox without the label.
func TestQueryModeReasonLabels(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	create := func(id string, labels map[string]string) *Record {
		raw, _ := json.Marshal(labels)
		return &Record{Sandbox: id, Kind: KindSandbox, Decision: DecisionAllow,
			Reasons: []Reason{{ID: "created"}}, Extra: map[string]json.RawMessage{"labels": raw}}
	}
	decision := func(id, dec, mode, reason string) *Record {
		return &Record{Sandbox: id, Kind: KindConnect, Decision: dec, Mode: mode, Host: "evil.example", Port: 443,
			Reasons: []Reason{{ID: reason}}}
	}
	recs := []*Record{
		create("sb-ml", map[string]string{"team": "ml", "env": "dev"}),
		create("sb-web", map[string]string{"team": "web"}),
	}
	for range 10 { // enough to rotate between creation and decisions
		recs = append(recs,
			decision("sb-ml", DecisionDeny, ModeReport, "default_deny"),    // would deny
			decision("sb-web", DecisionDeny, ModeEnforce, "default_deny"),  // denied
			decision("sb-web", DecisionAllow, ModeEnforce, "allow_listed"), // allowed
			&Record{Sandbox: "sb-dns", Kind: KindDNS, Decision: DecisionDeny, QName: "x.example.", Reasons: []Reason{{ID: "dns_denied"}}},
		)
	}
	recs = append(recs, create("sb-ml", map[string]string{"team": "web"}), decision("sb-ml", DecisionDeny, ModeReport, "default_deny"))
	for _, r := range recs {
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, err := ChainFiles(cfg.File)
	if err != nil || len(files) < 2 {
		t.Fatalf("chain files: got %v, %v; want rotated siblings", files, err)
	}
	tests := []struct {
		name string
		f    Filter
		want int
	}{
		{"report mode", Filter{Mode: ModeReport}, 11},
		{"enforce mode includes records without a mode", Filter{Mode: ModeEnforce}, 30 + 3},
		{"enforced denials", Filter{Mode: ModeEnforce, Decision: DecisionDeny}, 20},
		{"reason", Filter{Reason: "default_deny"}, 21},
		{"reason not first", Filter{Reason: "nope"}, 0},
		{"label", Filter{Labels: map[string]string{"team": "ml"}}, 1 + 10},
		{"two labels", Filter{Labels: map[string]string{"team": "ml", "env": "dev"}}, 1 + 10},
		{"label value differs", Filter{Labels: map[string]string{"team": "ops"}}, 0},
		{"label of reused id", Filter{Labels: map[string]string{"team": "web"}}, 1 + 20 + 1 + 1},
		{"label and mode", Filter{Labels: map[string]string{"team": "ml"}, Mode: ModeReport}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := 0
			err := Query(context.Background(), files, tt.f, func(r *Record) error {
				got++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %d records, want %d", got, tt.want)
			}
		})
	}
}

func TestOutcome(t *testing.T) {
	tests := []struct {
		name string
		r    Record
		want string
	}{
		{"allow", Record{Decision: DecisionAllow, Mode: ModeReport}, DecisionAllow},
		{"enforced deny", Record{Decision: DecisionDeny, Mode: ModeEnforce}, DecisionDeny},
		{"deny without mode", Record{Decision: DecisionDeny}, DecisionDeny},
		{"report deny", Record{Decision: DecisionDeny, Mode: ModeReport}, OutcomeWouldDeny},
		{"report error", Record{Decision: DecisionError, Mode: ModeReport}, DecisionError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Outcome(&tt.r); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
