package daemon

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/learn"
)

// TestUpdateSandbox: PATCH changes one sandbox's allow list and labels, what
// serves it gets the new rules, another sandbox keeps its own, and the audit
// record names the caller with the old and new rules.
func TestUpdateSandbox(t *testing.T) {
	w := newFakeWorld(t)
	a := w.client(1000)
	sb := a.create(t, `{"labels":{"team":"ml","tier":"dev"},"allow":["api.example.com"]}`)
	other := a.create(t, `{"allow":["api.example.com"]}`)

	r := a.json(t, "PATCH", "/v1/sandboxes/"+sb.ID, `{"allow_add":["pypi.org","*.files.example.org:8443"],"allow_remove":["api.example.com"],"labels":{"tier":"prod","team":null}}`)
	if r.status != http.StatusOK {
		t.Fatalf("patch: got %d %s, want 200", r.status, r.body)
	}
	var got api.Sandbox
	r.decode(t, &got)
	if want := []string{"pypi.org", "*.files.example.org:8443"}; !slices.Equal(got.Allow, want) {
		t.Errorf("allow: got %q, want %q", got.Allow, want)
	}
	if len(got.Labels) != 1 || got.Labels["tier"] != "prod" {
		t.Errorf("labels: got %v, want tier=prod alone", got.Labels)
	}
	served, _ := w.net.policy(sb.ID)
	if served.Allow == nil || !slices.Contains(served.Allow.Entries(), "pypi.org") || slices.Contains(served.Allow.Entries(), "api.example.com") || served.Labels["tier"] != "prod" {
		t.Errorf("served rules: got %+v, want pypi.org allowed, api.example.com not, tier=prod", served)
	}
	if o, _ := w.net.policy(other.ID); !slices.Contains(o.Allow.Entries(), "api.example.com") {
		t.Errorf("the other sandbox's rules changed: %+v", o)
	}
	var view api.Sandbox
	a.json(t, "GET", "/v1/sandboxes/"+sb.ID, "").decode(t, &view)
	if !slices.Equal(view.Allow, got.Allow) {
		t.Errorf("GET after PATCH: allow %q, want %q", view.Allow, got.Allow)
	}

	recs := w.audit.Match(func(r audit.Record) bool { return r.Sandbox == sb.ID && audittest.HasReason(r, ReasonUpdated) })
	if len(recs) != 1 {
		t.Fatalf("update records: got %d, want 1", len(recs))
	}
	rec := recs[0]
	var by int
	var old, next struct {
		Labels map[string]string `json:"labels"`
		Allow  []string          `json:"allow"`
		Mode   string            `json:"mode"`
	}
	_ = json.Unmarshal(rec.Extra["by_uid"], &by)
	_ = json.Unmarshal(rec.Extra["old"], &old)
	_ = json.Unmarshal(rec.Extra["new"], &next)
	if by != 1000 || !slices.Equal(old.Allow, []string{"api.example.com"}) || !slices.Equal(next.Allow, got.Allow) || old.Labels["team"] != "ml" || next.Labels["team"] != "" {
		t.Errorf("record: by %d old %+v new %+v, want by 1000 with the old and new rules", by, old, next)
	}
	// Replay follows the change: the rebuilt sandbox has the new rules.
	b := learn.NewRebuilder()
	for _, r := range w.audit.Match(func(r audit.Record) bool { return r.Sandbox == sb.ID }) {
		b.Observe(&r)
	}
	if rb := b.Sandbox(sb.ID); rb.Allow == nil || !slices.Contains(rb.Allow.Entries(), "pypi.org") || rb.Labels["tier"] != "prod" {
		t.Errorf("rebuilt sandbox: got %+v, want the updated rules", rb)
	}
}

