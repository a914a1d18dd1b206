package netns

import (
	"context"
	"errors"
	"fmt"
	"maps"

	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/oplog"
)

// Attach gives the existing namespace at nsPath (/var/run/netns/x, /proc/PID/ns/net)
// the sandbox listeners and rules, plus PREROUTING/INPUT/FORWARD rules for traffic
// arriving on its other interfaces (tap, veth), as inbound says: with
// InboundCapture (the zero value) TCP and DNS are redirected to the listeners,
// with InboundAccept new TCP connections to the namespace's own addresses on
// the listed ports are let in and only their replies out; everything else
// arriving is logged and dropped. It saves the namespace's
// iptables rules and the sysctls it changes first, so Detach (or Recover after a
// crash) puts them back. The namespace is also bind-mounted at RunDir/airlock-<id>
// so a restarted gateway finds it. On error the namespace is left as it was.
func (m *Manager) Attach(ctx context.Context, sb identity.Sandbox, nsPath string, inbound Inbound) (*Sandbox, error) {
	if err := inbound.Validate(); err != nil {
		return nil, fmt.Errorf("netns: attach %s: %w", sb.ID, err)
	}
	inbound = inbound.normalized()
	if err := m.reserve(sb.ID); err != nil {
		return nil, err
	}
	if err := m.prepare(); err != nil {
		m.release(sb.ID)
		return nil, err
	}
	s, err := m.attach(ctx, sb, nsPath, inbound)
	if err != nil {
		m.release(sb.ID)
		m.log.Error("attach", oplog.SandboxKey, sb.ID, "netns", nsPath, oplog.ErrorKey, err)
		return nil, fmt.Errorf("netns: attach %s to %s: %w", sb.ID, nsPath, err)
	}
	m.mu.Lock()
	m.sandboxes[sb.ID] = s
	m.mu.Unlock()
	m.log.Info("sandbox namespace attached", oplog.SandboxKey, sb.ID, "netns", nsPath, "inbound", inbound.String())
	return s, nil
}

func (m *Manager) attach(ctx context.Context, sb identity.Sandbox, nsPath string, inbound Inbound) (s *Sandbox, err error) {
	var undo []func()
	defer func() {
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
		}
	}()
	target, err := nsInode(nsPath)
	if err != nil {
		return nil, fmt.Errorf("netns %s: %w", nsPath, err)
	}
	host, err := hostNetNS()
	if err != nil {
		return nil, err
	}
	if target == host {
		return nil, fmt.Errorf("refusing to attach to the gateway's own network namespace (%v)", target)
	}
	m.mu.Lock()
	for _, other := range m.sandboxes {
		if other == nil {
			continue
		}
		if ino, err := nsInode(other.Path); err == nil && ino == target {
			m.mu.Unlock()
			return nil, fmt.Errorf("namespace already managed as sandbox %q", other.ID)
		}
	}
	m.mu.Unlock()

	path := m.nsPath(sb.ID)
	// A first state file before anything is touched, so Recover finds the bind
	// mount if the process dies before the full state is written.
	st := m.newState(sb, originAttached)
	st.Source, st.Inbound = nsPath, &inbound
	if err := m.writeState(st); err != nil {
		return nil, err
	}
	undo = append(undo, func() { m.removeState(sb.ID) })
	if err := m.step("namespace"); err != nil {
		return nil, err
	}
	if err := bindMount(nsPath, path); err != nil {
		return nil, err
	}
	undo = append(undo, func() { unmountRemove(path) })
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer h.Close()

	if err := m.step("save"); err != nil {
		return nil, err
	}
	backend, saved, err := m.chooseAttachBackend(ctx, h)
	if err != nil {
		return nil, err
	}
	links, err := linkNames(h)
	if err != nil {
		return nil, err
	}
	want := attachSysctls(links)
	oldSysctls, err := readSysctls(h, want)
	if err != nil {
		return nil, err
	}
	// A namespace with no IPv4 default route (docker --network none) fails every
	// connect before the rules see it; give it the island route, as Create does.
	hasDefault, err := hasDefaultRoute(h)
	if err != nil {
		return nil, err
	}
	st.Backend, st.SavedRules, st.SavedSysctls, st.AddedIsland = backend, saved, oldSysctls, !hasDefault
	st.Saved = true
	if err := m.step("state"); err != nil {
		return nil, err
	}
	if err := m.writeState(st); err != nil {
		return nil, err
	}
	// From here on the namespace is being changed: undo restores it.
	undo = append(undo, func() {
		uh, err := vnetns.GetFromPath(path)
		if err == nil {
			err = m.restoreNamespace(ctx, uh, st)
			uh.Close()
		}
		if err != nil {
			m.log.Error("attach: undo", oplog.SandboxKey, sb.ID, oplog.ErrorKey, err)
		}
	})
	if err := m.step("sysctl"); err != nil {
		return nil, err
	}
	if err := writeSysctls(h, want); err != nil {
		return nil, err
	}
	if st.AddedIsland {
		if err := configureIsland(h, m.cfg.islandAddr(), false); err != nil {
			return nil, err
		}
	}
	if err := m.step("rules"); err != nil {
		return nil, err
	}
	spec := m.ruleSpec(true, inbound)
	if err := m.ipt.Restore(ctx, h, backend, spec.render(), true); err != nil {
		return nil, fmt.Errorf("install rules: %w", err)
	}
	if err := m.ipt.Verify(ctx, h, backend, spec); err != nil {
		return nil, err
	}
	if err := installL2Guard(h, links); err != nil {
		return nil, err
	}
	own, err := nsAddrs(h)
	if err != nil {
		return nil, err
	}
	s = &Sandbox{ID: sb.ID, Labels: maps.Clone(sb.Labels), Path: path, Attached: true, Source: nsPath, Own: own, Pod: clonePod(sb.Pod), Inbound: inbound, info: sb}
	if err := m.serve(s); err != nil {
		return nil, err
	}
	return s, nil
}

