package fakenet

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/test/roottest"
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

// TestRootConcurrentCreateKeepsTheWinner: processes that pick the same subnet
// at once must leave the one that got it alone. Regression: create checked
// that the namespace was free, then made it, and a loser of that race tore
// down the winner's namespace and link (a concurrent test's fake internet
// vanished mid-test: "Cannot open network namespace alk-inet-N").
func TestRootConcurrentCreateKeepsTheWinner(t *testing.T) {
	roottest.Require(t)
	idx := -1
	for i := 249; i >= 20; i-- { // a free index, from the top (New starts low)
		if _, err := os.Stat(fmt.Sprintf("/run/netns/alk-inet-%d", i)); err != nil {
			idx = i
			break
		}
	}
	if idx < 0 {
		t.Skip("no free fake internet index")
	}
	const racers = 6
	nets := make([]*Net, racers)
	errs := make([]error, racers)
	var start, done sync.WaitGroup
	start.Add(1)
	for i := range racers {
		done.Add(1)
		go func() {
			defer done.Done()
			nets[i] = &Net{}
			start.Wait()
			errs[i] = nets[i].create(idx)
		}()
	}
	start.Done()
	done.Wait()
	var winners []*Net
	for i, n := range nets {
		if errs[i] == nil {
			winners = append(winners, n)
			t.Cleanup(func() { n.destroy() })
		}
	}
	if len(winners) != 1 {
		t.Fatalf("got %d creators of alk-inet-%d, want exactly 1; errors: %v", len(winners), idx, errs)
	}
	if _, err := os.Stat("/run/netns/" + winners[0].Name); err != nil {
		t.Fatalf("the winner's namespace is gone: %v", err)
	}
	if err := run("ip", "link", "show", winners[0].hostLink); err != nil {
		t.Fatalf("the winner's link is gone: %v", err)
	}
}
