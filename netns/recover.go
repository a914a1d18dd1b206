package netns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/oplog"
)

// RecoverPolicy says what Recover does with namespaces a previous gateway left.
type RecoverPolicy string

// Recover policies.
const (
	RecoverReattach RecoverPolicy = "reattach"
	RecoverRemove   RecoverPolicy = "remove"
)

// RecoverResult lists what Recover did, by sandbox id.
type RecoverResult struct {
	Reattached []string
	Removed    []string
}

// Recover finds the namespaces a crashed gateway left: every sandbox with a
// state file in StateDir that this Manager does not manage. A namespace it
// created (Create, CreateFrom) served a sandbox of the process that died, so
// it is removed whatever p says. An attached one (Attach: someone else's
// namespace, which outlives the gateway) is re-attached with RecoverReattach
// (same id, labels, mode and allow list, its rules put back and verified, new
// listeners) or restored and let go with RecoverRemove. A namespace whose
// state file cannot be read is removed (for an attached one only the bind
// mount goes; its drop rules stay, so it stays closed). Pool namespaces of
// this process that it no longer tracks, and of processes that no longer run,
// are removed. Namespaces of other Managers (other StateDirs) are never
// touched.
func (m *Manager) Recover(ctx context.Context, p RecoverPolicy) (RecoverResult, error) {
	var res RecoverResult
	if p != RecoverReattach && p != RecoverRemove {
		return res, fmt.Errorf("netns: recover policy %q: must be reattach or remove", p)
	}
	if err := m.prepare(); err != nil {
		return res, err
	}
	var errs []error
	if entries, err := os.ReadDir(m.cfg.RunDir); err == nil {
		for _, e := range entries {
			path := filepath.Join(m.cfg.RunDir, e.Name())
			if !m.stalePool(e.Name(), path) {
				continue
			}
			if err := unmountRemove(path); err != nil {
				errs = append(errs, err)
			}
		}
	}
	files, err := os.ReadDir(m.cfg.StateDir)
	if err != nil {
		return res, fmt.Errorf("netns: recover: %w", err)
	}
	for _, f := range files {
		id, ok := strings.CutSuffix(f.Name(), ".json")
		if !ok || ValidateID(id) != nil {
			continue
		}
		m.mu.Lock()
		_, managed := m.sandboxes[id]
		if !managed {
			m.sandboxes[id] = nil
		}
		m.mu.Unlock()
		if managed {
			continue
		}
		path := m.nsPath(id)
		if _, err := os.Lstat(path); err != nil {
			// The namespace is gone (a crash before it was made, or after it
			// was removed): only the state file is left.
			m.removeState(id)
			m.release(id)
			continue
		}
		s, removed, err := m.recoverOne(ctx, id, path, p)
		if err != nil {
			errs = append(errs, fmt.Errorf("netns: recover %s: %w", id, err))
		}
		if s == nil {
			m.release(id)
		} else {
			m.mu.Lock()
			m.sandboxes[id] = s
			m.mu.Unlock()
			res.Reattached = append(res.Reattached, id)
		}
		if removed {
			res.Removed = append(res.Removed, id)
		}
	}
	m.log.Info("recover", "policy", string(p), "reattached", res.Reattached, "removed", res.Removed)
	return res, errors.Join(errs...)
}

// stalePool reports whether name is a pool namespace nobody uses: made by a
// process that no longer runs, or by this one but no longer in its pool.
func (m *Manager) stalePool(name, path string) bool {
	rest, ok := strings.CutPrefix(name, poolPrefix)
	if !ok {
		return false
	}
	pidStr, _, ok := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	if pid == os.Getpid() {
		return !poolOfThisProcess(path)
	}
	err = unix.Kill(pid, 0)
	return errors.Is(err, unix.ESRCH)
}

