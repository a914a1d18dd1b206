package report

import (
	"net"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/publicsuffix"

	"github.com/airlock-dev/airlock/audit"
)

// maxDistinctNames bounds the distinct names remembered per flagged domain.
const maxDistinctNames = 64

// maxEventDetail bounds an Event's detail text.
const maxEventDetail = 300

// Budget sources (BudgetRow.Source).
const (
	SourceGateway = "gateway" // audit.Budget's summaries (kind summary)
	SourceDNS     = "dns"     // the DNS filter's summaries (kind dns)
)

// widths is the timeline's bucket ladder, in seconds: each divides the next,
// so coarsening merges whole buckets. Past the last, widths double.
var widths = [...]int64{1, 5, 10, 30, 60, 300, 600, 1800, 3600, 7200, 21600, 43200, 86400}

type tally struct{ n, up, down int64 }

type cellKey struct{ sb, kind, dec, dest, reason int32 }

type tlKey struct {
	bucket        int64
	sb, kind, dec int32
}

type flagKey struct{ sb, flag string }

type nameKey struct{ sb, domain string }

type nameAgg struct {
	count, denied int64
	flags         map[string]bool
	names         map[string]bool
	example       string
}

type secretKey struct{ sb, id, version, fp, where, dest, dec string }

type budgetKey struct{ sb, source string }

// interner numbers strings in order of first appearance.
type interner struct {
	idx  map[string]int32
	list []string
}

func (in *interner) id(s string) int32 {
	if i, ok := in.idx[s]; ok {
		return i
	}
	if in.idx == nil {
		in.idx = map[string]int32{}
	}
	i := int32(len(in.list))
	in.idx[s] = i
	in.list = append(in.list, s)
	return i
}

// aggregator folds records into bounded aggregates; finish turns them into
// a Report. Memory is bounded by Config's Max* fields, not by the log.
type aggregator struct {
	cfg   *Config
	scope Scope

	sandboxes, kinds, decisions, dests, reasons interner

	cells map[cellKey]*tally
	tl    map[tlKey]*tally
	width int64 // seconds, widths[wi] or past it
	wi    int
	minB  int64
	maxB  int64
	haveB bool

	dnsQueries, dnsFlagged int64
	flags                  map[flagKey]*FlagRow
	names                  map[nameKey]*nameAgg
	secrets                map[secretKey]*SecretUse
	drops                  map[string]*DropRow
	budgets                map[budgetKey]*BudgetRow
	events                 []Event
	folded                 map[string]int64
	infos                  map[string]*SandboxInfo
	samples                map[sampleKey][]string
	bypasses               map[bypassKey]*BypassRow
	fnd                    findingAgg // findings.go
}

func newAggregator(cfg *Config) *aggregator {
	return &aggregator{
		cfg:     cfg,
		scope:   Scope{ByKind: map[string]int64{}},
		cells:   map[cellKey]*tally{},
		tl:      map[tlKey]*tally{},
		width:   widths[0],
		flags:   map[flagKey]*FlagRow{},
		names:   map[nameKey]*nameAgg{},
		secrets: map[secretKey]*SecretUse{},
		drops:   map[string]*DropRow{},
		budgets: map[budgetKey]*BudgetRow{},
		folded:  map[string]int64{},

		infos:    map[string]*SandboxInfo{},
		samples:  map[sampleKey][]string{},
		bypasses: map[bypassKey]*BypassRow{},
	}
}

// add folds one record (audit.Query's; r is not kept).
func (a *aggregator) add(r *audit.Record) {
	a.scope.Records++
	a.scope.ByKind[r.Kind]++
	if !r.TS.IsZero() {
		if a.scope.FirstTS.IsZero() || r.TS.Before(a.scope.FirstTS) {
			a.scope.FirstTS = r.TS
		}
		if r.TS.After(a.scope.LastTS) {
			a.scope.LastTS = r.TS
		}
	}
	sb := a.sandbox(r.Sandbox)
	if r.Sandbox != "" {
		a.who(sb, r)
	}
	for i := range r.Secrets {
		a.secret(sb, r, &r.Secrets[i])
	}
	a.findings(sb, r)
	switch r.Kind {
	case audit.KindCrashRecovered, audit.KindOutage, audit.KindRetention:
		a.event(r)
		return
	case audit.KindClose:
		// A tunnel's bytes: the tunnel was allowed (its decision record
		// counts the request); the close record adds only bytes.
		if r.BytesUp != 0 || r.BytesDown != 0 {
			a.count(sb, r.Kind, audit.DecisionAllow, destOf(r), "", r.TS, tally{up: r.BytesUp, down: r.BytesDown})
		}
		return
	case audit.KindExec, audit.KindSandbox, audit.KindCheckpoint:
		return
	}
	if r.Decision == "" {
		return
	}
	if sum := audit.SummaryOf(r); sum.N > 0 {
		a.summary(sb, r, sum)
		return
	}
	// A report-mode denial was let through: counted as would_deny, apart
	// from the denials that were enforced.
	outcome, dest := audit.Outcome(r), destOf(r)
	a.count(sb, r.Kind, outcome, dest, firstReason(r), r.TS, tally{n: 1, up: r.BytesUp, down: r.BytesDown})
	a.sample(r, outcome, dest, firstReason(r))
	a.bypass(sb, r, outcome, dest)
	switch r.Kind {
	case audit.KindDNS:
		a.dns(sb, r)
	case audit.KindDrop:
		a.drop(sb).Logged++
	}
}

