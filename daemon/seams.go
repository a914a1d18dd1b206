package daemon

import (
	"context"
	"io"
	"syscall"

	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
)

// The seams the daemon's sandboxes are built on, owned here so the API and
// the sandbox registry are tested without root against fakes (fakes_test.go).
// The real ones are the executor's long-lived sandboxes (package sandboxd)
// and the island namespaces (package netns), adapted in executor.go and
// network.go.

// executor makes sandboxes: Prepare for the warm pool, Create (Prepare and
// Start at once, overlapped) when the pool is empty.
type executor interface {
	Prepare(ctx context.Context, spec prepareSpec) (box, error)
	Create(ctx context.Context, ps prepareSpec, ss startSpec) (box, error)
}

// box is one sandbox of the executor (a *sandboxd.Sandbox).
type box interface {
	Start(ctx context.Context, spec startSpec) error
	Exec(ctx context.Context, x execSpec) (process, error)
	Usage() (usage, error)
	PutFiles(ctx context.Context, dir string, r io.Reader) (filesResult, error)
	GetFiles(ctx context.Context, path string, w io.Writer) error
	// Kill kills every process and returns the final usage once none can
	// run; Destroy also waits for the rest of the teardown.
	Kill(ctx context.Context) (usage, error)
	Destroy(ctx context.Context) (usage, error)
	Done() <-chan struct{}
	WorkDir() string
}

// process is one exec in a box (a *sandboxd.Process).
type process interface {
	ID() string
	PID() int
	Signal(sig syscall.Signal) error
	Wait() (*execResult, error)
}

// network gives sandboxes their island namespaces (a *netns.Manager).
type network interface {
	// TakePooled returns a ready namespace (rules in place, nothing served)
	// for a sandbox the pool prepares before its id is known.
	TakePooled(ctx context.Context) (pooledNet, error)
	// CreateFrom gives a pooled namespace its sandbox and serves it.
	CreateFrom(ctx context.Context, sb policy.Sandbox, p pooledNet) (*netns.Sandbox, error)
	// Create makes and serves a namespace for sb at once.
	Create(ctx context.Context, sb policy.Sandbox) (*netns.Sandbox, error)
	Teardown(ctx context.Context, id string) error
	// Update gives a served sandbox new labels, mode and allow list and
	// re-decides its open connections; it returns how many it closed.
	Update(sb policy.Sandbox) (closed int, err error)
}

// pooledNet is a namespace TakePooled handed out.
type pooledNet interface {
	Path() string
	// Check fails when the namespace was removed or replaced from outside
	// since it was taken (the pool drops such an entry).
	Check() error
	Discard() error
}

// The executor's types, spelled short where the seams use them.
type (
	prepareSpec = sandboxd.PrepareSpec
	startSpec   = sandboxd.StartSpec
	execSpec    = sandboxd.ExecSpec
	execResult  = sandboxd.ExecResult
	execError   = sandboxd.ExecError
	usage       = sandboxd.Usage
	filesResult = sandboxd.FilesResult
)
