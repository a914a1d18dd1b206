package daemon

import (
	"errors"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
)

func TestAuditNode(t *testing.T) {
	host := func(name string, err error) func() (string, error) {
		return func() (string, error) { return name, err }
	}
	for _, tc := range []struct {
		name, configured, env string
		hostname              func() (string, error)
		want, wantErr         string
	}{
		{"config wins", "node-cfg", "node-env", host("h", nil), "node-cfg", ""},
		{"downward API", "", "ip-10-0-1-17.ec2.internal", host("h", nil), "ip-10-0-1-17.ec2.internal", ""},
		{"host name", "", "", host("build-7", nil), "build-7", ""},
		{"bad env", "", "node a", host("h", nil), "", `audit.node: $NODE_NAME "node a" is not a node name`},
		{"bad host name", "", "", host("h\x00", nil), "", "the host name"},
		{"no host name", "", "", host("", errors.New("uname failed")), "", "uname failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := auditNode(tc.configured, tc.env, tc.hostname)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %q, %v; want error containing %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

// TestNodeRulesAgree: config and the audit writer must never disagree on a
// node name, or a config that loads would make a writer that refuses to
// start (both apply hostname.ValidNode).
func TestNodeRulesAgree(t *testing.T) {
	for _, name := range []string{"", "node-1", "ip-10-0-1-17.eu-west-1.compute.internal", "Node_A", "node a",
		"node/1", "nöde", "node\n", strings.Repeat("a", 253), strings.Repeat("a", 254)} {
		if c, a := config.ValidNodeName(name), audit.ValidNode(name); c != a {
			t.Errorf("%q: config says %v, audit says %v", name, c, a)
		}
	}
}
