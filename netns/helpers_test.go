package netns

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/dnsfilter"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/policy"
)

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		for _, r := range netnstest.RemoveStale(DefaultRunDir, DefaultStateDir) {
			fmt.Fprintln(os.Stderr, "removed stale", r)
		}
	}
	os.Exit(m.Run())
}

// memAudit collects audit records.
type memAudit struct {
	mu   sync.Mutex
	recs []audit.Record
}

func (a *memAudit) Log(r *audit.Record) error {
	a.mu.Lock()
	a.recs = append(a.recs, *r)
	a.mu.Unlock()
	return nil
}

func (a *memAudit) kind(kind string) []audit.Record {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []audit.Record
	for _, r := range a.recs {
		if r.Kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// hostDecider allows exactly the listed host names (and DNS questions for them).
type hostDecider struct{ allow map[string]bool }

func (d hostDecider) Decide(_ context.Context, in *policy.Input) policy.Decision {
	host := in.Destination.Host
	if in.DNS != nil {
		host = strings.TrimSuffix(in.DNS.QName, ".")
	}
	if d.allow[host] {
		return policy.Decision{Allowed: true, Mode: policy.ModeEnforce, Rev: "test"}
	}
	return policy.Decision{Allowed: false, Mode: policy.ModeEnforce, Rev: "test",
		Reasons: []policy.Reason{{ID: "not_allowed", Msg: host + " is not allowed"}}}
}

// testServer is the netns.Server for the root tests: the real DNS filter, and a
// small HTTP proxy (explicit and transparent) that asks the same decider about the
// host name, resolves it from a fixed table and dials only addresses in that
// table: a recording dialer that refuses everything else.
type testServer struct {
	dns     *dnsfilter.Filter
	decider policy.Decider
	hosts   map[string]netip.Addr

	dialed  atomic.Int64
	refused atomic.Int64
	denied  atomic.Int64

	mu  sync.Mutex
	sbs map[string]*proxySandbox
}

type proxySandbox struct {
	http *http.Server
	tl   net.Listener
	wg   sync.WaitGroup
}

func newTestServer(t testing.TB, upstream string, hosts map[string]netip.Addr) *testServer {
	t.Helper()
	allow := map[string]bool{}
	for h := range hosts {
		allow[h] = true
	}
	dec := hostDecider{allow: allow}
	f, err := dnsfilter.New(dnsfilter.Config{
		Upstreams:  []string{upstream},
		AllowCIDRs: []string{"198.18.0.0/15"},
		Timeout:    2 * time.Second,
	}, dec, &memAudit{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("dnsfilter.New: %v", err)
	}
	s := &testServer{dns: f, decider: dec, hosts: hosts, sbs: map[string]*proxySandbox{}}
	t.Cleanup(func() { f.Shutdown(context.Background()) })
	return s
}

var _ Server = (*testServer)(nil)

func (s *testServer) Serve(sb policy.Sandbox, own []netip.Addr, ls Listeners) error {
	if err := s.dns.ServeSandbox(sb, own, ls.DNSUDP, ls.DNSTCP); err != nil {
		return err
	}
	ps := &proxySandbox{tl: ls.Transparent}
	ps.http = &http.Server{Handler: http.HandlerFunc(s.explicit), ReadHeaderTimeout: 5 * time.Second}
	s.mu.Lock()
	if _, dup := s.sbs[sb.ID]; dup {
		s.mu.Unlock()
		return fmt.Errorf("sandbox %s served twice", sb.ID)
	}
	s.sbs[sb.ID] = ps
	s.mu.Unlock()
	ps.wg.Add(2)
	go func() { defer ps.wg.Done(); ps.http.Serve(ls.Explicit) }()
	go func() { defer ps.wg.Done(); s.transparent(ls.Transparent) }()
	return nil
}

func (s *testServer) Stop(id string) {
	s.dns.StopSandbox(id)
	s.mu.Lock()
	ps := s.sbs[id]
	delete(s.sbs, id)
	s.mu.Unlock()
	if ps == nil {
		return
	}
	ps.http.Close()
	ps.tl.Close()
	ps.wg.Wait()
}

func (s *testServer) served() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.sbs)
}

// target checks host against policy and returns the address to dial.
func (s *testServer) target(host string, port int) (netip.AddrPort, bool) {
	in := &policy.Input{Kind: policy.KindHTTP, Destination: policy.Destination{Host: host, Port: port}}
	d := s.decider.Decide(context.Background(), in)
	ip, ok := s.hosts[host]
	if !d.Permit() || !ok {
		s.denied.Add(1)
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip, uint16(port)), true
}

// dial connects only to addresses in the host table.
func (s *testServer) dial(ctx context.Context, ap netip.AddrPort) (net.Conn, error) {
	for _, ip := range s.hosts {
		if ip == ap.Addr() {
			s.dialed.Add(1)
			var d net.Dialer
			return d.DialContext(ctx, "tcp4", ap.String())
		}
	}
	s.refused.Add(1)
	return nil, fmt.Errorf("test dialer refuses %s", ap)
}

func (s *testServer) explicit(w http.ResponseWriter, r *http.Request) {
	if !r.URL.IsAbs() || r.Method == http.MethodConnect {
		http.Error(w, "not a proxy request", http.StatusBadRequest)
		return
	}
	port := 80
	if p := r.URL.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	ap, ok := s.target(r.URL.Hostname(), port)
	if !ok {
		http.Error(w, "denied", http.StatusForbidden)
		return
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return s.dial(ctx, ap) }}
	defer tr.CloseIdleConnections()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.Header.Del("Proxy-Connection")
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

func (s *testServer) transparent(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go s.relay(c.(*net.TCPConn))
	}
}

func (s *testServer) relay(c *net.TCPConn) {
	defer c.Close()
	orig, err := originalDst(c)
	if err != nil {
		return
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	host, _, err := net.SplitHostPort(req.Host)
	if err != nil {
		host = req.Host
	}
	ap, ok := s.target(host, int(orig.Port()))
	if !ok {
		io.WriteString(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: 7\r\nConnection: close\r\n\r\ndenied\n")
		return
	}
	c.SetReadDeadline(time.Time{})
	up, err := s.dial(context.Background(), ap)
	if err != nil {
		return
	}
	defer up.Close()
	if err := req.Write(up); err != nil {
		return
	}
	go io.Copy(up, br)
	io.Copy(c, up)
}

// originalDst reads SO_ORIGINAL_DST from a redirected connection.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		mreq, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			serr = err
			return
		}
		port := uint16(mreq.Multiaddr[2])<<8 | uint16(mreq.Multiaddr[3])
		ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(mreq.Multiaddr[4:8])), port)
	})
	if err == nil {
		err = serr
	}
	return ap, err
}

// nsExec runs argv inside the namespace at path (via nsenter) with a bounded
// time and returns its combined output.
func nsExec(t testing.TB, path string, timeout time.Duration, argv ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "nsenter", append([]string{"--net=" + path, "--"}, argv...)...)
	cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// fdCount counts this process's open file descriptors.
func fdCount(t testing.TB) int {
	t.Helper()
	// io.Copy between TCP connections caches splice pipes in a sync.Pool that
	// only a GC releases; collect twice so they are not counted as leaks.
	runtime.GC()
	runtime.GC()
	time.Sleep(10 * time.Millisecond)
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

var errInjected = errors.New("injected failure")
