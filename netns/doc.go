// Package netns builds and tears down the island network namespaces that give each
// sandbox exactly one way out: the airlock gateway (DESIGN.md section 1).
//
// For every sandbox it owns a namespace named airlock-<id>, bind-mounted under
// /run/netns the way `ip netns add` does: lo up, an island address on lo
// (10.255.255.254/32 by default), the route `default dev lo src <island>`, IPv6
// disabled. Inside it, from a locked OS thread that setns()es and is never returned
// to the scheduler, it opens the gateway's listeners (explicit proxy 127.0.0.1:3128,
// DNS 127.0.0.1:53 over UDP and TCP, transparent proxy 127.0.0.1:15001) and hands
// them to a caller-owned Server. One iptables-restore run inside the namespace
// installs the rules: TCP and UDP to port 53 go to the DNS listener, every other TCP
// connection not to 127.0.0.0/8 goes to the transparent listener, and every other
// packet leaving the namespace is sent to NFLOG and dropped. The NFLOG messages are
// read from a netfilter netlink socket opened inside the namespace and written to the
// audit log as kind "drop" records, rate limited per sandbox. Before all of
// that, new flows (conntrack entries) are limited to 500/s with a burst of 2000
// and dropped silently past it, and the island's conntrack timeouts are short
// (10-30 s): every flow a sandbox starts, even a datagram redirected to the DNS
// listener, is kernel memory no cgroup charges, and unlimited a sandbox made
// 20,000 entries in 0.2 s.
//
// Attach gives a namespace made by someone else (docker --network none,
// /proc/PID/ns/net, the namespace holding a Firecracker tap) the same listeners and
// rules, and adds rules for traffic arriving on its other interfaces (tap, veth):
// nat PREROUTING DNATs TCP and DNS to the listeners on 127.0.0.1 (which needs
// route_localnet=1, set by Attach) and logs everything else, which filter INPUT
// and FORWARD then drop. A namespace without an IPv4 default route gets the
// island address and route, since without a route every connect fails before the
// rules see it. IPv6 is disabled in it as in an island. Detach restores the
// iptables rules, sysctls and routes it saved before touching anything.
//
// # Capabilities
//
// The rules and routes are the whole boundary. A process holding CAP_NET_ADMIN in
// the namespace can delete them and a process holding CAP_NET_RAW can forge packets
// past them. Sandboxes must therefore never hold CAP_NET_ADMIN or CAP_NET_RAW in their
// network namespace (nor in a user namespace that owns it): the executor (package
// sandboxd) runs sandbox processes with a non-root uid, every capability dropped
// and no_new_privs, and callers of Attach (airlock attach for containers and VMs)
// must keep the container or VM without those capabilities in the attached
// namespace. For a Firecracker VM the guest only sees the tap device, so the guest's
// root is not root in the namespace that holds the rules.
//
// # iptables backend
//
// Rules are written as iptables-restore text and applied in one run inside the
// namespace (a goroutine locks its OS thread, setns()es, and execs iptables-restore;
// the thread dies with the goroutine). Both iptables-nft and iptables-legacy work on
// the development machines (Debian, iptables 1.8.9, kernel 6.18). Config.IPTables
// "auto" uses iptables-legacy-restore when it is installed and falls back to
// iptables-nft-restore: measured here, one legacy run of the island ruleset takes
// about 5 ms and one nft run about 35 ms, which alone would miss the 15 ms create
// target. The island's tables belong to airlock alone, so the choice does not
// interact with the host's firewall. When attaching to a namespace whose existing
// rules live only in the other backend, Attach uses that one, so the two are never
// mixed in one namespace.
//
// # Lifecycle
//
// Teardown removes the listeners (Server.Stop), the rules and the namespace.
// Every sandbox has a small state file (Config.StateDir, state.go) holding its
// labels and, for attached namespaces, the rules and sysctls to restore, so
// Recover (recover.go) can re-attach or remove the airlock-* namespaces a crashed
// gateway left behind. Close releases the process's resources but leaves
// namespaces and rules in place, exactly as a crash would: the sandbox then has
// no way out at all until Recover runs. A failed Create or Attach undoes every
// step it took.
//
// The listeners go to a caller-owned Server (Serve must not block; Stop closes
// them). This package must never import gateway or dnsfilter: package daemon
// glues them in through the Server interface.
//
// Measured on the 2-core development VM (BenchmarkCreate, 100 runs): Create p50
// 3.3-4.0 ms cold with iptables-legacy (23.8 ms with iptables-nft) and 0.9-1.2 ms
// from the pool; Teardown p50 0.1 ms.
package netns
