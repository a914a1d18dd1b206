package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/oplog"
)

// fillPool keeps Config.PoolSize ready namespaces (rules installed, no listeners)
// named airlock-pool-<pid>-<n>. It runs until Close.
func (m *Manager) fillPool() {
	defer close(m.poolDone)
	for {
		select {
		case <-m.poolStop:
			return
		case <-m.poolKick:
		}
		for len(m.pool) < cap(m.pool) {
			select {
			case <-m.poolStop:
				return
			default:
			}
			if err := m.prepare(); err != nil {
				m.log.Error("pool", oplog.ErrorKey, err)
				break
			}
			path := m.poolPath()
			// Recorded before it exists: a Recover running meanwhile (another
			// Manager of this process) must never see it as stale.
			m.poolNames.Store(path, struct{}{})
			if err := m.makePooled(path); err != nil {
				m.poolNames.Delete(path)
				m.log.Error("pool: make namespace", oplog.ErrorKey, err)
				break
			}
			m.pool <- path
		}
	}
}

// poolPath names the next pool namespace: airlock-pool-<pid>-<n>, so a
// later process's Recover knows it for stale once this one is gone. n counts
// for the whole process: two Managers in one process (tests, a recovery beside
// a daemon) never make the same name.
func (m *Manager) poolPath() string {
	return filepath.Join(m.cfg.RunDir, fmt.Sprintf("%s%d-%d", poolPrefix, os.Getpid(), poolSeq.Add(1)))
}

// poolSeq numbers this process's pool namespaces.
var poolSeq atomic.Uint64

func (m *Manager) makePooled(path string) error {
	return m.newIsland(context.Background(), path)
}

// claimPooled moves a ready pool namespace to path, if one is ready.
func (m *Manager) claimPooled(path string) bool {
	for {
		p, ok := m.readyPooled()
		if !ok {
			return false
		}
		err := m.movePooled(p, path)
		if err == nil {
			return true
		}
		m.log.Warn("pool: claim", oplog.PathKey, p, oplog.ErrorKey, err)
	}
}

// readyPooled takes a ready pool namespace, if any, and asks for another.
func (m *Manager) readyPooled() (string, bool) {
	if m.pool == nil {
		return "", false
	}
	select {
	case p := <-m.pool:
		m.kickPool()
		return p, true
	default:
		return "", false
	}
}

// movePooled gives the pool namespace at src its sandbox's name dst: bind
// mounted at dst, its pool name gone (in the background). A process that
// joined it by its pool name stays in it. On error src is removed too (it is
// not reused).
func (m *Manager) movePooled(src, dst string) error {
	if err := bindMount(src, dst); err != nil {
		if rerr := unmountRemove(src); rerr != nil {
			m.log.Warn("pool: remove pool name", oplog.PathKey, src, oplog.ErrorKey, rerr)
		}
		m.poolNames.Delete(src)
		return err
	}
	// The old name's unmount waits for an RCU grace period (2-3 ms): it goes
	// in the background. Until it is done the name is still this manager's
	// (poolNames), so Recover leaves it; after a crash it is a stale pool
	// name, which Recover removes.
	m.unmounts.Add(1)
	go func() {
		defer m.unmounts.Done()
		if rerr := unmountRemove(src); rerr != nil {
			m.log.Warn("pool: remove pool name", oplog.PathKey, src, oplog.ErrorKey, rerr)
		}
		m.poolNames.Delete(src)
	}()
	return nil
}

// Pooled is a ready namespace taken from the pool (TakePooled): the island is
// set up and its rules installed, but it has no listeners and nothing serves
// it, so a process inside has no way out at all. The daemon starts a prepared
// sandbox in it (Path) and later either gives it to a sandbox (CreateFrom) or
// throws it away (Discard). Its methods are safe for concurrent use.
type Pooled struct {
	m    *Manager
	path string
	id   nsID // the namespace at path when it was taken (Check)

	mu   sync.Mutex
	used bool // handed to CreateFrom, or discarded
}

// Path is the namespace's bind mount (RunDir/airlock-pool-<pid>-<n>), for
// setns: a process that joins it stays in the namespace when CreateFrom
// renames it.
func (p *Pooled) Path() string { return p.path }

// TakePooled returns a ready namespace from the pool (Config.PoolSize), which
// then makes another in the background; when none is ready (or the pool is
// off) it makes one now. The namespace belongs to the caller until
// CreateFrom or Discard; Close discards one still held.
func (m *Manager) TakePooled(ctx context.Context) (*Pooled, error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errors.New("netns: take pooled: manager is closed")
	}
	if err := m.prepare(); err != nil {
		return nil, err
	}
	path, id, err := m.readyOrNew(ctx)
	if err != nil {
		return nil, err
	}
	p := &Pooled{m: m, path: path, id: id}
	m.mu.Lock()
	closed = m.closed
	if !closed {
		m.taken[p] = struct{}{}
	}
	m.mu.Unlock()
	if closed {
		p.Discard()
		return nil, errors.New("netns: take pooled: manager is closed")
	}
	return p, nil
}

