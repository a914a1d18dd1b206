package inspect

import (
	_ "embed"
	"fmt"
	"math"
	"regexp"
	"regexp/syntax"
	"sort"
	"strings"

	"github.com/BurntSushi/toml"
)

// gitleaksTOML is gitleaks' default rule set (MIT; see rules/NOTICE).
//
//go:embed rules/gitleaks.toml
var gitleaksTOML string

// tomlRules is the part of gitleaks' config format this package reads.
type tomlRules struct {
	Allowlist tomlAllowlist `toml:"allowlist"`
	Rules     []struct {
		ID          string          `toml:"id"`
		Regex       string          `toml:"regex"`
		Path        string          `toml:"path"`
		Entropy     float64         `toml:"entropy"`
		SecretGroup int             `toml:"secretGroup"`
		Keywords    []string        `toml:"keywords"`
		Allowlists  []tomlAllowlist `toml:"allowlists"`
	} `toml:"rules"`
}

type tomlAllowlist struct {
	Condition   string   `toml:"condition"`
	RegexTarget string   `toml:"regexTarget"`
	Regexes     []string `toml:"regexes"`
	Stopwords   []string `toml:"stopwords"`
	Paths       []string `toml:"paths"`
}

// rule is one compiled detector.
type rule struct {
	id          string
	re          *regexp.Regexp
	secretGroup int
	entropy     float64
	keywords    []string
	allow       []allowlist
	confidence  string
	class       string
	// reach is how far from a keyword hit a match can extend, in bytes; the
	// regexp runs only over that window around each hit.
	reach int
	// assign marks the "name = value" rules (gitleaks' generic and
	// per-service assignment patterns): a keyword hit runs the regexp only
	// when an assignment operator and a long enough value follow it.
	assign bool
	// wordStart marks a rule every match of which starts at a word
	// boundary with one of its keywords (`\b(?:hvs\.|s\.)...`): a hit
	// glued to a word byte before it ("reqs.Header") cannot start a match
	// and runs no regexp. Derived from the regexp (keywordAtWordStart).
	wordStart bool
	// anchored is re anchored at its start, for a rule every match of
	// which starts with one of its keywords (wordStart, keywordAtStart): a hit
	// runs the search over its window only when a match starts at the hit.
	anchored *regexp.Regexp
	// short marks a rule with a keyword of three bytes or less ("ey",
	// "sk", "s."): common in any text, so a hit counts only when a token
	// of at least shortTail bytes follows it.
	short bool
}

// allowlist is one of a rule's exceptions. An allowlist that needs a file
// path cannot apply to traffic and is dropped at load.
type allowlist struct {
	and       bool
	target    string // "secret", "match" or "line"
	regexes   []*regexp.Regexp
	stopwords []string
}

// ruleSet is every rule behind one keyword automaton.
type ruleSet struct {
	rules  []*rule
	byID   map[string]*rule
	global allowlist
	ac     *automaton
	// kwRules maps an automaton pattern to the rules it triggers and whether
	// it is a keyword written backwards.
	kwRules [][]int
	kwRev   []bool
	pats    []string // the automaton's patterns
	// plainWalk makes every scan use the plain walk and skip the checks on
	// reversed hits: the reference the differential tests hold the fast
	// path to (PlainWalk, tests only).
	plainWalk bool
}

// Reach limits.
const (
	unboundedReach = 16 << 10 // a rule with an unbounded repetition
	tokenExtend    = 512      // a window grows to the end of the token it cuts
)

// assignPrefix starts gitleaks' "name = value" rules; assignPrefixCased
// starts the ones whose name is matched in one case or all capitals
// (`(?-i:[Ss]umo|SUMO)`), followed by the same name, operator and value
// parts.
const (
	assignPrefix      = `(?i)[\w.-]{0,50}?`
	assignPrefixCased = `[\w.-]{0,50}?(?i:[\w.-]{0,50}?`
)

