package identity

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/hostname"
)

// Ports a preset host or a bare --allow HOST is reachable on (the library's
// default_ports), and the ports that carry DNS (its dns_ports).
const (
	PortHTTPS = 443
	PortHTTP  = 80
	PortDNS   = 53
	PortDoT   = 853
)

// AnyPort as the port of an allow entry (HOST:*) means every port; DNS ports
// still need naming.
const AnyPort = "*"

// HostPorts is one host pattern's entry in data.airlock.hosts.registry or
// data.airlock.hosts.allow, merged over every preset or --allow that names it.
type HostPorts struct {
	Ports   map[int]bool
	AnyPort bool
	Git     bool
}

func (h *HostPorts) AddPort(p int) {
	if h.Ports == nil {
		h.Ports = map[int]bool{}
	}
	h.Ports[p] = true
}

func (h *HostPorts) AddDefaultPorts() {
	h.AddPort(PortHTTPS)
	h.AddPort(PortHTTP)
}

// Value is the entry as the library reads it: true for ports 443 and 80 alone
// (the common case, so a 100,000-host preset costs no more than before), else
// {"ports": [...], "git": true}.
func (h *HostPorts) Value() any {
	if !h.AnyPort && !h.Git && len(h.Ports) == 2 && h.Ports[PortHTTPS] && h.Ports[PortHTTP] {
		return true
	}
	ports := make([]int, 0, len(h.Ports))
	for p := range h.Ports {
		ports = append(ports, p)
	}
	sort.Ints(ports)
	list := make([]any, 0, len(ports)+1)
	for _, p := range ports {
		list = append(list, p)
	}
	if h.AnyPort {
		list = append(list, AnyPort)
	}
	obj := map[string]any{"ports": list}
	if h.Git {
		obj["git"] = true
	}
	return obj
}

// IsDNSPort reports whether p carries DNS (53, 853).
func IsDNSPort(p int) bool { return p == PortDNS || p == PortDoT }

// ParseHostPorts reads one preset value: true (ports 443 and 80), or an
// object with "ports" (integers; default 443 and 80) and "git" (this host
// serves git, so the read-only rules allow git's fetch). A preset can never
// name a DNS port: raw DNS through a tunnel needs a rule of its own.
func ParseHostPorts(v any) (*HostPorts, error) {
	h := &HostPorts{}
	if b, ok := v.(bool); ok && b {
		h.AddDefaultPorts()
		return h, nil
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("value must be true or an object such as {\"ports\": [443, 80], \"git\": true}")
	}
	for k := range obj {
		if k != "ports" && k != "git" {
			return nil, fmt.Errorf("unknown field %q (want ports, git)", k)
		}
	}
	if g, ok := obj["git"]; ok {
		b, isBool := g.(bool)
		if !isBool {
			return nil, fmt.Errorf("git must be true or false")
		}
		h.Git = b
	}
	raw, ok := obj["ports"]
	if !ok {
		h.AddDefaultPorts()
		return h, nil
	}
	list, ok := raw.([]any)
	if !ok || len(list) == 0 {
		return nil, fmt.Errorf("ports must be a non-empty list of port numbers such as [443, 80]")
	}
	for _, pv := range list {
		p, err := presetPort(pv)
		if err != nil {
			return nil, err
		}
		h.AddPort(p)
	}
	return h, nil
}

// presetPort reads one port number of a preset.
func presetPort(v any) (int, error) {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case float64:
		s = strconv.FormatFloat(x, 'f', -1, 64)
	case int:
		s = strconv.Itoa(x)
	default:
		return 0, fmt.Errorf("port %v is not a number in 1..65535", v)
	}
	p, err := hostname.ParsePort(s)
	if err != nil {
		return 0, fmt.Errorf("port %s is not a number in 1..65535", s)
	}
	if IsDNSPort(p) {
		return 0, fmt.Errorf("port %d carries DNS: a preset cannot open it (write a rule with dns_port_optin)", p)
	}
	return p, nil
}

// NormalizeAllow returns the canonical form of one allow entry, the string
// NewAllowList stores and policy enforces: a host pattern (host, *.domain,
// **.domain, IP), optionally followed by :PORT or :* — "pypi.org",
// "pypi.org:8443", "*.corp.example:*", "[2001:db8::1]:8443". An unbracketed
// IPv6 literal has no port.
func NormalizeAllow(s string) (string, error) {
	pattern, port, err := SplitAllow(s)
	if err != nil {
		return "", err
	}
	if port == "" {
		return pattern, nil
	}
	if strings.IndexByte(pattern, ':') >= 0 {
		pattern = "[" + pattern + "]"
	}
	return pattern + ":" + port, nil
}

// SplitAllow splits an allow entry into its normalized pattern and its port:
// "" (none given), "*" or a decimal port in 1..65535.
func SplitAllow(s string) (pattern, port string, err error) {
	h := s
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", fmt.Errorf("unterminated IPv6 literal")
		}
		h = s[:end+1]
		if rest := s[end+1:]; rest != "" {
			p, ok := strings.CutPrefix(rest, ":")
			if !ok {
				return "", "", fmt.Errorf("junk %q after the IPv6 literal (want [IPv6]:PORT)", rest)
			}
			if port, err = allowPort(p); err != nil {
				return "", "", err
			}
		}
	case strings.Count(s, ":") == 1:
		var p string
		h, p, _ = strings.Cut(s, ":")
		if port, err = allowPort(p); err != nil {
			return "", "", err
		}
	}
	pattern, err = hostname.NormalizePattern(h)
	if err != nil {
		return "", "", err
	}
	return pattern, port, nil
}

// allowPort checks the port of an allow entry.
func allowPort(p string) (string, error) {
	if p == AnyPort {
		return p, nil
	}
	n, err := hostname.ParsePort(p)
	if err != nil {
		return "", fmt.Errorf("port %q is not %s or a number in 1..65535", p, AnyPort)
	}
	return strconv.Itoa(n), nil
}

// AllowEntries merges normalized allow entries by host pattern into the
// object policy reads (data.airlock.hosts.allow, input.sandbox.allow).
func AllowEntries(allow []string) (map[string]any, error) {
	entries := map[string]*HostPorts{}
	for _, a := range allow {
		pattern, port, err := SplitAllow(a)
		if err != nil {
			return nil, fmt.Errorf("policy: allow_hosts: %q: %w", a, err)
		}
		h := entries[pattern]
		if h == nil {
			h = &HostPorts{}
			entries[pattern] = h
		}
		switch port {
		case "":
			h.AddDefaultPorts()
		case AnyPort:
			h.AnyPort = true
		default:
			n, _ := strconv.Atoi(port)
			h.AddPort(n)
		}
	}
	out := make(map[string]any, len(entries))
	for k, h := range entries {
		out[k] = h.Value()
	}
	return out, nil
}
