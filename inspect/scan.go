package inspect

import (
	"bytes"
	"sort"
	"strconv"
	"strings"
)

// hit is a finding with where its match starts in the raw bytes (-1 when a
// decoding revealed it).
type hit struct {
	Finding
	pos, end int // the secret's bounds in the raw bytes when pos >= 0
}

// scanState is one Scan: the findings so far and the decoding budget.
type scanState struct {
	s       *Scanner
	where   string
	decoded int  // bytes decoded so far, against Config.MaxDecoded
	minConf bool // report only medium and high confidence (joined pieces)
	atEach  bool // keep a value's every raw occurrence (a Window's joins)
	// scanned are spans of the top layer already scanned on their own
	// (ScanFields' pieces, as the join holds them): a token run inside one
	// is not decoded again.
	scanned []span
	hits    []hit
	seen    map[string]bool
	// found counts hits offered to add, repeats included, and starved
	// records that the decoding budget refused a layer: ScanFields
	// remembers a field as clean only when neither moved while it ran.
	found   int
	starved bool
}

func (s *Scanner) newState(where string) *scanState {
	return &scanState{s: s, where: where}
}

func (s *Scanner) scan(where string, data []byte) []Finding {
	one := [1]Field{{Where: where, Value: data}}
	gen := s.canaries.gen.Load()
	k, cacheable := s.clean.key('s', one[:])
	if cacheable && s.clean.has(k, gen) {
		return nil
	}
	st := s.newState(where)
	st.run(data)
	fs := st.findings()
	if cacheable && len(fs) == 0 {
		s.clean.put(k, gen)
	}
	return fs
}

// run scans data at where, with the oversize cut and the where-specific
// detectors.
func (st *scanState) run(data []byte) {
	s := st.s
	if len(data) > s.cfg.MaxBytes {
		st.add(hit{Finding: Finding{Detector: DetectorOversize, Class: ClassOversize, Where: st.where, Confidence: High}, pos: -1})
		data = data[:s.cfg.MaxBytes]
	}
	st.layer(data, "", 0)
	switch st.where {
	case WhereDNS:
		st.dnsName(data)
	case WherePath:
		st.urlPath(data)
	}
}

// Where values the scanner treats specially.
const (
	WhereDNS  = "dns.qname"
	WherePath = "url.path"
)

func (st *scanState) findings() []Finding {
	// One value is reported once per encoding, by its strongest detector: a
	// canary beats a credential rule, a high-confidence rule a generic one.
	best := map[string]int{}
	for i, h := range st.hits {
		if h.Fingerprint == "" || h.Class != ClassCredential && h.Class != ClassCanary {
			continue
		}
		k := h.Fingerprint + "\x00" + h.Encoding
		if j, ok := best[k]; !ok || stronger(h.Finding, st.hits[j].Finding) {
			best[k] = i
		}
	}
	out := make([]Finding, 0, len(st.hits))
	for i, h := range st.hits {
		if h.Fingerprint != "" && (h.Class == ClassCredential || h.Class == ClassCanary) && best[h.Fingerprint+"\x00"+h.Encoding] != i {
			continue
		}
		out = append(out, h.Finding)
	}
	return out
}

// stronger orders findings of one value: canary, then confidence.
func stronger(a, b Finding) bool {
	if (a.Class == ClassCanary) != (b.Class == ClassCanary) {
		return a.Class == ClassCanary
	}
	return confRank[a.Confidence] > confRank[b.Confidence]
}

var confRank = map[string]int{Low: 1, Medium: 2, High: 3}

func (st *scanState) add(h hit) {
	if st.s.disabled[h.Detector] {
		return
	}
	if st.minConf && h.Confidence == Low {
		return
	}
	st.found++
	key := h.Detector + "\x00" + h.Fingerprint + "\x00" + h.Encoding
	if st.atEach && h.pos >= 0 {
		key += "\x00" + strconv.Itoa(h.pos)
	}
	if st.seen[key] {
		return
	}
	if st.seen == nil {
		st.seen = map[string]bool{}
	}
	st.seen[key] = true
	st.hits = append(st.hits, h)
}

func chain(enc, step string) string {
	if enc == "" {
		return step
	}
	return enc + "+" + step
}

// layer runs the rules over data and, below MaxDepth, rescans what data
// decodes to.
func (st *scanState) layer(data []byte, enc string, depth int) {
	runs := st.rules(data, enc)
	for _, r := range runs {
		if depth == 0 && st.seenRun(r) {
			continue
		}
		st.run1(data[r.lo:r.hi], enc, depth)
	}
	if depth >= st.s.cfg.MaxDepth {
		return
	}
	// Only the stretches around escapes can decode to something new:
	// decode those, not the whole piece again.
	for _, r := range escapeRegions(data, '%', isPercentEscape) {
		if d, ok := percentDecode(data[r.lo:r.hi]); ok && st.budget(len(d)) {
			st.layer(d, chain(enc, "url"), depth+1)
		}
	}
	for _, r := range escapeRegions(data, '\\', isBackslashEscape) {
		if d, ok := unescape(data[r.lo:r.hi]); ok && st.budget(len(d)) {
			st.layer(d, chain(enc, "escape"), depth+1)
		}
	}
}