// sandbox names r's sandbox, folding those past MaxSandboxes.
func (a *aggregator) sandbox(s string) string {
	if s == "" {
		s = NoSandbox
	}
	if _, ok := a.sandboxes.idx[s]; ok {
		return s
	}
	if len(a.sandboxes.list) >= a.cfg.MaxSandboxes {
		a.folded["sandboxes"]++
		s = OtherSandboxes
	}
	a.sandboxes.id(s)
	return s
}

// count adds t to the cell and the timeline bucket of one event.
func (a *aggregator) count(sb, kind, dec, dest, reason string, ts time.Time, t tally) {
	k := cellKey{sb: a.sandboxes.id(sb), kind: a.kinds.id(kind), dec: a.decisions.id(dec)}
	di, dok := a.dests.idx[dest]
	ri, rok := a.reasons.idx[reason]
	var c *tally
	if dok && rok {
		k.dest, k.reason = di, ri
		c = a.cells[k]
	}
	switch {
	case c != nil:
	case len(a.cells) >= a.cfg.MaxCells:
		// Past the cap: the destination (and an unseen reason) fold.
		a.folded["cells"] += max(t.n, 1)
		k.dest = a.dests.id(Other)
		if !rok {
			reason = Other
		}
		k.reason = a.reasons.id(reason)
		c = a.cells[k]
	default:
		k.dest, k.reason = a.dests.id(dest), a.reasons.id(reason)
		c = a.cells[k]
	}
	if c == nil {
		c = &tally{}
		a.cells[k] = c
	}
	c.add(t)
	if ts.IsZero() {
		a.folded["no_timestamp"] += t.n
		return
	}
	a.bucket(tlKey{bucket: ts.Unix(), sb: k.sb, kind: k.kind, dec: k.dec}, t)
}

func (t *tally) add(o tally) {
	t.n += o.n
	t.up += o.up
	t.down += o.down
}

// bucket adds t to the timeline, widening the buckets while the span would
// need more than MaxBuckets.
func (a *aggregator) bucket(k tlKey, t tally) {
	b := floorDiv(k.bucket, a.width) * a.width
	if !a.haveB {
		a.minB, a.maxB, a.haveB = b, b, true
	}
	a.minB, a.maxB = min(a.minB, b), max(a.maxB, b)
	for (a.maxB-a.minB)/a.width+1 > int64(a.cfg.MaxBuckets) {
		a.widen()
		b = floorDiv(b, a.width) * a.width
	}
	k.bucket = b
	c := a.tl[k]
	if c == nil {
		c = &tally{}
		a.tl[k] = c
	}
	c.add(t)
}

// widen moves to the next bucket width and merges the buckets into it.
func (a *aggregator) widen() {
	a.wi++
	if a.wi < len(widths) {
		a.width = widths[a.wi]
	} else {
		a.width *= 2
	}
	merged := make(map[tlKey]*tally, len(a.tl)/2+1)
	for k, t := range a.tl {
		k.bucket = floorDiv(k.bucket, a.width) * a.width
		if m := merged[k]; m != nil {
			m.add(*t)
		} else {
			merged[k] = t
		}
	}
	a.tl = merged
	a.minB = floorDiv(a.minB, a.width) * a.width
	a.maxB = floorDiv(a.maxB, a.width) * a.width
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}

// summary folds a record that stands for n events: split by its by_decision
// count when that adds up, into the (summarized) destination.
func (a *aggregator) summary(sb string, r *audit.Record, sum audit.SummaryCounts) {
	n, byDec := sum.N, sum.ByDecision
	var total int64
	for _, c := range byDec {
		total += c
	}
	if total != n {
		byDec = map[string]int64{r.Decision: n}
	}
	for _, d := range sortedKeys(byDec) {
		a.count(sb, r.Kind, d, Summarized, firstReason(r), r.TS, tally{n: byDec[d]})
	}
	switch r.Kind {
	case audit.KindDrop:
		a.drop(sb).Suppressed += n
		return
	case audit.KindDNS:
		a.dnsQueries += n
		for flag, c := range sum.ByFlag {
			f := a.flag(sb, flag)
			f.Count += c
			f.Summarized += c
		}
		a.budget(sb, SourceDNS, r, sum, byDec)
	default:
		a.budget(sb, SourceGateway, r, sum, byDec)
	}
}

