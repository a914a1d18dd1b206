package daemon

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/netns"
)

func apiCall(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	h.ServeHTTP(rec, req.WithContext(withCaller(req.Context(), caller{uid: 0})))
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, rec.Body.String(), err)
		}
	}
	return rec.Code, out
}

// TestRootAPIAdmin: the root-only routes against a real daemon: attach,
// detach, reload, summary, health and the metrics listener.
func TestRootAPIAdmin(t *testing.T) {
	d, _, _, _ := newTestDaemon(t)
	t.Cleanup(func() { d.Close() })
	h := d.Handler()

	code, out := apiCall(t, h, "GET", "/v1/health", "")
	if code != 200 || out["policy_rev"] == "" {
		t.Fatalf("health: %d %v", code, out)
	}

	if code, out := apiCall(t, h, "POST", "/v1/attach", `{"id": "alk-api-x", "netns": "/nonexistent"}`); code != 422 || out["code"] != "unprocessable" {
		t.Fatalf("attach of a missing namespace: %d %v, want 422", code, out)
	}
	if code, _ := apiCall(t, h, "DELETE", "/v1/attach/nope", ""); code != 404 {
		t.Fatalf("detach of an unknown sandbox: %d, want 404", code)
	}
	// A namespace made by someone else: attached, listed, detached.
	ns := uniqueID("alk-api-ext") // concurrent checkouts must not share it
	q := func(s string) string { return strings.ReplaceAll(s, "alk-api-ext", ns) }
	_ = exec.Command("ip", "netns", "delete", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	if code, out := apiCall(t, h, "POST", "/v1/attach", q(`{"id": "alk-api-ext", "netns": "/run/netns/alk-api-ext", "pod": {"name": "a\nb"}}`)); code != 400 || out["field"] != "pod.name" {
		t.Fatalf("attach with a control character in the pod name: %d %v, want 400 naming pod.name", code, out)
	}
	for body, field := range map[string]string{
		`{"mode": "open"}`:                     "inbound.mode",
		`{"mode": "capture", "ports": [8080]}`: "inbound.ports",
		`{"mode": "accept", "ports": [80, 0]}`: "inbound.ports[1]",
		`{"mode": "accept", "udp": [53]}`:      "",
	} {
		code, out := apiCall(t, h, "POST", "/v1/attach", q(`{"id": "alk-api-ext", "netns": "/run/netns/alk-api-ext", "inbound": `)+body+`}`)
		if code != 400 || (field != "" && out["field"] != field) {
			t.Fatalf("attach with inbound %s: %d %v, want 400 naming %q", body, code, out, field)
		}
	}
	if code, out := apiCall(t, h, "POST", "/v1/attach", q(`{"id": "alk-api-ext", "netns": "/run/netns/alk-api-ext", "labels": {"team": "web"}, "pod": {"namespace": "ci", "name": "web-0"}}`)); code != 201 {
		t.Fatalf("attach: %d %v", code, out)
	}
	if code, out := apiCall(t, h, "GET", q("/v1/attach/alk-api-ext"), ""); code != 200 || out["in_force"] != true || out["pod"].(map[string]any)["namespace"] != "ci" ||
		fmt.Sprint(out["inbound"]) != "map[mode:capture]" || out["inbound_accepted"] != float64(0) {
		t.Fatalf("check after attach: %d %v, want in force with the pod, inbound capture", code, out)
	}
	// Someone with CAP_NET_ADMIN in the namespace removes airlock's jump.
	bin := "iptables-nft"
	if d.Backend() == netns.IPTablesLegacy {
		bin = "iptables-legacy"
	}
	if out, err := exec.Command("ip", "netns", "exec", ns, bin, "-w", "-t", "nat", "-D", "OUTPUT", "-j", "AIRLOCK-NAT-OUT").CombinedOutput(); err != nil {
		t.Fatalf("remove the nat jump: %v %s", err, out)
	}
	if code, out := apiCall(t, h, "GET", q("/v1/attach/alk-api-ext"), ""); code != 200 || out["in_force"] != false || !strings.Contains(fmt.Sprint(out["problem"]), "AIRLOCK-NAT-OUT") {
		t.Fatalf("check after the nat jump was removed: %d %v, want not in force naming AIRLOCK-NAT-OUT", code, out)
	}
	if code, _ := apiCall(t, h, "GET", "/v1/attach/nope", ""); code != 404 {
		t.Fatalf("check of an unknown sandbox: %d, want 404", code)
	}
	if code, out := apiCall(t, h, "POST", "/v1/attach", q(`{"id": "alk-api-ext", "netns": "/run/netns/alk-api-ext"}`)); code != 409 {
		t.Fatalf("second attach with the same id: %d %v, want 409", code, out)
	}
	if _, out := apiCall(t, h, "GET", "/v1/health", ""); !strings.Contains(strings.Join(toStrings(out["sandboxes"]), ","), q("alk-api-ext")) {
		t.Fatalf("health does not list the attached sandbox: %v", out)
	}
	if code, _ := apiCall(t, h, "DELETE", q("/v1/attach/alk-api-ext"), ""); code != 204 {
		t.Fatalf("detach: %d, want 204", code)
	}
	if code, out := apiCall(t, h, "POST", "/v1/policy/reload", ""); code != 200 || out["policy_rev"] == "" {
		t.Fatalf("reload: %d %v", code, out)
	}
	// The metrics listener serves every part's registry.
	mrec := httptest.NewRecorder()
	d.MetricsHandler().ServeHTTP(mrec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"airlock_gateway_", "airlock_dns_", "airlock_sandboxes_active", "airlock_sandbox_pool_depth"} {
		if !strings.Contains(mrec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if code, _ := apiCall(t, h, "GET", "/v1/policy/reload", ""); code != 405 {
		t.Fatalf("GET of a POST route: %d, want 405", code)
	}
}

func toStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			if s, ok := x.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}
