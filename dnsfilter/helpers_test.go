package dnsfilter

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// seenQuery is one query the fake upstream received.
type seenQuery struct {
	name  string
	qtype uint16
	net   string
	ecs   bool // an EDNS client subnet option was present
}

// fakeUpstream is a miekg/dns server on 127.0.0.1 (UDP and TCP on one port) that
// records every query it receives and answers from answer.
type fakeUpstream struct {
	addr string
	mu   sync.Mutex
	seen []seenQuery
	// answer builds the reply; nil means NXDOMAIN. It must not block forever.
	answer func(network string, req *dns.Msg) *dns.Msg
}

func startUpstream(t testing.TB, answer func(network string, req *dns.Msg) *dns.Msg) *fakeUpstream {
	t.Helper()
	u := &fakeUpstream{answer: answer}
	var pc net.PacketConn
	var ln net.Listener
	for range 20 {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		pc = nil
	}
	if pc == nil {
		t.Fatal("no free port for udp and tcp")
	}
	u.addr = pc.LocalAddr().String()
	for _, srv := range []*dns.Server{{PacketConn: pc, Handler: u}, {Listener: ln, Handler: u}} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		go srv.ActivateAndServe()
		<-started
		t.Cleanup(func() { srv.Shutdown() })
	}
	return u
}

func (u *fakeUpstream) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	network := "udp"
	if _, ok := w.LocalAddr().(*net.TCPAddr); ok {
		network = "tcp"
	}
	sq := seenQuery{net: network}
	if len(req.Question) > 0 {
		sq.name, sq.qtype = req.Question[0].Name, req.Question[0].Qtype
	}
	if opt := req.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if o.Option() == dns.EDNS0SUBNET {
				sq.ecs = true
			}
		}
	}
	u.mu.Lock()
	u.seen = append(u.seen, sq)
	u.mu.Unlock()
	var resp *dns.Msg
	if u.answer != nil {
		resp = u.answer(network, req)
	}
	if resp == nil {
		resp = new(dns.Msg)
		resp.SetRcode(req, dns.RcodeNameError)
	}
	w.WriteMsg(resp)
}

func (u *fakeUpstream) queries() []seenQuery {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenQuery(nil), u.seen...)
}

// count returns how many queries for name (any case, with or without the dot)
// the upstream has seen.
func (u *fakeUpstream) count(name string) int {
	n := 0
	for _, q := range u.queries() {
		if strings.EqualFold(strings.TrimSuffix(q.name, "."), strings.TrimSuffix(name, ".")) {
			n++
		}
	}
	return n
}

// records answers from a table: name -> records in zone-file form.
func records(table map[string][]string) func(string, *dns.Msg) *dns.Msg {
	return func(_ string, req *dns.Msg) *dns.Msg {
		q := req.Question[0]
		lines, ok := table[strings.ToLower(q.Name)]
		if !ok {
			return nil
		}
		resp := new(dns.Msg)
		resp.SetReply(req)
		for _, l := range lines {
			rr, err := dns.NewRR(l)
			if err != nil {
				panic(err)
			}
			if rr.Header().Rrtype == q.Qtype || rr.Header().Rrtype == dns.TypeCNAME {
				resp.Answer = append(resp.Answer, rr)
			}
		}
		return resp
	}
}

// env is a Filter serving one sandbox on loopback, with its fakes.
type env struct {
	f   *Filter
	up  *fakeUpstream
	dec *policytest.Decider
	aud *audittest.Log
	udp string // the sandbox's DNS address
	tcp string
}

func newEnv(t *testing.T, cfg Config, up *fakeUpstream, dec policy.Decider, own ...netip.Addr) *env {
	t.Helper()
	return newEnvWith(t, cfg, up, dec, nil, own...)
}

// newEnvWith is newEnv with before called on the Filter before it serves
// (to replace its clock).
func newEnvWith(t *testing.T, cfg Config, up *fakeUpstream, dec policy.Decider, before func(*Filter), own ...netip.Addr) *env {
	t.Helper()
	if cfg.Upstreams == nil {
		cfg.Upstreams = []string{up.addr}
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 2 * time.Second
	}
	e := &env{up: up, aud: &audittest.Log{}}
	e.dec, _ = dec.(*policytest.Decider)
	f, err := New(cfg, dec, e.aud, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.f = f
	if before != nil {
		before(f)
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.udp, e.tcp = pc.LocalAddr().String(), ln.Addr().String()
	if err := f.ServeSandbox(policy.Sandbox{ID: "sb-1", Labels: map[string]string{"agent": "test"}}, own, pc, ln); err != nil {
		t.Fatalf("ServeSandbox: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := f.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return e
}

// last returns the last record for qname (normalized), failing if there is none.
func (e *env) last(t *testing.T, qname string) audit.Record {
	t.Helper()
	r, ok := e.aud.Last(func(r audit.Record) bool { return r.QName == qname })
	if !ok {
		t.Fatalf("no audit record for %q in %d records", qname, len(e.aud.Records()))
	}
	return r
}

// ask sends one question over network ("udp" or "tcp") and returns the reply.
func (e *env) ask(t *testing.T, network, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return e.exchange(t, network, m)
}

func (e *env) exchange(t *testing.T, network string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 5 * time.Second}
	addr := e.udp
	if network == "tcp" {
		addr = e.tcp
	}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("exchange %v: %v", m.Question, err)
	}
	return r
}

// rawUDP sends raw bytes to the sandbox's UDP listener and returns the reply, or
// nil when none came within wait.
func (e *env) rawUDP(t *testing.T, b []byte, wait time.Duration) []byte {
	t.Helper()
	c, err := net.Dial("udp", e.udp)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

func addrs(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch v := rr.(type) {
		case *dns.A:
			out = append(out, v.A.String())
		case *dns.AAAA:
			out = append(out, v.AAAA.String())
		}
	}
	return out
}
