package dnsfilter

import (
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/policy"
)

// TestUpdateSandboxRules: after UpdateSandbox the next question is decided
// under the sandbox's new allow list, whatever the decision cache held
// from before (refused then allowed, allowed then refused); an unknown
// sandbox is an error.
func TestUpdateSandboxRules(t *testing.T) {
	up := startUpstream(t, records(map[string][]string{"api.example.": {"api.example. 60 IN A 198.18.0.9"}}))
	eng, err := policy.New(policy.Config{Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	e := newEnv(t, Config{AllowCIDRs: []string{"198.18.0.0/15"}}, up, eng)
	ask := func() int {
		r := e.ask(t, "udp", "api.example.", dns.TypeA)
		return r.Rcode
	}
	for range 2 { // the second from the cache when it is on
		if got := ask(); got != dns.RcodeNameError {
			t.Fatalf("before: got rcode %d, want NXDOMAIN", got)
		}
	}
	l, err := policy.NewAllowList([]string{"api.example"})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.f.UpdateSandbox(policy.Sandbox{ID: "sb-1", Allow: l}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if got := ask(); got != dns.RcodeSuccess {
			t.Fatalf("widened: got rcode %d, want an answer", got)
		}
	}
	if err := e.f.UpdateSandbox(policy.Sandbox{ID: "sb-1"}); err != nil {
		t.Fatal(err)
	}
	before := up.count("api.example.")
	if got := ask(); got != dns.RcodeNameError {
		t.Fatalf("narrowed: got rcode %d, want NXDOMAIN", got)
	}
	if up.count("api.example.") != before {
		t.Fatal("narrowed: the upstream was asked for a refused name")
	}
	if err := e.f.UpdateSandbox(policy.Sandbox{ID: "sb-unknown"}); err == nil {
		t.Fatal("an unknown sandbox: got no error")
	}
}
