package dnsfilter

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

const integrationPolicy = `package airlock.egress

allow if input.destination.host == "pypi.org"

# An allowed wildcard: any name under tunnel.example.
allow if "tunnel.example" in input.destination.suffixes

# MX (only) for pypi.org is opted in; other restricted types stay refused.
allow_reasons contains {"id": "dns_qtype_optin", "msg": "MX for pypi.org"} if {
	input.kind == "dns"
	input.dns.qtype == "MX"
	input.destination.host == "pypi.org"
}

deny contains {"id": "dns_exfil", "msg": "exfiltration signal"} if {
	input.kind == "dns"
	count(input.dns.flags) > 0
}
`

// TestWithRealPolicyAndAudit runs the filter with the real policy engine (a
// user policy that denies on exfiltration flags) and the real audit writer, and
// reads the audit file back.
func TestWithRealPolicyAndAudit(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "dns.rego"), []byte(integrationPolicy), 0o600); err != nil {
		t.Fatal(err)
	}
	// A generous deadline: see gateway's TestRealPolicyEngine.
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatalf("policy.New: %v", err)
	}
	auditFile := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.New(audit.Config{File: auditFile}, nil)
	if err != nil {
		t.Fatalf("audit.New: %v", err)
	}
	up := startUpstream(t, func(_ string, req *dns.Msg) *dns.Msg {
		resp := new(dns.Msg)
		resp.SetReply(req)
		rr, _ := dns.NewRR(req.Question[0].Name + " 60 IN A 151.101.7.7")
		resp.Answer = []dns.RR{rr}
		return resp
	})
	f, err := New(Config{Upstreams: []string{up.addr}}, eng, w, nil)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ServeSandbox(policy.Sandbox{ID: "sb-int"}, nil, pc, ln); err != nil {
		t.Fatal(err)
	}
	e := &env{f: f, up: up, udp: pc.LocalAddr().String(), tcp: ln.Addr().String()}

	exfil := strings.Repeat("x", 45) + ".tunnel.example"
	tests := []struct {
		qname string
		rcode int
		sent  int // queries the upstream must have seen for it
	}{
		{"pypi.org", dns.RcodeSuccess, 1},
		{"api.tunnel.example", dns.RcodeSuccess, 1},
		{exfil, dns.RcodeNameError, 0},
		{"evil.example.com", dns.RcodeNameError, 0},
	}
	for _, tt := range tests {
		r := e.ask(t, "udp", tt.qname+".", dns.TypeA)
		if r.Rcode != tt.rcode {
			t.Errorf("%s: got %s, want %s", tt.qname, dns.RcodeToString[r.Rcode], dns.RcodeToString[tt.rcode])
		}
		if n := up.count(tt.qname); n != tt.sent {
			t.Errorf("%s: upstream saw it %d times, want %d", tt.qname, n, tt.sent)
		}
	}
	// The Rego opt-in reaches the filter: MX is forwarded, TXT is refused and
	// never sent.
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeMX); r.Rcode != dns.RcodeSuccess {
		t.Errorf("MX pypi.org: got %s, want NOERROR (opted in by policy)", dns.RcodeToString[r.Rcode])
	}
	if n := up.count("pypi.org"); n != 2 {
		t.Errorf("after MX: upstream saw pypi.org %d times, want 2", n)
	}
	if r := e.ask(t, "udp", "pypi.org.", dns.TypeTXT); r.Rcode != dns.RcodeRefused {
		t.Errorf("TXT pypi.org: got %s, want REFUSED", dns.RcodeToString[r.Rcode])
	}
	if n := up.count("pypi.org"); n != 2 {
		t.Errorf("after TXT: upstream saw pypi.org %d times, want still 2", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := f.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	recs := map[string]audit.Record{}
	fh, err := os.Open(auditFile)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		var r audit.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if r.Kind == audit.KindDNS && r.QType == "A" {
			recs[r.QName] = r
		}
		if r.Kind == audit.KindDNS && r.QType != "A" {
			recs[r.QName+"/"+r.QType] = r
		}
	}
	if len(recs) != len(tests)+2 {
		t.Fatalf("audit: got %d dns records, want %d", len(recs), len(tests)+2)
	}
	if r := recs["pypi.org/MX"]; r.Decision != audit.DecisionAllow || len(r.Reasons) != 1 || r.Reasons[0].ID != ReasonQTypeOptIn {
		t.Errorf("opted-in MX record: got %+v", r)
	}
	if r := recs["pypi.org/TXT"]; r.Decision != audit.DecisionDeny || r.RCode != "REFUSED" {
		t.Errorf("refused TXT record: got %+v", r)
	}
	if r := recs["pypi.org"]; r.Decision != audit.DecisionAllow || r.PolicyRev == "" || len(r.Answers) != 1 || r.Upstream != up.addr || r.Prev == "" {
		t.Errorf("allowed record: got %+v", r)
	}
	r := recs[exfil]
	if r.Decision != audit.DecisionDeny || r.RCode != "NXDOMAIN" || len(r.Reasons) == 0 || r.Reasons[0].ID != "dns_exfil" {
		t.Errorf("exfil record: got %+v, want deny NXDOMAIN for dns_exfil", r)
	}
	if len(r.Flags) != 1 || r.Flags[0] != FlagLongLabel {
		t.Errorf("exfil flags: got %v, want [long_label]", r.Flags)
	}
	if r := recs["evil.example.com"]; r.Decision != audit.DecisionDeny || r.Reasons[0].ID != "default_deny" {
		t.Errorf("denied record: got %+v", r)
	}
}