// readyOrNew takes a ready pool namespace, dropping any that was removed
// from outside while it waited (`ip netns delete` on its name), or makes one
// now when none is ready.
func (m *Manager) readyOrNew(ctx context.Context) (string, nsID, error) {
	for {
		path, ok := m.readyPooled()
		if !ok {
			break
		}
		id, err := nsInode(path)
		if err == nil {
			return path, id, nil
		}
		m.log.Warn("pool: dropped a namespace removed from outside", oplog.PathKey, path, oplog.ErrorKey, err)
		m.poolNames.Delete(path)
		unmountRemove(path)
	}
	if err := ctx.Err(); err != nil {
		return "", nsID{}, fmt.Errorf("netns: take pooled: %w", err)
	}
	path := m.poolPath()
	m.poolNames.Store(path, struct{}{})
	if err := m.makePooled(path); err != nil {
		m.poolNames.Delete(path)
		return "", nsID{}, fmt.Errorf("netns: take pooled: %w", err)
	}
	id, err := nsInode(path)
	if err != nil {
		m.poolNames.Delete(path)
		unmountRemove(path)
		return "", nsID{}, fmt.Errorf("netns: take pooled: %w", err)
	}
	return path, id, nil
}

// Check reports whether p's namespace is still where it was taken: an
// `ip netns delete` of its name, or its bind mount unmounted or replaced
// from outside, leaves a Pooled that CreateFrom can only fail on.
func (p *Pooled) Check() error {
	id, err := nsInode(p.path)
	if err != nil {
		return fmt.Errorf("netns: pooled namespace %s is gone: %w", p.path, err)
	}
	if id != p.id {
		return fmt.Errorf("netns: pooled namespace %s was replaced", p.path)
	}
	return nil
}

// use marks p used once; it reports false when it already was.
func (p *Pooled) use() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.used {
		return false
	}
	p.used = true
	p.m.mu.Lock()
	delete(p.m.taken, p)
	p.m.mu.Unlock()
	return true
}

// Discard tears down a pooled namespace that was not given to a sandbox: its
// bind mount and pool name go (a process still inside keeps the namespace,
// with its rules and no listeners: no way out). After CreateFrom, or a second
// time, it does nothing; so `defer p.Discard()` is always safe.
func (p *Pooled) Discard() error {
	if !p.use() {
		return nil
	}
	p.m.poolNames.Delete(p.path)
	if err := unmountRemove(p.path); err != nil {
		return fmt.Errorf("netns: discard pooled: %w", err)
	}
	return nil
}

// CreateFrom gives the pooled namespace p to sb, exactly as Create would have
// made one: state file, the namespace renamed to RunDir/airlock-<id> (a
// process already inside stays inside), listeners opened in it, and the
// Server told to serve sb. It uses p up either way: on error p's namespace has
// been removed (nothing is left; a process inside has no way out). Call it
// before any of the sandbox's own code runs in the namespace: a listener port
// something there already bound makes CreateFrom fail.
func (m *Manager) CreateFrom(ctx context.Context, sb identity.Sandbox, p *Pooled) (*Sandbox, error) {
	if p == nil || p.m != m {
		return nil, errors.New("netns: create from pooled: not a namespace this manager's TakePooled returned")
	}
	if !p.use() {
		return nil, fmt.Errorf("netns: create from pooled %s: already used or discarded", p.path)
	}
	discard := func() {
		m.poolNames.Delete(p.path)
		unmountRemove(p.path)
	}
	if err := m.reserve(sb.ID); err != nil {
		discard()
		return nil, err
	}
	path := m.nsPath(sb.ID)
	s, err := m.create(ctx, sb, path, p)
	if err != nil {
		discard() // when the move did not happen; a no-op otherwise
		m.release(sb.ID)
		m.log.Error("create sandbox namespace from the pool", oplog.SandboxKey, sb.ID, oplog.ErrorKey, err)
		return nil, fmt.Errorf("netns: create %s from pooled: %w", sb.ID, err)
	}
	m.mu.Lock()
	m.sandboxes[sb.ID] = s
	m.mu.Unlock()
	m.log.Info("sandbox namespace created from the pool", oplog.SandboxKey, sb.ID, oplog.PathKey, path)
	return s, nil
}

func (m *Manager) kickPool() {
	select {
	case m.poolKick <- struct{}{}:
	default:
	}
}
