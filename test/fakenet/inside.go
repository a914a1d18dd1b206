package fakenet

import (
	"fmt"
	"net"
	"net/netip"
	"time"
)

// Listen opens a TCP listener on h's address and port inside the fake
// internet (for a test's own server there, such as a parent proxy); it is
// closed with the fake internet.
func (n *Net) Listen(h *Host, port int) (net.Listener, error) {
	var l net.Listener
	err := n.inNS(func() error {
		var err error
		l, err = net.Listen("tcp4", netip.AddrPortFrom(h.IP, uint16(port)).String())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fakenet: listen on %s:%d: %w", h.IP, port, err)
	}
	n.mu.Lock()
	n.closers = append(n.closers, l)
	n.mu.Unlock()
	return l, nil
}

// Lookup answers name as the fake resolver would, without counting a query.
func (n *Net) Lookup(name string) (netip.Addr, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	ip, ok := n.records[name]
	return ip, ok
}

// Dial connects from inside the fake internet to addr, which must be in its
// subnet: a server of the test there never reaches anything else.
func (n *Net) Dial(addr netip.AddrPort) (net.Conn, error) {
	if !n.Subnet.Contains(addr.Addr()) {
		return nil, fmt.Errorf("fakenet: %s is outside the fake internet %s", addr, n.Subnet)
	}
	var c net.Conn
	err := n.inNS(func() error {
		var err error
		c, err = net.DialTimeout("tcp4", addr.String(), 10*time.Second)
		return err
	})
	return c, err
}
