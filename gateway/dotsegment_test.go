package gateway

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
)

// pathRule allows the explicit proxy's plain requests to pypi.org only
// under /v1/, as a policy's startswith(input.http.path, "/v1/") would.
type pathRule struct{}

func (pathRule) Decide(_ context.Context, in *policy.Input) policy.Decision {
	if in.Destination.Host == "pypi.org" && (in.HTTP == nil || strings.HasPrefix(in.HTTP.Path, "/v1/")) {
		return policytest.Allowed()
	}
	return policytest.Denied(policytest.ReasonNotAllowed)
}

// TestDotSegmentsRefused pins a hole in path rules: the gateway handed policy
// the path as sent, so /v1/../admin passed a rule on /v1/ and a server that
// resolves dot segments served /admin. A path with a . or .. segment, plain
// or percent-encoded, is refused before policy; the upstream sees nothing.
func TestDotSegmentsRefused(t *testing.T) {
	up := newHeaderUpstream(t)
	h := newHarness(t, pathRule{}, names("pypi.org"), nil)
	h.allowUpstreams(up.upstream)
	target := "pypi.org:" + strconv.Itoa(up.port)
	tests := []struct {
		path string
		want int
	}{
		{"/v1/ok", 200},
		{"/v1/a.b/..c/.d", 200}, // dots inside a segment are names
		{"/v1/../admin", 403},
		{"/v1/%2e%2e/admin", 403},
		{"/v1/%2E%2e/admin", 403},
		{"/v1/./../admin", 403},
		{"/v1/.", 403},
		{"/v1/..", 403},
		{"/admin", 403},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			before := up.reqs.Load()
			resp, body := rawRequest(t, h.explicit, "GET http://"+target+tt.path+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
			if resp.StatusCode != tt.want {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tt.want)
			}
			if got := up.reqs.Load() - before; (tt.want == 200) != (got == 1) {
				t.Errorf("upstream saw %d requests, want %d", got, map[bool]int64{true: 1, false: 0}[tt.want == 200])
			}
		})
	}
}

func TestHasDotSegment(t *testing.T) {
	for path, want := range map[string]bool{
		"/": false, "": false, "/a/b": false, "/a.b": false, "/..a": false, "/a../": false,
		"/.": true, "/..": true, "/a/./b": true, "/a/../b": true, "..": true, "/a/..": true,
	} {
		if got := hasDotSegment(path); got != want {
			t.Errorf("hasDotSegment(%q): got %v, want %v", path, got, want)
		}
	}
}
