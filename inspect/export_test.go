package inspect

// PlainWalk makes s scan with the plain walk only, the reference the
// differential tests hold the fast path to.
func PlainWalk(s *Scanner) { s.rules.plainWalk = true }
