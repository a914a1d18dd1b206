package daemon

import (
	"context"

	"github.com/airlock-dev/airlock/sandboxd"
)

// sandboxdExecutor is the executor seam over the real executor: sandboxd's
// long-lived sandboxes.
type sandboxdExecutor struct{ e *sandboxd.Executor }

var (
	_ executor = sandboxdExecutor{}
	_ box      = sandboxdBox{}
	_ process  = (*sandboxd.Process)(nil)
)

func (x sandboxdExecutor) Prepare(ctx context.Context, spec prepareSpec) (box, error) {
	s, err := x.e.Prepare(ctx, spec)
	if err != nil {
		return nil, err
	}
	return sandboxdBox{s}, nil
}

func (x sandboxdExecutor) Create(ctx context.Context, ps prepareSpec, ss startSpec) (box, error) {
	s, err := x.e.Create(ctx, ps, ss)
	if err != nil {
		return nil, err
	}
	return sandboxdBox{s}, nil
}

// sandboxdBox is one sandboxd sandbox; only Exec needs adapting (its
// process is the seam's).
type sandboxdBox struct{ *sandboxd.Sandbox }

func (b sandboxdBox) Exec(ctx context.Context, x execSpec) (process, error) {
	p, err := b.Sandbox.Exec(ctx, x)
	if err != nil {
		return nil, err // never a typed nil in the interface
	}
	return p, nil
}
