package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/roottest"
)

// runTimeout bounds one `airlock run` (the clients get generous time; the
// machine is small and shared).
const runTimeout = 4 * time.Minute

// env is one test's airlock configuration.
type env struct {
	t      *testing.T
	dir    string
	config string // airlock.yaml
	audit  string // audit.file
}

// newEnv roottest-gates t and writes an airlock.yaml that points DNS at the fake
// resolver, lets the gateway reach the fake internet's subnet, trusts its CA,
// and keeps the audit log in a fresh directory. extra is appended YAML.
func newEnv(t *testing.T, extra string) *env {
	t.Helper()
	roottest.Require(t)
	if w == nil {
		t.Fatal("e2e: fake internet not set up")
	}
	dir := t.TempDir()
	e := &env{t: t, dir: dir, config: filepath.Join(dir, "airlock.yaml"), audit: filepath.Join(dir, "audit", "audit.jsonl")}
	yaml := fmt.Sprintf(`policy: {mode: enforce}
dns: {upstreams: [%q]}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {memory: 1G, cpus: 2, pids: 512, timeout: 3m, tmp_size: 512M}
%s`, w.net.DNSAddr.String(), w.net.Subnet.String(), w.caFile, e.audit,
		filepath.Join(dir, "no-ca", "ca.pem"), filepath.Join(dir, "no-ca", "ca.key"), extra)
	if err := os.WriteFile(e.config, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	return e
}

// result is what one `airlock run` did.
type result struct {
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\n--- stdout\n%s\n--- stderr\n%s", r.code, r.stdout, r.stderr)
}

// sandboxID returns a sandbox id unique to this test run.
func sandboxID(prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "e2e-" + prefix + "-" + hex.EncodeToString(b[:])
}

// airlockCmd builds `airlock run --config C FLAGS... -- ARGV...`. hostEnv adds
// variables to airlock's own environment (secret sources). Without a
// --workspace in FLAGS it adds --workspace none: the test's own directory
// (run's default workspace) is never bound.
func (e *env) airlockCmd(ctx context.Context, flags []string, argv []string, hostEnv ...string) *exec.Cmd {
	args := append([]string{"run", "--config", e.config}, flags...)
	if !slices.Contains(flags, "--workspace") {
		args = append(args, "--workspace", "none")
	}
	args = append(append(args, "--"), argv...)
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Env = append([]string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"}, hostEnv...)
	cmd.WaitDelay = 10 * time.Second
	return cmd
}

// run runs airlock to completion and returns its exit code and output.
func (e *env) run(flags []string, argv []string, hostEnv ...string) result {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := e.airlockCmd(ctx, flags, argv, hostEnv...)
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
		e.t.Fatalf("airlock run: %v\n%s", err, res)
	}
	if ctx.Err() != nil {
		e.t.Fatalf("airlock run did not finish within %s\n%s", runTimeout, res)
	}
	e.t.Logf("airlock run %s\n%s", strings.Join(flags, " "), res)
	return res
}

// sh runs a shell script in the sandbox.
func (e *env) sh(flags []string, script string, hostEnv ...string) result {
	e.t.Helper()
	return e.run(flags, []string{"/bin/sh", "-c", script}, hostEnv...)
}

// records reads the audit log.
func (e *env) records() []audit.Record {
	e.t.Helper()
	return audittest.ReadLog(e.t, e.audit)
}

// match selects audit records.
type match struct {
	kind, decision, host, method, path, qname string
}

func (m match) ok(r audit.Record) bool {
	return (m.kind == "" || r.Kind == m.kind) &&
		(m.decision == "" || r.Decision == m.decision) &&
		(m.host == "" || r.Host == m.host) &&
		(m.method == "" || r.Method == m.method) &&
		(m.path == "" || strings.HasPrefix(r.Path, m.path)) &&
		(m.qname == "" || strings.TrimSuffix(r.QName, ".") == m.qname)
}

// find returns the records that match m.
func find(recs []audit.Record, m match) []audit.Record {
	var out []audit.Record
	for _, r := range recs {
		if m.ok(r) {
			out = append(out, r)
		}
	}
	return out
}

// mustFind fails unless at least one record matches.
func mustFind(t *testing.T, recs []audit.Record, m match) audit.Record {
	t.Helper()
	got := find(recs, m)
	if len(got) == 0 {
		t.Fatalf("no audit record matches %+v; records:\n%s", m, dump(recs))
	}
	return got[0]
}

// mustNotFind fails if a record matches.
func mustNotFind(t *testing.T, recs []audit.Record, m match) {
	t.Helper()
	if got := find(recs, m); len(got) > 0 {
		t.Fatalf("got %d audit records matching %+v, want none; records:\n%s", len(got), m, dump(recs))
	}
}

func dump(recs []audit.Record) string {
	var b strings.Builder
	for _, r := range recs {
		j, _ := json.Marshal(r)
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

// counts snapshots a fake host's counters.
type counts struct{ conns, requests, udp int64 }

func snap(h *fakenet.Host) counts {
	return counts{h.Conns(), h.Requests(), h.UDP()}
}

func (c counts) sub(o counts) counts {
	return counts{c.conns - o.conns, c.requests - o.requests, c.udp - o.udp}
}

// seenSince returns the requests h served after the first n.
func seenSince(h *fakenet.Host, n int) []*http.Request {
	s := h.Seen()
	if n > len(s) {
		return nil
	}
	return s[n:]
}

// wantCode fails unless the run exited with code.
func wantCode(t *testing.T, res result, code int) {
	t.Helper()
	if res.code != code {
		t.Fatalf("got exit %d, want %d\n%s", res.code, code, res)
	}
}
