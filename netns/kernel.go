package netns

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// inNS runs fn on a fresh OS thread that has setns()ed into ns. The goroutine
// locks its thread and exits without unlocking, so the runtime kills the thread
// instead of handing a thread in the wrong namespace to other goroutines.
func inNS(ns vnetns.NsHandle, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// No UnlockOSThread: this thread's namespace is no longer the process's.
		if err := vnetns.Set(ns); err != nil {
			errc <- fmt.Errorf("setns: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// newNamespace makes a new network namespace and bind-mounts it at path, the way
// `ip netns add` does. It returns an open handle; on error nothing is left.
func newNamespace(path string) (vnetns.NsHandle, error) { return newNamespaceWith(path, nil) }

// newNamespaceWith is newNamespace that also runs here, when not nil, on the
// thread that made the namespace (inside it) before it returns: one thread
// instead of one per step. An error from here removes the namespace.
func newNamespaceWith(path string, here func() error) (vnetns.NsHandle, error) {
	type result struct {
		h   vnetns.NsHandle
		err error
	}
	rc := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		// Never unlocked: after unshare this thread is in the new namespace.
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			rc <- result{vnetns.None(), fmt.Errorf("unshare: %w", err)}
			return
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := bindMount(self, path); err != nil {
			rc <- result{vnetns.None(), err}
			return
		}
		h, err := vnetns.GetFromPath(path)
		if err != nil {
			unmountRemove(path)
			rc <- result{vnetns.None(), fmt.Errorf("open %s: %w", path, err)}
			return
		}
		if here != nil {
			if err := here(); err != nil {
				h.Close()
				unmountRemove(path)
				rc <- result{vnetns.None(), err}
				return
			}
		}
		rc <- result{h, nil}
	}()
	r := <-rc
	return r.h, r.err
}

// bindMount creates the file dst and bind-mounts src onto it.
func bindMount(src, dst string) error {
	f, err := os.OpenFile(dst, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("create %s: %w", dst, err)
	}
	f.Close()
	if err := unix.Mount(src, dst, "none", unix.MS_BIND, ""); err != nil {
		os.Remove(dst)
		return fmt.Errorf("bind mount %s on %s: %w", src, dst, err)
	}
	return nil
}

// unmountRemove lazily unmounts path and removes the file. A missing file is not
// an error.
func unmountRemove(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// prepareRunDir makes dir exist and be a shared mount point, as iproute2 does, so
// that namespace mounts and unmounts propagate to mount namespaces cloned later.
func prepareRunDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("netns: run_dir %s: %w", dir, err)
	}
	err := unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) {
		if err = unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("netns: run_dir %s: make shared mount: %w", dir, err)
	}
	return nil
}

// nsID identifies the network namespace a file refers to (device and inode of
// the nsfs file). It fails for a file that is not a namespace.
type nsID struct{ dev, ino uint64 }

func nsInode(path string) (nsID, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return nsID{}, err
	}
	if fs.Type != unix.NSFS_MAGIC {
		return nsID{}, fmt.Errorf("%s is not a namespace file (filesystem magic %#x)", path, fs.Type)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// The main goroutine keeps the main thread. A goroutine that setns()es into a
// sandbox's namespace exits holding its locked thread so the runtime retires the
// thread, but the runtime cannot retire the main thread: had such a goroutine run
// there, the main thread would stay parked in the sandbox's namespace, and
// /proc/self/ns/net (which names the main thread) would name the sandbox's. With
// the main goroutine locked to it from init, no other goroutine ever runs there.
func init() { runtime.LockOSThread() }

// hostNetNS is the network namespace the gateway's ordinary threads run in. It
// reads /proc/thread-self from a locked thread, never /proc/self: /proc/self is
// the main thread, and when a goroutine that entered a sandbox's namespace
// (inNS) happens to run on the main thread and exits, the runtime cannot retire
// that thread, so it stays parked in the sandbox's namespace. Regression: attach
// intermittently refused a fresh namespace as "the gateway's own".
func hostNetNS() (nsID, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return nsInode("/proc/thread-self/ns/net")
}

// configureIsland sets up lo inside ns: up, the island address, the default route
// through lo. All netlink work uses a handle bound to ns.
func configureIsland(ns vnetns.NsHandle, island netip.Addr, loUp bool) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()
	return configureLo(h, island, loUp)
}

// configureIslandHere is configureIsland in the calling thread's namespace.
func configureIslandHere(island netip.Addr) error {
	h, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()
	return configureLo(h, island, true)
}

