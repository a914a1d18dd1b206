package policy

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/open-policy-agent/opa/v1/rego"
)

// TestStripDecision decides through the engine what the response-content
// example's Rego tests decide from JSON: a response finding from the docs
// host is stripped (Decision.Strip on an allow), one from the MCP host is
// denied (never Strip), none is neither.
func TestStripDecision(t *testing.T) {
	e := newEngine(t, Config{Dir: filepath.Join("..", "policies", "examples", "response-content")})
	in := func(host string, fs ...Finding) *Input {
		x := httpIn("POST", host, "/mcp")
		if len(fs) > 0 {
			x.Content = &Content{Findings: fs}
		}
		return x
	}
	inj := Finding{Detector: "prompt-injection", Class: "injection", Where: "sse.event", Confidence: "high"}
	for _, tc := range []struct {
		name           string
		in             *Input
		allowed, strip bool
	}{
		{"docs host, injection", in("docs.corp.example", inj), true, true},
		{"mcp host, injection", in("mcp.corp.example", inj), false, false},
		{"docs host, no finding", in("docs.corp.example"), true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := e.Decide(context.Background(), tc.in)
			if d.Err != nil || d.Allowed != tc.allowed || d.Strip != tc.strip {
				t.Fatalf("got allowed %v strip %v (%v), want allowed %v strip %v", d.Allowed, d.Strip, d.Err, tc.allowed, tc.strip)
			}
		})
	}
}

// A decision document whose strip is not a boolean is a policy error.
func TestStripDecisionShape(t *testing.T) {
	base := func(strip any) rego.ResultSet {
		return rego.ResultSet{{Expressions: []*rego.ExpressionValue{{Value: map[string]any{
			"allowed": true, "reasons": []any{}, "mitm": false, "http_status": json.Number("0"), "strip": strip,
		}}}}}
	}
	if d, err := parseResult(base(true)); err != nil || !d.Strip {
		t.Fatalf("strip true: got %+v %v, want Strip", d, err)
	}
	if _, err := parseResult(base("yes")); err == nil {
		t.Fatal(`strip "yes": got no error, want one naming decision.strip`)
	}
}
