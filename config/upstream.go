package config

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strings"
)

// Upstream configures how the gateway reaches the internet.
type Upstream struct {
	// AllowCIDRs are ranges the SSRF guard lets through (an internal registry).
	AllowCIDRs []string `yaml:"allow_cidrs"`
	// CAFile is an extra PEM bundle trusted for upstream TLS, beside the system roots.
	CAFile string `yaml:"ca_file"`
	// Proxy is the company's egress proxy every upstream connection goes
	// through (CONNECT origin:port): http://host[:port] or https://host[:port],
	// never with credentials in it. Empty: the gateway dials origins itself.
	Proxy string `yaml:"proxy"`
	// NoProxy lists origins dialed directly instead: host names, *.domain or
	// .domain (names under it), addresses and CIDRs (IP-literal origins).
	NoProxy []string `yaml:"no_proxy"`
	// ProxyAuthSecret names a secret of the secrets file whose value,
	// "user:password", is sent to the proxy as Proxy-Authorization: Basic.
	ProxyAuthSecret string `yaml:"proxy_auth_secret"`
}

// validate checks allow_cidrs and the proxy keys; secretsFile is secrets.file.
func (u *Upstream) validate(secretsFile string) error {
	for i, s := range u.AllowCIDRs {
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("upstream.allow_cidrs[%d]: %q is not a CIDR such as 10.0.0.0/8", i, s)
		}
	}
	return u.validateProxy(secretsFile)
}

// validateProxy checks upstream.proxy, no_proxy and proxy_auth_secret.
func (u *Upstream) validateProxy(secretsFile string) error {
	if u.Proxy == "" {
		if len(u.NoProxy) > 0 || u.ProxyAuthSecret != "" {
			return errors.New("upstream.no_proxy and upstream.proxy_auth_secret need upstream.proxy")
		}
		return nil
	}
	p, err := url.Parse(u.Proxy)
	switch {
	case err != nil:
		return fmt.Errorf("upstream.proxy: %q is not a URL: %w", u.Proxy, err)
	case p.User != nil:
		return errors.New("upstream.proxy: the URL carries credentials; put \"user:password\" in a secret of the secrets file and name it in upstream.proxy_auth_secret")
	case p.Scheme != "http" && p.Scheme != "https":
		return fmt.Errorf("upstream.proxy: %q: scheme must be http or https", u.Proxy)
	case p.Hostname() == "" || (p.Path != "" && p.Path != "/") || p.RawQuery != "" || p.Fragment != "":
		return fmt.Errorf("upstream.proxy: %q: want http://host[:port] or https://host[:port]", u.Proxy)
	}
	for i, e := range u.NoProxy {
		if !validNoProxy(e) {
			return fmt.Errorf("upstream.no_proxy[%d]: %q is not a host name, *.domain, .domain, address or CIDR", i, e)
		}
	}
	if u.ProxyAuthSecret != "" && secretsFile == "" {
		return fmt.Errorf("upstream.proxy_auth_secret: %q names a secret but secrets.file is not set", u.ProxyAuthSecret)
	}
	return nil
}

// validNoProxy reports whether e is an address, a CIDR, or a host name
// (letters, digits, '-' and '.') optionally written *.name or .name.
func validNoProxy(e string) bool {
	if _, err := netip.ParsePrefix(e); err == nil {
		return true
	}
	if _, err := netip.ParseAddr(e); err == nil {
		return true
	}
	name := strings.TrimPrefix(strings.TrimPrefix(e, "*"), ".")
	if name == "" || len(name) > 253 {
		return false
	}
	for _, l := range strings.Split(strings.TrimSuffix(name, "."), ".") {
		if l == "" || len(l) > 63 {
			return false
		}
		for _, r := range l {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}
