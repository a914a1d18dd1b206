package apitest

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/api"
)

// TestCheckerCatchesDrift: a handler that answers what the daemon does not
// (an undocumented route, status or field) is recorded; one that answers as
// documented is not.
func TestCheckerCatchesDrift(t *testing.T) {
	for _, tc := range []struct {
		name, method, path string
		status             int
		body               any
		want               string // "" for no mismatch
	}{
		{"documented", "GET", "/v1/summary", 200, []api.SummaryRow{{Decision: "deny", Kind: "connect", Host: "evil.example", Port: 443, Count: 2}}, ""},
		{"field spelled as Go names it", "GET", "/v1/summary", 200, []map[string]any{{"Decision": "deny", "Kind": "connect", "Host": "x", "Count": 1}}, "does not match"},
		{"status not listed", "GET", "/v1/summary", http.StatusTeapot, api.Error{Code: api.CodeInternal, Message: "x"}, "status api/openapi.json does not list"},
		{"route not described", "GET", "/v1/secret-admin", 200, map[string]any{}, "not in api/openapi.json"},
		{"unknown route answered 404", "GET", "/v1/nothing", 404, api.Error{Code: api.CodeNotFound, Message: "no route"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load()
			if err != nil {
				t.Fatal(err)
			}
			h := c.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(tc.status)
				_ = json.NewEncoder(w).Encode(tc.body)
			}))
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
			errs := c.Errors()
			switch {
			case tc.want == "" && len(errs) > 0:
				t.Errorf("got mismatches %q, want none", errs)
			case tc.want != "" && (len(errs) != 1 || !strings.Contains(errs[0], tc.want)):
				t.Errorf("got mismatches %q, want one saying %q", errs, tc.want)
			}
		})
	}
}
