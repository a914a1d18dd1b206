package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
)

func TestResolverAddrs(t *testing.T) {
	tests := []struct {
		name string
		in   []string
		want []netip.Addr
	}{
		{name: "plain", in: []string{"1.1.1.1:53", "[2606:4700::1111]:53"}, want: []netip.Addr{netip.MustParseAddr("1.1.1.1"), netip.MustParseAddr("2606:4700::1111")}},
		{name: "dns over tls", in: []string{"tls://9.9.9.9:853#dns.quad9.net"}, want: []netip.Addr{netip.MustParseAddr("9.9.9.9")}},
		{name: "mapped", in: []string{"[::ffff:8.8.8.8]:53"}, want: []netip.Addr{netip.MustParseAddr("8.8.8.8")}},
		{name: "name skipped", in: []string{"dns.google:53"}, want: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolverAddrs(tt.in); !slices.Equal(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// listenInNetns listens on addr (TCP) inside the named network namespace and
// counts the connections accepted; it closes at cleanup.
func listenInNetns(t *testing.T, ns, addr string) *atomic.Int64 {
	t.Helper()
	type result struct {
		l   net.Listener
		err error
	}
	rc := make(chan result, 1)
	go func() {
		// The thread is never unlocked: it leaves with the goroutine, so no
		// other goroutine runs in the namespace.
		runtime.LockOSThread()
		h, err := vnetns.GetFromName(ns)
		if err != nil {
			rc <- result{err: err}
			return
		}
		defer h.Close()
		if err := vnetns.Set(h); err != nil {
			rc <- result{err: err}
			return
		}
		l, err := net.Listen("tcp4", addr)
		rc <- result{l, err}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, r.err)
	}
	t.Cleanup(func() { r.l.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := r.l.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n
}

// TestRootResolverAddressRefused: a name the policy allows that resolves to
// the DNS filter's upstream resolver (inside upstream.allow_cidrs) is refused
// through the explicit proxy (plain and CONNECT) and the transparent
// listener, by name and by address, and the resolver's host sees zero TCP
// connections. Regression: only the host's own addresses were refused, so a
// tunnel to such a name carried raw DNS past the filter.
func TestRootResolverAddressRefused(t *testing.T) {
	var resolverIP string
	d, n, _, _ := newTestDaemon(t, func(c *config.Config) {
		resolverIP = netip.MustParseAddrPort(c.DNS.Upstreams[0]).Addr().String()
		c.Policy.Allow = []string{"resolver.example", resolverIP}
	})
	t.Cleanup(func() { d.Close() })
	n.SetRecord("resolver.example", n.DNSAddr.Addr())
	var conns []*atomic.Int64
	for _, port := range []string{"80", "443"} {
		conns = append(conns, listenInNetns(t, n.Name, resolverIP+":"+port))
	}
	var stdout bytes.Buffer
	script := strings.Join([]string{
		"curl -sS --max-time 20 -o /dev/null -w '%{http_code} ' http://resolver.example/",
		"curl -sS --max-time 20 -o /dev/null -w '%{http_code} ' https://resolver.example/",
		"curl -sS --max-time 20 -o /dev/null -w '%{http_code} ' http://" + resolverIP + "/",
		"curl -sS --noproxy '*' --max-time 20 -o /dev/null -w '%{http_code} ' http://resolver.example/",
		"curl -sS --noproxy '*' --max-time 20 -o /dev/null -w '%{http_code} ' http://" + resolverIP + "/",
		"exit 0",
	}, "; ")
	res, err := d.Run(context.Background(), Task{ID: uniqueID("alk-daemon-resolver"), Argv: []string{"sh", "-c", script}, Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || strings.Contains(stdout.String(), "200") {
		t.Fatalf("exit %d, stdout %q: the resolver's address was reachable", res.ExitStatus(), stdout.String())
	}
	for i, c := range conns {
		if got := c.Load(); got != 0 {
			t.Fatalf("the resolver's host saw %d TCP connections on port %s, want 0", got, []string{"80", "443"}[i])
		}
	}
}

// TestRootGatewayBudgetWired: a sandbox sending many requests the gateway
// denies gets a few records one by one and the rest counted in summary
// records; every request is accounted for and the denied host saw nothing.
func TestRootGatewayBudgetWired(t *testing.T) {
	d, n, cfg, _ := newTestDaemon(t, func(c *config.Config) {
		c.Audit.GatewayRate, c.Audit.GatewayBurst = 0.01, 5
	})
	const requests = 60
	var stdout bytes.Buffer
	id := uniqueID("alk-daemon-budget")
	res, err := d.Run(context.Background(), Task{ID: id, Argv: []string{"sh", "-c",
		fmt.Sprintf("curl -s --max-time 60 -o /dev/null -w '%%{http_code} ' 'http://evil.example/[1-%d]'; exit 0", requests)}, Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || strings.Count(stdout.String(), "403") != requests {
		t.Fatalf("exit %d, stdout %q: want %d refusals", res.ExitStatus(), stdout.String(), requests)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if got := n.evil.Conns(); got != 0 {
		t.Fatalf("evil.example saw %d connections, want 0", got)
	}
	individual, summarized := 0, 0
	for _, r := range audittest.ReadLog(t, cfg.Audit.File) {
		switch {
		case r.Sandbox != id:
		case r.Kind == audit.KindSummary:
			var c int
			_ = json.Unmarshal(r.Extra[audit.SummaryRequestsKey], &c)
			summarized += c
		case r.Kind == string(policy.KindHTTP) && r.Host == "evil.example" && r.Decision == audit.DecisionDeny:
			individual++
		}
	}
	if individual+summarized != requests || summarized == 0 || individual > 5 {
		t.Fatalf("got %d individual + %d summarized records of denied requests, want %d in all, at most 5 one by one", individual, summarized, requests)
	}
}

// TestRootLowDiskSpaceRefusesSandboxes: with the audit log's filesystem
// below audit.min_free, run and attach are refused with an error naming the
// filesystem and the numbers, and no namespace is made; with room again they
// work.
func TestRootLowDiskSpaceRefusesSandboxes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "alk-daemon-tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=8m", "alk-daemon-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	d, _, _, _ := newTestDaemon(t, func(c *config.Config) {
		c.Audit.File = filepath.Join(dir, "audit.jsonl")
		fs, err := config.ParseFreeSpace("4M")
		if err != nil {
			t.Fatal(err)
		}
		c.Audit.MinFree = fs
	})
	t.Cleanup(func() { d.Close() })
	filler := filepath.Join(dir, "filler")
	if err := os.WriteFile(filler, make([]byte, 6<<20), 0o600); err != nil {
		t.Fatal(err)
	}
	lowID := uniqueID("alk-daemon-lowdisk")
	_, err := d.Run(context.Background(), Task{ID: lowID, Argv: []string{"true"}})
	var le *LowDiskSpaceError
	if !errors.As(err, &le) || !errors.Is(err, ErrLowDiskSpace) || le.Mount != dir || le.Need != 4<<20 || le.Free >= le.Need ||
		!strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "audit.min_free 4M") {
		t.Fatalf("run with the audit filesystem nearly full: got %v, want a LowDiskSpaceError naming %s and the numbers", err, dir)
	}
	if _, err := os.Stat("/run/netns/airlock-" + lowID); !os.IsNotExist(err) {
		t.Fatalf("a namespace was made for a refused sandbox: %v", err)
	}
	if _, err := d.Attach(context.Background(), policy.Sandbox{ID: uniqueID("alk-daemon-lowdisk-a")}, filepath.Join(t.TempDir(), "no-such-netns"), netns.Inbound{}); !errors.Is(err, ErrLowDiskSpace) {
		t.Fatalf("attach with the audit filesystem nearly full: got %v, want ErrLowDiskSpace", err)
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	res, err := d.Run(context.Background(), Task{ID: uniqueID("alk-daemon-lowdisk"), Argv: []string{"true"}})
	if err != nil || res.ExitStatus() != 0 {
		t.Fatalf("run with room again: got %v, %v; want exit 0", res, err)
	}
}
