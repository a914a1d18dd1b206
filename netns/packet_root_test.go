package netns

import (
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/poll"
)

// l2Sniffer counts every frame of ethertype proto arriving in a namespace
// whose payload carries marker (the network's end of the pod's veth).
type l2Sniffer struct {
	n    atomic.Int64
	done chan struct{}
}

func sniffL2(t *testing.T, path string, proto uint16, marker []byte) *l2Sniffer {
	t.Helper()
	s := &l2Sniffer{done: make(chan struct{})}
	fd := -1
	if err := in(t, path, func() error {
		var err error
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(proto)))
		if err != nil {
			return err
		}
		tv := unix.NsecToTimeval((100 * time.Millisecond).Nanoseconds())
		return unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv)
	}); err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	go func() {
		defer close(s.done)
		buf := make([]byte, 2048)
		for !stop.Load() {
			n, from, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue
			}
			if strings.Contains(string(buf[:n]), string(marker)) {
				s.n.Add(1)
			}
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		<-s.done
		unix.Close(fd)
	})
	return s
}

// sendPacketFrame sends payload as one frame of ethertype proto out of the
// namespace's interface dev to the MAC dst through an AF_PACKET socket, as a
// pod holding CAP_NET_RAW (Kubernetes' default) can: nothing of the IP
// stack, iptables included, sees such a frame. bypass sets
// PACKET_QDISC_BYPASS (the frame skips the qdisc layer too).
func sendPacketFrame(t *testing.T, path, dev string, dst net.HardwareAddr, proto uint16, payload []byte, bypass bool) {
	t.Helper()
	if err := in(t, path, func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if bypass {
			if err := unix.SetsockoptInt(fd, unix.SOL_PACKET, unix.PACKET_QDISC_BYPASS, 1); err != nil {
				return err
			}
		}
		sa := &unix.SockaddrLinklayer{Protocol: htons(proto), Ifindex: ifi.Index, Halen: 6}
		copy(sa.Addr[:], dst)
		err = unix.Sendto(fd, payload, 0, sa)
		if err != nil && err != unix.EPERM && err != unix.ENOBUFS {
			return err // EPERM, ENOBUFS: a filter dropped it
		}
		return nil
	}); err != nil {
		t.Fatalf("AF_PACKET frame out of %s: %v", dev, err)
	}
}

// udpPacket is an IPv4 UDP datagram src:sport -> dst:dport carrying data
// (UDP checksum 0: none).
func udpPacket(src, dst netip.Addr, sport, dport uint16, data []byte) []byte {
	p := make([]byte, 28+len(data))
	p[0] = 0x45
	binary.BigEndian.PutUint16(p[2:4], uint16(len(p)))
	p[8], p[9] = 64, unix.IPPROTO_UDP
	s4, d4 := src.As4(), dst.As4()
	copy(p[12:16], s4[:])
	copy(p[16:20], d4[:])
	sum := uint32(0)
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(p[i : i+2]))
	}
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(p[10:12], ^uint16(sum))
	binary.BigEndian.PutUint16(p[20:22], sport)
	binary.BigEndian.PutUint16(p[22:24], dport)
	binary.BigEndian.PutUint16(p[24:26], uint16(8+len(data)))
	copy(p[28:], data)
	return p
}

// TestAttachPacketSocketsContained: a workload holding CAP_NET_RAW (a pod,
// by Kubernetes' default) in an attached namespace writes whole frames with
// an AF_PACKET socket, which no iptables chain sees: an IPv4 UDP datagram
// to the network, an ARP frame carrying data, a frame of a made-up
// ethertype, with and without PACKET_QDISC_BYPASS. None may reach the
// network's end of the veth, in capture and in accept mode, while the
// kernel's own ARP and an accepted connection's replies still do.
func TestAttachPacketSocketsContained(t *testing.T) {
	for _, mode := range []Inbound{{}, {Mode: InboundAccept, Ports: []int{8080}}} {
		t.Run(mode.String(), func(t *testing.T) { testAttachPacketSockets(t, mode) })
	}
}

