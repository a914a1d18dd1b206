package inspect

import "slices"

// automaton is an Aho-Corasick automaton over lowercase patterns, compiled
// to a dense DFA on byte classes and matching ASCII case-insensitively. The
// scan loop is one table load and one compare per byte whatever the number
// of patterns: states with output are numbered last, so "is this a match"
// is a single comparison against outBase.
type automaton struct {
	// class maps a byte to its class (ASCII folded; 0: no pattern uses
	// it), with tokenBit set for a token byte, so one load per byte serves
	// both the automaton and the token-run finder.
	class [256]uint8
	// plain is class without tokenBit, for the lanes' walk.
	plain   [256]uint8
	stride  int       // classes per state
	delta   []uint32  // state*stride + class -> next state*stride
	outBase uint32    // first state (times stride) with output
	out     [][]int32 // (state - first output state) -> pattern ids ending there
	lens    []int     // pattern lengths
	longest int       // the deepest state: the longest pattern, plus one if it needs a boundary
	// start is the state a walk starts in (times stride): the root, or
	// with boundary patterns the state after a non-word byte, as if one
	// came before the input.
	start uint32
}

// newAutomaton compiles patterns. A pattern with boundary[i] set matches
// only where the byte before it is not a word byte (or at the start): the
// trie holds it behind every non-word class, so a hit glued to a word
// ("this.", for the keyword "s.") never reaches an output state and costs
// the walk nothing. boundary may be nil.
func newAutomaton(patterns []string, boundary []bool) *automaton {
	a := &automaton{}
	// Byte classes: each byte used by a pattern (folded) gets its own.
	// With boundary patterns every word byte gets one too, so that class
	// 0 (bytes no pattern uses) holds only non-word bytes.
	nclass := 1
	anyBoundary := slices.Contains(boundary, true)
	if anyBoundary {
		for c := 0; c < 256; c++ {
			if b := lower(byte(c)); isWordByte(b) && a.class[b] == 0 {
				a.class[b] = uint8(nclass)
				nclass++
			}
		}
	}
	for _, p := range patterns {
		for i := 0; i < len(p); i++ {
			c := lower(p[i])
			if a.class[c] == 0 {
				a.class[c] = uint8(nclass)
				nclass++
			}
		}
		a.lens = append(a.lens, len(p))
		a.longest = max(a.longest, len(p))
		if anyBoundary && boundary[len(a.lens)-1] {
			a.longest = max(a.longest, len(p)+1)
		}
	}
	for c := 'A'; c <= 'Z'; c++ {
		a.class[c] = a.class[c+'a'-'A']
	}
	if nclass > tokenBit {
		panic("inspect: too many keyword byte classes")
	}
	a.stride = nclass
	// Trie.
	type node struct {
		next map[uint8]int
		fail int
		out  []int32
	}
	nodes := []node{{next: map[uint8]int{}}}
	insert := func(pi int, path []uint8) {
		s := 0
		for _, c := range path {
			n, ok := nodes[s].next[c]
			if !ok {
				n = len(nodes)
				nodes = append(nodes, node{next: map[uint8]int{}})
				nodes[s].next[c] = n
			}
			s = n
		}
		nodes[s].out = append(nodes[s].out, int32(pi))
	}
	// The non-word classes: 0, and those of the non-word bytes patterns use.
	nonWord := []uint8{0}
	for c := 0; c < 256; c++ {
		if k := a.class[c]; k != 0 && !isWordByte(byte(c)) && !slices.Contains(nonWord, k) {
			nonWord = append(nonWord, k)
		}
	}
	for pi, p := range patterns {
		path := make([]uint8, 0, len(p)+1)
		for i := 0; i < len(p); i++ {
			path = append(path, a.class[p[i]])
		}
		if !anyBoundary || !boundary[pi] {
			insert(pi, path)
			continue
		}
		for _, c := range nonWord {
			insert(pi, append([]uint8{c}, path...))
		}
	}
	// Failure links, breadth first, and the full transition function.
	trans := make([][]int, len(nodes))
	for i := range trans {
		trans[i] = make([]int, nclass)
	}
	var queue []int
	for c := 0; c < nclass; c++ {
		if n, ok := nodes[0].next[uint8(c)]; ok {
			trans[0][c] = n
			queue = append(queue, n)
		}
	}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		nodes[s].out = append(nodes[s].out, nodes[nodes[s].fail].out...)
		for c := 0; c < nclass; c++ {
			if n, ok := nodes[s].next[uint8(c)]; ok {
				nodes[n].fail = trans[nodes[s].fail][c]
				trans[s][c] = n
				queue = append(queue, n)
			} else {
				trans[s][c] = trans[nodes[s].fail][c]
			}
		}
	}
	// Renumber: states without output first (root is 0), then with output.
	order := make([]int, len(nodes))
	num := 0
	for s := range nodes {
		if len(nodes[s].out) == 0 {
			order[s] = num
			num++
		}
	}
	firstOut := num
	for s := range nodes {
		if len(nodes[s].out) > 0 {
			order[s] = num
			num++
		}
	}
	a.outBase = uint32(firstOut * nclass)
	if anyBoundary {
		a.start = uint32(order[trans[0][0]] * nclass)
	}
	a.delta = make([]uint32, len(nodes)*nclass)
	a.out = make([][]int32, len(nodes)-firstOut)
	for s := range nodes {
		for c := 0; c < nclass; c++ {
			a.delta[order[s]*nclass+c] = uint32(order[trans[s][c]] * nclass)
		}
		if len(nodes[s].out) > 0 {
			a.out[order[s]-firstOut] = nodes[s].out
		}
	}
	a.plain = a.class
	for c := range a.class {
		if isToken(byte(c)) {
			a.class[c] |= tokenBit
		}
	}
	return a
}

// tokenBit marks a token byte in automaton.class.
const tokenBit = 0x80

// scan calls hit(pattern, end) for every occurrence of a pattern in data,
// end being the index just past it, in order of end, and returns the token
// runs of at least minRun bytes. A long input is walked in lanes
// (hitLanes) and searched for runs apart (tokenRuns); a short one, and the
// reference both are tested against, by walk, one pass for both.
func (a *automaton) scan(data []byte, hit func(pattern int, end int)) (runs []span) {
	if len(data) < laneMin {
		return a.walk(data, hit)
	}
	a.hitLanes(data, hit)
	return tokenRuns(data)
}

// walk is the plain walk: one state, one byte at a time.
func (a *automaton) walk(data []byte, hit func(pattern int, end int)) (runs []span) {
	delta, class, outBase := a.delta, &a.class, uint32(a.outBase)
	s := a.start
	run := 0
	for i, b := range data {
		c := class[b]
		s = delta[s+uint32(c&^tokenBit)]
		t := int(c >> 7)
		if t == 0 && run >= minRun {
			runs = append(runs, span{i - run, i})
		}
		run = (run + 1) * t
		if s >= outBase {
			for _, p := range a.out[int(s-outBase)/a.stride] {
				hit(int(p), i+1)
			}
		}
	}
	if run >= minRun {
		runs = append(runs, span{len(data) - run, len(data)})
	}
	return runs
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
