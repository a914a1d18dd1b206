package gateway

import (
	"context"
	"net/http"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// Injector is the seam package secrets plugs into. The gateway calls it only
// after policy allowed a request, and Inject only on an intercepted request
// whose upstream connection is verified TLS.
type Injector interface {
	// NeedsMITM reports whether a binding for this sandbox and destination needs
	// the connection intercepted even though policy did not ask for it.
	NeedsMITM(sb policy.Sandbox, host string, port int) bool
	// Inject edits req (strip what the sandbox sent, set the real credential) and
	// returns what to audit. An error refuses the request.
	Inject(ctx context.Context, sb policy.Sandbox, req *http.Request) ([]audit.Secret, error)
}

// Revisioner is implemented by a Decider that can name its current policy
// revision cheaply. The gateway then caches decisions per revision: an
// identical input under the same revision gets the same decision.
type Revisioner interface {
	PolicyRevision() string
}
