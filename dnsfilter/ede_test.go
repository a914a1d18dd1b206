package dnsfilter

import (
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestRefusalsExplainThemselves: a client that asks with EDNS gets an RFC 8914
// extended error naming the name, why it was refused and how to allow it,
// over UDP and TCP; a client without EDNS
// gets the plain answer, and an allowed answer carries no explanation.
func TestRefusalsExplainThemselves(t *testing.T) {
	up := startUpstream(t, records(testZone))
	e := newEnv(t, Config{}, up, policytest.AllowUnder("pypi.org"))
	tests := []struct {
		name     string
		qname    string
		qtype    uint16
		udpSize  uint16 // 0: no EDNS
		wantCode uint16
		want     []string // "" row: no EDE
	}{
		{name: "policy deny", qname: "evil.example.com.", qtype: dns.TypeA, udpSize: 1232, wantCode: dns.ExtendedErrorCodeBlocked,
			want: []string{"evil.example.com", policytest.ReasonNotAllowed, "--allow evil.example.com"}},
		{name: "policy deny, small buffer", qname: "evil.example.com.", qtype: dns.TypeA, udpSize: 512, wantCode: dns.ExtendedErrorCodeBlocked,
			want: []string{"evil.example.com"}},
		{name: "long denied name still fits 512 bytes", qname: strings.Repeat("a", 63) + "." + strings.Repeat("b", 63) + "." + strings.Repeat("c", 63) + "." + strings.Repeat("d", 57) + ".com.", qtype: dns.TypeA, udpSize: 512,
			wantCode: dns.ExtendedErrorCodeBlocked, want: []string{"airlock: policy denies aaaa"}},
		{name: "query type", qname: "txt.pypi.org.", qtype: dns.TypeTXT, udpSize: 1232, wantCode: dns.ExtendedErrorCodeProhibited,
			want: []string{"TXT", "txt.pypi.org", "dns_qtype_optin"}},
		{name: "IP literal", qname: "10.0.0.1.", qtype: dns.TypeA, udpSize: 1232, wantCode: dns.ExtendedErrorCodeProhibited,
			want: []string{"10.0.0.1 is an IP address"}},
		{name: "answers dropped by the address guard", qname: "internal.pypi.org.", qtype: dns.TypeA, udpSize: 1232, wantCode: dns.ExtendedErrorCodeBlocked,
			want: []string{"internal.pypi.org", "airlock never connects to", "airlock's own"}},
		{name: "allowed", qname: "pypi.org.", qtype: dns.TypeA, udpSize: 1232},
		{name: "no EDNS", qname: "evil.example.com.", qtype: dns.TypeA},
	}
	for _, network := range []string{"udp", "tcp"} {
		for _, tt := range tests {
			t.Run(network+"/"+tt.name, func(t *testing.T) {
				m := new(dns.Msg)
				m.SetQuestion(tt.qname, tt.qtype)
				if tt.udpSize != 0 {
					m.SetEdns0(tt.udpSize, false)
				}
				r := e.exchange(t, network, m)
				if r.Truncated {
					t.Fatalf("reply truncated")
				}
				ede := findEDE(r)
				if tt.want == nil {
					if ede != nil {
						t.Errorf("got EDE %d %q, want none", ede.InfoCode, ede.ExtraText)
					}
					return
				}
				if ede == nil {
					t.Fatalf("got no EDE in %v, want one", r)
				}
				if ede.InfoCode != tt.wantCode {
					t.Errorf("EDE code: got %d, want %d", ede.InfoCode, tt.wantCode)
				}
				for _, w := range tt.want {
					if !strings.Contains(ede.ExtraText, w) {
						t.Errorf("EDE text %q lacks %q", ede.ExtraText, w)
					}
				}
				if len(ede.ExtraText) > maxEDEText {
					t.Errorf("EDE text is %d bytes, want at most %d", len(ede.ExtraText), maxEDEText)
				}
			})
		}
	}
	if n := up.count("evil.example.com"); n != 0 {
		t.Errorf("upstream saw the denied name %d times, want 0", n)
	}
}

func findEDE(r *dns.Msg) *dns.EDNS0_EDE {
	opt := r.IsEdns0()
	if opt == nil {
		return nil
	}
	for _, o := range opt.Option {
		if e, ok := o.(*dns.EDNS0_EDE); ok {
			return e
		}
	}
	return nil
}

func TestClip(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdefg..."},
		{"abcdef\u00e9xyz", 10, "abcdef..."}, // é cut in half is dropped
	}
	for _, tt := range tests {
		if got := clip(tt.in, tt.n); got != tt.want {
			t.Errorf("clip(%q, %d): got %q, want %q", tt.in, tt.n, got, tt.want)
		}
	}
}
