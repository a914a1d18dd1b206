package policy

import (
	"context"
	"testing"
)

// The content rules reach the engine's own input conversion and decision
// cache: a request to an allowed host carrying a high-confidence credential
// is denied, the same request without it allowed (the cache must tell them
// apart), and a policy turns the detector off by name.
func TestContentFindingsDecide(t *testing.T) {
	ctx := context.Background()
	allowAll := func(t *testing.T, extra string) *Engine {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"p.rego": "package airlock.egress\n\nallow := true\n" + extra})
		return newEngine(t, Config{Dir: dir})
	}
	withFinding := func(class, conf string) *Input {
		in := httpIn("GET", "api.example", "/")
		in.Content = &Content{Findings: []Finding{{Detector: "aws-access-token", Class: class, Where: "url.query", Confidence: conf, Fingerprint: "0123456789abcdef"}}}
		return in
	}
	e := allowAll(t, "")
	if u := e.cur.Load().used; !u.content {
		t.Fatalf("got used fields %+v, want content (the library reads it)", u)
	}
	for _, tc := range []struct {
		name string
		in   *Input
		want bool
		id   string
	}{
		{"no findings", httpIn("GET", "api.example", "/"), true, ""},
		{"high credential", withFinding("credential", "high"), false, "content_credential"},
		{"canary", withFinding("canary", "low"), false, "content_canary"},
		{"medium credential recorded", withFinding("credential", "medium"), true, ""},
		{"entropy recorded", withFinding("entropy", "high"), true, ""},
		{"no findings again (cache)", httpIn("GET", "api.example", "/"), true, ""},
		{"high credential again (cache)", withFinding("credential", "high"), false, "content_credential"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := e.Decide(ctx, tc.in)
			if d.Err != nil || d.Allowed != tc.want || (tc.id != "" && reasonIDs(d) != tc.id) {
				t.Fatalf("got allowed %v reasons %q err %v, want %v %q", d.Allowed, reasonIDs(d), d.Err, tc.want, tc.id)
			}
		})
	}
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		"p.rego":   "package airlock.egress\n\nallow := true\n",
		"off.rego": "package airlock.content\n\ndisabled := {\"aws-access-token\"}\n",
	})
	off := newEngine(t, Config{Dir: dir})
	if d := off.Decide(ctx, withFinding("credential", "high")); !d.Allowed {
		t.Fatalf("detector turned off by name: got %+v, want allowed", d)
	}
	canary := withFinding("canary", "high")
	canary.Content.Findings[0].Detector = "canary"
	if d := off.Decide(ctx, canary); d.Allowed {
		t.Fatalf("another detector still on: got allowed, want denied")
	}
}
