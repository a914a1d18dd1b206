package netns

// Attack battery against the island: each probe runs inside a sandbox's
// namespace on a thread with the sandbox's credentials (uid 65534, no
// capabilities), tries to get a packet or a connection somewhere other than the
// gateway, and the test then checks that the target (the fake internet, the
// gateway's dialer, the host) saw nothing.

import (
	"bufio"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/test/fakenet"
)

const nobody = 65534

// asNobody runs fn on a fresh thread inside s's namespace whose credentials are
// those of a sandbox process: uid and gid 65534, no supplementary groups, no
// capabilities. Credentials are per thread in Linux; the raw syscalls change
// only this thread, which inNS never hands back to the scheduler.
func asNobody(t *testing.T, s *Sandbox, fn func() error) error {
	t.Helper()
	h, err := vnetns.GetFromPath(s.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return inNS(h, func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
			return fmt.Errorf("setgroups: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, nobody, nobody, nobody); e != 0 {
			return fmt.Errorf("setresgid: %w", e)
		}
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, nobody, nobody, nobody); e != 0 {
			return fmt.Errorf("setresuid: %w", e)
		}
		status, err := os.ReadFile("/proc/thread-self/status")
		if err != nil {
			return err
		}
		for _, want := range []string{"CapEff:\t0000000000000000", "CapPrm:\t0000000000000000", "Uid:\t65534\t65534\t65534"} {
			if !strings.Contains(string(status), want) {
				return fmt.Errorf("attacker thread is not unprivileged: want %q in\n%s", want, status)
			}
		}
		return fn()
	})
}

// leakCounter counts, inside the fake internet, every packet arriving on its
// veth from anything but the host's address: a packet from a sandbox that got
// past the island would be one of them (the gateway dials from the host).
func leakCounter(t *testing.T, n *fakenet.Net) func() int64 {
	t.Helper()
	idx := strings.TrimPrefix(n.Name, "alk-inet-")
	rule := []string{"INPUT", "-i", "alk-i" + idx + "-p", "!", "-s", n.HostAddr.String() + "/32", "-m", "comment", "--comment", "alk-redteam-leaks"}
	ipt := func(args ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", n.Name, "iptables", "-w"}, args...)...).CombinedOutput()
		return string(out), err
	}
	if out, err := ipt(append([]string{"-I"}, rule...)...); err != nil {
		t.Fatalf("leak counter: %v: %s", err, out)
	}
	t.Cleanup(func() { ipt(append([]string{"-D"}, rule...)...) })
	return func() int64 {
		t.Helper()
		out, err := ipt("-L", "INPUT", "-v", "-x", "-n")
		if err != nil {
			t.Fatalf("read leak counter: %v: %s", err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "alk-redteam-leaks") {
				f := strings.Fields(line)
				v, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					t.Fatalf("leak counter line %q: %v", line, err)
				}
				return v
			}
		}
		t.Fatalf("leak counter rule not found in\n%s", out)
		return 0
	}
}

// refusedSocket reports whether creating the socket failed (as it must).
func refusedSocket(domain, typ, proto int) (bool, error) {
	fd, err := unix.Socket(domain, typ, proto)
	if err != nil {
		return true, err
	}
	unix.Close(fd)
	return false, nil
}

