package netns

import (
	"context"
	"fmt"
	"strconv"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/oplog"
)

// Making an island namespace: lo with the island address and route, the
// sysctls, the rules (iptables-restore, or the template's tables:
// xtables.go), the conntrack sysctls.

// newIsland makes the island namespace at path (lo, sysctls, rules); on
// error nothing is left. With the template of the island's tables
// (islandRules), every step runs on the thread that made the namespace.
func (m *Manager) newIsland(ctx context.Context, path string) error {
	if t := m.template(); t != nil {
		h, err := newNamespaceWith(path, func() error { return m.setupIslandHere(t) })
		if err == nil {
			h.Close()
		}
		return err
	}
	h, err := newNamespace(path)
	if err != nil {
		return err
	}
	err = m.setupIsland(ctx, h)
	h.Close()
	if err != nil {
		unmountRemove(path)
	}
	return err
}

// setupIsland configures a new namespace: lo, sysctls, rules.
func (m *Manager) setupIsland(ctx context.Context, h vnetns.NsHandle) error {
	if err := m.step("island"); err != nil {
		return err
	}
	if err := configureIsland(h, m.cfg.islandAddr(), true); err != nil {
		return err
	}
	if err := m.step("sysctl"); err != nil {
		return err
	}
	if err := writeSysctls(h, islandSysctls); err != nil {
		return err
	}
	if err := m.step("rules"); err != nil {
		return err
	}
	if err := m.islandRules(ctx, h); err != nil {
		return err
	}
	if err := writeSysctls(h, islandConntrackSysctls); err != nil {
		return err
	}
	return nil
}

// setupIslandHere is setupIsland in the calling thread's namespace, with the
// rules loaded from the template t.
func (m *Manager) setupIslandHere(t *islandTables) error {
	if err := m.step("island"); err != nil {
		return err
	}
	if err := configureIslandHere(m.cfg.islandAddr()); err != nil {
		return err
	}
	if err := m.step("sysctl"); err != nil {
		return err
	}
	if err := applySysctls(islandSysctls); err != nil {
		return err
	}
	if err := m.step("rules"); err != nil {
		return err
	}
	if err := loadTablesHere(t); err != nil {
		m.dropTemplate(t, err)
		return fmt.Errorf("load the island's tables: %w", err)
	}
	return applySysctls(islandConntrackSysctls)
}

// islandRules installs the island's rules in the new namespace h. With
// iptables-legacy and the real runner, the second island's rules are
// installed by iptables-restore, proved by Verify and kept as the template
// (readIslandTables); every later island gets the template's tables loaded
// and compared back (loadIslandTables, xtables.go). Otherwise
// iptables-restore runs for each.
func (m *Manager) islandRules(ctx context.Context, h vnetns.NsHandle) error {
	if t := m.template(); t != nil {
		err := loadIslandTables(h, t)
		if err != nil {
			m.dropTemplate(t, err)
		}
		return err
	}
	spec := m.ruleSpec(false, Inbound{})
	if err := m.ipt.Restore(ctx, h, m.backend, spec.render(), false); err != nil {
		return fmt.Errorf("install rules: %w", err)
	}
	// The template is taken from a manager's second island: one that makes
	// a single island (an in-process airlock run) never pays for Verify and
	// the read-back.
	if !m.templates() || m.restored.Add(1) < 2 {
		return nil
	}
	if err := m.ipt.Verify(ctx, h, m.backend, spec); err != nil {
		return err
	}
	t, err := readIslandTables(h)
	if err != nil {
		// This island has its verified rules; the next one runs
		// iptables-restore again.
		m.log.Warn("island rules: no template", oplog.ErrorKey, err)
		return nil
	}
	m.island.CompareAndSwap(nil, t)
	return nil
}

// template is the island's tables to load, or nil where every island runs
// iptables-restore (not legacy, a test's runner, no island made yet).
func (m *Manager) template() *islandTables {
	if !m.templates() {
		return nil
	}
	return m.island.Load()
}

// templates reports whether islands may be loaded from a template: the
// legacy backend, the real runner, 64-bit tables (the layout xtables.go
// writes), and no load has failed.
func (m *Manager) templates() bool {
	_, real := m.ipt.(execRunner)
	return real && m.backend == IPTablesLegacy && strconv.IntSize == 64 && !m.noTemplate.Load()
}

// dropTemplate gives up templates for the manager's life after loading t
// failed with err: that island fails (closed), and every later one runs
// iptables-restore, as with iptables-nft.
func (m *Manager) dropTemplate(t *islandTables, err error) {
	m.noTemplate.Store(true)
	if m.island.CompareAndSwap(t, nil) {
		m.log.Warn("island rules: loading the template failed; iptables-restore from now on", oplog.ErrorKey, err)
	}
}
