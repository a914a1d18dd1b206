package netns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"sync/atomic"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/oplog"
)

// Listeners are the sockets a sandbox's namespace gets, all on 127.0.0.1 inside it.
type Listeners struct {
	Explicit    net.Listener   // explicit HTTP proxy (HTTP_PROXY), default port 3128
	Transparent net.Listener   // transparent capture target, default port 15001
	DNSTCP      net.Listener   // DNS over TCP, default port 53
	DNSUDP      net.PacketConn // DNS over UDP, default port 53
}

// Close closes every non-nil socket.
func (l Listeners) Close() {
	for _, c := range []io.Closer{l.Explicit, l.Transparent, l.DNSTCP, l.DNSUDP} {
		if c != nil {
			c.Close()
		}
	}
}

// Server is what serves a sandbox's listeners: the gateway and the DNS filter,
// glued together by the caller (package daemon). Serve must not block: it starts
// serving and returns; from then on the server owns the listeners and closes them
// in Stop. If Serve returns an error the Manager closes the listeners itself.
type Server interface {
	Serve(sb identity.Sandbox, own []netip.Addr, ls Listeners) error
	Stop(id string)
}

// Sandbox is one managed namespace.
type Sandbox struct {
	// ID is the sandbox id; the namespace is NamePrefix+ID under Config.RunDir.
	ID     string
	Labels map[string]string
	// Path is the namespace's bind mount. The executor joins it with setns.
	Path string
	// Attached is true for a namespace made by someone else (Attach).
	Attached bool
	// Source is the path given to Attach.
	Source string
	// Own are the gateway's addresses as the sandbox sees them.
	Own []netip.Addr
	// Pod is the Kubernetes pod of an attached namespace (airlock-cni), or nil.
	Pod *identity.Pod
	// Inbound is what an attached namespace's rules do with arriving
	// traffic (normalized: mode set, ports sorted).
	Inbound Inbound

	// accepted counts the inbound connections InboundAccept let in (as
	// logged: NFLOG may lose messages under load).
	accepted atomic.Uint64

	info identity.Sandbox // what the Server is told: id, labels, mode, allow
	// adopted: a rootless island (Adopt), which lives and dies with the
	// process that made it; no path, no state file.
	adopted bool
	ls      Listeners
	drops   *dropReader
}

// Manager creates, attaches and tears down sandbox namespaces.
type Manager struct {
	cfg     Config
	backend string
	srv     Server
	audit   audit.Logger
	log     *slog.Logger
	ipt     iptablesRunner
	// hook, when set (tests), is called before each step of Create and Attach; an
	// error makes the step fail.
	hook func(step string) error

	// island holds the island's tables as the second island got them from
	// iptables-restore and Verify (islandRules; legacy backend only).
	island   atomic.Pointer[islandTables]
	restored atomic.Int32 // islands whose rules iptables-restore installed (island.go)
	// noTemplate is set once loading the template failed (dropTemplate).
	noTemplate atomic.Bool

	prepOnce sync.Once
	prepErr  error

	mu        sync.Mutex
	sandboxes map[string]*Sandbox // nil value: reserved by a Create in progress
	closed    bool

	pool     chan string // paths of ready pool namespaces
	poolKick chan struct{}
	poolStop chan struct{}
	poolDone chan struct{}
	// accepted counts inbound connections InboundAccept let in, over all
	// sandboxes since New.
	accepted  atomic.Uint64
	poolNames sync.Map // path -> struct{} for pool namespaces this Manager made, ready or taken
	// unmounts counts the pool names movePooled still unmounts in the
	// background; Close waits for them.
	unmounts sync.WaitGroup
	taken    map[*Pooled]struct{} // handed out by TakePooled, not yet used; guarded by mu
}

// New returns a Manager. It does no kernel work until the first Create, Attach or
// Recover; with Config.PoolSize > 0 it starts filling the pool in the background.
func New(cfg Config, srv Server, al audit.Logger, logger *slog.Logger) (*Manager, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if srv == nil {
		return nil, errors.New("netns: server is nil")
	}
	backend, err := resolveBackend(cfg.IPTables)
	if err != nil {
		return nil, err
	}
	m := &Manager{
		cfg:       cfg,
		backend:   backend,
		srv:       srv,
		audit:     al,
		log:       oplog.For(logger, "netns"),
		ipt:       execRunner{timeout: cfg.ExecTimeout},
		sandboxes: map[string]*Sandbox{},
		taken:     map[*Pooled]struct{}{},
		poolStop:  make(chan struct{}),
		poolDone:  make(chan struct{}),
	}
	managers.Store(m, struct{}{})
	if cfg.PoolSize > 0 {
		m.pool = make(chan string, cfg.PoolSize)
		m.poolKick = make(chan struct{}, 1)
		m.poolKick <- struct{}{}
		go m.fillPool()
	} else {
		close(m.poolDone)
	}
	return m, nil
}