func TestAttackIslandFromInside(t *testing.T) {
	w := newWorld(t, Config{}, "loop.test", "meta.test", "island.test", "hostveth.test", "dns.google")
	w.net.SetRecord("loop.test", netip.MustParseAddr("127.0.0.1"))
	w.net.SetRecord("meta.test", netip.MustParseAddr("169.254.169.254"))
	w.net.SetRecord("island.test", w.m.cfg.islandAddr())
	s := w.createReplayed(t, "redteam") // its rules loaded from the template (xtables.go)
	leaks := leakCounter(t, w.net)
	denied := w.denied.IP
	island := w.m.cfg.islandAddr()
	icmpBefore, err := w.net.ICMPEchoRequests()
	if err != nil {
		t.Fatal(err)
	}
	dnsBefore := w.net.AllQueries()

	t.Run("raw and packet sockets", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			for _, sk := range []struct {
				name              string
				domain, typ, prot int
			}{
				{"raw ip", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_RAW},
				{"raw icmp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_ICMP},
				{"raw tcp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_TCP},
				{"raw udp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_UDP},
				{"raw sctp", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_SCTP},
				{"raw gre", unix.AF_INET, unix.SOCK_RAW, unix.IPPROTO_GRE},
				{"raw proto 253", unix.AF_INET, unix.SOCK_RAW, 253},
				{"raw ipv6", unix.AF_INET6, unix.SOCK_RAW, unix.IPPROTO_RAW},
				{"packet", unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ALL))},
				{"packet dgram", unix.AF_PACKET, unix.SOCK_DGRAM, int(htons(unix.ETH_P_IP))},
			} {
				if ok, err := refusedSocket(sk.domain, sk.typ, sk.prot); !ok {
					t.Errorf("%s socket created as nobody", sk.name)
				} else if !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EPROTONOSUPPORT) && !errors.Is(err, unix.EAFNOSUPPORT) {
					t.Logf("%s: %v", sk.name, err)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ping socket, SCTP and other protocols", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			dst := &unix.SockaddrInet4{Addr: denied.As4()}
			// An ICMP datagram ("ping") socket: refused by ping_group_range in a
			// new namespace; if a host ever allows it, the drop rule still holds.
			if fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, unix.IPPROTO_ICMP); err == nil {
				echo := []byte{8, 0, 0, 0, 0, 1, 0, 1, 'a', 'l', 'k'}
				if err := unix.Sendto(fd, echo, 0, dst); err == nil {
					t.Errorf("ping socket echo to %s sent", denied)
				}
				unix.Close(fd)
			}
			// SCTP (when the kernel has it) and UDP-Lite: not TCP, so dropped.
			for _, p := range []struct {
				name      string
				typ, prot int
			}{{"sctp stream", unix.SOCK_STREAM, unix.IPPROTO_SCTP}, {"sctp seqpacket", unix.SOCK_SEQPACKET, unix.IPPROTO_SCTP}, {"udplite", unix.SOCK_DGRAM, unix.IPPROTO_UDPLITE}, {"dccp", unix.SOCK_DCCP, unix.IPPROTO_DCCP}} {
				fd, err := unix.Socket(unix.AF_INET, p.typ, p.prot)
				if err != nil {
					continue // not in this kernel: nothing to send with
				}
				sa := &unix.SockaddrInet4{Port: 7, Addr: denied.As4()}
				cerr := unix.Connect(fd, sa)
				var serr error
				if p.typ == unix.SOCK_DGRAM {
					serr = unix.Sendto(fd, []byte("leak"), 0, sa)
				}
				if cerr == nil && (p.typ != unix.SOCK_DGRAM || serr == nil) {
					t.Errorf("%s to %s: connect %v, send %v: want both refused", p.name, denied, cerr, serr)
				}
				unix.Close(fd)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("UDP to 5353 and other DNS-like ports", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			for _, dst := range []netip.AddrPort{
				netip.AddrPortFrom(w.net.Unused, 5353), netip.AddrPortFrom(w.net.DNSAddr.Addr(), 5353),
				netip.AddrPortFrom(w.net.DNSAddr.Addr(), 853), netip.AddrPortFrom(w.net.DNSAddr.Addr(), 54),
				netip.MustParseAddrPort("224.0.0.251:5353"), netip.MustParseAddrPort("224.0.0.252:5355"),
			} {
				q := []byte{0, 1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 8, 'w', 'e', 'b', 'l', 'e', 'a', 'k', 's', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1}
				if err := unix.Sendto(fd, q, 0, &unix.SockaddrInet4{Port: int(dst.Port()), Addr: dst.Addr().As4()}); err == nil {
					t.Errorf("DNS-shaped datagram to %s sent", dst)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("broadcast, multicast and the island address", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_BROADCAST, 1)
			unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, 255)
			subnetBcast := w.net.Subnet.Addr().As4()
			subnetBcast[3] = 255
			for _, dst := range []netip.Addr{
				netip.MustParseAddr("255.255.255.255"), netip.AddrFrom4(subnetBcast),
				netip.MustParseAddr("224.0.0.1"), netip.MustParseAddr("239.255.255.250"),
				island, w.net.HostAddr,
			} {
				if err := unix.Sendto(fd, []byte("leak"), 0, &unix.SockaddrInet4{Port: 7, Addr: dst.As4()}); err == nil {
					t.Errorf("datagram to %s:7 sent", dst)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("0.0.0.0 is the island's own loopback", func(t *testing.T) {
		// Linux routes a datagram or connect to INADDR_ANY to 127.0.0.1: it
		// reaches the island's loopback (here the explicit proxy), never a wire.
		err := asNobody(t, s, func() error {
			c, err := net.DialTimeout("tcp4", "0.0.0.0:"+strconv.Itoa(w.m.cfg.ExplicitPort), 2*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			if ra := c.RemoteAddr().(*net.TCPAddr); !ra.IP.IsLoopback() {
				t.Errorf("0.0.0.0 connected to %v, want loopback", ra)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("big datagrams and fragments", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DONT)
			for _, size := range []int{1473, 9000, 65507} {
				if err := unix.Sendto(fd, make([]byte, size), 0, &unix.SockaddrInet4{Port: 7, Addr: denied.As4()}); err == nil {
					t.Errorf("%d-byte datagram to %s:7 sent", size, denied)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("IPv6: loopback, link-local, mapped", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			if fd, err := unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM, 0); err == nil {
				for _, dst := range []string{"::1", "fe80::1", "ff02::1", "2001:db8::1", "64:ff9b::" + denied.String()} {
					a := netip.MustParseAddr(dst)
					sa := &unix.SockaddrInet6{Port: 7, Addr: a.As16()}
					if a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast() {
						sa.ZoneId = 1 // lo
					}
					if err := unix.Sendto(fd, []byte("leak"), 0, sa); err == nil {
						t.Errorf("udp6 to [%s]:7 sent", dst)
					}
				}
				unix.Close(fd)
			}
			for _, dst := range []string{"[::1]:3128", "[::1]:53", "[fe80::1%lo]:80", "[2001:db8::1]:80"} {
				if c, err := net.DialTimeout("tcp6", dst, 2*time.Second); err == nil {
					c.Close()
					t.Errorf("tcp6 connect to %s succeeded", dst)
				}
			}
			// An IPv4-mapped address goes through the IPv4 rules: UDP dropped,
			// TCP captured by the gateway, which denies the raw IP.
			mapped := netip.AddrFrom16(denied.As16()) // ::ffff:a.b.c.d
			if c, err := net.Dial("udp6", netip.AddrPortFrom(mapped, 7).String()); err == nil {
				if _, err := c.Write([]byte("leak")); err == nil {
					t.Errorf("udp to mapped %s:7 sent", mapped)
				}
				c.Close()
			}
			if c, err := net.DialTimeout("tcp6", netip.AddrPortFrom(mapped, 7).String(), 3*time.Second); err == nil {
				c.Write([]byte("ping\n"))
				c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if n, _ := c.Read(make([]byte, 16)); n > 0 {
					t.Errorf("mapped TCP to %s:7 was echoed", mapped)
				}
				c.Close()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("TCP fast open and urgent data to a denied host", func(t *testing.T) {
		err := asNobody(t, s, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_FASTOPEN_CONNECT, 1)
			unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2})
			sa := &unix.SockaddrInet4{Port: 7, Addr: denied.As4()}
			// Data in the SYN (MSG_FASTOPEN), then urgent data.
			unix.Sendto(fd, []byte("ping in the syn\n"), unix.MSG_FASTOPEN, sa)
			unix.Sendto(fd, []byte("!"), unix.MSG_OOB, nil)
			buf := make([]byte, 64)
			if n, _, _ := unix.Recvfrom(fd, buf, 0); n > 0 {
				t.Errorf("denied host answered fast-open data: %q", buf[:n])
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})

	t.Run("loopback: only the gateway's three listeners", func(t *testing.T) {
		// Every socket bound in the namespace, as the sandbox sees them: a
		// listener of the host or another sandbox would be listed here.
		var tcpList, udpList string
		var odd []string
		err := asNobody(t, s, func() error {
			b, err := os.ReadFile("/proc/thread-self/net/tcp")
			if err != nil {
				return err
			}
			tcpList = string(b)
			if b, err = os.ReadFile("/proc/thread-self/net/udp"); err != nil {
				return err
			}
			udpList = string(b)
			// Ports nothing listens on, and other loopback addresses (the
			// listeners are bound to 127.0.0.1; port 53 is redirected).
			for _, dst := range []string{"127.0.0.1:22", "127.0.0.1:15002", "127.0.0.1:3129", "127.0.0.1:8080", "127.1.2.3:3128", "127.1.2.3:15001", "127.255.255.254:3128"} {
				if c, err := net.DialTimeout("tcp4", dst, time.Second); err == nil {
					c.Close()
					odd = append(odd, dst)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		lo := hexAddr(netip.MustParseAddr("127.0.0.1"))
		var wantTCP []string
		for _, p := range []int{w.m.cfg.DNSPort, w.m.cfg.ExplicitPort, w.m.cfg.TransparentPort} {
			wantTCP = append(wantTCP, fmt.Sprintf("%s:%04X", lo, p))
		}
		slices.Sort(wantTCP)
		if got := boundSockets(tcpList, "0A"); !slices.Equal(got, wantTCP) {
			t.Errorf("TCP listeners in the island: got %v, want %v", got, wantTCP)
		}
		if got, want := boundSockets(udpList, ""), []string{fmt.Sprintf("%s:%04X", lo, w.m.cfg.DNSPort)}; !slices.Equal(got, want) {
			t.Errorf("UDP sockets in the island: got %v, want %v", got, want)
		}
		if len(odd) > 0 {
			t.Errorf("connected to %v, want refused", odd)
		}
	})

	t.Run("the gateway's listeners cannot be turned around", func(t *testing.T) {
		before := len(w.srv.dialLog())
		explicit := "127.0.0.1:" + strconv.Itoa(w.m.cfg.ExplicitPort)
		transparent := "127.0.0.1:" + strconv.Itoa(w.m.cfg.TransparentPort)
		islandTP := netip.AddrPortFrom(island, uint16(w.m.cfg.TransparentPort)).String()
		hostPort := w.net.HostAddr.String() + ":80"
		type probe struct {
			name, dial, send string
		}
		var probes []probe
		for _, target := range []string{
			explicit, transparent, "127.0.0.1:53", "127.0.0.1:22", "localhost:3128",
			"2130706433:3128", "0x7f.1:3128", "0177.0.0.1:3128", "[::1]:3128", "[::ffff:127.0.0.1]:3128",
			"0.0.0.0:3128", islandTP, "169.254.169.254:80", "[fd00:ec2::254]:80", "100.100.100.200:80",
			hostPort, "loop.test:3128", "meta.test:80", "island.test:15001",
		} {
			probes = append(probes,
				probe{"CONNECT " + target, explicit, "CONNECT " + target + " HTTP/1.1\r\nHost: " + target + "\r\n\r\n"},
				probe{"GET http://" + target, explicit, "GET http://" + target + "/ HTTP/1.1\r\nHost: " + target + "\r\n\r\n"},
			)
		}
		for _, host := range []string{"127.0.0.1:3128", "127.0.0.1:15001", "loop.test:3128", "meta.test", "169.254.169.254", hostPort} {
			// The transparent listener reached directly (no NAT: the original
			// destination is the listener itself) and through the island
			// address (NAT: the original destination is the island).
			probes = append(probes,
				probe{"direct transparent Host " + host, transparent, "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
				probe{"island transparent Host " + host, islandTP, "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
				probe{"island:3128 Host " + host, netip.AddrPortFrom(island, uint16(w.m.cfg.ExplicitPort)).String(), "GET / HTTP/1.1\r\nHost: " + host + "\r\n\r\n"},
			)
		}
		err := asNobody(t, s, func() error {
			for _, p := range probes {
				c, err := net.DialTimeout("tcp4", p.dial, 3*time.Second)
				if err != nil {
					t.Errorf("%s: dial %s: %v (the probe did not run)", p.name, p.dial, err)
					continue
				}
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Write([]byte(p.send))
				line, _ := bufio.NewReader(c).ReadString('\n')
				c.Close()
				if strings.Contains(line, " 200 ") {
					t.Errorf("%s: got %q, want a refusal", p.name, strings.TrimSpace(line))
				}
			}
			// Raw bytes and a TLS ClientHello for a DNS-over-TLS provider on
			// 853, through transparent capture.
			if c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(w.net.Unused, 853).String(), 3*time.Second); err == nil {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				tc := tls.Client(c, &tls.Config{ServerName: "dns.example", InsecureSkipVerify: true})
				if tc.Handshake() == nil {
					t.Errorf("TLS to port 853 completed")
				}
				c.Close()
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.srv.dialLog()[before:]; len(got) != 0 {
			t.Errorf("the gateway dialed %v for probes that must never leave", got)
		}
	})

	t.Run("an allowed Host at a denied IP goes to the allowed host", func(t *testing.T) {
		beforeWeb := w.web.Requests()
		err := asNobody(t, s, func() error {
			c, err := net.DialTimeout("tcp4", netip.AddrPortFrom(denied, 80).String(), 3*time.Second)
			if err != nil {
				return err
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(5 * time.Second))
			fmt.Fprintf(c, "GET /fronted HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n")
			line, _ := bufio.NewReader(c).ReadString('\n')
			if !strings.Contains(line, " 200 ") {
				t.Logf("fronted request: %q", line)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got := w.web.Requests() - beforeWeb; got != 1 {
			t.Errorf("web.test requests: got %d, want 1 (the gateway dials the name it checked)", got)
		}
	})

	t.Run("abstract and path unix sockets of the host", func(t *testing.T) {
		name := fmt.Sprintf("@airlock-redteam-%d-%d", os.Getpid(), time.Now().UnixNano())
		l, err := net.Listen("unix", name)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		accepted := make(chan struct{}, 16)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				accepted <- struct{}{}
				c.Close()
			}
		}()
		var listing string
		err = asNobody(t, s, func() error {
			if c, err := net.DialTimeout("unix", name, 2*time.Second); err == nil {
				c.Close()
				t.Errorf("connected to the host's abstract socket %s", name)
			}
			b, err := os.ReadFile("/proc/thread-self/net/unix")
			listing = string(b)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(listing, strings.TrimPrefix(name, "@")) {
			t.Errorf("the host's abstract socket is listed inside the sandbox")
		}
		select {
		case <-accepted:
			t.Errorf("the host's abstract socket accepted a connection from the sandbox")
		default:
		}
	})

	t.Run("/proc/net shows only the island", func(t *testing.T) {
		files := map[string]string{}
		err := asNobody(t, s, func() error {
			for _, f := range []string{"dev", "route", "arp", "tcp", "udp", "tcp6", "udp6", "raw", "if_inet6", "fib_trie"} {
				b, err := os.ReadFile("/proc/thread-self/net/" + f)
				if err == nil {
					files[f] = string(b)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var ifaces []string
		for _, line := range strings.Split(files["dev"], "\n")[2:] {
			if name, _, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				ifaces = append(ifaces, name)
			}
		}
		if !slices.Equal(ifaces, []string{"lo"}) {
			t.Errorf("interfaces visible: %v, want only lo", ifaces)
		}
		for f, body := range files {
			for _, host := range []netip.Addr{w.net.HostAddr, w.net.DNSAddr.Addr(), w.web.IP} {
				if strings.Contains(body, host.String()) || strings.Contains(body, hexAddr(host)) {
					t.Errorf("/proc/net/%s shows host address %s", f, host)
				}
			}
		}
		if strings.Count(files["route"], "\n") != 2 {
			t.Errorf("routes visible:\n%s\nwant only the island's default", files["route"])
		}
	})

	// Last: this flood also spends the new-flow budget (TestAttackConntrackFlood).
	t.Run("UDP to every port of a denied host", func(t *testing.T) {
		sent := 0
		err := asNobody(t, s, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			for port := 1; port <= 65535; port++ {
				if port == 53 {
					continue // redirected to the DNS filter, below
				}
				if unix.Sendto(fd, []byte("leak"), 0, &unix.SockaddrInet4{Port: port, Addr: denied.As4()}) == nil {
					sent++
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if sent != 0 {
			t.Errorf("%d of 65534 datagrams were sent, want all refused", sent)
		}
	})

	// Nothing reached the fake internet but what the gateway dialed, and no
	// datagram, echo request or DNS query for a leak name.
	if got := leaks(); got != 0 {
		t.Errorf("packets from the sandbox at the fake internet: %d, want 0", got)
	}
	if got := w.denied.Conns(); got != 0 {
		t.Errorf("denied host TCP connections: %d, want 0", got)
	}
	if got := w.denied.UDP(); got != 0 {
		t.Errorf("denied host datagrams: %d, want 0", got)
	}
	if got, err := w.net.ICMPEchoRequests(); err != nil || got != icmpBefore {
		t.Errorf("echo requests at the fake internet: %d (%v), want %d", got, err, icmpBefore)
	}
	if got := w.net.Queries("webleaks.test"); got != 0 {
		t.Errorf("fake DNS saw the leak name %d times", got)
	}
	t.Logf("fake DNS queries during the battery: %d (the gateway resolving allowed names)", w.net.AllQueries()-dnsBefore)
	if t.Failed() {
		_, save := backendBinaries(w.m.Backend())
		out, _ := nsExec(t, s.Path, 5*time.Second, save)
		t.Logf("rules:\n%s", out)
	}
}

func TestAttackConntrackFlood(t *testing.T) {
	// Every datagram to a new IP:53 is redirected to the DNS listener and
	// becomes a conntrack entry; without a limit a sandbox fills the table
	// (kernel memory no cgroup charges) in seconds.
	w := newWorld(t, Config{})
	s := w.createReplayed(t, "ctflood")
	const sends = 20000
	refused := 0
	start := time.Now()
	err := asNobody(t, s, func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		for i := range sends {
			dst := [4]byte{203, 0, byte(i >> 8), byte(i)}
			if unix.Sendto(fd, []byte{0}, 0, &unix.SockaddrInet4{Port: 53, Addr: dst}) != nil {
				refused++
			}
		}
		return nil
	})
	elapsed := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	var count int
	var timeout string
	err = inSandbox(t, s, func() error {
		b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_count")
		if err != nil {
			return err
		}
		count, err = strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return err
		}
		b, err = os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_udp_timeout")
		timeout = strings.TrimSpace(string(b))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// The bound uses the time the flood took, so a slow machine only widens it.
	bound := DefaultNewFlowBurst + int(float64(DefaultNewFlowRate)*elapsed.Seconds()) + 100
	t.Logf("%d datagrams in %v: %d refused, %d conntrack entries (bound %d)", sends, elapsed, refused, count, bound)
	if count > bound || count >= sends {
		t.Errorf("conntrack entries after %d new flows: %d, want at most %d", sends, count, bound)
	}
	if refused == 0 {
		t.Errorf("no datagram of the flood was refused")
	}
	if timeout != "10" {
		t.Errorf("island nf_conntrack_udp_timeout: %q, want 10", timeout)
	}
	// The sandbox still resolves after the flood is over (the bucket refills).
	time.Sleep(time.Second)
	out, err := nsExec(t, s.Path, 15*time.Second, "dig", "+short", "+tries=1", "+time=3", "@127.0.0.1", "web.test", "A")
	if err != nil || strings.TrimSpace(out) != w.web.IP.String() {
		t.Errorf("dig after the flood: %v: %q", err, out)
	}
}

// boundSockets lists the local addresses ("0100007F:0035") of the sockets in a
// /proc/net/{tcp,udp} listing, only those in state (hex) when state is set.
func boundSockets(listing, state string) []string {
	var out []string
	for _, line := range strings.Split(listing, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 4 || (state != "" && f[3] != state) {
			continue
		}
		out = append(out, f[1])
	}
	slices.Sort(out)
	return out
}

// hexAddr is an IPv4 address as /proc/net/{tcp,udp,route} print it.
func hexAddr(a netip.Addr) string {
	b := a.As4()
	return fmt.Sprintf("%02X%02X%02X%02X", b[3], b[2], b[1], b[0])
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
