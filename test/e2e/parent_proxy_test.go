package e2e

import (
	"encoding/base64"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/proxytest"
)

// startParentProxy serves a counting CONNECT proxy (test/proxytest) on h's
// port inside the fake internet; it forwards only to fake-internet hosts, by
// the name the fake resolver knows.
func startParentProxy(t *testing.T, n *fakenet.Net, h *fakenet.Host, port int) *proxytest.Parent {
	t.Helper()
	l, err := n.Listen(h, port)
	if err != nil {
		t.Fatal(err)
	}
	return proxytest.Serve(t, l, func(target string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(target)
		if err != nil {
			return nil, err
		}
		pn, err := strconv.Atoi(port)
		if err != nil {
			return nil, err
		}
		ip, ok := n.Lookup(host)
		if !ok {
			return nil, fmt.Errorf("%s is not in the fake internet", host)
		}
		return n.Dial(netip.AddrPortFrom(ip, uint16(pn)))
	})
}

// TestRootParentProxy, from inside `airlock run`: with
// upstream.proxy naming a proxy in the fake internet (credential from the
// secrets file), an intercepted HTTPS GET, a tunnel to an --allow host and a
// plain HTTP GET all succeed through it, each as CONNECT by name with the
// credential; a denied host, and the parent itself as an origin (by name and
// by address), are refused with the parent seeing none of it. The audit names
// the parent and never carries the credential.
func TestRootParentProxy(t *testing.T) {
	const proxyPort = 3128
	const cred = "alice:e2e-parent-pw"
	proxyHost, err := w.net.AddHost([]string{"proxy.corp.test"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := startParentProxy(t, w.net, proxyHost, proxyPort)
	e := newEnv(t, "")
	secretsFile := filepath.Join(e.dir, "secrets.yaml")
	if err := os.WriteFile(secretsFile, []byte("secrets:\n- {id: corp-proxy, env: ALK_E2E_PROXY_CRED}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(e.config)
	if err != nil {
		t.Fatal(err)
	}
	parent := "proxy.corp.test:" + strconv.Itoa(proxyPort)
	withProxy := strings.Replace(string(cfg), "upstream: {", fmt.Sprintf("secrets: {file: %q}\nupstream: {proxy: %q, proxy_auth_secret: corp-proxy, ", secretsFile, "http://"+parent), 1)
	if err := os.WriteFile(e.config, []byte(withProxy), 0o600); err != nil {
		t.Fatal(err)
	}
	evilBefore, proxyBefore := snap(w.evil), snap(proxyHost)
	pip := proxyHost.IP.String() + ":" + strconv.Itoa(proxyPort)
	res := e.sh([]string{"--id", sandboxID("parent"), "--allow", "other.example.test", "--allow", parent, "--allow", pip}, `
curl -sS --max-time 60 -o /tmp/b1 -w 'mitm=%{http_code}\n' https://pypi.org/simple/; echo "mitm_body=$(cat /tmp/b1)"
curl -sS --max-time 60 -o /tmp/b2 -w 'tunnel=%{http_code}\n' https://other.example.test/t; echo "tunnel_body=$(cat /tmp/b2)"
curl -sS --max-time 60 -o /tmp/b3 -w 'plain=%{http_code}\n' http://pypi.org/simple/; echo "plain_body=$(cat /tmp/b3)"
curl -sS --max-time 30 -o /dev/null -w 'evil=%{http_connect}\n' https://evil.example/steal
curl -sS --max-time 30 -o /dev/null -w 'parent_name=%{http_code}\n' http://`+parent+`/
curl -sS --max-time 30 -o /dev/null -w 'parent_ip=%{http_code}\n' http://`+pip+`/
true
`, "ALK_E2E_PROXY_CRED="+cred)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "mitm", "200", res)
	wantKV(t, m, "mitm_body", "hello from pypi.org/simple/", res)
	wantKV(t, m, "tunnel", "200", res)
	wantKV(t, m, "plain", "200", res)
	wantKV(t, m, "plain_body", "hello from pypi.org/simple/", res)
	wantKV(t, m, "evil", "403", res)
	wantKV(t, m, "parent_name", "403", res)
	wantKV(t, m, "parent_ip", "403", res)

	targets, auths := p.Seen()
	want := map[string]bool{"CONNECT pypi.org:443": true, "CONNECT other.example.test:443": true, "CONNECT pypi.org:80": true}
	got := map[string]bool{}
	for _, x := range targets {
		got[x] = true
		if !want[x] {
			t.Errorf("parent saw %q; it saw %v, want only %v", x, targets, want)
		}
	}
	if len(got) != len(want) {
		t.Errorf("parent saw %v, want each of %v", targets, want)
	}
	wantAuth := "Basic " + base64.StdEncoding.EncodeToString([]byte(cred))
	for i, a := range auths {
		if a != wantAuth {
			t.Errorf("CONNECT %s carried Proxy-Authorization %q, want the secret's", targets[i], a)
		}
	}
	if n := p.Conns.Load(); n != int64(len(targets)) {
		t.Errorf("parent: %d connections for %d CONNECTs: a connection that asked nothing", n, len(targets))
	}
	if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("evil.example: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}
	if d := snap(proxyHost).sub(proxyBefore); d.requests != 0 {
		t.Errorf("proxy host's web servers: got %d requests, want 0", d.requests)
	}

	raw, err := os.ReadFile(e.audit)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), "e2e-parent-pw") || strings.Contains(string(raw), wantAuth[len("Basic "):]) {
		t.Errorf("the audit log carries the parent's credential")
	}
	if strings.Contains(res.stderr, "e2e-parent-pw") || strings.Contains(res.stderr, wantAuth[len("Basic "):]) {
		t.Errorf("airlock's log carries the parent's credential")
	}
	recs := e.records()
	for _, mm := range []match{
		{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET"},
		{kind: audit.KindConnect, decision: audit.DecisionAllow, host: "other.example.test"},
	} {
		r := mustFind(t, recs, mm)
		if got := string(r.Extra["parent_proxy"]); got != strconv.Quote(parent) {
			t.Errorf("%+v: parent_proxy %s, want %q", mm, got, parent)
		}
	}
	mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionDeny, host: "evil.example"})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: "proxy.corp.test"})
}
