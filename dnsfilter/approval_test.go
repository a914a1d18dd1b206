package dnsfilter

import (
	"context"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// TestDNSAwaitingApproval: a question the policy asks about is answered
// when the person's answer comes: the address once approved (the upstream
// asked only then), NXDOMAIN with the answer's reason first when refused
// (the upstream never asked); without Approve it is the NXDOMAIN it was.
func TestDNSAwaitingApproval(t *testing.T) {
	up := startUpstream(t, records(map[string][]string{"ask.example.": {"ask.example. 60 IN A 198.18.0.7"}, "no.example.": {"no.example. 60 IN A 198.18.0.8"}}))
	dec := policytest.Func(func(in *policy.Input) policy.Decision {
		d := policytest.Denied(policytest.ReasonNotAllowed)
		d.Ask, d.AskMsg = true, "new name"
		return d
	})
	type question struct {
		name string
		ans  chan bool
	}
	asked := make(chan question, 4)
	cfg := Config{AllowCIDRs: []string{"198.18.0.0/15"}, Approve: func(_ context.Context, sb policy.Sandbox, name, msg string, _ []policy.Reason) (bool, string, string) {
		q := question{name: name, ans: make(chan bool)}
		asked <- q
		if <-q.ans {
			return true, "approved_once", "uid 1000 answered once"
		}
		return false, "approval_denied", "uid 1000 answered deny"
	}}
	e := newEnv(t, cfg, up, dec)
	for _, tc := range []struct {
		name  string
		allow bool
		rcode int
	}{
		{"ask.example.", true, dns.RcodeSuccess},
		{"no.example.", false, dns.RcodeNameError},
	} {
		reply := make(chan *dns.Msg, 1)
		go func() {
			m := new(dns.Msg)
			m.SetQuestion(tc.name, dns.TypeA)
			c := &dns.Client{Net: "tcp", Timeout: 10 * time.Second}
			r, _, _ := c.Exchange(m, e.tcp)
			reply <- r
		}()
		var q question
		select {
		case q = <-asked:
		case <-time.After(audittest.WaitLimit):
			t.Fatalf("%s: no question asked", tc.name)
		}
		if n := up.count(tc.name); n != 0 {
			t.Fatalf("%s: the upstream was asked %d times before the answer, want 0", tc.name, n)
		}
		q.ans <- tc.allow
		r := <-reply
		if r == nil || r.Rcode != tc.rcode {
			t.Fatalf("%s: got %v, want rcode %d", tc.name, r, tc.rcode)
		}
		if tc.allow && (len(r.Answer) != 1 || addrs(r.Answer)[0] != "198.18.0.7") {
			t.Fatalf("%s: answers %v, want 198.18.0.7", tc.name, r.Answer)
		}
		if !tc.allow && up.count(tc.name) != 0 {
			t.Fatalf("%s: the upstream was asked for a refused name", tc.name)
		}
		rec := e.last(t, tc.name[:len(tc.name)-1])
		want := "approved_once"
		if !tc.allow {
			want = "approval_denied"
		}
		if len(rec.Reasons) == 0 || rec.Reasons[0].ID != want {
			t.Fatalf("%s: record reasons %+v, want %s first", tc.name, rec.Reasons, want)
		}
	}
	// Nobody to ask: the NXDOMAIN it was, at once.
	plain := newEnv(t, Config{}, up, dec)
	if r := plain.ask(t, "udp", "other.example.", dns.TypeA); r.Rcode != dns.RcodeNameError {
		t.Fatalf("without Approve: got rcode %d, want NXDOMAIN", r.Rcode)
	}
}
