package daemon

import (
	"context"
	"fmt"

	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
)

// netnsNetwork is the network seam over the island namespace manager.
type netnsNetwork struct {
	m   *netns.Manager
	srv server // what serves its sandboxes: Update's gateway and DNS filter
}

var (
	_ network   = netnsNetwork{}
	_ pooledNet = (*netns.Pooled)(nil)
)

func (n netnsNetwork) TakePooled(ctx context.Context) (pooledNet, error) {
	p, err := n.m.TakePooled(ctx)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// CreateFrom serves a namespace TakePooled returned; p is used up either
// way.
func (n netnsNetwork) CreateFrom(ctx context.Context, sb policy.Sandbox, p pooledNet) (*netns.Sandbox, error) {
	pp, ok := p.(*netns.Pooled)
	if !ok {
		_ = p.Discard()
		return nil, fmt.Errorf("daemon: pooled namespace %T is not the manager's", p)
	}
	return n.m.CreateFrom(ctx, sb, pp)
}

func (n netnsNetwork) Create(ctx context.Context, sb policy.Sandbox) (*netns.Sandbox, error) {
	return n.m.Create(ctx, sb)
}

func (n netnsNetwork) Teardown(ctx context.Context, id string) error { return n.m.Teardown(ctx, id) }

// Update swaps a served sandbox's rules in the DNS filter, then in the
// gateway, which re-decides its open connections.
func (n netnsNetwork) Update(sb policy.Sandbox) (int, error) {
	if err := n.srv.dns.UpdateSandbox(sb); err != nil {
		return 0, err
	}
	return n.srv.gw.UpdateSandbox(sb)
}
