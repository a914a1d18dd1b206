package policy

import (
	"context"
	"slices"
	"testing"
)

// Explain tells the truth about a security team's policy: what each host may do,
// nothing about hosts the policy does not name.
func TestExplain(t *testing.T) {
	x, err := Explain(context.Background(), ExplainConfig{
		Policy:  Config{Dir: "../policies/examples/http-allow-table"},
		Secrets: map[string][]string{"api.openai.com": {"openai-key"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(x.Presets) != 0 {
		t.Fatalf("presets: got %v, want none (airlock-policy.yaml)", x.Presets)
	}
	want := map[string][]string{
		"api.github.com": {"dns", "connect/tls 80 intercepted", "connect/tls 443 intercepted", "http 80 GET /repos/acme/*", "http 443 GET /repos/acme/*"},
		"api.openai.com": {"dns", "connect/tls 80 intercepted", "connect/tls 443 intercepted", "http 80 POST /v1/chat/completions", "http 443 POST /v1/chat/completions", "secret openai-key"},
	}
	if len(x.Hosts) != len(want) {
		t.Fatalf("hosts: got %d (%+v), want %d", len(x.Hosts), x.Hosts, len(want))
	}
	for _, h := range x.Hosts {
		if got := h.Facts(); !slices.Equal(got, want[h.Host]) {
			t.Errorf("%s: got %q, want %q", h.Host, got, want[h.Host])
		}
	}
}

// Explain shows a tunnel as a tunnel, and a rule that depends on labels only
// for a sandbox with them.
func TestExplainTunnelAndLabels(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{
		ManifestFile: "presets: [none]\n",
		"policy.rego": `package airlock.egress

import data.airlock

allow if {
	input.kind in {"connect", "tls", "dns"}
	input.destination.host == "tunnel.example"
	input.destination.port == 443
}

allow if {
	input.sandbox.labels.team == "ml"
	airlock.host_in({"ml.example": true})
}

allow if {
	input.kind == "tcp"
	input.destination.host == "db.example"
	input.destination.port == 5432
}
`,
	})
	x, err := Explain(context.Background(), ExplainConfig{Policy: Config{Dir: dir}})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, h := range x.Hosts {
		got[h.Host] = h.Facts()
	}
	// The rule names port 443, and a DNS question has none: the name is not
	// resolved, which explain says by leaving dns out.
	wantTunnel := []string{"connect/tls 443 tunnel", "http 443 every request (tunnel, not seen)"}
	if !slices.Equal(got["tunnel.example"], wantTunnel) {
		t.Errorf("tunnel.example: got %q, want %q", got["tunnel.example"], wantTunnel)
	}
	if !slices.Equal(got["db.example"], []string{"tcp 5432"}) {
		t.Errorf("db.example: got %q, want [tcp 5432]", got["db.example"])
	}
	if _, ok := got["ml.example"]; ok {
		t.Errorf("ml.example listed for a sandbox without team=ml: %q", got["ml.example"])
	}
	x, err = Explain(context.Background(), ExplainConfig{Policy: Config{Dir: dir}, Labels: map[string]string{"team": "ml"}})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, h := range x.Hosts {
		if h.Host == "ml.example" {
			found = slices.Contains(h.Facts(), "http 443 every request (tunnel, not seen)") && slices.Contains(h.Facts(), "http 80 DELETE *")
		}
	}
	if !found {
		t.Errorf("ml.example for team=ml: want every method, got %+v", x.Hosts)
	}
}

func TestDiffExplain(t *testing.T) {
	old := &Explanation{Hosts: []HostView{
		{Host: "a.example", DNS: true, Connect: []PortView{{Port: 443}}, HTTP: []HTTPView{{Port: 443, Tunnel: true}}},
		{Host: "gone.example", DNS: true},
	}}
	cur := &Explanation{Hosts: []HostView{
		{Host: "a.example", DNS: true, Connect: []PortView{{Port: 443, Intercepted: true}}, HTTP: []HTTPView{{Port: 443, Methods: map[string][]string{"GET": {"*"}}}}},
		{Host: "new.example", TCP: []int{22}},
	}}
	ds := DiffExplain(old, cur)
	want := []HostDiff{
		{Host: "a.example", Added: []string{"connect/tls 443 intercepted", "http 443 GET *"}, Removed: []string{"connect/tls 443 tunnel", "http 443 every request (tunnel, not seen)"}},
		{Host: "gone.example", Removed: []string{"dns"}},
		{Host: "new.example", Added: []string{"tcp 22"}},
	}
	if len(ds) != len(want) {
		t.Fatalf("got %+v, want %+v", ds, want)
	}
	for i := range want {
		if ds[i].Host != want[i].Host || !slices.Equal(ds[i].Added, want[i].Added) || !slices.Equal(ds[i].Removed, want[i].Removed) {
			t.Errorf("got %+v, want %+v", ds[i], want[i])
		}
	}
}
