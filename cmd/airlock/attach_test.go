//go:build !airlock_front

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/poll"
	"github.com/airlock-dev/airlock/test/roottest"
)

func TestParseLabels(t *testing.T) {
	tests := []struct {
		name    string
		in      []string
		want    map[string]string
		wantErr bool
	}{
		{"none", nil, nil, false},
		{"two", []string{"agent=coder", "team="}, map[string]string{"agent": "coder", "team": ""}, false},
		{"value with =", []string{"k=a=b"}, map[string]string{"k": "a=b"}, false},
		{"no =", []string{"agent"}, nil, true},
		{"empty key", []string{"=x"}, nil, true},
		{"duplicate", []string{"a=1", "a=2"}, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseLabels(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %v", err, tt.wantErr)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestAttachUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"attach"},
		{"attach", "--netns", "/proc/self/ns/net"},
		{"attach", "--netns", "/x", "--id", "bad/id"},
		{"attach", "--netns", "/x", "--id", "ok", "--label", "nokey"},
		{"attach", "--netns", "/x", "--id", "ok", "--inbound", "open"},
		{"attach", "--netns", "/x", "--id", "ok", "--inbound-port", "80"},
		{"attach", "--netns", "/x", "--id", "ok", "--inbound", "accept", "--inbound-port", "0"},
		{"attach", "--netns", "/x", "--id", "ok", "--inbound", "accept", "--inbound-port", "x"},
	} {
		if code := run(args); code != 2 {
			t.Errorf("airlock %v: exit %d, want 2", args, code)
		}
	}
}

// inNet runs fn on a thread inside the namespace at path; the thread is never
// handed back to the scheduler.
func inNet(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := vnetns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := vnetns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// TestAttachCommand runs `airlock attach` with the real policy engine, audit
// writer, gateway and DNS filter on a namespace made like `docker run --network
// none` makes one, checks egress from inside it, interrupts it and checks that
// the namespace is back as it was.
func TestAttachCommand(t *testing.T) {
	roottest.Require(t)
	for _, r := range netnstest.RemoveStale(netns.DefaultRunDir, "") {
		t.Logf("removed stale %s", r)
	}
	n := fakenet.Start(t)
	web, denied := n.Host(t, "web.test"), n.Host(t, "denied.test")
	name := netnstest.NSName("ctr")
	t.Cleanup(func() { exec.Command("ip", "netns", "delete", name).Run() })
	for _, argv := range [][]string{{"ip", "netns", "add", name}, {"ip", "-n", name, "link", "set", "lo", "up"}} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v: %s", argv, err, out)
		}
	}
	path := "/run/netns/" + name
	saveBefore, _ := exec.Command("ip", "netns", "exec", name, "iptables-legacy-save").Output()

	dir := t.TempDir()
	cfgFile := filepath.Join(dir, "airlock.yaml")
	os.WriteFile(cfgFile, []byte("upstream: {allow_cidrs: [198.18.0.0/15]}\nca: {cert: "+dir+"/none.pem, key: "+dir+"/none.key}\n"), 0o600)
	auditFile := filepath.Join(dir, "audit.jsonl")
	id := netnstest.SandboxID("cli")

	ready := make(chan *netns.Sandbox, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := newAttachCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs([]string{"--netns", path, "--id", id, "--label", "kind=container", "--config", cfgFile,
		"--allow", "web.test", "--audit", auditFile, "--dns-upstream", n.DNSAddr.String(), "--state-dir", filepath.Join(dir, "state")})
	// The test hooks into the options through the ready callback.
	attachReadyHook = func(sb *netns.Sandbox) { ready <- sb }
	defer func() { attachReadyHook = nil }()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("attach exited early: %v\n%s", err, out.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("attach did not become ready\n%s", out.String())
	}

	err := inNet(path, func() error {
		if got, err := fakenet.Get(web.IP.String()+":80", "web.test", "/attach"); !strings.Contains(got, "hello from web.test /attach") {
			t.Errorf("allowed host from the container: %q, %v", got, err)
		}
		if got, _ := fakenet.Get(denied.IP.String()+":80", "denied.test", "/attach"); strings.Contains(got, "hello") {
			t.Errorf("denied host answered: %q", got)
		}
		c, err := net.Dial("udp4", denied.IP.String()+":7")
		if err == nil {
			c.Write([]byte("x"))
			c.Close()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := denied.Conns() + denied.Requests() + denied.UDP(); got != 0 {
		t.Errorf("denied host saw %d connections, requests or datagrams, want 0", got)
	}

	// The drop record arrives asynchronously (NFLOG batch, audit queue).
	hasDrop := func() bool {
		recs, _ := audittest.ReadFile(auditFile)
		for _, r := range recs {
			if r.Kind == audit.KindDrop && r.Sandbox == id {
				return true
			}
		}
		return false
	}
	poll.Within(5*time.Second, hasDrop)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("attach: %v\n%s", err, out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("attach did not exit after the interrupt")
	}
	if !strings.Contains(out.String(), "detached "+path) {
		t.Errorf("output lacks the detach line:\n%s", out.String())
	}
	saveAfter, _ := exec.Command("ip", "netns", "exec", name, "iptables-legacy-save").Output()
	if strings.Contains(string(saveAfter), "AIRLOCK") {
		t.Errorf("rules left after detach:\n%s\nbefore:\n%s", saveAfter, saveBefore)
	}
	if _, err := os.Lstat(filepath.Join(netns.DefaultRunDir, netns.NamePrefix+id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("bind mount left after detach: %v", err)
	}
	routes, _ := exec.Command("ip", "-n", name, "route").Output()
	if strings.TrimSpace(string(routes)) != "" {
		t.Errorf("routes left after detach: %q", routes)
	}

	// The audit log holds the allowed request, the denied one and the UDP drop.
	recs := audittest.ReadLog(t, auditFile)
	var allow, deny, drop bool
	for _, r := range recs {
		if r.Sandbox != id {
			continue
		}
		allow = allow || (r.Decision == audit.DecisionAllow && r.Host == "web.test")
		deny = deny || (r.Decision == audit.DecisionDeny && r.Host == "denied.test")
		drop = drop || (r.Kind == audit.KindDrop && r.Protocol == "udp" && r.IP == denied.IP.String() && r.Port == 7)
	}
	if !allow || !deny || !drop {
		t.Errorf("audit: allow=%v deny=%v drop=%v, want all true (%d records)", allow, deny, drop, len(recs))
	}
}
