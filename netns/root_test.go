package netns

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/roottest"
)

// world is one root test's fake internet, server and manager.
type world struct {
	net    *fakenet.Net
	web    *fakenet.Host // allowed as web.test
	denied *fakenet.Host // denied.test: policy says no
	srv    *testServer
	audit  *audittest.Log
	m      *Manager
	cfg    Config
}

// newWorld builds a world whose policy allows web.test and the extra names.
func newWorld(t *testing.T, cfg Config, extraAllow ...string) *world {
	t.Helper()
	roottest.Require(t)
	n := fakenet.Start(t)
	web, denied := n.Host(t, "web.test"), n.Host(t, "denied.test")
	w := &world{net: n, web: web, denied: denied, audit: &audittest.Log{}}
	w.srv = newTestServer(t, n.DNSAddr.String(), n.Subnet, append([]string{"web.test"}, extraAllow...), w.audit)
	if cfg.StateDir == "" {
		cfg.StateDir = t.TempDir()
	}
	cfg.DropInterval = max(cfg.DropInterval, 50*time.Millisecond)
	w.cfg = cfg
	w.m = w.newManager(t)
	return w
}

func (w *world) newManager(t *testing.T) *Manager {
	t.Helper()
	m, err := New(w.cfg, w.srv, w.audit, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() {
		if err := teardownAll(context.Background(), m); err != nil {
			t.Errorf("TeardownAll: %v", err)
		}
	})
	return m
}

func (w *world) create(t *testing.T, tag string) *Sandbox {
	t.Helper()
	s, err := w.m.Create(context.Background(), identity.Sandbox{ID: netnstest.SandboxID(tag), Labels: map[string]string{"test": t.Name()}})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return s
}

func curl(t *testing.T, path string, args ...string) (string, error) {
	t.Helper()
	return nsExec(t, path, 15*time.Second, append([]string{"curl", "-sS", "--max-time", "5"}, args...)...)
}