// seenRun reports whether the top-layer token run r lies within one of
// st.scanned.
func (st *scanState) seenRun(r span) bool {
	sc := st.scanned
	i := sort.Search(len(sc), func(i int) bool { return sc[i].lo > r.lo }) - 1
	return i >= 0 && r.hi <= sc[i].hi
}

// budget takes n bytes of the decoding budget, or reports there is none.
func (st *scanState) budget(n int) bool {
	if st.decoded+n > st.s.cfg.MaxDecoded {
		st.starved = true
		return false
	}
	st.decoded += n
	return true
}

// span is a window of data a rule runs over.
type span struct{ lo, hi int }

// rules runs the keyword automaton over data, then each triggered rule's
// regexp over windows around its keyword hits (forwards, and backwards for
// reversed keywords).
//
// It returns the token runs of data the same pass found.
func (st *scanState) rules(data []byte, enc string) []span {
	c := st.s.compiled()
	if c.err != nil {
		st.add(hit{Finding: MalformedFinding(st.where, c.err), pos: -1})
		return nil
	}
	rs := c.rules
	var fwd, rev map[int][]span
	var te tokenEnds
	walk := rs.ac.scan
	if rs.plainWalk {
		walk = rs.ac.walk
	}
	runs := walk(data, func(p, end int) {
		start := end - rs.ac.lens[p]
		for _, ri := range rs.kwRules[p] {
			if !c.enabled[ri] {
				continue
			}
			r := rs.rules[ri]
			if !rs.kwRev[p] && (r.assign && !assignFollows(data, end) || r.short && !tokenFollows(data, end, shortTail) ||
				r.wordStart && start > 0 && isWordByte(data[start-1])) {
				continue
			}
			// Every match of a wordStart rule starts at a hit like this
			// one: none starts here unless the anchored form matches at
			// the hit, over as much as the window would give it.
			if r.anchored != nil && !rs.kwRev[p] && !r.anchored.Match(data[start:te.end(data, min(len(data), end+r.reach))]) {
				continue
			}
			// A keyword written backwards: the window is read reversed, a
			// match runs leftwards from the hit's end. The same checks hold
			// mirrored: what follows the keyword in the reversed text is
			// what precedes the hit here, the byte after the hit is the one
			// before the match, and the anchored form runs over the
			// reversed bytes before the hit's end.
			if rs.kwRev[p] && !rs.plainWalk {
				if r.assign && !revAssignFollows(data, start) || r.short && !tokenPrecedes(data, start, shortTail) ||
					r.wordStart && end < len(data) && isWordByte(data[end]) {
					continue
				}
				if r.anchored != nil && !revAnchored(r, data, start, end) {
					continue
				}
			}
			sp := span{max(0, start-r.reach), min(len(data), end+r.reach)}
			if rs.kwRev[p] {
				if rev == nil {
					rev = map[int][]span{}
				}
				rev[ri] = append(rev[ri], sp)
			} else {
				if fwd == nil {
					fwd = map[int][]span{}
				}
				fwd[ri] = append(fwd[ri], sp)
			}
		}
	})
	for _, ri := range sortedKeys(fwd) {
		for _, sp := range merge(data, fwd[ri]) {
			st.match(rs, rs.rules[ri], data, sp, enc, false)
		}
	}
	for _, ri := range sortedKeys(rev) {
		for _, sp := range merge(data, rev[ri]) {
			w := append([]byte(nil), data[sp.lo:sp.hi]...)
			reverseBytes(w)
			st.match(rs, rs.rules[ri], w, span{0, len(w)}, chain(enc, "reversed"), true)
		}
	}
	return runs
}

