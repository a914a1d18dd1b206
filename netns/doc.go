// Package netns builds and tears down the island network namespaces that give
// each sandbox exactly one way out: the airlock gateway. An island has only lo,
// an island address and a route through lo; the gateway's listeners are born
// inside it from a locked thread and served from the host; its rules (one
// iptables-restore run, or a verified island's tables loaded again)
// redirect TCP to the transparent listener and DNS to the filter, and log and
// drop everything else (written as "drop" audit records). Attach gives a namespace made by someone else (a container's, a
// VM's) the same listeners and rules, with what arrives on its interfaces
// captured as egress (a VM's tap) or accepted as inbound connections on listed
// ports (a pod's veth; Inbound), plus a link-layer guard (an nftables netdev
// egress chain per interface: frames written with a packet socket, which no
// iptables chain sees, do not leave), and restores it on Detach; state files let
// Recover re-attach attached namespaces a crashed gateway left and remove the
// ones it had created. The pool keeps namespaces ready; TakePooled hands one
// out for a sandbox to be prepared in, CreateFrom gives it to the sandbox.
//
// A rootless island is built from inside by the process born in it
// (BuildIsland, in the sandbox's init) and served with Adopt.
//
// Entry points: New, (*Manager).Create, TakePooled, CreateFrom, Attach,
// Detach, Teardown, Recover, Close, IslandSpec, BuildIsland, Adopt. The listeners go to a caller-owned Server (package daemon glues in
// the gateway and the DNS filter). Rules, attach, recovery, the pool and the
// capabilities a sandbox must never hold: netns/DESIGN.md.
//
// netns must never import: config, policy, gateway, dnsfilter, sandboxd, secrets,
// daemon, cmd/airlock.
package netns