// mediumRules are distinctive-prefix rules whose format also turns up in
// ordinary traffic or text (a JWT in an Authorization header, a curl command
// in a README) or whose keyword is too short to be distinctive.
var mediumRules = map[string]bool{
	"jwt": true, "jwt-base64": true, "curl-auth-header": true, "curl-auth-user": true,
	"twilio-api-key": true, "vault-service-token": true, "octopus-deploy-api-key": true,
	"harness-api-key": true, "authress-service-client-access-key": true,
	"facebook-access-token": true, "okta-access-token": true, "intra42-client-secret": true,
	"cohere-api-token": true, "sidekiq-sensitive-url": true, "microsoft-teams-webhook": true,
	"slack-webhook-url": true,
}

func defaultRules() (*ruleSet, error) {
	return parseRules(gitleaksTOML)
}

// parseRules compiles a gitleaks-format rule set. Rules that only apply to
// file paths are skipped: traffic has none.
func parseRules(text string) (*ruleSet, error) {
	var tr tomlRules
	if _, err := toml.Decode(text, &tr); err != nil {
		return nil, fmt.Errorf("inspect: rules: %w", err)
	}
	rs := &ruleSet{byID: map[string]*rule{}}
	g, err := compileAllowlist(tr.Allowlist)
	if err != nil {
		return nil, fmt.Errorf("inspect: rules: global allowlist: %w", err)
	}
	if g != nil {
		rs.global = *g
	}
	for _, t := range tr.Rules {
		if t.Regex == "" || t.Path != "" || len(t.Keywords) == 0 {
			continue // path-only or file-scoped rules, or no keyword to prefilter on
		}
		re, err := regexp.Compile(t.Regex)
		if err != nil {
			return nil, fmt.Errorf("inspect: rules: %s: %w", t.ID, err)
		}
		r := &rule{id: t.ID, re: re, secretGroup: t.SecretGroup, entropy: t.Entropy, class: ClassCredential}
		for _, k := range t.Keywords {
			r.keywords = append(r.keywords, strings.ToLower(k))
		}
		for _, a := range t.Allowlists {
			al, err := compileAllowlist(a)
			if err != nil {
				return nil, fmt.Errorf("inspect: rules: %s: allowlist: %w", t.ID, err)
			}
			if al != nil {
				r.allow = append(r.allow, *al)
			}
		}
		r.reach = reach(t.Regex, repeatCap(r.keywords))
		r.short = minLen(r.keywords) <= 3
		r.assign = strings.HasPrefix(t.Regex, assignPrefix) || strings.HasPrefix(t.Regex, assignPrefixCased)
		r.wordStart = keywordAtWordStart(t.Regex, r.keywords)
		if r.wordStart || keywordAtStart(t.Regex, r.keywords) {
			if r.anchored, err = regexp.Compile(`^(?:` + t.Regex + `)`); err != nil {
				return nil, fmt.Errorf("inspect: rules: %s: %w", t.ID, err)
			}
		}
		r.confidence = ruleConfidence(t.ID, t.Regex)
		if _, dup := rs.byID[r.id]; dup {
			return nil, fmt.Errorf("inspect: rules: %s defined twice", r.id)
		}
		rs.add(r)
	}
	for _, r := range canaryRules() {
		rs.add(r)
	}
	rs.build()
	return rs, nil
}

func (rs *ruleSet) add(r *rule) {
	rs.rules = append(rs.rules, r)
	rs.byID[r.id] = r
}

// ruleConfidence grades a rule: a generic assignment pattern is low, a
// "service name = value" pattern medium, a distinctive token format high.
func ruleConfidence(id, re string) string {
	switch {
	case strings.HasPrefix(id, "generic"):
		return Low
	case mediumRules[id], strings.HasPrefix(re, assignPrefix):
		return Medium
	}
	return High
}

