package report

import (
	"cmp"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"

	"github.com/airlock-dev/airlock/audit"
)

// Bounds of the per-sandbox and per-denial detail.
const (
	maxArgvSamples   = 5   // distinct command lines kept per sandbox
	maxArgvBytes     = 200 // one command line, clipped
	maxDenialSamples = 3   // distinct "METHOD path" kept per top-denial row
	maxSampleBytes   = 160
)

// Bypass kinds (BypassRow.How).
const (
	// BypassTransparent: a connection the sandbox's namespace captured
	// because it did not go through HTTP(S)_PROXY (kind tls or tcp, or an
	// http record with extra original_ip).
	BypassTransparent = "ignored_proxy"
	// BypassDirectIP: a connection to an IP address instead of a name.
	BypassDirectIP = "direct_ip"
)

// SandboxInfo says what ran in a sandbox and for whom: its owner's uid,
// labels (from its creation record), Kubernetes pod, and the command lines
// of its execs (at most 5 distinct, each clipped to 200 bytes).
type SandboxInfo struct {
	Sandbox string            `json:"sandbox"`
	Owner   string            `json:"owner,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`
	Pod     *audit.Pod        `json:"pod,omitempty"`
	Execs   int64             `json:"execs"`
	Argv    []string          `json:"argv"`
}

// BypassRow counts a sandbox's attempts to get around the proxy to one
// destination: How is BypassTransparent or BypassDirectIP; Outcome is the
// decision (allow, deny, error, would_deny).
type BypassRow struct {
	Sandbox     string `json:"sandbox"`
	Destination string `json:"destination"`
	How         string `json:"how"`
	Outcome     string `json:"outcome"`
	Count       int64  `json:"count"`
}

type sampleKey struct {
	dest, reason, outcome string
}

type bypassKey struct{ sb, dest, how, outcome string }

// who notes what r says of its sandbox: owner, pod, labels, argv.
func (a *aggregator) who(sb string, r *audit.Record) {
	if sb == OtherSandboxes {
		return
	}
	info := a.infos[sb]
	if info == nil {
		info = &SandboxInfo{Sandbox: sb, Argv: []string{}}
		a.infos[sb] = info
	}
	if r.Owner != "" {
		info.Owner = r.Owner
	}
	if r.Pod != nil && info.Pod == nil {
		p := *r.Pod
		info.Pod = &p
	}
	if raw, ok := r.Extra["labels"]; ok && r.Kind == audit.KindSandbox {
		var labels map[string]string
		if json.Unmarshal(raw, &labels) == nil && len(labels) > 0 {
			info.Labels = labels
		}
	}
	if r.Kind == audit.KindExec && r.Exec != nil && r.Exec.Phase == audit.ExecStart {
		info.Execs++
		line := clip(strings.Join(r.Exec.Argv, " "), maxArgvBytes)
		if len(info.Argv) < maxArgvSamples && !slices.Contains(info.Argv, line) {
			info.Argv = append(info.Argv, line)
		}
	}
}

// sample keeps a denial's method and path, a few per top-denial row.
func (a *aggregator) sample(r *audit.Record, outcome, dest, reason string) {
	if outcome == audit.DecisionAllow || (r.Method == "" && r.Path == "") {
		return
	}
	if outcome == audit.DecisionError {
		outcome = audit.DecisionDeny // errors are refusals, as in deniedRows
	}
	k := sampleKey{dest, reason, outcome}
	s, ok := a.samples[k]
	if !ok && len(a.samples) >= a.cfg.MaxCells {
		return
	}
	line := clip(strings.TrimSpace(r.Method+" "+r.Path), maxSampleBytes)
	if len(s) < maxDenialSamples && !slices.Contains(s, line) {
		a.samples[k] = append(s, line)
	}
}

// bypass counts r when it got around the proxy: captured transparently, or
// aimed at an IP address.
func (a *aggregator) bypass(sb string, r *audit.Record, outcome, dest string) {
	var how string
	_, named := r.Extra["original_ip"]
	switch {
	case r.Kind == audit.KindTLS || r.Kind == audit.KindTCP || r.Kind == audit.KindHTTP && named:
		how = BypassTransparent
	case isIP(r.Host) || r.Host == "" && r.IP != "" && (r.Kind == audit.KindHTTP || r.Kind == audit.KindConnect):
		how = BypassDirectIP
	default:
		return
	}
	k := bypassKey{sb, dest, how, outcome}
	b := a.bypasses[k]
	if b == nil {
		if len(a.bypasses) >= a.cfg.MaxCells {
			a.folded["bypass"]++
			return
		}
		b = &BypassRow{Sandbox: sb, Destination: dest, How: how, Outcome: outcome}
		a.bypasses[k] = b
	}
	b.Count++
}

func isIP(host string) bool {
	_, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil
}

func (a *aggregator) infoRows() []SandboxInfo {
	out := make([]SandboxInfo, 0, len(a.infos))
	for _, i := range a.infos {
		out = append(out, *i)
	}
	slices.SortFunc(out, func(x, y SandboxInfo) int { return cmp.Compare(x.Sandbox, y.Sandbox) })
	return out
}

// bypassRows is the top TopN by count.
func (a *aggregator) bypassRows() []BypassRow {
	out := make([]BypassRow, 0, len(a.bypasses))
	for _, b := range a.bypasses {
		out = append(out, *b)
	}
	slices.SortFunc(out, func(x, y BypassRow) int {
		return cmp.Or(cmp.Compare(y.Count, x.Count), cmp.Compare(x.Sandbox, y.Sandbox), cmp.Compare(x.Destination, y.Destination),
			cmp.Compare(x.How, y.How), cmp.Compare(x.Outcome, y.Outcome))
	})
	if len(out) > a.cfg.TopN {
		a.folded["bypass"] += int64(len(out) - a.cfg.TopN)
		out = out[:a.cfg.TopN]
	}
	return out
}
