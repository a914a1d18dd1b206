package daemon

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
)

func apiCall(t *testing.T, h http.Handler, method, path, body string) (int, map[string]any) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(method, path, strings.NewReader(body)))
	var out map[string]any
	if rec.Body.Len() > 0 {
		if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: body %q is not a JSON object: %v", method, path, rec.Body.String(), err)
		}
	}
	return rec.Code, out
}

func TestRootAPI(t *testing.T) {
	d, n, _, _ := newTestDaemon(t)
	t.Cleanup(func() { d.Close() })
	h := d.Handler()

	code, out := apiCall(t, h, "GET", "/v1/health", "")
	if code != 200 || out["policy_rev"] == "" {
		t.Fatalf("health: %d %v", code, out)
	}

	code, out = apiCall(t, h, "POST", "/v1/run", `{"argv": ["sh", "-c", "curl -sS --max-time 20 https://pypi.org/x; curl -sS --max-time 20 -o /dev/null -w %{http_code} https://evil.example/; exit 7"], "limits": {"timeout": "60s", "memory": "256M"}}`)
	if code != 200 || out["exit_status"] != float64(7) || !strings.Contains(out["stdout"].(string), "hello from pypi.org /x") || !strings.Contains(out["stderr"].(string), "CONNECT tunnel failed, response 403") {
		t.Fatalf("run: %d %v", code, out)
	}
	if n.evil.Conns() != 0 {
		t.Fatalf("evil.example saw %d connections through the API's sandbox, want 0", n.evil.Conns())
	}

	bad := []struct{ name, body, want string }{
		{"unknown field", `{"argv": ["true"], "bogus": 1}`, `unknown field "bogus"`},
		{"no command", `{"argv": []}`, "argv: missing command"},
		{"bad size", `{"argv": ["true"], "limits": {"memory": "12Q"}}`, `unknown unit "Q"`},
		{"bad id", `{"argv": ["true"], "id": "../x"}`, "id:"},
		{"two values", `{"argv": ["true"]} {}`, "more than one"},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			code, out := apiCall(t, h, "POST", "/v1/run", tt.body)
			if code != 400 || !strings.Contains(out["error"].(string), tt.want) {
				t.Fatalf("got %d %v, want 400 naming %q", code, out, tt.want)
			}
		})
	}

	if code, out := apiCall(t, h, "POST", "/v1/attach", `{"id": "alk-api-x", "netns": "/nonexistent"}`); code != 422 {
		t.Fatalf("attach of a missing namespace: %d %v, want 422", code, out)
	}
	if code, _ := apiCall(t, h, "DELETE", "/v1/attach/nope", ""); code != 404 {
		t.Fatalf("detach of an unknown sandbox: %d, want 404", code)
	}
	// A namespace made by someone else: attached, listed, detached.
	ns := "alk-api-ext"
	_ = exec.Command("ip", "netns", "delete", ns).Run()
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "delete", ns).Run() })
	if code, out := apiCall(t, h, "POST", "/v1/attach", `{"id": "alk-api-ext", "netns": "/run/netns/alk-api-ext", "labels": {"team": "web"}}`); code != 201 {
		t.Fatalf("attach: %d %v", code, out)
	}
	if code, out := apiCall(t, h, "POST", "/v1/attach", `{"id": "alk-api-ext", "netns": "/run/netns/alk-api-ext"}`); code != 409 {
		t.Fatalf("second attach with the same id: %d %v, want 409", code, out)
	}
	if _, out := apiCall(t, h, "GET", "/v1/health", ""); !strings.Contains(strings.Join(toStrings(out["sandboxes"]), ","), "alk-api-ext") {
		t.Fatalf("health does not list the attached sandbox: %v", out)
	}
	if code, _ := apiCall(t, h, "DELETE", "/v1/attach/alk-api-ext", ""); code != 204 {
		t.Fatalf("detach: %d, want 204", code)
	}
	if code, out := apiCall(t, h, "POST", "/v1/policy/reload", ""); code != 200 || out["policy_rev"] == "" {
		t.Fatalf("reload: %d %v", code, out)
	}
	// The metrics listener serves both parts: the run above moved the gateway's
	// decisions and the DNS filter's queries.
	mrec := httptest.NewRecorder()
	d.MetricsHandler().ServeHTTP(mrec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{"airlock_gateway_decisions_total", "airlock_dns_"} {
		if !strings.Contains(mrec.Body.String(), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/summary", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"Host":"evil.example"`) {
		t.Fatalf("summary: %d %s", rec.Code, rec.Body.String())
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