// build compiles the keyword automaton: every keyword, and every keyword of
// four bytes or more written backwards (a reversed secret still carries its
// prefix, reversed).
func (rs *ruleSet) build() {
	idx := map[string]int{}
	var pats []string
	addPat := func(p string, rev bool, ri int) {
		key := p
		if rev {
			key = "\x00" + p
		}
		i, ok := idx[key]
		if !ok {
			i = len(pats)
			idx[key] = i
			pats = append(pats, p)
			rs.kwRules = append(rs.kwRules, nil)
			rs.kwRev = append(rs.kwRev, rev)
		}
		rs.kwRules[i] = append(rs.kwRules[i], ri)
	}
	for ri, r := range rs.rules {
		for _, k := range r.keywords {
			addPat(k, false, ri)
			if len(k) >= 4 && r.confidence != Low {
				addPat(reverseString(k), true, ri)
			}
		}
	}
	// A short keyword every rule of which needs a word boundary before
	// it ("s.", "ey") hits inside words all the time: the automaton
	// drops those hits itself.
	boundary := make([]bool, len(pats))
	for i, p := range pats {
		boundary[i] = !rs.kwRev[i] && len(p) <= 3 && isWordByte(p[0])
		for _, ri := range rs.kwRules[i] {
			boundary[i] = boundary[i] && rs.rules[ri].wordStart
		}
	}
	rs.pats = pats
	rs.ac = newAutomaton(pats, boundary)
}

func (rs *ruleSet) known(id string) bool { _, ok := rs.byID[id]; return ok }

func (rs *ruleSet) ids() []string {
	var out []string
	for _, r := range rs.rules {
		if r.class == ClassCredential {
			out = append(out, r.id)
		}
	}
	sort.Strings(out)
	return out
}

func compileAllowlist(t tomlAllowlist) (*allowlist, error) {
	a := &allowlist{and: strings.EqualFold(t.Condition, "AND"), target: t.RegexTarget}
	if a.target == "" {
		a.target = "secret"
	}
	if len(t.Paths) > 0 && (a.and || len(t.Regexes) == 0 && len(t.Stopwords) == 0) {
		return nil, nil // needs a file path to hold
	}
	for _, s := range t.Regexes {
		re, err := regexp.Compile(s)
		if err != nil {
			return nil, err
		}
		a.regexes = append(a.regexes, re)
	}
	for _, w := range t.Stopwords {
		a.stopwords = append(a.stopwords, strings.ToLower(w))
	}
	if len(a.regexes) == 0 && len(a.stopwords) == 0 {
		return nil, nil
	}
	return a, nil
}

// allows reports whether the allowlist excuses a match.
func (a *allowlist) allows(secret, match, line []byte) bool {
	if a == nil || len(a.regexes) == 0 && len(a.stopwords) == 0 {
		return false
	}
	target := secret
	switch a.target {
	case "match":
		target = match
	case "line":
		target = line
	}
	reHit := false
	for _, re := range a.regexes {
		if re.Match(target) {
			reHit = true
			break
		}
	}
	swHit := false
	if len(a.stopwords) > 0 {
		low := strings.ToLower(string(secret))
		for _, w := range a.stopwords {
			if strings.Contains(low, w) {
				swHit = true
				break
			}
		}
	}
	if a.and {
		return (len(a.regexes) == 0 || reHit) && (len(a.stopwords) == 0 || swHit)
	}
	return reHit || swHit
}

// reach is the most bytes a match of the expression can span, counting an
// unbounded repetition as capRep bytes, at most unboundedReach.
func reach(expr string, capRep int) int {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return unboundedReach
	}
	return min(maxLen(re.Simplify(), capRep), unboundedReach)
}

// repeatCap is what an unbounded repetition counts for in a rule's reach:
// a rule with only long, rare keywords ("-----begin") may span a whole
// private key; one with common keywords reaches a bounded token.
func repeatCap(keywords []string) int {
	if minLen(keywords) >= 6 {
		return unboundedReach
	}
	return 512
}

