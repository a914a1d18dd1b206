package netns

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/oplog"
)

// Rootless islands. An unprivileged gateway cannot make a network namespace
// it can enter: setns into a namespace owned by a child user namespace needs
// CAP_SYS_ADMIN in the caller's own user namespace too, and a multithreaded
// process may not join a user namespace. So the island is made from inside by
// the one process born in it (the sandbox's init, cloned with CLONE_NEWUSER
// and CLONE_NEWNET): BuildIsland, given the manager's IslandSpec, sets up lo,
// the sysctls and the same rules as Create's, opens the listeners and the
// NFLOG socket there and returns their files; Adopt serves them from the
// gateway's process, which dials upstream from its own namespace. The
// namespace lives as long as its init: Teardown only stops serving it.

// IslandSpec is what BuildIsland needs; the manager renders it (IslandSpec)
// so the rules are the same as a root island's.
type IslandSpec struct {
	IslandAddr      string `json:"island_addr"`
	ExplicitPort    int    `json:"explicit_port"`
	TransparentPort int    `json:"transparent_port"`
	DNSPort         int    `json:"dns_port"`
	NFLogGroup      int    `json:"nflog_group"`
	Backend         string `json:"backend"`
	// Restore is the backend's iptables-restore, found on the gateway's
	// PATH (init has none).
	Restore string `json:"restore"`
	Rules   string `json:"rules"`
}

// IslandSpec returns the spec of this manager's island, for BuildIsland.
func (m *Manager) IslandSpec() ([]byte, error) {
	bin, _ := backendBinaries(m.backend)
	restore, err := lookBin(bin)
	if err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	if restore, err = filepath.Abs(restore); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	return json.Marshal(IslandSpec{
		IslandAddr: m.cfg.IslandAddr, ExplicitPort: m.cfg.ExplicitPort, TransparentPort: m.cfg.TransparentPort,
		DNSPort: m.cfg.DNSPort, NFLogGroup: m.cfg.NFLogGroup, Backend: m.backend, Restore: restore,
		Rules: m.ruleSpec(false, Inbound{}).render(),
	})
}

// islandFiles is how many files BuildIsland returns.
const islandFiles = 5

// BuildIsland makes the calling process's network namespace an island: it
// must be a fresh one the process may administer (a rootless sandbox's
// init, root of the user namespace owning it). It returns, in order, the
// explicit, transparent and DNS TCP listeners, the DNS UDP socket and the
// NFLOG socket, for Adopt. Run before the process starts other threads'
// work in another namespace: every step acts on the calling thread's.
func BuildIsland(spec []byte) ([]*os.File, error) {
	var s IslandSpec
	dec := json.NewDecoder(strings.NewReader(string(spec)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("netns: island spec: %w", err)
	}
	cfg := Config{IslandAddr: s.IslandAddr, ExplicitPort: s.ExplicitPort, TransparentPort: s.TransparentPort,
		DNSPort: s.DNSPort, NFLogGroup: s.NFLogGroup, IPTables: s.Backend}.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if s.Backend != IPTablesNFT && s.Backend != IPTablesLegacy {
		return nil, fmt.Errorf("netns: island spec: backend %q: want nft or legacy", s.Backend)
	}
	if !filepath.IsAbs(s.Restore) {
		return nil, fmt.Errorf("netns: island spec: restore %q: want an absolute path", s.Restore)
	}
	// A handle that is not open makes netlink use the calling thread's
	// namespace.
	if err := configureIsland(vnetns.None(), cfg.islandAddr(), true); err != nil {
		return nil, err
	}
	if err := applySysctls(islandSysctls); err != nil {
		return nil, err
	}
	if err := restoreHere(s.Restore, s.Backend, s.Rules); err != nil {
		return nil, fmt.Errorf("install rules: %w", err)
	}
	if err := applySysctls(islandConntrackSysctls); err != nil {
		return nil, err
	}
	ls, nl, err := listenHere("the sandbox's island", cfg)
	if err != nil {
		return nil, err
	}
	defer ls.Close()
	defer nl.Close()
	var files []*os.File
	for _, c := range []interface{ File() (*os.File, error) }{
		ls.Explicit.(*net.TCPListener), ls.Transparent.(*net.TCPListener), ls.DNSTCP.(*net.TCPListener), ls.DNSUDP.(*net.UDPConn),
	} {
		f, err := c.File()
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("netns: island listener file: %w", err)
		}
		files = append(files, f)
	}
	fd, err := unix.Dup(int(nl.f.Fd()))
	if err != nil {
		for _, f := range files {
			f.Close()
		}
		return nil, fmt.Errorf("netns: nflog file: %w", err)
	}
	return append(files, os.NewFile(uintptr(fd), "nflog")), nil
}

