package policy

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/airlock-dev/airlock/hostname"
)

// ExplainConfig says which policy Explain describes and for which sandbox.
type ExplainConfig struct {
	// Policy is the engine configuration (Dir, Presets, AllowHosts); its
	// cache and watch settings are ignored.
	Policy Config
	// Labels are the asking sandbox's labels (rules may read them).
	Labels map[string]string
	// Secrets maps a host pattern to the ids of the secrets bound to it (from
	// the secrets file; policy does not read secrets itself).
	Secrets map[string][]string
}

// Explanation is what a policy lets a sandbox do, host by host.
type Explanation struct {
	Presets []string   `json:"presets"`
	Hosts   []HostView `json:"hosts"`
	// NotProbed counts the host names past MaxExplainHosts, not asked about.
	NotProbed int `json:"not_probed,omitempty"`
}

// MaxExplainHosts bounds the names Explain asks about (each costs a few dozen
// decisions); the rest are counted in Explanation.NotProbed.
const MaxExplainHosts = 2000

// HostView is what one host (or wildcard pattern) may do.
type HostView struct {
	Host    string     `json:"host"`
	DNS     bool       `json:"dns"`
	Connect []PortView `json:"connect,omitempty"` // CONNECT and TLS (SNI), per port
	TCP     []int      `json:"tcp,omitempty"`     // raw TCP ports
	HTTP    []HTTPView `json:"http,omitempty"`    // per port with an intercepted or plain-HTTP path
	Secrets []string   `json:"secrets,omitempty"`
}

// PortView is one port's CONNECT/TLS decision.
type PortView struct {
	Port        int  `json:"port"`
	Intercepted bool `json:"intercepted"`
}

// HTTPView is what HTTP requests to one port may do: Tunnel when the CONNECT is
// allowed without interception (every request passes unseen), else the
// methods and the probed paths each may use ("*" is any path).
type HTTPView struct {
	Port    int                 `json:"port"`
	Tunnel  bool                `json:"tunnel,omitempty"`
	Methods map[string][]string `json:"methods,omitempty"`
}

// Methods Explain probes, and the path it uses for "any path".
var (
	explainMethods = []string{"GET", "HEAD", "OPTIONS", "POST", "PUT", "PATCH", "DELETE"}
	explainPorts   = []int{443, 80, 22, 8443}
)

const anyPathProbe = "/airlock-explain/any/path"

// offlineEvalTimeout bounds one of Explain's evaluations.
const offlineEvalTimeout = 10 * time.Second

// Explain describes, for each host a policy names, what a sandbox may do:
// DNS, CONNECT/TLS per port and whether it is intercepted, raw TCP, HTTP
// methods and paths, and the secrets bound. It works by asking the policy:
// the hosts are those named by the active presets, the allow hosts, the
// secrets and any string in the policy's own rules and data that is a host
// name; the ports are 443, 80, 22, 8443 and any the entries or rules name; the
// paths are the policy's literal paths and globs (a "*" probed as "x") and
// one path no rule names, shown as "*". A host only a computed name would
// match is not listed.
func Explain(ctx context.Context, ec ExplainConfig) (*Explanation, error) {
	cfg := ec.Policy
	cfg.CacheSize, cfg.Watch = -1, false
	if cfg.EvalTimeout == 0 {
		// Offline: nothing waits on a probe but the command, and a loaded
		// machine must not turn an allow into a fail-closed deny.
		cfg.EvalTimeout = offlineEvalTimeout
	}
	us, err := units(cfg.Dir, false)
	if err != nil {
		return nil, err
	}
	b, err := build(us[0], cfg)
	if err != nil {
		return nil, err
	}
	e, err := New(cfg, nil)
	if err != nil {
		return nil, err
	}
	defer e.Close()
	hosts, ports, paths := explainProbes(b, ec.Secrets)
	out := &Explanation{Presets: activePresets(b)}
	if len(hosts) > MaxExplainHosts {
		out.NotProbed = len(hosts) - MaxExplainHosts
		hosts = hosts[:MaxExplainHosts]
	}
	sb := Sandbox{ID: "explain", Labels: ec.Labels}
	for _, h := range hosts {
		v := explainHost(ctx, e, sb, h, ports, paths)
		v.Secrets = ec.Secrets[h]
		if v.DNS || len(v.Connect) > 0 || len(v.TCP) > 0 || len(v.HTTP) > 0 || len(v.Secrets) > 0 {
			out.Hosts = append(out.Hosts, v)
		}
	}
	return out, nil
}