func minLen(ss []string) int {
	n := 1 << 30
	for _, s := range ss {
		n = min(n, len(s))
	}
	return n
}

// shortTail is how many token bytes must follow a short keyword.
const shortTail = 16

// tokenFollows reports whether n secret-shaped bytes (token bytes, '.',
// '~') follow end.
func tokenFollows(data []byte, end, n int) bool {
	if end+n > len(data) {
		return false
	}
	for _, c := range data[end : end+n] {
		if !isToken(c) && c != '.' && c != '~' {
			return false
		}
	}
	return true
}

// maxLen is the longest match of re in bytes, an unbounded repetition
// counting capRep.
func maxLen(re *syntax.Regexp, capRep int) int {
	switch re.Op {
	case syntax.OpLiteral:
		n := 0
		for _, r := range re.Rune {
			n += runeBytes(r)
		}
		return n
	case syntax.OpCharClass:
		hi := rune(0)
		for i := 1; i < len(re.Rune); i += 2 {
			hi = max(hi, re.Rune[i])
		}
		return runeBytes(hi)
	case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
		return 4
	case syntax.OpStar, syntax.OpPlus:
		return min(capRep, unboundedReach)
	case syntax.OpQuest:
		return maxLen(re.Sub[0], capRep)
	case syntax.OpRepeat:
		n := maxLen(re.Sub[0], capRep)
		if re.Max < 0 {
			return min(n*re.Min+capRep, unboundedReach)
		}
		return min(n*re.Max, unboundedReach)
	case syntax.OpCapture:
		return maxLen(re.Sub[0], capRep)
	case syntax.OpConcat:
		t := 0
		for _, s := range re.Sub {
			t = min(t+maxLen(s, capRep), unboundedReach)
		}
		return t
	case syntax.OpAlternate:
		m := 0
		for _, s := range re.Sub {
			m = max(m, maxLen(s, capRep))
		}
		return m
	}
	return 0 // empty-width assertions
}

func runeBytes(r rune) int {
	switch {
	case r < 0x80:
		return 1
	case r < 0x800:
		return 2
	case r < 0x10000:
		return 3
	}
	return 4
}

// shannon is the Shannon entropy of b in bits per byte.
func shannon(b []byte) float64 {
	if len(b) == 0 {
		return 0
	}
	var counts [256]int
	for _, c := range b {
		counts[c]++
	}
	n := float64(len(b))
	h := 0.0
	for _, c := range counts {
		if c > 0 {
			p := float64(c) / n
			h -= p * math.Log2(p)
		}
	}
	return h
}

func reverseString(s string) string {
	b := []byte(s)
	reverseBytes(b)
	return string(b)
}

func reverseBytes(b []byte) {
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
}

// assignFollows reports whether, after a keyword ending at end, data holds
// what every "name = value" rule needs: up to 20 name bytes, up to 3
// quotes or spaces, an operator (= > : , || ?=), up to 5 quotes, spaces or
// '=', then at least 10 value bytes. It accepts a superset of what the
// regexps match, so it never hides a match; it spares the regexp engine
// most keyword hits in source code and prose.
func assignFollows(data []byte, end int) bool {
	for p := end; p <= end+20 && p <= len(data); p++ {
		if p > end && !isNameByte(data[p-1]) {
			break
		}
		q := p
		for n := 0; n < 3 && q < len(data) && isQuoteSpace(data[q]); n++ {
			q++
		}
		for n := 0; n <= 3 && q < len(data); n++ {
			if !assignOp(data, q) {
				break
			}
			if valueFollows(data, q) {
				return true
			}
			q++
		}
	}
	return false
}

func assignOp(data []byte, q int) bool {
	switch data[q] {
	case '=', '>', ':', ',', '|', '?':
		return true
	}
	return false
}