func testAttachPacketSockets(t *testing.T, inbound Inbound) {
	w := newWorld(t, Config{})
	c := newContainer(t)
	ctx := context.Background()
	ns := strings.TrimPrefix(c.path, "/run/netns/")
	run(t, "ip", "-n", ns, "route", "add", "default", "via", netIP.String())
	dev, podMAC, peerMAC := "", net.HardwareAddr(nil), net.HardwareAddr(nil)
	if err := in(t, c.path, func() error {
		ifs, err := net.Interfaces()
		for _, ifi := range ifs {
			if ifi.Flags&net.FlagLoopback == 0 {
				dev, podMAC = ifi.Name, ifi.HardwareAddr
			}
		}
		return err
	}); err != nil || dev == "" {
		t.Fatalf("the pod's interface: %q, %v", dev, err)
	}
	if err := in(t, c.vmPath, func() error {
		ifs, err := net.Interfaces()
		for _, ifi := range ifs {
			if ifi.Flags&net.FlagLoopback == 0 {
				peerMAC = ifi.HardwareAddr
			}
		}
		return err
	}); err != nil || peerMAC == nil {
		t.Fatalf("the network's MAC: %v, %v", peerMAC, err)
	}
	listenInPod(t, c.path, 8080)

	id := netnstest.SandboxID("pkt")
	if _, err := w.m.Attach(ctx, identity.Sandbox{ID: id}, c.path, inbound); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { _ = w.m.Detach(context.Background(), id) })

	marker := []byte("alk-exfil-" + id)
	ipSn := sniffL2(t, c.vmPath, unix.ETH_P_IP, marker)
	arpSn := sniffL2(t, c.vmPath, unix.ETH_P_ARP, marker)
	const etherX = 0x88b5 // IEEE local experimental
	xSn := sniffL2(t, c.vmPath, etherX, marker)
	// A UDP server on the network's side, as a collector would be.
	var udpGot atomic.Int64
	var wg sync.WaitGroup
	if err := in(t, c.vmPath, func() error {
		u, err := net.ListenPacket("udp4", netIP.String()+":9")
		if err != nil {
			return err
		}
		t.Cleanup(func() { u.Close(); wg.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			b := make([]byte, 2048)
			for {
				n, _, err := u.ReadFrom(b)
				if err != nil {
					return
				}
				if strings.Contains(string(b[:n]), string(marker)) {
					udpGot.Add(1)
				}
			}
		}()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	arp := make([]byte, 28+len(marker)) // a request for the network's address, data after it
	copy(arp, []byte{0, 1, 8, 0, 6, 4, 0, 1})
	copy(arp[8:14], podMAC)
	pod4, net4 := podIP.As4(), netIP.As4()
	copy(arp[14:18], pod4[:])
	copy(arp[24:28], net4[:])
	copy(arp[28:], marker)
	for _, bypass := range []bool{false, true} {
		for range 3 {
			sendPacketFrame(t, c.path, dev, peerMAC, unix.ETH_P_IP, udpPacket(podIP, netIP, 5353, 9, marker), bypass)
			sendPacketFrame(t, c.path, dev, peerMAC, unix.ETH_P_ARP, arp, bypass)
			sendPacketFrame(t, c.path, dev, net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, etherX, marker, bypass)
		}
	}
	// Something the pod may send, after them: an accepted connection's
	// reply (accept) or nothing at all (capture); the kernel's own ARP for
	// it is let out either way.
	if inbound.Mode == InboundAccept {
		run(t, "ip", "-n", ns, "neigh", "flush", "all")
		out, _, err := dialFrom(t, c.vmPath, podIP.String()+":8080")
		if err != nil || out != "pod 8080\n" {
			t.Fatalf("an accepted connection after the frames: %v: %q", err, out)
		}
	}
	// Give the sniffers time to count a frame that got through (none should).
	poll.Within(time.Second, func() bool { return ipSn.n.Load()+arpSn.n.Load()+xSn.n.Load()+udpGot.Load() > 0 })
	if got := [4]int64{ipSn.n.Load(), arpSn.n.Load(), xSn.n.Load(), udpGot.Load()}; got != [4]int64{} {
		t.Fatalf("frames from an AF_PACKET socket reached the network: IPv4 %d, ARP %d, ethertype %#x %d; the UDP collector got %d datagrams",
			got[0], got[1], etherX, got[2], got[3])
	}

	// CHECK notices the guard gone; Detach leaves no netdev table.
	if err := w.m.CheckAttached(ctx, id); err != nil {
		t.Fatalf("CheckAttached with the guard in place: %v", err)
	}
	h, err := vnetns.GetFromPath(c.path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := removeL2Guard(h); err != nil {
		t.Fatal(err)
	}
	if err := w.m.CheckAttached(ctx, id); err == nil || !strings.Contains(err.Error(), "no link-layer guard on "+dev) {
		t.Fatalf("CheckAttached with the guard removed: %v, want it named", err)
	}
	if err := installL2Guard(h, []string{"lo", dev}); err != nil {
		t.Fatal(err)
	}
	// An interface added after the attach (a later CNI plugin's) has no
	// guard chain: CHECK names it. The namespace's deletion removes it.
	extra, peer := netnstest.LinkName("g"), netnstest.LinkName("h")
	run(t, "ip", "-n", ns, "link", "add", extra, "type", "veth", "peer", "name", peer)
	if err := w.m.CheckAttached(ctx, id); err == nil || !strings.Contains(err.Error(), "no link-layer guard on "+extra) {
		t.Fatalf("CheckAttached with an interface added after the attach: %v, want it named", err)
	}
	if err := w.m.Detach(ctx, id); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	nc, err := nftables.New(nftables.WithNetNSFd(int(h)))
	if err != nil {
		t.Fatal(err)
	}
	if tables, err := nc.ListTablesOfFamily(nftables.TableFamilyNetdev); err != nil || len(tables) != 0 {
		t.Fatalf("after Detach: netdev tables %v, %v; want none", tables, err)
	}
}

// TestAttachCaptureServesTheNetwork records what inbound capture means on a
// veth: a connection arriving from the network (a neighbour on the pod
// network) is taken as the workload's own egress and served by the
// gateway under the workload's identity and policy. Right for a VM's tap,
// wrong for a pod: airlock-cni refuses capture (cniplugin), and SECURITY.md
// says so for plain attach.
func TestAttachCaptureServesTheNetwork(t *testing.T) {
	w := newWorld(t, Config{})
	c := newContainer(t)
	ctx := context.Background()
	id := netnstest.SandboxID("capnet")
	if _, err := w.m.Attach(ctx, identity.Sandbox{ID: id}, c.path, Inbound{}); err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { _ = w.m.Detach(context.Background(), id) })
	reqs := w.web.Requests()
	var out string
	if err := in(t, c.vmPath, func() error {
		var err error
		out, err = fakenet.Get(podIP.String()+":80", "web.test", "/from-the-network")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "hello from web.test /from-the-network") || w.web.Requests()-reqs != 1 {
		t.Fatalf("a neighbour's request through the pod's capture: %q (web.test counted %d); capture no longer serves the network, update cniplugin and SECURITY.md",
			out, w.web.Requests()-reqs)
	}
}