// chooseAttachBackend saves the namespace's rules with the configured backend.
// With auto, a namespace whose rules live only in the other backend is handled
// with that one, so the two are never mixed.
func (m *Manager) chooseAttachBackend(ctx context.Context, h vnetns.NsHandle) (string, string, error) {
	saved, err := m.ipt.Save(ctx, h, m.backend)
	if err != nil {
		return "", "", fmt.Errorf("save rules: %w", err)
	}
	if m.cfg.IPTables != IPTablesAuto || hasRules(saved) {
		return m.backend, saved, nil
	}
	other := IPTablesNFT
	if m.backend == IPTablesNFT {
		other = IPTablesLegacy
	}
	if _, err := resolveBackend(other); err != nil {
		return m.backend, saved, nil
	}
	if otherSaved, err := m.ipt.Save(ctx, h, other); err == nil && hasRules(otherSaved) {
		return other, otherSaved, nil
	}
	return m.backend, saved, nil
}

// restoreNamespace puts back the rules and sysctls saved in st.
func (m *Manager) restoreNamespace(ctx context.Context, h vnetns.NsHandle, st *state) error {
	var errs []error
	if err := m.ipt.Restore(ctx, h, st.Backend, restoreText(st.SavedRules), false); err != nil {
		errs = append(errs, fmt.Errorf("restore rules: %w", err))
	}
	if err := removeL2Guard(h); err != nil {
		errs = append(errs, err)
	}
	if err := writeSysctls(h, st.SavedSysctls); err != nil {
		errs = append(errs, fmt.Errorf("restore sysctls: %w", err))
	}
	if st.AddedIsland {
		if err := removeIsland(h, m.cfg.islandAddr()); err != nil {
			errs = append(errs, fmt.Errorf("remove island route: %w", err))
		}
	}
	return errors.Join(errs...)
}

// restoreAttached restores the attached namespace at path from its state file
// and removes the bind mount.
func (m *Manager) restoreAttached(ctx context.Context, id, path string) error {
	st, err := m.readState(id)
	if err != nil {
		return fmt.Errorf("read state: %w (namespace %s left as is)", err, path)
	}
	if st.Saved {
		h, err := vnetns.GetFromPath(path)
		if err != nil {
			return fmt.Errorf("open %s: %w", path, err)
		}
		err = m.restoreNamespace(ctx, h, st)
		h.Close()
		if err != nil {
			return err
		}
	}
	return unmountRemove(path)
}