// applySysctls writes set in the calling thread's namespace (an island's
// init, or writeSysctls inside a namespace); a missing net/ipv6 tree is skipped.
// Each directory is opened once and each file relative to it, with plain
// system calls: every name looked up under /proc/sys/net is matched against
// the namespace's tables, and an island writes fifteen of them.
func applySysctls(set []sysctl) error {
	dirs := map[string]int{}
	defer func() {
		for _, fd := range dirs {
			unix.Close(fd)
		}
	}()
	for _, s := range set {
		p, err := sysctlPath(s.Key)
		if err != nil {
			return err
		}
		dir, base := filepath.Split(p)
		dfd, ok := dirs[dir]
		if !ok {
			dfd, err = unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err == nil {
				dirs[dir] = dfd
			}
		}
		if err == nil {
			err = writeAt(dfd, base, s.Value)
		}
		if err != nil {
			if errors.Is(err, unix.ENOENT) && strings.HasPrefix(s.Key, "net/ipv6/") {
				continue
			}
			return fmt.Errorf("write sysctl %s=%s: %w", s.Key, s.Value, err)
		}
	}
	return nil
}

// writeAt writes value to the file name in the directory dfd.
func writeAt(dfd int, name, value string) error {
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	n, err := unix.Write(fd, []byte(value))
	if err == nil && n != len(value) {
		err = fmt.Errorf("short write: %d of %d bytes", n, len(value))
	}
	return err
}

// restoreHere runs iptables-restore in the calling process's namespace.
// iptables-legacy takes its lock in /run, which an unprivileged process
// may not write: it gets a lock file of its own.
func restoreHere(bin, backend, rules string) error {
	cmd := exec.Command(bin, "-w", "5")
	cmd.Stdin = strings.NewReader(rules)
	if backend == IPTablesLegacy {
		lock, err := os.CreateTemp("", "airlock-xtables-*.lock")
		if err != nil {
			return fmt.Errorf("iptables lock file: %w", err)
		}
		lock.Close()
		defer os.Remove(lock.Name())
		cmd.Env = append(os.Environ(), "XTABLES_LOCKFILE="+lock.Name())
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", bin, err, strings.TrimSpace(string(out)))
	}
	return nil
}

// Adopt serves an island BuildIsland made in another process's namespace:
// files are its five files, in BuildIsland's order, and are Adopt's from
// then on (closed on error). The sandbox has no Path: nothing can join the
// namespace but its own processes, and Teardown only stops serving it.
func (m *Manager) Adopt(ctx context.Context, sb identity.Sandbox, files []*os.File) (_ *Sandbox, err error) {
	defer func() {
		for _, f := range files {
			f.Close() // the listeners hold their own duplicates
		}
	}()
	if len(files) != islandFiles {
		return nil, fmt.Errorf("netns: adopt %s: got %d files, want %d", sb.ID, len(files), islandFiles)
	}
	if err := m.reserve(sb.ID); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			m.release(sb.ID)
		}
	}()
	ls, nl, err := adoptFiles(files)
	if err != nil {
		return nil, fmt.Errorf("netns: adopt %s: %w", sb.ID, err)
	}
	s := &Sandbox{
		ID:      sb.ID,
		Labels:  maps.Clone(sb.Labels),
		Own:     []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), m.cfg.islandAddr()},
		info:    sb,
		adopted: true,
	}
	if err := m.serveListeners(s, ls, nl); err != nil {
		return nil, err
	}
	m.mu.Lock()
	m.sandboxes[sb.ID] = s
	m.mu.Unlock()
	m.log.Info("rootless island adopted", oplog.SandboxKey, sb.ID)
	return s, nil
}

// adoptFiles makes the listeners and the NFLOG socket of BuildIsland's
// files (each duplicated; the files stay the caller's).
func adoptFiles(files []*os.File) (Listeners, *nflogConn, error) {
	var ls Listeners
	fail := func(what string, err error) (Listeners, *nflogConn, error) {
		ls.Close()
		return Listeners{}, nil, fmt.Errorf("%s: %w", what, err)
	}
	var err error
	if ls.Explicit, err = net.FileListener(files[0]); err != nil {
		return fail("explicit listener", err)
	}
	if ls.Transparent, err = net.FileListener(files[1]); err != nil {
		return fail("transparent listener", err)
	}
	if ls.DNSTCP, err = net.FileListener(files[2]); err != nil {
		return fail("dns tcp listener", err)
	}
	if ls.DNSUDP, err = net.FilePacketConn(files[3]); err != nil {
		return fail("dns udp socket", err)
	}
	fd, err := unix.Dup(int(files[4].Fd()))
	if err != nil {
		return fail("nflog socket", err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return fail("nflog socket", err)
	}
	if sa, err := unix.Getsockname(fd); err != nil {
		unix.Close(fd)
		return fail("nflog socket", err)
	} else if _, ok := sa.(*unix.SockaddrNetlink); !ok {
		unix.Close(fd)
		return fail("nflog socket", errors.New("not a netlink socket"))
	}
	return ls, &nflogConn{f: os.NewFile(uintptr(fd), "nflog")}, nil
}