// TestUpdateSandboxRefused: every refused PATCH names the problem and
// changes nothing (no record, the served rules as they were).
func TestUpdateSandboxRefused(t *testing.T) {
	w := newFakeWorld(t)
	a, b, root := w.client(1000), w.client(1001), w.client(0)
	sb := a.create(t, `{"allow":["api.example.com"]}`)
	for _, tc := range []struct {
		name   string
		c      *apiClient
		body   string
		status int
		field  string
	}{
		{"empty", a, `{}`, 400, ""},
		{"unknown field", a, `{"allow_everything":true}`, 400, ""},
		{"another owner's", b, `{"allow_add":["x.example.com"]}`, 404, "id"},
		{"mode by owner", a, `{"mode":"report"}`, 403, "mode"},
		{"bad mode", root, `{"mode":"off"}`, 400, "mode"},
		{"wide wildcard by owner", a, `{"allow_add":["*.com"]}`, 403, "allow_add[0]"},
		{"wide wildcard by owner in replace", a, `{"allow":["ok.example.com","**.co.uk"]}`, 403, "allow[1]"},
		{"not as enforced", a, `{"allow_add":["API.example.com."]}`, 400, "allow_add[0]"},
		{"remove absent", a, `{"allow_remove":["nope.example.com"]}`, 400, "allow_remove[0]"},
		{"bad label", a, `{"labels":{"a=b":"c"}}`, 400, "labels"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := tc.c.json(t, "PATCH", "/v1/sandboxes/"+sb.ID, tc.body)
			if r.status != tc.status {
				t.Fatalf("got %d %s, want %d", r.status, r.body, tc.status)
			}
			if e := r.apiError(t); tc.field != "" && e.Field != tc.field {
				t.Errorf("field: got %q, want %q (%s)", e.Field, tc.field, e.Message)
			}
		})
	}
	if n := len(w.audit.Match(func(r audit.Record) bool { return audittest.HasReason(r, ReasonUpdated) })); n != 0 {
		t.Errorf("update records after refusals: got %d, want 0", n)
	}
	if p, _ := w.net.policy(sb.ID); p.Allow.Len() != 1 {
		t.Errorf("served rules changed by a refused PATCH: %+v", p)
	}
	// Root may widen past one registrable domain and change the mode.
	if r := root.json(t, "PATCH", "/v1/sandboxes/"+sb.ID, `{"allow":["**.example.com:*"],"mode":"report"}`); r.status != 200 {
		t.Fatalf("root patch: got %d %s, want 200", r.status, r.body)
	}
	if p, _ := w.net.policy(sb.ID); p.Mode != policy.ModeReport {
		t.Errorf("mode served: got %q, want report", p.Mode)
	}
}

// TestUpdateSandboxAuditRefused: when the audit log refuses the record,
// the PATCH is refused (503) and nothing changes.
func TestUpdateSandboxAuditRefused(t *testing.T) {
	w := newFakeWorld(t)
	a := w.client(1000)
	sb := a.create(t, `{"allow":["api.example.com"]}`)
	w.audit.Refuse(audittest.Full)
	r := a.json(t, "PATCH", "/v1/sandboxes/"+sb.ID, `{"allow":[]}`)
	if r.status != http.StatusServiceUnavailable {
		t.Fatalf("got %d %s, want 503", r.status, r.body)
	}
	if p, _ := w.net.policy(sb.ID); p.Allow.Len() != 1 {
		t.Errorf("served rules changed: %+v", p)
	}
}

// TestUpdateLatency prints how long a PATCH takes through the API (decode,
// checks, the audit record, the hand-over to what serves the sandbox: a
// fake here; the gateway's share is gateway's TestChangeToEffectLatency),
// p50/p99 over a bounded number of PATCHes; no assertion on the numbers.
func TestUpdateLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement")
	}
	w := newFakeWorld(t)
	a := w.client(1000)
	sb := a.create(t, `{"allow":["api.example.com"]}`)
	const n = 200
	var d []time.Duration
	for i := range n {
		body := `{"allow_add":["pypi.org"]}`
		if i%2 == 1 {
			body = `{"allow_remove":["pypi.org"]}`
		}
		start := time.Now()
		r := a.json(t, "PATCH", "/v1/sandboxes/"+sb.ID, body)
		d = append(d, time.Since(start))
		if r.status != 200 {
			t.Fatalf("patch %d: %d %s", i, r.status, r.body)
		}
	}
	slices.Sort(d)
	t.Logf("PATCH /v1/sandboxes/{id} round trip over loopback HTTP, %d PATCHes: p50 %s p99 %s", n, d[n/2].Round(time.Microsecond), d[n*99/100].Round(time.Microsecond))
}
