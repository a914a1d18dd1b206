package netns

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/identity"
	"github.com/airlock-dev/airlock/netns/netnstest"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/poll"
)

// The addresses newContainer gives: the container plays the pod, the "vm"
// namespace on the veth's other end plays the network (the node's bridge,
// the kubelet).
var (
	podIP = netip.MustParseAddr("198.18.200.1")
	netIP = netip.MustParseAddr("198.18.200.2")
)

// podServer is a TCP server in the pod namespace that counts connections
// and answers "pod PORT\n"; onConn, when set, runs for each connection
// before the answer (the "server" trying to use the flow to get out).
type podServer struct {
	l      net.Listener
	n      atomic.Int64
	onConn atomic.Pointer[func(c net.Conn)]
}

func listenInPod(t *testing.T, path string, port int) *podServer {
	t.Helper()
	s := &podServer{}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		// SO_REUSEPORT so the attack below can bind a client socket to the
		// same port (an accepted port used as a source port).
		err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		if err != nil {
			return err
		}
		return serr
	}}
	if err := in(t, path, func() error {
		var err error
		s.l, err = lc.Listen(context.Background(), "tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.l.Close() })
	go func() {
		for {
			c, err := s.l.Accept()
			if err != nil {
				return
			}
			s.n.Add(1)
			if on := s.onConn.Load(); on != nil {
				(*on)(c)
			}
			fmt.Fprintf(c, "pod %d\n", port)
			c.Close()
		}
	}()
	return s
}

// frame is one IPv4 packet the sniffer saw.
type frame struct {
	src, dst     netip.Addr
	proto        byte
	sport, dport uint16
	flags        byte // TCP flags
}

func (f frame) String() string {
	return fmt.Sprintf("proto %d %s:%d -> %s:%d flags %#x", f.proto, f.src, f.sport, f.dst, f.dport, f.flags)
}

// sniffer records every IPv4 packet arriving in a namespace (the network's
// end of the pod's veth): what the pod sent, whatever a socket made of it.
type sniffer struct {
	fd     int
	mu     sync.Mutex
	frames []frame
	done   chan struct{}
}

func sniff(t *testing.T, path string) *sniffer {
	t.Helper()
	s := &sniffer{fd: -1, done: make(chan struct{})}
	if err := in(t, path, func() error {
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
		if err != nil {
			return err
		}
		s.fd = fd
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
			n, from, err := unix.Recvfrom(s.fd, buf, 0)
			if err != nil {
				continue
			}
			if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
				continue // the network's own packets
			}
			if f, ok := parseFrame(buf[:n]); ok {
				s.mu.Lock()
				s.frames = append(s.frames, f)
				s.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() {
		stop.Store(true)
		<-s.done
		unix.Close(s.fd)
	})
	return s
}

func parseFrame(p []byte) (frame, bool) {
	if len(p) < 20 || p[0]>>4 != 4 {
		return frame{}, false
	}
	ihl := int(p[0]&0x0f) * 4
	f := frame{src: netip.AddrFrom4([4]byte(p[12:16])), dst: netip.AddrFrom4([4]byte(p[16:20])), proto: p[9]}
	if l4 := p[min(ihl, len(p)):]; (f.proto == unix.IPPROTO_TCP || f.proto == unix.IPPROTO_UDP) && len(l4) >= 4 {
		f.sport, f.dport = binary.BigEndian.Uint16(l4[0:2]), binary.BigEndian.Uint16(l4[2:4])
		if f.proto == unix.IPPROTO_TCP && len(l4) >= 14 {
			f.flags = l4[13]
		}
	}
	return f, true
}

// from returns the frames sent by addr.
func (s *sniffer) from(addr netip.Addr) []frame {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []frame
	for _, f := range s.frames {
		if f.src == addr {
			out = append(out, f)
		}
	}
	return out
}

// TCP flags.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// sendRawTCP sends one hand-made TCP segment from inside the namespace at
// path, as a workload holding CAP_NET_RAW could (it must not, but the rules
// must not depend on it): src:sport -> dst:dport with flags.
func sendRawTCP(t *testing.T, path string, src netip.Addr, sport uint16, dst netip.Addr, dport uint16, flags byte) {
	t.Helper()
	pkt := make([]byte, 40)
	pkt[0] = 0x45
	binary.BigEndian.PutUint16(pkt[2:4], 40)
	binary.BigEndian.PutUint16(pkt[6:8], 0x4000)
	pkt[8], pkt[9] = 64, unix.IPPROTO_TCP
	s4, d4 := src.As4(), dst.As4()
	copy(pkt[12:16], s4[:])
	copy(pkt[16:20], d4[:])
	tcp := pkt[20:]
	binary.BigEndian.PutUint16(tcp[0:2], sport)
	binary.BigEndian.PutUint16(tcp[2:4], dport)
	binary.BigEndian.PutUint32(tcp[4:8], 0x1000_0000)
	if flags&tcpACK != 0 {
		binary.BigEndian.PutUint32(tcp[8:12], 0x2000_0000)
	}
	tcp[12] = 5 << 4
	tcp[13] = flags
	binary.BigEndian.PutUint16(tcp[14:16], 65535)
	// Checksum over the pseudo-header and the segment.
	sum := uint32(0)
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(binary.BigEndian.Uint16(b[i : i+2]))
		}
	}
	add(s4[:])
	add(d4[:])
	add([]byte{0, unix.IPPROTO_TCP, 0, 20})
	add(tcp)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(tcp[16:18], ^uint16(sum))
	err := in(t, path, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		err = unix.Sendto(fd, pkt, 0, &unix.SockaddrInet4{Addr: d4})
		if err != nil && err != unix.EPERM {
			return err // EPERM: a rule dropped it on the way out
		}
		return nil
	})
	if err != nil {
		t.Fatalf("raw segment %s:%d -> %s:%d: %v", src, sport, dst, dport, err)
	}
}

