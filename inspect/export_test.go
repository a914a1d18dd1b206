package inspect

import "strings"

// PlainWalk makes s scan the way it did before the fast path: the plain
// walk only, over an automaton without boundary patterns, no anchored check for rules that are not wordStart (the ones
// keywordAtStart anchors), no checks on reversed hits, and no assignment
// check for the cased "name = value" rules. It is the reference the
// differential tests hold the fast path to.
func PlainWalk(s *Scanner) {
	rs := s.compiled().rules // this scanner's own rule set (parsed per scanner)
	rs.plainWalk = true
	rs.ac = newAutomaton(rs.pats, nil)
	for _, r := range rs.rules {
		if !r.wordStart {
			r.anchored = nil
		}
		if strings.HasPrefix(r.re.String(), assignPrefixCased) {
			r.assign = false
		}
	}
}
