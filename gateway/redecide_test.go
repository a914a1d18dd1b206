package gateway

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
)

// changingDecider is a policytest.Decider that announces its changes
// (ChangeNotifier), as policy.Engine does on a reload or bundle activation.
type changingDecider struct {
	*policytest.Decider
	denyAll atomic.Bool
	mitmAll atomic.Bool // every allowed tunnel intercepted
	mu      sync.Mutex
	ch      chan struct{}
}

var _ ChangeNotifier = (*changingDecider)(nil)

func (d *changingDecider) Changed() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.ch
}

func (d *changingDecider) Decide(ctx context.Context, in *policy.Input) policy.Decision {
	if d.denyAll.Load() {
		return policytest.Denied(policytest.ReasonNotAllowed)
	}
	dec := d.Decider.Decide(ctx, in)
	if dec.Allowed && d.mitmAll.Load() {
		dec.MITM = true
	}
	return dec
}

// denyEverything switches to a policy that denies everything and announces
// the change.
func (d *changingDecider) denyEverything() {
	d.denyAll.Store(true)
	d.mu.Lock()
	close(d.ch)
	d.ch = make(chan struct{})
	d.mu.Unlock()
}

// TestPolicyChangeClosesOpenConnections: a policy change reaches connections
// already open. Regression: nothing re-decided a connection after it was
// admitted, so a spliced CONNECT tunnel, a CONNECT carrying plaintext HTTP
// and a websocket to a host the new policy denies went on carrying bytes
// under the old rules. Each is now closed within a bounded wait, its close
// record says policy_changed, and the upstream receives nothing after the
// change; a keep-alive request after the change is refused by the new rules.
func TestPolicyChangeClosesOpenConnections(t *testing.T) {
	echo := newRawUpstream(t, "")
	plain := newUpstream(t, nil, nil)
	ws := newUpstream(t, websocket.Handler(func(c *websocket.Conn) { io.Copy(c, c) }), nil)

	type open struct {
		c    net.Conn
		br   *bufio.Reader
		use  func() error // one exchange on the open connection
		recv func() int64 // bytes the upstream received so far
	}
	tests := []struct {
		name string
		open func(t *testing.T, h *harness) open
	}{
		{"spliced CONNECT tunnel (raw TCP)", func(t *testing.T, h *harness) open {
			c, br := connectTo(t, h, "raw.example", echo.port)
			use := func() error {
				io.WriteString(c, "ping")
				buf := make([]byte, 4)
				_, err := io.ReadFull(br, buf)
				return err
			}
			return open{c, br, use, echo.bytesIn.Load}
		}},
		{"CONNECT carrying keep-alive plaintext HTTP", func(t *testing.T, h *harness) open {
			c, br := connectTo(t, h, "pypi.org", plain.port)
			use := func() error {
				fmt.Fprintf(c, "GET /k HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", plain.port)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					return err
				}
				io.Copy(io.Discard, resp.Body)
				if resp.StatusCode != 200 {
					return fmt.Errorf("status %d", resp.StatusCode)
				}
				return nil
			}
			return open{c, br, use, plain.bytesIn.Load}
		}},
		{"websocket through the explicit proxy", func(t *testing.T, h *harness) open {
			c, err := net.Dial("tcp", h.explicit)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			c.SetDeadline(time.Now().Add(10 * time.Second))
			cfg, _ := websocket.NewConfig("ws://pypi.org:"+strconv.Itoa(ws.port)+"/ws", "http://pypi.org/")
			conn, err := websocket.NewClient(cfg, &absConn{Conn: c, host: "pypi.org:" + strconv.Itoa(ws.port)})
			if err != nil {
				t.Fatal(err)
			}
			use := func() error {
				if err := websocket.Message.Send(conn, "hi"); err != nil {
					return err
				}
				var got string
				return websocket.Message.Receive(conn, &got)
			}
			return open{c, nil, use, ws.bytesIn.Load}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dec := &changingDecider{Decider: tunnelPolicy(), ch: make(chan struct{})}
			h := newHarness(t, dec, names("pypi.org", "raw.example"), nil)
			h.allowUpstreams(plain, ws)
			h.dialer.allow(echo.addr)
			o := tt.open(t, h)
			if err := o.use(); err != nil {
				t.Fatalf("before the change: %v", err)
			}
			n := len(h.log.Records())
			dec.denyEverything()
			var closedBy *audit.Record
			poll.Within(audittest.WaitLimit, func() bool {
				for _, r := range h.log.Records()[n:] {
					if audittest.HasReason(r, ReasonPolicyChanged) {
						closedBy = &r
						return true
					}
				}
				return false
			})
			if closedBy == nil {
				t.Fatalf("no record with reason %s after the change: %+v", ReasonPolicyChanged, h.log.Records()[n:])
			}
			after := o.recv()
			if err := o.use(); err == nil {
				t.Fatal("the connection still works under the new policy")
			}
			time.Sleep(100 * time.Millisecond) // a byte relayed late would have arrived
			if got := o.recv() - after; got != 0 {
				t.Fatalf("upstream received %d bytes after the change, want 0", got)
			}
		})
	}
}