func sortedKeys(m map[int][]span) []int {
	keys := make([]int, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Ints(keys)
	return keys
}

// merge sorts spans, grows each to the ends of the tokens it cuts (so a
// window edge is never mistaken for a token boundary) and joins overlaps.
func merge(data []byte, sps []span) []span {
	sort.Slice(sps, func(i, j int) bool { return sps[i].lo < sps[j].lo })
	var out []span
	for _, sp := range sps {
		for n := 0; sp.lo > 0 && n < tokenExtend && isToken(data[sp.lo-1]); n++ {
			sp.lo--
		}
		for n := 0; sp.hi < len(data) && n < tokenExtend && isToken(data[sp.hi]); n++ {
			sp.hi++
		}
		// Overlapping windows join, up to maxSpan: past that each keeps its
		// own window (each holds every match around its hit), so the
		// regexp engine keeps to inputs small enough for backtracking.
		if len(out) > 0 && sp.lo <= out[len(out)-1].hi && max(sp.hi, out[len(out)-1].hi)-out[len(out)-1].lo <= maxSpan {
			out[len(out)-1].hi = max(out[len(out)-1].hi, sp.hi)
			continue
		}
		out = append(out, sp)
	}
	return out
}

// revAssignFollows is assignFollows for a keyword found written backwards
// at data[start:]: what follows it in the reversed text is what precedes
// it here. assignFollows reads at most 45 bytes past the keyword.
func revAssignFollows(data []byte, start int) bool {
	var w [64]byte
	n := 0
	for i := start - 1; i >= 0 && n < len(w); i-- {
		w[n] = data[i]
		n++
	}
	return assignFollows(w[:n], 0)
}

// tokenPrecedes is tokenFollows mirrored: n secret-shaped bytes before
// start.
func tokenPrecedes(data []byte, start, n int) bool {
	if start < n {
		return false
	}
	for _, c := range data[start-n : start] {
		if !isToken(c) && c != '.' && c != '~' {
			return false
		}
	}
	return true
}

// revAnchored reports whether r's anchored form matches the bytes of data
// before end, reversed, over as much as a window around a hit at
// data[start:end] would give it.
func revAnchored(r *rule, data []byte, start, end int) bool {
	lo := max(0, start-r.reach)
	for n := 0; lo > 0 && n < tokenExtend && isToken(data[lo-1]); n++ {
		lo--
	}
	var stack [4096]byte
	w := stack[:0]
	if end-lo > len(stack) {
		w = make([]byte, 0, end-lo)
	}
	for i := end - 1; i >= lo; i-- {
		w = append(w, data[i])
	}
	return r.anchored.Match(w)
}

// tokenEnd is hi grown to the end of the token it cuts, as merge grows a
// window.
func tokenEnd(data []byte, hi int) int {
	for n := 0; hi < len(data) && n < tokenExtend && isToken(data[hi]); n++ {
		hi++
	}
	return hi
}

// tokenEnds is tokenEnd over one input, remembering the stretch of token
// bytes it last read: hits inside one long token (a base64 image) would
// otherwise each read the same tokenExtend bytes.
type tokenEnds struct {
	lo, hi int  // data[lo:hi] are token bytes
	closed bool // and data[hi] is not (or hi is len(data))
}

func (t *tokenEnds) end(data []byte, hi int) int {
	limit := min(len(data), hi+tokenExtend)
	if t.hi > t.lo && t.lo <= hi && hi <= t.hi {
		if t.closed || limit <= t.hi {
			return min(t.hi, limit)
		}
		// Known tokens up to t.hi: read on from there.
		j := t.hi
		for j < limit && isToken(data[j]) {
			j++
		}
		t.hi, t.closed = j, j < limit || j == len(data)
		return j
	}
	j := tokenEnd(data, hi)
	t.lo, t.hi, t.closed = hi, j, j < limit || j == len(data)
	return j
}

// maxSpan bounds a window joined from several keyword hits.
const maxSpan = 2048

// match runs r over data[sp] and records what passes its checks.
func (st *scanState) match(rs *ruleSet, r *rule, data []byte, sp span, enc string, reversed bool) {
	w := data[sp.lo:sp.hi]
	for _, m := range r.re.FindAllSubmatchIndex(w, -1) {
		whole := w[m[0]:m[1]]
		lo, hi := m[0], m[1] // the secret's bounds in w
		switch {
		case r.secretGroup > 0 && 2*r.secretGroup+1 < len(m) && m[2*r.secretGroup] >= 0:
			lo, hi = m[2*r.secretGroup], m[2*r.secretGroup+1]
		case r.secretGroup == 0:
			for g := 1; 2*g+1 < len(m); g++ {
				if m[2*g] >= 0 && m[2*g+1] > m[2*g] {
					lo, hi = m[2*g], m[2*g+1]
					break
				}
			}
		}
		secret := w[lo:hi]
		if r.entropy > 0 && shannon(secret) <= r.entropy {
			continue
		}
		line := lineAround(w, m[0], m[1])
		if rs.global.allows(secret, whole, line) {
			continue
		}
		allowed := false
		for i := range r.allow {
			if r.allow[i].allows(secret, whole, line) {
				allowed = true
				break
			}
		}
		if allowed {
			continue
		}
		if r.class == ClassCanary {
			c, ok := st.s.canaries.recognize(r.id, secret)
			if !ok {
				continue
			}
			secret = c
		}
		f := Finding{Detector: r.id, Class: r.class, Where: st.where, Encoding: enc, Confidence: r.confidence, Fingerprint: st.s.fingerprint(secret)}
		if r.class == ClassCanary {
			f.Detector = DetectorCanary
		}
		pos, end := -1, 0
		if enc == "" && !reversed {
			pos, end = sp.lo+lo, sp.lo+hi
		}
		st.add(hit{Finding: f, pos: pos, end: end})
	}
}

// lineAround is the line of w holding w[lo:hi].
func lineAround(w []byte, lo, hi int) []byte {
	s := bytes.LastIndexByte(w[:lo], '\n') + 1
	e := bytes.IndexByte(w[hi:], '\n')
	if e < 0 {
		return w[s:]
	}
	return w[s : hi+e]
}

// tokenTable marks the bytes of base64 (both alphabets), hex and base32
// text and of most credential formats.
var tokenTable = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		t[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || strings.IndexByte("+/=_-", b) >= 0
	}
	return t
}()