// Backend returns the iptables backend in use (nft or legacy).
func (m *Manager) Backend() string { return m.backend }

func (m *Manager) prepare() error {
	m.prepOnce.Do(func() {
		if err := prepareRunDir(m.cfg.RunDir); err != nil {
			m.prepErr = err
			return
		}
		if err := writableNetSysctls(); err != nil {
			m.prepErr = err
			return
		}
		if err := os.MkdirAll(m.cfg.StateDir, 0o700); err != nil {
			m.prepErr = fmt.Errorf("netns: state_dir %s: %w", m.cfg.StateDir, err)
		}
	})
	return m.prepErr
}

func (m *Manager) step(name string) error {
	if m.hook != nil {
		if err := m.hook(name); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

func (m *Manager) nsPath(id string) string { return filepath.Join(m.cfg.RunDir, NamePrefix+id) }

// ErrIDInUse is reserve's refusal of an id that a sandbox of the manager's,
// or a namespace file a crash left, already has. reserve is the one check
// of a new id's uniqueness; the daemon's API answers it as a conflict.
var ErrIDInUse = errors.New("already exists")

// reserve claims id so that two Creates cannot race for it.
func (m *Manager) reserve(id string) error {
	if err := ValidateID(id); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("netns: manager is closed")
	}
	if _, ok := m.sandboxes[id]; ok {
		return fmt.Errorf("netns: sandbox %q %w", id, ErrIDInUse)
	}
	if _, err := os.Lstat(m.nsPath(id)); err == nil {
		return fmt.Errorf("netns: sandbox %q: %s %w (left by a crash? run Recover)", id, m.nsPath(id), ErrIDInUse)
	}
	m.sandboxes[id] = nil
	return nil
}

func (m *Manager) release(id string) {
	m.mu.Lock()
	delete(m.sandboxes, id)
	m.mu.Unlock()
}

// Create makes the island namespace for sb, opens its listeners, installs its
// rules and hands the listeners to the Server. On error nothing is left behind.
func (m *Manager) Create(ctx context.Context, sb identity.Sandbox) (*Sandbox, error) {
	if err := m.reserve(sb.ID); err != nil {
		return nil, err
	}
	if err := m.prepare(); err != nil {
		m.release(sb.ID)
		return nil, err
	}
	path := m.nsPath(sb.ID)
	s, err := m.create(ctx, sb, path, nil)
	if err != nil {
		m.release(sb.ID)
		m.log.Error("create sandbox namespace", oplog.SandboxKey, sb.ID, oplog.ErrorKey, err)
		return nil, fmt.Errorf("netns: create %s: %w", sb.ID, err)
	}
	m.mu.Lock()
	m.sandboxes[sb.ID] = s
	m.mu.Unlock()
	m.log.Info("sandbox namespace created", oplog.SandboxKey, sb.ID, oplog.PathKey, path)
	return s, nil
}

// create makes sb's namespace at path (from the pooled namespace p when
// given, else from the pool when one is ready, else a new one) and serves it.
func (m *Manager) create(ctx context.Context, sb identity.Sandbox, path string, p *Pooled) (s *Sandbox, err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	// The state file comes first, so that whatever a crash leaves from here on
	// is found by Recover.
	if err := m.step("state"); err != nil {
		return nil, err
	}
	if err := m.writeState(m.newState(sb, originCreated)); err != nil {
		return nil, err
	}
	undo = append(undo, func() { m.removeState(sb.ID) })
	if p != nil {
		if err := m.step("namespace"); err != nil {
			return nil, err
		}
		if err := m.movePooled(p.path, path); err != nil {
			return nil, err
		}
	} else if !m.claimPooled(path) {
		if err := m.step("namespace"); err != nil {
			return nil, err
		}
		if err := m.newIsland(ctx, path); err != nil {
			return nil, err
		}
	}
	undo = append(undo, func() { unmountRemove(path) })
	s = &Sandbox{
		ID:     sb.ID,
		Labels: maps.Clone(sb.Labels),
		Path:   path,
		Own:    []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), m.cfg.islandAddr()},
		info:   sb,
	}
	if err := m.serve(s); err != nil {
		return nil, err
	}
	return s, nil
}

// ruleSpec is the island's ruleset, or with attach an attached namespace's
// with inbound for its arriving traffic.
func (m *Manager) ruleSpec(attach bool, inbound Inbound) ruleSpec {
	s := ruleSpec{DNSPort: m.cfg.DNSPort, TransparentPort: m.cfg.TransparentPort, NFLogGroup: m.cfg.NFLogGroup,
		NewFlowRate: m.cfg.NewFlowRate, NewFlowBurst: m.cfg.NewFlowBurst, Attach: attach}
	if attach {
		s.Inbound = inbound.normalized()
	}
	return s
}