func (a *aggregator) budget(sb, source string, r *audit.Record, sum audit.SummaryCounts, byDec map[string]int64) {
	k := budgetKey{sb, source}
	b := a.budgets[k]
	if b == nil {
		b = &BudgetRow{Sandbox: sb, Source: source, ByDecision: map[string]int64{}, First: r.TS}
		a.budgets[k] = b
	}
	b.Summaries++
	b.Events += sum.N
	for d, c := range byDec {
		b.ByDecision[d] += c
	}
	for reason, c := range sum.ByReason {
		if b.ByReason == nil {
			b.ByReason = map[string]int64{}
		}
		if _, ok := b.ByReason[reason]; !ok && len(b.ByReason) >= a.cfg.TopN {
			reason = Other
		}
		b.ByReason[reason] += c
	}
	if sum.Final {
		b.Final = true
	}
	b.Last = r.TS
}

func (a *aggregator) drop(sb string) *DropRow {
	d := a.drops[sb]
	if d == nil {
		d = &DropRow{Sandbox: sb}
		a.drops[sb] = d
	}
	return d
}

func (a *aggregator) flag(sb, flag string) *FlagRow {
	k := flagKey{sb, flag}
	f := a.flags[k]
	if f == nil {
		if len(a.flags) >= a.cfg.MaxDNSFlags {
			a.folded["dns_flags"]++
			k.flag = Other
			if f = a.flags[k]; f != nil {
				return f
			}
		}
		f = &FlagRow{Sandbox: sb, Flag: k.flag}
		a.flags[k] = f
	}
	return f
}

// dns counts one DNS question and, when flagged, its domain.
func (a *aggregator) dns(sb string, r *audit.Record) {
	a.dnsQueries++
	if len(r.Flags) == 0 {
		return
	}
	a.dnsFlagged++
	for _, fl := range r.Flags {
		a.flag(sb, fl).Count++
	}
	name := strings.ToLower(strings.TrimSuffix(r.QName, "."))
	domain, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		domain = name
	}
	k := nameKey{sb, domain}
	n := a.names[k]
	if n == nil {
		if len(a.names) >= a.cfg.MaxDNSFlags {
			a.folded["dns_names"]++
			k.domain = Other
		}
		if n = a.names[k]; n == nil {
			n = &nameAgg{flags: map[string]bool{}, names: map[string]bool{}, example: clip(name, 120)}
			a.names[k] = n
		}
	}
	n.count++
	if r.Decision != audit.DecisionAllow {
		n.denied++
	}
	for _, fl := range r.Flags {
		if len(n.flags) < 16 {
			n.flags[fl] = true
		}
	}
	if len(n.names) < maxDistinctNames {
		n.names[name] = true
	}
}

func (a *aggregator) secret(sb string, r *audit.Record, s *audit.Secret) {
	k := secretKey{sb: sb, id: s.ID, version: s.Version, fp: s.Fingerprint, where: s.Where, dest: destOf(r), dec: r.Decision}
	u := a.secrets[k]
	if u == nil {
		if len(a.secrets) >= a.cfg.MaxSecretUses {
			a.folded["secret_uses"]++
			return
		}
		u = &SecretUse{Sandbox: sb, ID: s.ID, Version: s.Version, Fingerprint: s.Fingerprint, Where: s.Where,
			Destination: k.dest, Decision: r.Decision, First: r.TS}
		a.secrets[k] = u
	}
	u.Count++
	u.Last = r.TS
}

func (a *aggregator) event(r *audit.Record) {
	if len(a.events) >= a.cfg.MaxEvents {
		a.folded["events"]++
		return
	}
	var parts []string
	for _, x := range r.Reasons {
		parts = append(parts, x.ID+": "+x.Msg)
	}
	if r.Error != "" {
		parts = append(parts, r.Error)
	}
	for _, k := range sortedKeys(r.Extra) {
		parts = append(parts, k+"="+string(r.Extra[k]))
	}
	a.events = append(a.events, Event{Seq: r.Seq, TS: r.TS, Kind: r.Kind, Detail: clip(strings.Join(parts, "; "), maxEventDetail)})
}

// destOf names a record's destination: the DNS name, or host (else IP) and port.
func destOf(r *audit.Record) string {
	if r.Kind == audit.KindDNS && r.QName != "" {
		return strings.ToLower(strings.TrimSuffix(r.QName, "."))
	}
	h := r.Host
	if h == "" {
		h = r.IP
	}
	if h == "" {
		return "(none)"
	}
	if r.Port != 0 && r.Kind != audit.KindDNS {
		return net.JoinHostPort(h, strconv.Itoa(r.Port))
	}
	return h
}

func firstReason(r *audit.Record) string {
	if len(r.Reasons) > 0 {
		return r.Reasons[0].ID
	}
	return ""
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