// valueFollows looks past the operator at q for 10 value bytes.
func valueFollows(data []byte, q int) bool {
	q++
	for n := 0; n < 6 && q < len(data); n++ {
		if v := valueRun(data[q:]); v >= 10 {
			return true
		}
		c := data[q]
		if c != '`' && c != '\'' && c != '"' && c != '=' && !isSpace(c) && c != '>' && c != '|' && c != ':' {
			return false
		}
		q++
	}
	return false
}

func valueRun(b []byte) int {
	n := 0
	for n < len(b) && n < 10 && (isToken(b[n]) || b[n] == '.') {
		n++
	}
	return n
}

func isNameByte(c byte) bool {
	return c == ' ' || c == '\t' || c == '.' || c == '-' || c == '_' || isAlnum(c)
}

func isQuoteSpace(c byte) bool { return c == '\'' || c == '"' || isSpace(c) }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// keywordAtWordStart reports whether every match of expr starts at a word
// boundary with one of keywords (ASCII case folded), its first byte a word
// byte (so the byte before it is not one): expr is `\b` followed by a part
// whose every match begins with a literal that some keyword is a prefix of.
// Anything it cannot prove is false.
func keywordAtWordStart(expr string, keywords []string) bool {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil || re.Op != syntax.OpConcat || len(re.Sub) < 2 || re.Sub[0].Op != syntax.OpWordBoundary {
		return false
	}
	prefixes, _ := literalPrefixes(&syntax.Regexp{Op: syntax.OpConcat, Sub: re.Sub[1:]})
	if len(prefixes) == 0 {
		return false
	}
	for _, p := range prefixes {
		// A match starting with a non-word byte has its boundary on the
		// other side: a word byte before it, not a non-word one.
		if p == "" || !isWordByte(p[0]) {
			return false
		}
		if !hasKeywordPrefix(p, keywords) {
			return false
		}
	}
	return true
}

// keywordAtStart reports whether every match of expr starts with a literal
// (of any case) that one of keywords is a prefix of, so every match starts
// at a keyword hit (`SK[0-9a-fA-F]{32}`, keyword "sk"). Anything it cannot
// prove is false.
func keywordAtStart(expr string, keywords []string) bool {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return false
	}
	prefixes, _ := literalPrefixes(re)
	if len(prefixes) == 0 {
		return false
	}
	for _, p := range prefixes {
		if !hasKeywordPrefix(p, keywords) {
			return false
		}
	}
	return true
}

// hasKeywordPrefix reports whether one of keywords is a prefix of p, in any
// case.
func hasKeywordPrefix(p string, keywords []string) bool {
	for _, k := range keywords {
		if k != "" && len(p) >= len(k) && strings.EqualFold(p[:len(k)], k) {
			return true
		}
	}
	return false
}

// maxPrefixes bounds the literal prefixes literalPrefixes tracks.
const maxPrefixes = 64

// literalPrefixes returns strings one of which every match of re starts
// with (nil: unknown), and whether they are re's whole matches (so a
// following part extends them).
func literalPrefixes(re *syntax.Regexp) ([]string, bool) {
	switch re.Op {
	case syntax.OpLiteral:
		return []string{string(re.Rune)}, true
	case syntax.OpCapture:
		return literalPrefixes(re.Sub[0])
	case syntax.OpAlternate:
		var out []string
		whole := true
		for _, sub := range re.Sub {
			p, w := literalPrefixes(sub)
			if p == nil || len(out)+len(p) > maxPrefixes {
				return nil, false
			}
			out = append(out, p...)
			whole = whole && w
		}
		return out, whole
	case syntax.OpConcat:
		out := []string{""}
		for _, sub := range re.Sub {
			p, w := literalPrefixes(sub)
			if p == nil || len(out)*len(p) > maxPrefixes {
				return out, false
			}
			var next []string
			for _, a := range out {
				for _, b := range p {
					next = append(next, a+b)
				}
			}
			out = next
			if !w {
				return out, false
			}
		}
		return out, true
	}
	return nil, false
}