// inSandbox runs fn on a thread inside the sandbox's namespace.
func inSandbox(t *testing.T, s *Sandbox, fn func() error) error {
	t.Helper()
	h, err := vnetns.GetFromPath(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return inNS(h, fn)
}

func TestIslandEgress(t *testing.T) {
	w := newWorld(t, Config{})
	s := w.create(t, "egress")

	t.Run("explicit proxy reaches allowed host", func(t *testing.T) {
		out, err := curl(t, s.Path, "-x", "http://127.0.0.1:3128", "http://web.test/x")
		if err != nil || !strings.Contains(out, "hello from web.test /x") {
			t.Fatalf("curl via proxy: %v: %q", err, out)
		}
	})
	t.Run("transparent capture reaches allowed host", func(t *testing.T) {
		before := w.web.Requests()
		out, err := curl(t, s.Path, "--noproxy", "*", "http://web.test/y")
		if err != nil || !strings.Contains(out, "hello from web.test /y") {
			t.Fatalf("curl without proxy: %v: %q", err, out)
		}
		if got := w.web.Requests() - before; got != 1 {
			t.Errorf("web.test requests: got %d, want 1", got)
		}
	})
	t.Run("dig to an address where nothing listens is answered by the filter", func(t *testing.T) {
		out, err := nsExec(t, s.Path, 15*time.Second, "dig", "+short", "+tries=1", "+time=3", "@"+w.net.Unused.String(), "web.test", "A")
		if err != nil || strings.TrimSpace(out) != w.web.IP.String() {
			t.Fatalf("dig: %v: got %q, want %s", err, out, w.web.IP)
		}
		out, err = nsExec(t, s.Path, 15*time.Second, "dig", "+tries=1", "+time=3", "@"+w.net.Unused.String(), "denied.test", "A")
		if err != nil || !strings.Contains(out, "NXDOMAIN") {
			t.Fatalf("dig denied.test: %v: got %q, want NXDOMAIN", err, out)
		}
		if got := w.net.Queries("denied.test"); got != 0 {
			t.Errorf("fake DNS saw %d queries for denied.test, want 0", got)
		}
	})
	t.Run("TCP to a denied IP is refused and the target sees nothing", func(t *testing.T) {
		out, _ := curl(t, s.Path, "--noproxy", "*", "http://"+w.denied.IP.String()+":7/")
		if strings.Contains(out, "hello") {
			t.Fatalf("denied host answered: %q", out)
		}
		out, _ = curl(t, s.Path, "--noproxy", "*", "http://denied.test/")
		if strings.Contains(out, "hello") {
			t.Fatalf("denied host answered: %q", out)
		}
		// A raw connect with a payload that is not HTTP.
		err := inSandbox(t, s, func() error {
			c, err := net.DialTimeout("tcp4", w.denied.IP.String()+":7", 3*time.Second)
			if err != nil {
				return nil
			}
			defer c.Close()
			c.Write([]byte("ping\n"))
			c.SetReadDeadline(time.Now().Add(3 * time.Second))
			buf := make([]byte, 16)
			if n, _ := c.Read(buf); n > 0 {
				t.Errorf("echo answered through the gateway: %q", buf[:n])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.denied.Conns(); got != 0 {
			t.Errorf("denied host connections: got %d, want 0", got)
		}
	})
	t.Run("UDP to a denied IP is dropped and audited", func(t *testing.T) {
		err := inSandbox(t, s, func() error {
			c, err := net.Dial("udp4", w.denied.IP.String()+":7")
			if err != nil {
				return err
			}
			defer c.Close()
			for range 3 {
				c.Write([]byte("hello"))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		w.audit.Wait(t, "udp drop record", dropOf(s.ID, "udp", w.denied.IP.String(), 7))
		if got := w.denied.UDP(); got != 0 {
			t.Errorf("denied host UDP datagrams: got %d, want 0", got)
		}
	})
	t.Run("ICMP to a denied IP is dropped and audited", func(t *testing.T) {
		err := inSandbox(t, s, func() error {
			c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
			if err != nil {
				return err
			}
			defer c.Close()
			msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 7, Seq: 1, Data: []byte("airlock")}}
			b, _ := msg.Marshal(nil)
			_, werr := c.WriteTo(b, &net.IPAddr{IP: w.denied.IP.AsSlice()})
			if werr == nil {
				t.Errorf("ICMP echo send succeeded, want EPERM from the drop rule")
			}
			c.SetReadDeadline(time.Now().Add(time.Second))
			if n, _, err := c.ReadFrom(make([]byte, 512)); err == nil {
				t.Errorf("got an ICMP reply (%d bytes)", n)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		w.audit.Wait(t, "icmp drop record", dropOf(s.ID, "icmp", w.denied.IP.String(), 0))
		if got, err := w.net.ICMPEchoRequests(); err != nil || got != 0 {
			t.Errorf("echo requests at the fake internet: got %d (%v), want 0", got, err)
		}
	})
	t.Run("IPv6 sockets fail", func(t *testing.T) {
		err := inSandbox(t, s, func() error {
			if l, err := net.Listen("tcp6", "[::1]:0"); err == nil {
				l.Close()
				t.Errorf("listen on [::1] succeeded")
			}
			if c, err := net.DialTimeout("tcp6", "[2001:db8::1]:80", 2*time.Second); err == nil {
				c.Close()
				t.Errorf("tcp6 dial succeeded")
			}
			if c, err := net.Dial("udp6", "[2001:db8::1]:53"); err == nil {
				if _, err := c.Write([]byte("x")); err == nil {
					t.Errorf("udp6 write succeeded")
				}
				c.Close()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	if t.Failed() {
		_, save := backendBinaries(w.m.Backend())
		out, _ := nsExec(t, s.Path, 5*time.Second, save)
		t.Logf("rules:\n%s", out)
	}
}

// dropOf matches the deny record of a packet sandbox sent to ip:port over proto.
func dropOf(sandbox, proto, ip string, port int) func(audit.Record) bool {
	return func(r audit.Record) bool {
		return r.Kind == audit.KindDrop && r.Sandbox == sandbox && r.Protocol == proto && r.IP == ip && r.Port == port && r.Decision == audit.DecisionDeny
	}
}