func isToken(b byte) bool { return tokenTable[b] }

// isWordByte reports whether b is a word byte of `\b` (ASCII letters,
// digits, '_').
func isWordByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '_'
}

// minRun is the shortest token run the decoders and the canary check look at.
const minRun = 16

// run1 checks one token run of at least minRun bytes for an AWS secret
// canary and, below MaxDepth, for an encoding to rescan.
func (st *scanState) run1(run []byte, enc string, depth int) {
	st.secretCanaries(run, enc)
	if depth >= st.s.cfg.MaxDepth {
		return
	}
	for _, c := range decodeRun(run) {
		if !st.budget(len(c.data)) {
			return
		}
		st.layer(c.data, chain(enc, c.name), depth+1)
	}
}

// secretCanaries checks every 40-character base64 stretch of run, forwards
// and backwards, for an AWS secret key canary.
func (st *scanState) secretCanaries(run []byte, enc string) {
	const n = awsSecretRandom + awsSecretMark
	if len(run) < n || st.s.disabled[DetectorCanary] {
		return
	}
	for i := 0; i < len(run); {
		if !isStdB64(run[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(run) && isStdB64(run[j]) {
			j++
		}
		if j-i == n {
			// A mixed-case stretch is checked by its mark (and the issued
			// set); one of a single case only by the issued set.
			v, mixed := run[i:j], mixedCase(run[i:j])
			for _, rev := range []bool{false, true} {
				c, e := v, enc
				if rev {
					c = append([]byte(nil), v...)
					reverseBytes(c)
					e = chain(enc, "reversed")
				}
				check := st.s.canaries.folded
				if mixed {
					check = st.s.canaries.recognize
				}
				if iv, ok := check("canary:aws-secret-access-key", c); ok {
					st.add(hit{Finding: Finding{Detector: DetectorCanary, Class: ClassCanary, Where: st.where, Encoding: e, Confidence: High, Fingerprint: st.s.fingerprint(iv)}, pos: -1})
				}
			}
		}
		i = j
	}
}

// isStdB64 reports whether b is in the standard base64 alphabet. A table:
// the range tests branch unpredictably on base64 text.
func isStdB64(b byte) bool { return stdB64Table[b] }

var stdB64Table = func() (t [256]bool) {
	for c := 0; c < 256; c++ {
		b := byte(c)
		t[c] = 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '+' || b == '/'
	}
	return t
}()

// Escape regions: escapes closer than regionGap share a region, which
// reaches regionPad bytes beyond its first and last escape (more than the
// longest single-line secret), grown to token ends.
const (
	regionGap = 256
	regionPad = 256
)

func isPercentEscape(b []byte, i int) bool {
	return b[i] == '%' && i+2 < len(b) && isHex(b[i+1]) && isHex(b[i+2])
}

func isBackslashEscape(b []byte, i int) bool {
	if b[i] != '\\' || i+1 >= len(b) {
		return false
	}
	switch b[i+1] {
	case 'u', 'x', '/':
		return true
	}
	return false
}

// escapeRegions returns the stretches of data around its escapes, each
// starting with the byte c.
func escapeRegions(data []byte, c byte, isEscape func([]byte, int) bool) []span {
	var out []span
	for i := 0; ; {
		j := bytes.IndexByte(data[i:], c)
		if j < 0 {
			break
		}
		i += j
		if !isEscape(data, i) {
			i++
			continue
		}
		lo, hi := max(0, i-regionPad), min(len(data), i+regionPad)
		if n := len(out); n > 0 && lo <= out[n-1].hi+regionGap {
			out[n-1].hi = hi
		} else {
			out = append(out, span{lo, hi})
		}
		i++
	}
	for k := range out {
		for n := 0; out[k].lo > 0 && n < tokenExtend && isToken(data[out[k].lo-1]); n++ {
			out[k].lo--
		}
		for n := 0; out[k].hi < len(data) && n < tokenExtend && isToken(data[out[k].hi]); n++ {
			out[k].hi++
		}
	}
	return out
}