// configureLo is configureIsland through the netlink handle h.
func configureLo(h *netlink.Handle, island netip.Addr, loUp bool) error {
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	if loUp || lo.Attrs().Flags&net.FlagUp == 0 {
		if err := h.LinkSetUp(lo); err != nil {
			return fmt.Errorf("set lo up: %w", err)
		}
	}
	ipn := &net.IPNet{IP: island.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if err := h.AddrAdd(lo, &netlink.Addr{IPNet: ipn}); err != nil {
		return fmt.Errorf("add %s to lo: %w", island, err)
	}
	if err := h.RouteAdd(islandRoute(lo.Attrs().Index, island)); err != nil {
		return fmt.Errorf("add default route dev lo src %s: %w", island, err)
	}
	return nil
}

// islandRoute is the default route through lo with the island source address.
func islandRoute(loIndex int, island netip.Addr) *netlink.Route {
	return &netlink.Route{
		LinkIndex: loIndex,
		Scope:     netlink.SCOPE_LINK,
		Dst:       &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)},
		Src:       island.AsSlice(),
	}
}

// removeIsland undoes configureIsland (except lo up) in an attached namespace.
func removeIsland(ns vnetns.NsHandle, island netip.Addr) error {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()
	lo, err := h.LinkByName("lo")
	if err != nil {
		return fmt.Errorf("find lo: %w", err)
	}
	var errs []error
	if err := h.RouteDel(islandRoute(lo.Attrs().Index, island)); err != nil && !errors.Is(err, unix.ESRCH) {
		errs = append(errs, fmt.Errorf("delete default route: %w", err))
	}
	ipn := &net.IPNet{IP: island.AsSlice(), Mask: net.CIDRMask(32, 32)}
	if err := h.AddrDel(lo, &netlink.Addr{IPNet: ipn}); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
		errs = append(errs, fmt.Errorf("delete %s from lo: %w", island, err))
	}
	return errors.Join(errs...)
}

// hasDefaultRoute reports whether ns has an IPv4 default route.
func hasDefaultRoute(ns vnetns.NsHandle) (bool, error) {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return false, fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()
	routes, err := h.RouteList(nil, netlink.FAMILY_V4)
	if err != nil {
		return false, fmt.Errorf("list routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || (r.Dst.IP.IsUnspecified() && r.Dst.Mask != nil && func() bool { o, _ := r.Dst.Mask.Size(); return o == 0 }()) {
			return true, nil
		}
	}
	return false, nil
}

// linkNames lists the interfaces in ns.
func linkNames(ns vnetns.NsHandle) ([]string, error) {
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink handle: %w", err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	names := make([]string, 0, len(links))
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	return names, nil
}

// LoopbackDownError: the gateway's listeners could not bind 127.0.0.1 in a
// namespace because its lo is down (a runtime that has not brought it up yet,
// or a namespace made by hand with `ip netns add`).
type LoopbackDownError struct {
	Namespace string // the path the caller gave
	Err       error  // the bind error
}

func (e *LoopbackDownError) Error() string {
	return fmt.Sprintf("loopback is down in namespace %s: bring it up (ip link set lo up) or let the runtime do it (%v)", e.Namespace, e.Err)
}

func (e *LoopbackDownError) Unwrap() error { return e.Err }

// listenError names what failed to listen; run inside the namespace, it
// turns "cannot assign requested address" into a LoopbackDownError when lo
// is down there.
func listenError(ns, what string, err error) error {
	err = fmt.Errorf("%s: %w", what, err)
	if !errors.Is(err, syscall.EADDRNOTAVAIL) {
		return err
	}
	if lo, lerr := netlink.LinkByName("lo"); lerr == nil && lo.Attrs().Flags&net.FlagUp == 0 {
		return &LoopbackDownError{Namespace: ns, Err: err}
	}
	return err
}

// sysctl is one /proc/sys/net setting inside a namespace.
type sysctl struct {
	Key   string `json:"key"` // relative to /proc/sys, e.g. net/ipv6/conf/all/disable_ipv6
	Value string `json:"value"`
}

// islandSysctls are written in every island namespace.
var islandSysctls = []sysctl{
	{"net/ipv6/conf/all/disable_ipv6", "1"},
	{"net/ipv6/conf/default/disable_ipv6", "1"},
	{"net/ipv6/conf/lo/disable_ipv6", "1"},
	{"net/ipv4/ip_forward", "0"},
}