// dialFrom connects from the network's namespace and returns the answer
// and the client's port.
func dialFrom(t *testing.T, path string, addr string) (string, int, error) {
	t.Helper()
	var out string
	var port int
	err := in(t, path, func() error {
		c, err := net.DialTimeout("tcp4", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		port = c.LocalAddr().(*net.TCPAddr).Port
		_ = c.SetDeadline(time.Now().Add(15 * time.Second))
		b := make([]byte, 64)
		n, err := c.Read(b)
		out = string(b[:n])
		return err
	})
	return out, port, err
}

// TestAttachInboundAccept attaches a pod-like namespace (a veth with a
// default route to the network) with inbound accept on port 8080 and checks
// both what it allows and what it must not: a probe from the network gets
// the pod's answer; an unlisted port and UDP see nothing and are logged as
// drops; the workload cannot use an accepted port to send anything that is
// not a reply (a SYN, a spoofed SYN-ACK or ACK), nor use an accepted
// connection to get out. The sniffer on the network's end proves that every
// packet the pod sent was a reply on an accepted connection. Capture mode
// (the default) before it lets nothing in, and detach restores the rules.
func TestAttachInboundAccept(t *testing.T) {
	w := newWorld(t, Config{})
	c := newContainer(t)
	ctx := context.Background()
	run(t, "ip", "-n", strings.TrimPrefix(c.path, "/run/netns/"), "route", "add", "default", "via", netIP.String())
	_, save := backendBinaries(w.m.Backend())
	rulesBefore, _ := nsExec(t, c.path, 10*time.Second, save)
	web, listed, unlisted := listenInPod(t, c.path, 80), listenInPod(t, c.path, 8080), listenInPod(t, c.path, 8081)
	udp := make(chan struct{}, 16)
	if err := in(t, c.path, func() error {
		u, err := net.ListenPacket("udp4", "0.0.0.0:9999")
		if err != nil {
			return err
		}
		t.Cleanup(func() { u.Close() })
		go func() {
			b := make([]byte, 64)
			for {
				if _, _, err := u.ReadFrom(b); err != nil {
					return
				}
				udp <- struct{}{}
			}
		}()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	probe := func(port int) (string, int, error) {
		return dialFrom(t, c.vmPath, fmt.Sprintf("%s:%d", podIP, port))
	}
	if out, _, err := probe(8080); err != nil || out != "pod 8080\n" {
		t.Fatalf("baseline probe before attach: %v: %q", err, out)
	}

	// Capture (the default): what arrives is taken for egress; the pod's
	// server sees nothing.
	id := netnstest.SandboxID("incap")
	if _, err := w.m.Attach(ctx, identity.Sandbox{ID: id}, c.path, Inbound{}); err != nil {
		t.Fatalf("Attach (capture): %v", err)
	}
	n := listed.n.Load()
	if out, _, err := probe(8080); strings.Contains(out, "pod") {
		t.Errorf("capture: the probe reached the pod's server: %v: %q", err, out)
	}
	if got := listed.n.Load() - n; got != 0 {
		t.Errorf("capture: the pod's server counted %d connections, want 0", got)
	}
	if err := w.m.Detach(ctx, id); err != nil {
		t.Fatalf("Detach (capture): %v", err)
	}

	// Accept on 8080.
	id = netnstest.SandboxID("inacc")
	s, err := w.m.Attach(ctx, identity.Sandbox{ID: id}, c.path, Inbound{Mode: InboundAccept, Ports: []int{8080}})
	if err != nil {
		t.Fatalf("Attach (accept): %v", err)
	}
	if err := w.m.CheckAttached(ctx, id); err != nil {
		t.Fatalf("CheckAttached: %v", err)
	}
	sn := sniff(t, c.vmPath)
	var clientPorts []uint16
	accepted := 0
	probeOK := func(what string) {
		t.Helper()
		out, port, err := probe(8080)
		if err != nil || out != "pod 8080\n" {
			t.Errorf("%s: the probe of 8080 from the network: %v: %q, want the pod's answer", what, err, out)
			return
		}
		clientPorts = append(clientPorts, uint16(port))
		accepted++
	}
	before := listed.n.Load()
	probeOK("accept")
	if got := listed.n.Load() - before; got != 1 {
		t.Errorf("the pod's 8080 server counted %d connections, want 1", got)
	}
	// The workload's own egress is still airlock's.
	reqs := w.web.Requests()
	if err := in(t, c.path, func() error {
		out, err := fakenet.Get(w.web.IP.String()+":80", "web.test", "/inbound")
		if err != nil || !strings.Contains(out, "hello from web.test /inbound") {
			t.Errorf("allowed host through the gateway: %v: %q", err, out)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if got := w.web.Requests() - reqs; got != 1 {
		t.Errorf("web.test requests: got %d, want 1", got)
	}

	t.Run("unlisted port sees nothing", func(t *testing.T) {
		n := unlisted.n.Load()
		if out, _, err := probe(8081); err == nil || out != "" {
			t.Errorf("8081 answered: %v: %q", err, out)
		}
		if out, _, err := probe(80); err == nil || out != "" {
			t.Errorf("80 answered: %v: %q", err, out)
		}
		if got := unlisted.n.Load() - n; got != 0 {
			t.Errorf("the pod's 8081 server counted %d connections, want 0", got)
		}
		if got := web.n.Load(); got != 0 {
			t.Errorf("the pod's 80 server counted %d connections, want 0", got)
		}
		w.audit.Wait(t, "drop of the refused connection to 8081", inDropOf(id, "tcp", podIP.String(), 8081))
	})
	t.Run("UDP to the pod stays dropped", func(t *testing.T) {
		if err := in(t, c.vmPath, func() error { return sendUDP(podIP.String()+":9999", 3) }); err != nil {
			t.Fatal(err)
		}
		w.audit.Wait(t, "drop of the datagram to 9999", inDropOf(id, "udp", podIP.String(), 9999))
		select {
		case <-udp:
			t.Errorf("the pod's UDP server got a datagram")
		default:
		}
	})
	t.Run("accepted port as source port", func(t *testing.T) {
		vmTCP := c.vmTCP.Load()
		// A real socket bound to 8080 connecting out: captured by the
		// gateway (198.18.200.2 is not allowed), never sent.
		if err := in(t, c.path, func() error {
			d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: podIP.AsSlice(), Port: 8080},
				Control: func(_, _ string, rc syscall.RawConn) error {
					return rc.Control(func(fd uintptr) { _ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
				}}
			conn, err := d.Dial("tcp4", netIP.String()+":8080")
			if err == nil {
				_ = conn.SetDeadline(time.Now().Add(2 * time.Second))
				b := make([]byte, 16)
				if n, _ := conn.Read(b); n > 0 {
					t.Errorf("a connection from port 8080 to the network got an answer: %q", b[:n])
				}
				conn.Close()
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		// Hand-made segments from 8080: a SYN, a SYN-ACK and an ACK that
		// belong to no accepted connection (conntrack NEW or INVALID).
		for _, flags := range []byte{tcpSYN, tcpSYN | tcpACK, tcpACK, tcpRST | tcpACK, tcpFIN | tcpACK} {
			sendRawTCP(t, c.path, podIP, 8080, netIP, 8080, flags)
			sendRawTCP(t, c.path, podIP, 8080, w.denied.IP, 80, flags)
		}
		if got := c.vmTCP.Load() - vmTCP; got != 0 {
			t.Errorf("the network's server counted %d connections, want 0", got)
		}
		if got := w.denied.Conns(); got != 0 {
			t.Errorf("denied.test counted %d connections, want 0", got)
		}
	})
	t.Run("an accepted connection opens no way out", func(t *testing.T) {
		vmTCP, vmUDP := c.vmTCP.Load(), c.vmUDP.Load()
		tried := make(chan error, 1)
		onConn := func(conn net.Conn) {
			peer := conn.RemoteAddr().(*net.TCPAddr)
			var errs []string
			// Back to the network's server, to the client's own port, and UDP.
			for _, addr := range []string{netIP.String() + ":8080", peer.String()} {
				if out, err := dialRead(addr); err == nil || strings.Contains(out, "vm") {
					errs = append(errs, fmt.Sprintf("%s answered the pod: %q", addr, out))
				}
			}
			if err := sendUDP(netIP.String()+":8081", 3); err != nil && !strings.Contains(err.Error(), "not permitted") {
				errs = append(errs, err.Error())
			}
			if len(errs) > 0 {
				tried <- fmt.Errorf("%s", strings.Join(errs, "; "))
			} else {
				tried <- nil
			}
		}
		listed.onConn.Store(&onConn)
		probeOK("during the server's attempts")
		if err := <-tried; err != nil {
			t.Error(err)
		}
		listed.onConn.Store(nil)
		if got := c.vmTCP.Load() - vmTCP; got != 0 {
			t.Errorf("the network's server counted %d connections from the pod, want 0", got)
		}
		if got := c.vmUDP.Load() - vmUDP; got != 0 {
			t.Errorf("the network's UDP server counted %d datagrams from the pod, want 0", got)
		}
	})

	// A last probe: its reply is the marker that whatever the pod sent
	// before it has reached the sniffer.
	probeOK("marker")
	poll.Until(t, 10*time.Second, "the marker's replies at the network's end", func() bool {
		return slices.ContainsFunc(sn.from(podIP), func(f frame) bool { return f.dport == clientPorts[len(clientPorts)-1] })
	})
	for _, f := range sn.from(podIP) {
		if f.proto != unix.IPPROTO_TCP || f.sport != 8080 || !slices.Contains(clientPorts, f.dport) {
			t.Errorf("the pod sent a packet that is no reply on an accepted connection: %v", f)
		}
	}
	// Counted: the metric's source, and the sandbox's own count.
	poll.Until(t, 10*time.Second, fmt.Sprintf("%d accepted connections counted", accepted), func() bool {
		return s.InboundAccepted() >= uint64(accepted) && w.m.InboundAccepted() >= uint64(accepted)
	})
	if err := w.m.CheckAttached(ctx, id); err != nil {
		t.Errorf("CheckAttached at the end: %v", err)
	}

	if err := w.m.Detach(ctx, id); err != nil {
		t.Fatalf("Detach: %v", err)
	}
	if rulesAfter, _ := nsExec(t, c.path, 10*time.Second, save); stripComments(rulesAfter) != stripComments(rulesBefore) {
		t.Errorf("rules after detach:\n%s\nwant\n%s", rulesAfter, rulesBefore)
	}
	if out, _, err := probe(8081); err != nil || out != "pod 8081\n" {
		t.Errorf("8081 after detach: %v: %q", err, out)
	}
}

// inDropOf matches the drop record of a packet arriving at the pod.
func inDropOf(sandbox, proto, ip string, port int) func(audit.Record) bool {
	match := dropOf(sandbox, proto, ip, port)
	return func(r audit.Record) bool {
		return match(r) && string(r.Extra["chain"]) == `"in"`
	}
}

// TestAttachInboundCheckNoticesChange: CHECK (CheckAttached) fails when an
// accept mode's rules are changed in the namespace: a port's accept removed,
// or an accept of everything put into airlock's input chain. Both backends
// print the rules back in a form Verify reads.
func TestAttachInboundCheckNoticesChange(t *testing.T) {
	for _, backend := range []string{IPTablesLegacy, IPTablesNFT} {
		t.Run(backend, func(t *testing.T) { testAttachInboundCheck(t, backend) })
	}
}

func testAttachInboundCheck(t *testing.T, backend string) {
	w := newWorld(t, Config{IPTables: backend})
	c := newContainer(t)
	ctx := context.Background()
	ipt := "iptables-" + w.m.Backend()
	for _, tc := range []struct {
		name   string
		change []string
		want   string
	}{
		{"accept of everything inserted", []string{"-I", chainIn, "2", "-j", "ACCEPT"}, "filter AIRLOCK-IN"},
		{"the port's SYN accept removed", []string{"-D", chainIn, "4"}, "filter AIRLOCK-IN"},
		{"the replies' accept removed", []string{"-D", chainOut, "7"}, "filter AIRLOCK-OUT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := netnstest.SandboxID("incheck")
			if _, err := w.m.Attach(ctx, identity.Sandbox{ID: id}, c.path, Inbound{Mode: InboundAccept, Ports: []int{8080}}); err != nil {
				t.Fatalf("Attach: %v", err)
			}
			defer func() {
				if err := w.m.Detach(ctx, id); err != nil {
					t.Errorf("Detach: %v", err)
				}
			}()
			if err := w.m.CheckAttached(ctx, id); err != nil {
				t.Fatalf("CheckAttached before the change: %v", err)
			}
			run(t, append([]string{"nsenter", "--net=" + c.path, "--", ipt, "-w"}, tc.change...)...)
			if err := w.m.CheckAttached(ctx, id); err == nil || !strings.Contains(err.Error(), "not in force") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("CheckAttached after the change: %v, want rules not in force in %s", err, tc.want)
			}
		})
	}
}