func activePresets(b *built) []string {
	var out []string
	cfg, _ := b.Data["airlock"].(map[string]any)["config"].(map[string]any)
	ps, _ := cfg["presets"].([]any)
	for _, p := range ps {
		out = append(out, fmt.Sprint(p))
	}
	return out
}

// explainHost probes one host (a pattern is probed with a name it matches).
func explainHost(ctx context.Context, e *Engine, sb Sandbox, pattern string, ports []int, paths []string) HostView {
	host := probeName(pattern)
	v := HostView{Host: pattern}
	ask := func(kind Kind, port int, h *HTTP) Decision {
		in := &Input{Kind: kind, Sandbox: sb, Destination: Destination{Host: host, Port: port}, HTTP: h}
		if kind == KindDNS {
			in.Destination.Port = 0
			in.DNS = &DNS{QName: host + ".", QType: "A"}
		}
		return e.Decide(ctx, in)
	}
	v.DNS = ask(KindDNS, 0, nil).Allowed
	for _, p := range ports {
		c := ask(KindConnect, p, nil)
		if c.Allowed {
			v.Connect = append(v.Connect, PortView{Port: p, Intercepted: c.MITM})
		}
		if ask(KindTCP, p, nil).Allowed {
			v.TCP = append(v.TCP, p)
		}
		hv := HTTPView{Port: p}
		if c.Allowed && !c.MITM && p != 80 {
			hv.Tunnel = true
			v.HTTP = append(v.HTTP, hv)
			continue
		}
		if !c.Allowed && p != 80 {
			continue // HTTPS to it is refused at CONNECT
		}
		for _, m := range explainMethods {
			scheme := "https"
			if p == 80 {
				scheme = "http"
			}
			ok := func(path string) bool {
				return ask(KindHTTP, p, &HTTP{Method: m, Scheme: scheme, Path: path}).Allowed
			}
			if ok(anyPathProbe) {
				hv.add(m, "*")
				continue
			}
			for _, path := range paths {
				if ok(probePath(path)) {
					hv.add(m, path)
				}
			}
		}
		if len(hv.Methods) > 0 {
			v.HTTP = append(v.HTTP, hv)
		}
	}
	return v
}

func (h *HTTPView) add(method, path string) {
	if h.Methods == nil {
		h.Methods = map[string][]string{}
	}
	h.Methods[method] = append(h.Methods[method], path)
}

// probeName is a name pattern matches: the host itself, or a label under a
// wildcard's domain.
func probeName(pattern string) string {
	switch {
	case strings.HasPrefix(pattern, "**."):
		return "a.b." + pattern[3:]
	case strings.HasPrefix(pattern, "*."):
		return "a." + pattern[2:]
	}
	return pattern
}

// probePath is a path a glob or literal path matches: each "*" becomes "x".
func probePath(p string) string { return strings.ReplaceAll(p, "*", "x") }

// explainProbes collects the hosts, ports and paths to ask about.
func explainProbes(b *built, secretHosts map[string][]string) (hosts []string, ports []int, paths []string) {
	hs, ps, pa := map[string]bool{}, map[int]bool{}, map[string]bool{}
	for _, p := range explainPorts {
		ps[p] = true
	}
	addHost := func(s string) {
		if n, err := hostname.NormalizePattern(s); err == nil && looksLikeHost(n) {
			hs[n] = true
		}
	}
	air, _ := b.Data["airlock"].(map[string]any)
	hostsDoc, _ := air["hosts"].(map[string]any)
	for _, k := range []string{"registry", "allow"} {
		m, _ := hostsDoc[k].(map[string]any)
		for h, v := range m {
			addHost(h)
			if o, ok := v.(map[string]any); ok {
				for _, p := range anySlice(o["ports"]) {
					if n, ok := toPort(p); ok {
						ps[n] = true
					}
				}
			}
		}
	}
	for h := range secretHosts {
		addHost(h)
	}
	for name, m := range b.Modules {
		if b.Tests[name] || strings.HasPrefix(name, embeddedTag+"lib/") {
			continue
		}
		ast.WalkTerms(m, func(t *ast.Term) bool {
			switch v := t.Value.(type) {
			case ast.String:
				s := string(v)
				if strings.HasPrefix(s, "/") {
					pa[s] = true
				} else {
					addHost(s)
				}
			case ast.Number:
				if n, ok := v.Int(); ok && n > 20 && n < 65536 {
					ps[n] = true
				}
			}
			return false
		})
	}
	walkUserData(b, addHost, func(s string) { pa[s] = true })
	for h := range hs {
		hosts = append(hosts, h)
	}
	for p := range ps {
		if p != 53 && p != 853 {
			ports = append(ports, p)
		}
	}
	for p := range pa {
		paths = append(paths, p)
	}
	sort.Strings(hosts)
	sort.Ints(ports)
	sort.Strings(paths)
	return hosts, ports, paths
}