// serve opens s's listeners and NFLOG socket inside its namespace and starts the
// server and the drop reader. On error everything it opened is closed.
func (m *Manager) serve(s *Sandbox) error {
	if err := m.step("listen"); err != nil {
		return err
	}
	h, err := vnetns.GetFromPath(s.Path)
	if err != nil {
		return fmt.Errorf("open %s: %w", s.Path, err)
	}
	name := s.Source // the caller's path for an attached namespace
	if name == "" {
		name = s.Path
	}
	ls, nl, err := openListeners(h, name, m.cfg)
	h.Close()
	if err != nil {
		return err
	}
	return m.serveListeners(s, ls, nl)
}

// serveListeners hands s's listeners to the server and starts the drop
// reader. On error everything is closed.
func (m *Manager) serveListeners(s *Sandbox, ls Listeners, nl *nflogConn) error {
	sb := s.info
	sb.ID, sb.Labels = s.ID, maps.Clone(s.Labels)
	if err := m.step("serve"); err != nil {
		ls.Close()
		nl.Close()
		return err
	}
	if err := m.srv.Serve(sb, s.Own, ls); err != nil {
		m.srv.Stop(s.ID)
		ls.Close()
		nl.Close()
		return fmt.Errorf("serve: %w", err)
	}
	s.ls = ls
	s.drops = newDropReader(nl, sb, m.audit, m.log, m.cfg.DropBurst, m.cfg.DropInterval, func() {
		s.accepted.Add(1)
		m.accepted.Add(1)
	})
	return nil
}

// InboundAccepted counts the inbound connections the InboundAccept rules of
// all attached namespaces let in since New (as logged: under a flood NFLOG
// may lose some).
func (m *Manager) InboundAccepted() uint64 { return m.accepted.Load() }

// InboundAccepted counts the inbound connections s's rules let in.
func (s *Sandbox) InboundAccepted() uint64 { return s.accepted.Load() }

// stopServing stops the server for s and closes everything the process holds.
func (m *Manager) stopServing(s *Sandbox) {
	m.srv.Stop(s.ID)
	s.ls.Close()
	if s.drops != nil {
		s.drops.Close()
	}
}

// Get returns the managed sandbox with id, if any.
func (m *Manager) Get(id string) (*Sandbox, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sandboxes[id]
	return s, s != nil
}

// IDs lists the managed sandboxes.
func (m *Manager) IDs() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []string
	for id, s := range m.sandboxes {
		if s != nil {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	return ids
}

// Teardown stops serving sandbox id and removes its rules and namespace; for an
// attached namespace it restores the rules and sysctls saved by Attach and leaves
// the namespace to its owner.
func (m *Manager) Teardown(ctx context.Context, id string) error {
	m.mu.Lock()
	s := m.sandboxes[id]
	if s == nil {
		m.mu.Unlock()
		return fmt.Errorf("netns: teardown %q: no such sandbox", id)
	}
	delete(m.sandboxes, id)
	m.mu.Unlock()
	m.stopServing(s)
	if s.adopted {
		m.log.Info("rootless island no longer served", oplog.SandboxKey, id)
		return nil
	}
	var err error
	if s.Attached {
		err = m.restoreAttached(ctx, id, s.Path)
	} else {
		err = unmountRemove(s.Path)
	}
	if err == nil {
		m.removeState(id)
		m.log.Info("sandbox namespace removed", oplog.SandboxKey, id, "attached", s.Attached)
		return nil
	}
	m.log.Error("teardown", oplog.SandboxKey, id, oplog.ErrorKey, err)
	return fmt.Errorf("netns: teardown %s: %w", id, err)
}

// Detach is Teardown for an attached namespace: it restores the namespace as it
// was before Attach and leaves it to its owner.
func (m *Manager) Detach(ctx context.Context, id string) error {
	if s, ok := m.Get(id); ok && !s.Attached {
		return fmt.Errorf("netns: detach %q: not attached (use Teardown)", id)
	}
	return m.Teardown(ctx, id)
}

// Close stops the pool (removing its namespaces, and those TakePooled handed
// out that were neither used nor discarded) and stops serving every sandbox,
// but leaves sandbox namespaces and rules in place, as a crash would: their
// sandboxes have no way out until a Manager's Recover re-attaches (attached
// ones) or removes them.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	defer managers.Delete(m)
	var live []*Sandbox
	for _, s := range m.sandboxes {
		if s != nil {
			live = append(live, s)
		}
	}
	m.sandboxes = map[string]*Sandbox{}
	taken := make([]*Pooled, 0, len(m.taken))
	for p := range m.taken {
		taken = append(taken, p)
	}
	m.mu.Unlock()
	var errs []error
	for _, p := range taken {
		errs = append(errs, p.Discard())
	}
	for _, s := range live {
		m.stopServing(s)
	}
	close(m.poolStop)
	<-m.poolDone
	if m.pool != nil {
		for {
			select {
			case p := <-m.pool:
				m.poolNames.Delete(p)
				errs = append(errs, unmountRemove(p))
				continue
			default:
			}
			break
		}
	}
	m.unmounts.Wait()
	return errors.Join(errs...)
}
