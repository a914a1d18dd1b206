package cniplugin

import (
	"errors"
	"fmt"
	"net"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
)

// Quarantine takes every interface of the namespace at netnsPath down but
// loopback, so nothing in it reaches anything: what a failed ADD leaves.
// The routes through those interfaces go with them.
func Quarantine(netnsPath string) error {
	ns, err := vnetns.GetFromPath(netnsPath)
	if err != nil {
		return fmt.Errorf("open %s: %w", netnsPath, err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", netnsPath, err)
	}
	defer h.Close()
	links, err := h.LinkList()
	if err != nil {
		return fmt.Errorf("list links in %s: %w", netnsPath, err)
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := h.LinkSetDown(l); err != nil {
			errs = append(errs, fmt.Errorf("set %s down: %w", l.Attrs().Name, err))
		}
	}
	return errors.Join(errs...)
}