// walkUserData passes every key and string of the directory's own data (not
// the engine's airlock.* documents) to host or path.
func walkUserData(b *built, host, path func(string)) {
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, c := range x {
				host(k)
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		case string:
			if strings.HasPrefix(x, "/") {
				path(x)
			} else {
				host(x)
			}
		}
	}
	for k, v := range b.Data {
		if k != "airlock" {
			walk(v)
		}
	}
}

// looksLikeHost: at least two labels and a last label that is not a number
// (a version "1.0" or a file "policy.rego" is not a host).
func looksLikeHost(n string) bool {
	i := strings.LastIndexByte(n, '.')
	if i <= 0 {
		return false
	}
	tld := n[i+1:]
	if _, err := strconv.Atoi(tld); err == nil {
		return false
	}
	switch tld {
	case "rego", "json", "yaml", "yml", "go", "py", "sh", "txt":
		return false
	}
	return true
}

func anySlice(v any) []any {
	s, _ := v.([]any)
	return s
}

func toPort(v any) (int, bool) {
	switch n := v.(type) {
	case float64:
		return int(n), n >= 1 && n <= 65535
	case int:
		return n, n >= 1 && n <= 65535
	case interface{ Int64() (int64, error) }:
		i, err := n.Int64()
		return int(i), err == nil && i >= 1 && i <= 65535
	}
	return 0, false
}

// Facts are a host's view as lines, the unit Explain's text and DiffExplain
// compare: "dns", "connect 443 intercepted", "connect 443 tunnel",
// "tcp 22", "http 443 GET /repos/acme/*", "http 443 tunnel: every request",
// "secret ID".
func (v HostView) Facts() []string {
	var out []string
	if v.DNS {
		out = append(out, "dns")
	}
	for _, c := range v.Connect {
		how := "tunnel"
		if c.Intercepted {
			how = "intercepted"
		}
		out = append(out, fmt.Sprintf("connect/tls %d %s", c.Port, how))
	}
	for _, p := range v.TCP {
		out = append(out, fmt.Sprintf("tcp %d", p))
	}
	for _, h := range v.HTTP {
		if h.Tunnel {
			out = append(out, fmt.Sprintf("http %d every request (tunnel, not seen)", h.Port))
			continue
		}
		for _, m := range explainMethods {
			for _, p := range h.Methods[m] {
				out = append(out, fmt.Sprintf("http %d %s %s", h.Port, m, p))
			}
		}
	}
	for _, s := range v.Secrets {
		out = append(out, "secret "+s)
	}
	return out
}

// HostDiff is what changed for one host between two explanations.
type HostDiff struct {
	Host    string   `json:"host"`
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
}

// DiffExplain compares two explanations host by host (facts, as Facts says).
func DiffExplain(old, cur *Explanation) []HostDiff {
	facts := func(x *Explanation) map[string]map[string]bool {
		m := map[string]map[string]bool{}
		for _, h := range x.Hosts {
			m[h.Host] = map[string]bool{}
			for _, f := range h.Facts() {
				m[h.Host][f] = true
			}
		}
		return m
	}
	a, b := facts(old), facts(cur)
	hosts := map[string]bool{}
	for h := range a {
		hosts[h] = true
	}
	for h := range b {
		hosts[h] = true
	}
	names := make([]string, 0, len(hosts))
	for h := range hosts {
		names = append(names, h)
	}
	sort.Strings(names)
	var out []HostDiff
	for _, h := range names {
		d := HostDiff{Host: h}
		for f := range b[h] {
			if !a[h][f] {
				d.Added = append(d.Added, f)
			}
		}
		for f := range a[h] {
			if !b[h][f] {
				d.Removed = append(d.Removed, f)
			}
		}
		if len(d.Added)+len(d.Removed) > 0 {
			sort.Strings(d.Added)
			sort.Strings(d.Removed)
			out = append(out, d)
		}
	}
	return out
}