// managers holds every Manager of this process that is not closed. A process
// with several (tests, a daemon beside a recovery) must not take another's
// live pool namespace, named with the same pid, for a stale one.
var managers sync.Map // *Manager -> struct{}

// poolOfThisProcess reports whether a live Manager of this process made the
// pool namespace at path and still has it, ready or taken.
func poolOfThisProcess(path string) bool {
	found := false
	managers.Range(func(k, _ any) bool {
		_, found = k.(*Manager).poolNames.Load(path)
		return !found
	})
	return found
}

// recoverOne re-attaches (an attached namespace, with RecoverReattach) or
// removes one leftover namespace. It returns the sandbox when re-attached, and
// whether the namespace was removed (or, for an attached one, restored and
// released).
func (m *Manager) recoverOne(ctx context.Context, id, path string, p RecoverPolicy) (*Sandbox, bool, error) {
	st, stErr := m.readState(id)
	remove := func() (*Sandbox, bool, error) {
		var err error
		if st != nil && st.Attached {
			err = m.restoreAttached(ctx, id, path)
		} else {
			err = unmountRemove(path)
		}
		if err != nil {
			return nil, false, err
		}
		m.removeState(id)
		return nil, true, nil
	}
	if stErr != nil {
		m.log.Warn("recover: no usable state, removing", oplog.SandboxKey, id, oplog.ErrorKey, stErr)
		return remove()
	}
	origin, _ := st.origin() // readState checked it
	if p == RecoverRemove || origin == originCreated || !st.Saved && origin == originAttached {
		// A namespace this manager created served a sandbox of the process
		// that died: nothing will run in it again. An attach that died
		// before changing anything is simply let go.
		m.log.Info("recover: removing", oplog.SandboxKey, id, "origin", origin)
		return remove()
	}
	info, err := st.sandbox()
	if err != nil {
		s, removed, rerr := remove()
		return s, removed, errors.Join(err, rerr)
	}
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		s, removed, rerr := remove()
		return s, removed, errors.Join(err, rerr)
	}
	defer h.Close()
	s := &Sandbox{ID: id, Labels: st.Labels, Path: path, Attached: true, Source: st.Source, Pod: clonePod(info.Pod), Inbound: st.inbound(), info: info}
	// Put the namespace back as it was, then attach again from scratch.
	if st.AddedIsland {
		if has, herr := hasDefaultRoute(h); herr == nil && !has {
			err = configureIsland(h, m.cfg.islandAddr(), false)
		}
	}
	if err == nil {
		err = m.ipt.Restore(ctx, h, st.Backend, restoreText(st.SavedRules), false)
	}
	if err == nil {
		err = m.ipt.Restore(ctx, h, st.Backend, m.ruleSpec(true, s.Inbound).render(), true)
	}
	if err == nil {
		err = m.ipt.Verify(ctx, h, st.Backend, m.ruleSpec(true, s.Inbound))
	}
	if err == nil {
		var links []string
		if links, err = linkNames(h); err == nil {
			err = writeSysctls(h, attachSysctls(links))
		}
		if err == nil {
			err = installL2Guard(h, links)
		}
	}
	if err == nil {
		s.Own, err = nsAddrs(h)
	}
	if err == nil {
		err = m.serve(s)
	}
	if err != nil {
		_, removed, rerr := remove()
		return nil, removed, errors.Join(err, rerr)
	}
	m.log.Info("recover: re-attached", oplog.SandboxKey, id)
	return s, false, nil
}

// nsAddrs lists 127.0.0.1 and the IPv4 addresses of the namespace's interfaces.
func nsAddrs(h vnetns.NsHandle) ([]netip.Addr, error) {
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	defer nh.Close()
	addrs, err := nh.AddrList(nil, netlink.FAMILY_V4)
	if err != nil {
		return nil, fmt.Errorf("list addresses: %w", err)
	}
	own := []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1})}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && !ip.IsLoopback() {
			own = append(own, ip)
		}
	}
	return own, nil
}