// islandConntrackSysctls shorten the conntrack timeouts in an island (they are
// per namespace), so the new-flow limit bounds the entries a sandbox can hold:
// nothing in an island needs a flow remembered for long after it goes quiet
// (the gateway's own connections live in the host's namespace). The keys exist
// only once the rules have loaded conntrack in the namespace, so they are
// written after the rules.
var islandConntrackSysctls = []sysctl{
	{"net/netfilter/nf_conntrack_udp_timeout", "10"},
	{"net/netfilter/nf_conntrack_udp_timeout_stream", "30"},
	{"net/netfilter/nf_conntrack_tcp_timeout_syn_sent", "10"},
	{"net/netfilter/nf_conntrack_tcp_timeout_syn_recv", "10"},
	{"net/netfilter/nf_conntrack_tcp_timeout_fin_wait", "10"},
	{"net/netfilter/nf_conntrack_tcp_timeout_close_wait", "10"},
	{"net/netfilter/nf_conntrack_tcp_timeout_last_ack", "10"},
	{"net/netfilter/nf_conntrack_tcp_timeout_time_wait", "10"},
	{"net/netfilter/nf_conntrack_tcp_timeout_close", "10"},
	{"net/netfilter/nf_conntrack_generic_timeout", "30"},
	{"net/netfilter/nf_conntrack_icmp_timeout", "10"},
}

// attachSysctls are the settings Attach writes for the interfaces in a namespace.
func attachSysctls(links []string) []sysctl {
	s := []sysctl{
		{"net/ipv6/conf/all/disable_ipv6", "1"},
		{"net/ipv6/conf/default/disable_ipv6", "1"},
		// The listeners sit on 127.0.0.1; DNAT of traffic arriving on a tap or veth
		// to them, and the replies leaving again, need route_localnet.
		{"net/ipv4/conf/all/route_localnet", "1"},
		{"net/ipv4/conf/default/route_localnet", "1"},
	}
	for _, l := range links {
		s = append(s, sysctl{"net/ipv6/conf/" + l + "/disable_ipv6", "1"})
		if l != "lo" {
			s = append(s, sysctl{"net/ipv4/conf/" + l + "/route_localnet", "1"})
		}
	}
	return s
}

// writeSysctls writes each setting inside ns. A missing net/ipv6 tree means the
// kernel has no IPv6, which is what disable_ipv6 wants, so those are skipped
// (applySysctls).
func writeSysctls(ns vnetns.NsHandle, set []sysctl) error {
	return inNS(ns, func() error { return applySysctls(set) })
}

// readSysctls returns the current values of the keys of set inside ns, skipping
// IPv6 keys the kernel does not have.
func readSysctls(ns vnetns.NsHandle, set []sysctl) ([]sysctl, error) {
	var old []sysctl
	err := inNS(ns, func() error {
		for _, s := range set {
			p, err := sysctlPath(s.Key)
			if err != nil {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				if errors.Is(err, os.ErrNotExist) && strings.HasPrefix(s.Key, "net/ipv6/") {
					continue
				}
				return fmt.Errorf("read sysctl %s: %w", s.Key, err)
			}
			old = append(old, sysctl{s.Key, strings.TrimSpace(string(b))})
		}
		return nil
	})
	return old, err
}

func sysctlPath(key string) (string, error) {
	if strings.Contains(key, "..") || !strings.HasPrefix(key, "net/") {
		return "", fmt.Errorf("sysctl %q: not a net/ key", key)
	}
	return filepath.Join("/proc/sys", key), nil
}

// openListeners opens the gateway's sockets inside ns, plus the NFLOG socket;
// name is the namespace as the caller knows it, for the error when its lo is
// down.
func openListeners(ns vnetns.NsHandle, name string, cfg Config) (Listeners, *nflogConn, error) {
	var ls Listeners
	var nl *nflogConn
	err := inNS(ns, func() error {
		var err error
		ls, nl, err = listenHere(name, cfg)
		return err
	})
	return ls, nl, err
}

// listenHere opens the listeners and the NFLOG socket in the calling
// thread's namespace; on error nothing stays open.
func listenHere(name string, cfg Config) (Listeners, *nflogConn, error) {
	var ls Listeners
	var nl *nflogConn
	err := func() error {
		addr := func(port int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(port)) }
		var lc net.ListenConfig
		var err error
		ctx := context.Background()
		if ls.Explicit, err = lc.Listen(ctx, "tcp4", addr(cfg.ExplicitPort)); err != nil {
			return listenError(name, "explicit listener", err)
		}
		if ls.Transparent, err = lc.Listen(ctx, "tcp4", addr(cfg.TransparentPort)); err != nil {
			return listenError(name, "transparent listener", err)
		}
		if ls.DNSTCP, err = lc.Listen(ctx, "tcp4", addr(cfg.DNSPort)); err != nil {
			return listenError(name, "dns tcp listener", err)
		}
		if ls.DNSUDP, err = lc.ListenPacket(ctx, "udp4", addr(cfg.DNSPort)); err != nil {
			return listenError(name, "dns udp listener", err)
		}
		if nl, err = openNFLog(uint16(cfg.NFLogGroup)); err != nil {
			return fmt.Errorf("nflog: %w", err)
		}
		return nil
	}()
	if err != nil {
		ls.Close()
		if nl != nil {
			nl.Close()
		}
		return Listeners{}, nil, err
	}
	return ls, nl, nil
}
