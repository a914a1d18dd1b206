package inspect

import "encoding/binary"

// The walk's cost is one dependent table load per byte: the next state
// needs the one before it, so a single walk runs at the latency of a load,
// not at the rate a core can issue them. A long input is scanned in two
// passes instead (DESIGN.md, "The walk in lanes"). hitLanes cuts it into
// four stretches and walks them in one loop, four independent chains the
// core overlaps; a stretch's walk starts from the root `longest` bytes
// before the stretch (no state is deeper, so by the stretch's first byte
// it is in the state the plain walk would be in). The loop writes to a
// per-block buffer only when a state has output; the hits are handed on in
// order after the walk. tokenRuns then finds the token runs by testing one
// aligned 8-byte word in eight bytes.

// Lane parameters: the number of stretches, the shortest input worth
// cutting, and the block the loop notes hits for.
const (
	lanes     = 4
	laneMin   = 1024
	laneBlock = 128
)

// laneHit is a hit kept during the walk: the state, times stride, and the
// end of the match in data.
type laneHit struct {
	state uint32
	end   int
}

// hitLanes calls hit(pattern, end) for every occurrence of a pattern in
// data, in order of end, as walk does (TestScanLanesMatchesWalk,
// FuzzScanLanes). len(data) >= laneMin.
func (a *automaton) hitLanes(data []byte, hit func(pattern int, end int)) {
	delta, class, outBase := a.delta, &a.plain, a.outBase
	m := len(data) / lanes
	d0, d1, d2, d3 := data[:m], data[m:2*m], data[2*m:3*m], data[3*m:4*m]
	st := [lanes]uint32{a.start}
	for k := 1; k < lanes; k++ {
		st[k] = a.warm(data[k*m-a.longest : k*m])
	}
	var hs [lanes][]laneHit
	// buf holds one block's hits, in order of position, each its state,
	// its position in the lane and its lane packed in one word.
	var buf [lanes * laneBlock]uint64
	for lo := 0; lo < m; lo += laneBlock {
		hi := min(lo+laneBlock, m)
		x0, x1, x2, x3 := d0[lo:hi], d1[lo:hi], d2[lo:hi], d3[lo:hi]
		x1, x2, x3 = x1[:len(x0)], x2[:len(x0)], x3[:len(x0)]
		s0, s1, s2, s3 := st[0], st[1], st[2], st[3]
		nb := 0
		for i := range x0 {
			s0 = delta[s0+uint32(class[x0[i]])]
			s1 = delta[s1+uint32(class[x1[i]])]
			s2 = delta[s2+uint32(class[x2[i]])]
			s3 = delta[s3+uint32(class[x3[i]])]
			if s0 >= outBase {
				buf[nb&(len(buf)-1)] = uint64(s0)<<32 | uint64(i)<<2
				nb++
			}
			if s1 >= outBase {
				buf[nb&(len(buf)-1)] = uint64(s1)<<32 | uint64(i)<<2 | 1
				nb++
			}
			if s2 >= outBase {
				buf[nb&(len(buf)-1)] = uint64(s2)<<32 | uint64(i)<<2 | 2
				nb++
			}
			if s3 >= outBase {
				buf[nb&(len(buf)-1)] = uint64(s3)<<32 | uint64(i)<<2 | 3
				nb++
			}
		}
		for _, h := range buf[:nb] {
			k := int(h & 3)
			hs[k] = append(hs[k], laneHit{uint32(h >> 32), k*m + lo + int(uint32(h)>>2) + 1})
		}
		st = [lanes]uint32{s0, s1, s2, s3}
	}
	// The last lane takes the bytes the division left over.
	hs[3] = a.blockHits(hs[3], data[4*m:], st[3], 4*m)
	for _, h := range hs {
		for _, h := range h {
			for _, p := range a.out[int(h.state-outBase)/a.stride] {
				hit(int(p), h.end)
			}
		}
	}
}

// blockHits walks x, which starts at data[off], from state s and appends
// its hits to hs.
func (a *automaton) blockHits(hs []laneHit, x []byte, s uint32, off int) []laneHit {
	for i, b := range x {
		s = a.delta[s+uint32(a.plain[b])]
		if s >= a.outBase {
			hs = append(hs, laneHit{s, off + i + 1})
		}
	}
	return hs
}

// warm is the state the walk is in after data, from the root.
func (a *automaton) warm(data []byte) uint32 {
	s := uint32(0)
	for _, b := range data {
		s = a.delta[s+uint32(a.plain[b])]
	}
	return s
}

// tokenRuns returns data's runs of at least minRun token bytes, as walk
// does. A run that long holds a whole 8-byte word at every 8th offset of
// its start, so the search tests one word in eight bytes (every byte of it
// in '+'..'z', by SWAR, then each byte) and reads a run out byte by byte
// only around a word of tokens.
func tokenRuns(data []byte) []span {
	var out []span
	n := len(data)
	for i := 0; i+8 <= n; {
		w := binary.LittleEndian.Uint64(data[i:])
		if outside(w) || !tokenWord(data[i:i+8]) {
			i += 8
			continue
		}
		lo, hi := i, i+8
		for lo > 0 && tokenTable[data[lo-1]] {
			lo--
		}
		for hi < n && tokenTable[data[hi]] {
			hi++
		}
		if hi-lo >= minRun {
			out = append(out, span{lo, hi})
		}
		i = hi + 1
	}
	return out
}

// SWAR constants: a byte of ones, and of high bits.
const (
	swarOnes = 0x0101010101010101
	swarHigh = 0x8080808080808080
)

// outside reports whether some byte of w is not a token byte by a cheap
// test: outside '+'..'z' (0x2b-0x7a), where every token byte is, or a '.'
// (common between words of code and prose).
func outside(w uint64) bool {
	below := (w - swarOnes*'+') &^ w       // high bit set in some byte < '+'
	above := (w + swarOnes*(0x7f-'z')) | w // high bit set in some byte > 'z'
	dot := w ^ swarOnes*'.'
	dot = (dot - swarOnes) &^ dot // high bit set in some byte that was '.'
	return (below|above|dot)&swarHigh != 0
}

// tokenWord reports whether the 8 bytes of x are token bytes.
func tokenWord(x []byte) bool {
	_ = x[7]
	return tokenTable[x[0]] && tokenTable[x[1]] && tokenTable[x[2]] && tokenTable[x[3]] &&
		tokenTable[x[4]] && tokenTable[x[5]] && tokenTable[x[6]] && tokenTable[x[7]]
}
