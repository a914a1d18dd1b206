package netns

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// nfnetlink_log constants (linux/netfilter/nfnetlink_log.h).
const (
	nfulnlMsgPacket  = 0
	nfulnlMsgConfig  = 1
	nfulaCfgCmd      = 1
	nfulaCfgMode     = 2
	nfulaCfgTimeout  = 4
	nfulnlCfgCmdBind = 1
	nfulnlCopyPacket = 2
	nfulaPayload     = 9
	nfulaPrefix      = 10
	nfgenmsgLen      = 4
	nlaTypeMask      = 0x3fff
)

// nflogConn is a NETLINK_NETFILTER socket bound to one nfnetlink_log group in the
// namespace where it was opened. Reads go through the runtime poller so Close
// unblocks a pending Read.
type nflogConn struct {
	f *os.File
}

// openNFLog opens the socket in the calling thread's namespace and binds group.
func openNFLog(group uint16) (*nflogConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("bind: %w", err)
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 1<<20)
	// Bind the group, then ask for the first nflogSize bytes of each packet.
	bind := make([]byte, 4)
	bind[0] = nfulnlCfgCmdBind
	mode := make([]byte, 8)
	binary.BigEndian.PutUint32(mode[0:4], nflogSize)
	mode[4] = nfulnlCopyPacket
	// Flush batches every 50 ms instead of the kernel's default second.
	timeout := make([]byte, 4)
	binary.BigEndian.PutUint32(timeout, 5)
	for i, attr := range []struct {
		typ  uint16
		data []byte
	}{{nfulaCfgCmd, bind[:1]}, {nfulaCfgMode, mode[:6]}, {nfulaCfgTimeout, timeout}} {
		msg := nflogConfigMsg(uint32(i+1), group, attr.typ, attr.data)
		if err := unix.Sendto(fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("config group %d: %w", group, err)
		}
		if err := nflogAck(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("config group %d: %w", group, err)
		}
	}
	return &nflogConn{f: os.NewFile(uintptr(fd), "nflog")}, nil
}

// nflogConfigMsg builds one NFULNL_MSG_CONFIG request with a single attribute.
func nflogConfigMsg(seq uint32, group uint16, attrType uint16, data []byte) []byte {
	alen := 4 + len(data)
	total := unix.NLMSG_HDRLEN + nfgenmsgLen + nlaAlign(alen)
	b := make([]byte, total)
	binary.NativeEndian.PutUint32(b[0:4], uint32(total))
	binary.NativeEndian.PutUint16(b[4:6], uint16(unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgConfig))
	binary.NativeEndian.PutUint16(b[6:8], unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	binary.NativeEndian.PutUint32(b[8:12], seq)
	g := b[unix.NLMSG_HDRLEN:]
	g[0] = unix.AF_UNSPEC
	g[1] = unix.NFNETLINK_V0
	binary.BigEndian.PutUint16(g[2:4], group)
	a := g[nfgenmsgLen:]
	binary.NativeEndian.PutUint16(a[0:2], uint16(alen))
	binary.NativeEndian.PutUint16(a[2:4], attrType)
	copy(a[4:], data)
	return b
}

func nlaAlign(n int) int { return (n + unix.NLA_ALIGNTO - 1) &^ (unix.NLA_ALIGNTO - 1) }

// nflogAck waits (briefly, the socket is non-blocking) for the kernel's ack.
func nflogAck(fd int) error {
	buf := make([]byte, 4096)
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) {
			if time.Now().After(deadline) {
				return errors.New("no ack from nfnetlink_log")
			}
			pfd := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			_, _ = unix.Poll(pfd, 100)
			continue
		}
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Type == unix.NLMSG_ERROR && len(m.Data) >= 4 {
				if code := int32(binary.NativeEndian.Uint32(m.Data[0:4])); code != 0 {
					return unix.Errno(-code)
				}
				return nil
			}
		}
	}
}

// Read blocks until the kernel sends a batch of log messages or the deadline set
// with SetReadDeadline passes, and returns the packets in it.
func (c *nflogConn) Read(buf []byte) ([]droppedPacket, error) {
	n, err := c.f.Read(buf)
	if err != nil {
		return nil, err
	}
	return parseNFLog(buf[:n]), nil
}

// SetReadDeadline bounds the next Read.
func (c *nflogConn) SetReadDeadline(t time.Time) error { return c.f.SetReadDeadline(t) }

// Close closes the socket and unblocks a pending Read.
func (c *nflogConn) Close() error { return c.f.Close() }

// droppedPacket is what the audit needs from one logged packet.
type droppedPacket struct {
	Prefix   string
	Protocol string // tcp, udp, icmp or the IP protocol number
	Dst      netip.Addr
	Port     int // destination port for tcp/udp
	ICMPType int // for icmp
}

// parseNFLog extracts the packets from a batch of netlink messages. Messages that
// are not NFULNL_MSG_PACKET or carry no IPv4 payload are skipped.
func parseNFLog(b []byte) []droppedPacket {
	msgs, err := syscall.ParseNetlinkMessage(b)
	if err != nil {
		return nil
	}
	var out []droppedPacket
	for _, m := range msgs {
		if m.Header.Type != unix.NFNL_SUBSYS_ULOG<<8|nfulnlMsgPacket || len(m.Data) < nfgenmsgLen {
			continue
		}
		var p droppedPacket
		var payload []byte
		attrs := m.Data[nfgenmsgLen:]
		for len(attrs) >= 4 {
			alen := int(binary.NativeEndian.Uint16(attrs[0:2]))
			atyp := binary.NativeEndian.Uint16(attrs[2:4]) & nlaTypeMask
			if alen < 4 || alen > len(attrs) {
				break
			}
			val := attrs[4:alen]
			switch atyp {
			case nfulaPrefix:
				p.Prefix = strings.TrimRight(string(val), "\x00")
			case nfulaPayload:
				payload = val
			}
			if a := nlaAlign(alen); a < len(attrs) {
				attrs = attrs[a:]
			} else {
				attrs = nil
			}
		}
		if ok := parseIPv4(payload, &p); ok {
			out = append(out, p)
		}
	}
	return out
}

// parseIPv4 fills protocol, destination and port from an IPv4 packet's headers.
func parseIPv4(pkt []byte, p *droppedPacket) bool {
	if len(pkt) < 20 || pkt[0]>>4 != 4 {
		return false
	}
	ihl := int(pkt[0]&0x0f) * 4
	if ihl < 20 || len(pkt) < ihl {
		return false
	}
	p.Dst = netip.AddrFrom4([4]byte(pkt[16:20]))
	l4 := pkt[ihl:]
	fragOff := binary.BigEndian.Uint16(pkt[6:8]) & 0x1fff
	switch proto := pkt[9]; proto {
	case unix.IPPROTO_TCP, unix.IPPROTO_UDP:
		p.Protocol = "tcp"
		if proto == unix.IPPROTO_UDP {
			p.Protocol = "udp"
		}
		if fragOff == 0 && len(l4) >= 4 {
			p.Port = int(binary.BigEndian.Uint16(l4[2:4]))
		}
	case unix.IPPROTO_ICMP:
		p.Protocol = "icmp"
		if fragOff == 0 && len(l4) >= 1 {
			p.ICMPType = int(l4[0])
		}
	default:
		p.Protocol = fmt.Sprintf("ip-%d", proto)
	}
	return true
}
