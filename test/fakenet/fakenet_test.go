package fakenet

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/roottest"
	"github.com/miekg/dns"
)

func TestRootFakenet(t *testing.T) {
	roottest.Require(t)
	n, err := New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	h, err := n.AddHost([]string{"pypi.org", "files.pythonhosted.org"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// DNS from the host reaches the fake resolver.
	c := new(dns.Client)
	m := new(dns.Msg)
	m.SetQuestion("pypi.org.", dns.TypeA)
	r, _, err := c.Exchange(m, n.DNSAddr.String())
	if err != nil || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != h.IP.String() {
		t.Fatalf("dns: got %v %v, want A %s", r, err, h.IP)
	}
	if got := n.Queries("pypi.org"); got != 1 {
		t.Fatalf("got %d queries, want 1", got)
	}
	// HTTPS with the fake CA, from the host.
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: n.CAPool()},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, h.IP.String()+":443")
		}}
	client := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	resp, err := client.Get("https://pypi.org/simple/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "hello from pypi.org /simple/\n" {
		t.Fatalf("got body %q", body)
	}
	if h.Conns() != 1 || h.Requests() != 1 {
		t.Fatalf("got %d conns %d requests, want 1 and 1", h.Conns(), h.Requests())
	}
	if _, err := n.ICMPEchoRequests(); err != nil {
		t.Fatal(err)
	}
	// An extra port counts its connections, and adding it twice is harmless.
	for range 2 {
		if err := n.AddTCPPort(h, 4444); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := net.DialTimeout("tcp4", h.IP.String()+":4444", 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("ping\n")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(conn, buf); err != nil || string(buf) != "ping\n" {
		t.Fatalf("echo: got %q %v", buf, err)
	}
	conn.Close()
	if h.PortConns(4444) != 1 || h.Conns() != 2 || h.PortConns(22) != 0 {
		t.Fatalf("got port 4444 conns %d, all conns %d, want 1 and 2", h.PortConns(4444), h.Conns())
	}
}
