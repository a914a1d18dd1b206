package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// unprivAllowEnv carries, to the test binary run as another user, the allow
// entries its sandbox asks for (a JSON array).
const unprivAllowEnv = "ALK_TEST_UNPRIV_ALLOW"

// allowReport is what the other user's run of
// TestRootAllowInvisibleWildcardRefused saw.
type allowReport struct {
	Code    string `json:"code"`  // of the create's error
	Field   string `json:"field"` // of the create's error
	Message string `json:"message"`
	Created string `json:"created,omitempty"`
	Output  string `json:"output,omitempty"`
	Err     string `json:"error,omitempty"`
}

// unprivAllowClient is the other user's side: create a sandbox with the
// allow entries asked for and, if that is allowed, try evil.example on
// ports 4444 and 22 from inside it.
func unprivAllowClient() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var rep allowReport
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(rep) }()
	var allow []string
	if err := json.Unmarshal([]byte(os.Getenv(unprivAllowEnv)), &allow); err != nil {
		rep.Err = "allow: " + err.Error()
		return 0
	}
	c := client.New(os.Getenv(unprivSocketEnv))
	defer c.Close()
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Allow: allow})
	var ae *api.Error
	if errors.As(err, &ae) {
		rep.Code, rep.Field, rep.Message = ae.Code, ae.Field, ae.Message
		return 0
	}
	if err != nil {
		rep.Err = "create: " + err.Error()
		return 0
	}
	rep.Created = sb.ID
	defer func() { _, _ = c.DeleteSandbox(context.Background(), sb.ID) }()
	var out strings.Builder
	script := "for p in 4444 22; do curl -sS --max-time 10 -o /dev/null -w \"$p %{http_code}\\n\" http://evil.example:$p/; done; exit 0"
	if _, err := c.Exec(ctx, sb.ID, api.ExecRequest{Argv: []string{"sh", "-c", script}}, client.ExecIO{Stdout: &out, Stderr: &out}); err != nil {
		rep.Err = "exec: " + err.Error()
	}
	rep.Output = out.String()
	return 0
}

// TestRootAllowInvisibleWildcardRefused pins the review's end-to-end hole: a
// caller other than root asked for "**.example.<soft hyphen>:*", which the
// bound (run on the entry as written) let through and the policy enforced
// as "**.example:*", so its sandbox reached evil.example, a host no policy
// allows, on ports 4444 and 22. Through the real daemon's API, as a real
// other user: the create is refused naming allow[0], and evil.example sees
// no connection on either port.
func TestRootAllowInvisibleWildcardRefused(t *testing.T) {
	a := newAPIRoot(t)
	evil := a.n.evil
	for _, p := range []int{4444, 22} {
		if err := a.n.AddTCPPort(evil, p); err != nil {
			t.Fatal(err)
		}
	}
	uid := systemUser(t, "alk-a"+strconv.Itoa(os.Getpid()), a.gid)
	for _, entry := range []string{"**.example.\u00ad:*", "**.example.\u200b:*"} {
		allow, _ := json.Marshal([]string{entry})
		var rep allowReport
		a.asUser(t, uid, &rep, unprivAllowEnv+"="+string(allow))
		if rep.Err != "" {
			t.Fatalf("%+q: the user's run: %+v", entry, rep)
		}
		if rep.Created != "" || rep.Code != api.CodeForbidden || rep.Field != "allow[0]" {
			t.Errorf("%+q as uid %d: got %+v, want forbidden naming allow[0] and no sandbox", entry, uid, rep)
		}
	}
	for _, p := range []int{4444, 22} {
		if n := evil.PortConns(p); n != 0 {
			t.Errorf("evil.example saw %d connections on port %d, want 0", n, p)
		}
	}
	if n := evil.Conns(); n != 0 {
		t.Errorf("evil.example saw %d connections in all, want 0", n)
	}
}
