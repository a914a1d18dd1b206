package inspect

// automaton finds every occurrence of a set of lowercase patterns, ASCII
// case-insensitively, and the token runs of the bytes, in one pass whose
// cost does not grow with the number of patterns. It filters, then
// verifies: a bitset over the byte classes of each position's next three
// bytes says whether some pattern can start there (a few percent of the
// positions of ordinary text), and only there is a trie of the patterns
// walked. The common byte costs independent table loads, never a load
// chained on the one before, which is what bounds an Aho-Corasick DFA.
type automaton struct {
	// class maps a byte to its class (ASCII folded; 0: no pattern uses
	// it), with tokenBit set for a token byte, so one load per byte serves
	// both the filter and the token-run finder.
	class  [256]uint8
	stride int       // classes per trie node
	next   []uint32  // node*stride + class -> child node*stride (0: none)
	out    [][]int32 // node -> ids of the patterns spelled by its path
	lens   []int     // pattern lengths
	// starts is a bitset over gram(c0, c1, c2), set for the first three
	// classes of each pattern (every continuation of a shorter one).
	starts [1 << 12]uint8
}

// gram hashes three byte classes to 15 bits (a collision only costs a
// trie walk). The scan keeps it rolling: h = (h<<5 ^ c) & gramMask is the
// gram of the last three classes.
func gram(c0, c1, c2 uint32) uint32 {
	return (c0<<10 ^ c1<<5 ^ c2) & gramMask
}

const gramMask = 1<<15 - 1

func newAutomaton(patterns []string) *automaton {
	a := &automaton{}
	// Byte classes: each byte used by a pattern (folded) gets its own.
	nclass := 1
	for _, p := range patterns {
		if p == "" {
			panic("inspect: empty keyword")
		}
		for i := 0; i < len(p); i++ {
			c := lower(p[i])
			if a.class[c] == 0 {
				a.class[c] = uint8(nclass)
				nclass++
			}
		}
		a.lens = append(a.lens, len(p))
	}
	for c := 'A'; c <= 'Z'; c++ {
		a.class[c] = a.class[c+'a'-'A']
	}
	if nclass > tokenBit {
		panic("inspect: too many keyword byte classes")
	}
	a.stride = nclass
	// The trie, node 0 its root.
	a.next = make([]uint32, nclass)
	a.out = [][]int32{nil}
	for pi, p := range patterns {
		s := uint32(0)
		for i := 0; i < len(p); i++ {
			k := s + uint32(a.class[p[i]])
			if a.next[k] == 0 {
				a.next[k] = uint32(len(a.next))
				a.next = append(a.next, make([]uint32, nclass)...)
				a.out = append(a.out, nil)
			}
			s = a.next[k]
		}
		node := int(s) / nclass
		a.out[node] = append(a.out[node], int32(pi))
		// The filter.
		c := [3]uint32{}
		for i := range min(3, len(p)) {
			c[i] = uint32(a.class[p[i]])
		}
		switch len(p) {
		case 1:
			for c1 := range uint32(nclass) {
				for c2 := range uint32(nclass) {
					a.setStart(gram(c[0], c1, c2))
				}
			}
		case 2:
			for c2 := range uint32(nclass) {
				a.setStart(gram(c[0], c[1], c2))
			}
		default:
			a.setStart(gram(c[0], c[1], c[2]))
		}
	}
	for c := range a.class {
		if isToken(byte(c)) {
			a.class[c] |= tokenBit
		}
	}
	return a
}

func (a *automaton) setStart(g uint32) {
	a.starts[g>>3] |= 1 << (g & 7)
}

// tokenBit marks a token byte in automaton.class.
const tokenBit = 0x80

// scan calls hit(pattern, end) for every occurrence of a pattern in data,
// end being the index just past it (in order of where they start), and
// returns the token runs of at least minRun bytes: the one pass over the
// bytes that a scan makes.
func (a *automaton) scan(data []byte, hit func(pattern int, end int)) (runs []span) {
	class, starts := &a.class, &a.starts
	n := len(data)
	run := 0
	// Two short dependency chains per byte (run, h), each two cheap
	// operations: h's low 15 bits are the gram of data[j-2:j+1].
	h := uint32(0)
	for j, b := range data {
		c := class[b]
		if c < tokenBit && run >= minRun {
			runs = append(runs, span{j - run, j})
		}
		run = (run + 1) & int(int8(c)>>7) // all ones for a token byte
		h = h<<5 ^ uint32(c&^tokenBit)
		if g := h & gramMask; starts[g>>3]&(1<<(g&7)) != 0 && j >= 2 {
			a.verify(data, j-2, hit)
		}
	}
	if run >= minRun {
		runs = append(runs, span{n - run, n})
	}
	// The last two positions, whose grams run past the end (class 0, which
	// no pattern uses: a short pattern's grams cover it).
	for i := max(0, n-2); i < n; i++ {
		c0, c1 := uint32(class[data[i]]&^tokenBit), uint32(0)
		if i+1 < n {
			c1 = uint32(class[data[i+1]] &^ tokenBit)
		}
		if g := gram(c0, c1, 0); starts[g>>3]&(1<<(g&7)) != 0 {
			a.verify(data, i, hit)
		}
	}
	return runs
}

// verify walks the trie from data[i], reporting each pattern it spells.
func (a *automaton) verify(data []byte, i int, hit func(pattern int, end int)) {
	next, class, stride := a.next, &a.class, a.stride
	s := uint32(0)
	for j := i; j < len(data); j++ {
		s = next[s+uint32(class[data[j]]&^tokenBit)]
		if s == 0 {
			return
		}
		for _, p := range a.out[int(s)/stride] {
			hit(int(p), j+1)
		}
	}
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
