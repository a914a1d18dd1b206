package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/fakenet"
)

const (
	grpcCheck = "/grpc.health.v1.Health/Check"
	grpcWatch = "/grpc.health.v1.Health/Watch"
)

// h2Handler serves gRPC's health service to HTTP/2 requests with a gRPC
// content type, and "h2 PATH proto=HTTP/x" to everything else.
func h2Handler() http.Handler {
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, health.NewServer())
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
			gs.ServeHTTP(w, r)
			return
		}
		fmt.Fprintf(w, "h2 %s proto=%s\n", r.URL.Path, r.Proto)
	})
}

// buildGRPCClient builds ./grpcclient into dir (a workspace the sandbox sees).
func buildGRPCClient(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "grpcclient")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./grpcclient")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./grpcclient: %v: %s", err, b)
	}
	return out
}

// TestRootHTTP2AndGRPCIntercepted: HTTP/2 from inside `airlock
// run`: curl --http2 and a Go gRPC client (google.golang.org/grpc) reach an
// intercepted h2 upstream in the fake internet, through the explicit proxy
// and transparently. A Rego rule on input.http.path allows the health
// service's Check and not its Watch: Check answers SERVING, Watch fails with
// PERMISSION_DENIED and the upstream never sees a Watch; on curl's one h2
// connection an allowed path answers 200 while a denied one gets 403. Each
// call is one audit record. A host the policy does not allow, reached by its
// address, sees zero connections.
func TestRootHTTP2AndGRPCIntercepted(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/curl")
	tag := strings.TrimPrefix(sandboxID("h"), "e2e-h-")
	allowed, denied := "grpc-"+tag+".example.test", "nogrpc-"+tag+".example.test"
	var hosts [2]*fakenet.Host
	for i, name := range []string{allowed, denied} {
		h, err := w.net.AddHost([]string{name}, h2Handler())
		if err != nil {
			t.Fatal(err)
		}
		hosts[i] = h
	}
	pol := filepath.Join(e.dir, "policy")
	if err := os.MkdirAll(pol, 0o755); err != nil {
		t.Fatal(err)
	}
	rego := fmt.Sprintf(`package airlock.egress

host := %q

allow if {
	input.kind != "http"
	input.destination.host == host
}

# One gRPC method, and the plain page curl fetches.
allow if {
	input.kind == "http"
	input.destination.host == host
	input.http.method == "POST"
	input.http.path == %q
}

allow if {
	input.kind == "http"
	input.destination.host == host
	input.http.method == "GET"
	input.http.path == "/page"
}

mitm if input.destination.host == host
`, allowed, grpcCheck)
	if err := os.WriteFile(filepath.Join(pol, "grpc.rego"), []byte(rego), 0o644); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(e.dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	client := buildGRPCClient(t, ws)
	deniedBefore := snap(hosts[1])
	res := e.sh([]string{"--id", sandboxID("h2"), "--policy", pol, "--workspace", ws}, strings.NewReplacer(
		"CLIENT", client, "ALLOWED", allowed, "NOHOST", denied, "NOADDR", hosts[1].IP.String()).Replace(`
noenv() { env -u HTTP_PROXY -u HTTPS_PROXY -u ALL_PROXY -u http_proxy -u https_proxy -u all_proxy "$@"; }
curl -sS --http2 --max-time 60 -w 'curl_%{http_code}_%{http_version}\n' -o /dev/null https://ALLOWED/page -o /dev/null https://ALLOWED/secret
echo "page=$(curl -sS --http2 --max-time 60 https://ALLOWED/page)"
CLIENT -addr ALLOWED:443 -method check
CLIENT -addr ALLOWED:443 -method watch
noenv CLIENT -addr ALLOWED:443 -method check -name transparent_check -n 3
noenv curl -sS --http2 --max-time 30 --resolve NOHOST:443:NOADDR -o /dev/null https://NOHOST/page; echo "denied_exit=$?"
true
`))
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "page", "h2 /page proto=HTTP/2.0", res)
	wantKV(t, m, "check", "SERVING", res)
	wantKV(t, m, "watch_error", "PermissionDenied", res)
	wantKV(t, m, "transparent_check", "SERVING", res)
	if !strings.Contains(res.stdout, "curl_200_2\n") || !strings.Contains(res.stdout, "curl_403_2\n") {
		t.Errorf("curl --http2 on one connection: want /page 200 and /secret 403, both over HTTP/2\n%s", res)
	}
	if m["denied_exit"] == "0" || m["denied_exit"] == "" {
		t.Errorf("curl to a denied host went through\n%s", res)
	}

	// What the upstreams saw: no Watch, no /secret, nothing at the denied host.
	seen := map[string]int{}
	for _, r := range hosts[0].Seen() {
		seen[r.Method+" "+r.URL.Path]++
	}
	want := map[string]int{"GET /page": 2, "POST " + grpcCheck: 4}
	for k, n := range want {
		if seen[k] != n {
			t.Errorf("%s: got %d requests, want %d (all seen: %v)", k, seen[k], n, seen)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("the upstream saw %v, want only %v", seen, want)
	}
	if d := snap(hosts[1]).sub(deniedBefore); d.conns != 0 || d.requests != 0 {
		t.Errorf("denied host: got %d connections, %d requests, want 0 and 0", d.conns, d.requests)
	}

	// One audit record per call.
	recs := e.records()
	if n := len(find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: allowed, method: "POST", path: grpcCheck})); n != 4 {
		t.Errorf("got %d allow records for %s, want 4 (one per call)\n%s", n, grpcCheck, dump(recs))
	}
	if n := len(find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: allowed, method: "POST", path: grpcWatch})); n != 1 {
		t.Errorf("got %d deny records for %s, want 1\n%s", n, grpcWatch, dump(recs))
	}
	if n := len(find(recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: allowed, method: "GET", path: "/page"})); n != 2 {
		t.Errorf("got %d allow records for GET /page, want 2\n%s", n, dump(recs))
	}
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionDeny, host: allowed, method: "GET", path: "/secret"})
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: denied})
}