// connectTo opens a CONNECT tunnel to host:port through h's explicit proxy.
func connectTo(t *testing.T, h *harness, host string, port int) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s:%d HTTP/1.1\r\n\r\n", host, port)
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v, want 200", resp, err)
	}
	return c, br
}

// TestKeepAliveRequestAfterPolicyChange: on an explicit keep-alive session
// the request after a change is decided under the new rules (the decision
// is per request; nothing cached from before the change answers it).
func TestKeepAliveRequestAfterPolicyChange(t *testing.T) {
	up := newUpstream(t, nil, nil)
	dec := &changingDecider{Decider: policytest.Allow("pypi.org"), ch: make(chan struct{})}
	h := newHarness(t, dec, names("pypi.org"), nil)
	h.allowUpstreams(up)
	c, err := net.Dial("tcp", h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	get := func() int {
		fmt.Fprintf(c, "GET http://pypi.org:%d/ HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port, up.port)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return 0
		}
		io.Copy(io.Discard, resp.Body)
		return resp.StatusCode
	}
	if got := get(); got != 200 {
		t.Fatalf("before the change: got %d, want 200", got)
	}
	var reqs atomic.Int64
	reqs.Store(up.reqs.Load())
	dec.denyEverything()
	if got := get(); got != 403 {
		t.Fatalf("after the change: got %d, want 403", got)
	}
	if got := up.reqs.Load() - reqs.Load(); got != 0 {
		t.Fatalf("upstream requests after the change: got %d, want 0", got)
	}
}

// TestRedecideOneSandbox: Redecide with a sandbox id (the entry point for a
// change to one sandbox's own rules) re-decides that sandbox's connections
// only, and reports how many it closed.
func TestRedecideOneSandbox(t *testing.T) {
	echo := newRawUpstream(t, "")
	dec := &changingDecider{Decider: tunnelPolicy(), ch: make(chan struct{})}
	h := newHarness(t, dec, names("raw.example"), nil)
	h.dialer.allow(echo.addr)
	c, br := connectTo(t, h, "raw.example", echo.port)
	ping := func() error {
		io.WriteString(c, "ping")
		buf := make([]byte, 4)
		_, err := io.ReadFull(br, buf)
		return err
	}
	if err := ping(); err != nil {
		t.Fatal(err)
	}
	dec.denyAll.Store(true) // changed, not announced
	if got := h.g.Redecide("alk-other-sandbox"); got != 0 {
		t.Fatalf("another sandbox: closed %d, want 0", got)
	}
	if err := ping(); err != nil {
		t.Fatalf("the tunnel of a sandbox not re-decided was cut: %v", err)
	}
	if got := h.g.Redecide("sb-test"); got != 1 {
		t.Fatalf("its sandbox: closed %d, want 1", got)
	}
	if err := ping(); err == nil {
		t.Fatal("the tunnel still works after its sandbox was re-decided")
	}
}

// TestPolicyChangeToInterceptionClosesTunnel: a spliced TLS tunnel whose
// destination the new policy intercepts is closed (it would now be admitted
// differently), with a policy_changed close record.
func TestPolicyChangeToInterceptionClosesTunnel(t *testing.T) {
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	up := newUpstream(t, nil, &cert)
	dec := &changingDecider{Decider: tunnelPolicy(), ch: make(chan struct{})}
	h := newHarness(t, dec, names("pypi.org"), pki)
	h.allowUpstreams(up)
	c, br := connectTo(t, h, "pypi.org", up.port)
	tc := tls.Client(&bufConn{Conn: c, r: br}, &tls.Config{ServerName: "pypi.org", RootCAs: pki.upPool})
	get := func() error {
		fmt.Fprintf(tc, "GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	}
	if err := get(); err != nil {
		t.Fatalf("before the change: %v", err)
	}
	n := len(h.log.Records())
	dec.mitmAll.Store(true)
	if got := h.g.Redecide(""); got != 1 {
		t.Fatalf("closed %d, want 1", got)
	}
	if err := get(); err == nil {
		t.Fatal("the spliced tunnel still works after its destination became intercepted")
	}
	recs := settledRecords(t, h.log, n, 1)
	if len(recs) != 1 || recs[0].Kind != audit.KindClose || !audittest.HasReason(recs[0], ReasonPolicyChanged) {
		t.Fatalf("records: got %+v, want one close record with reason %s", recs, ReasonPolicyChanged)
	}
}
