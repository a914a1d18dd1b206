package inspect

// The walk's cost is one dependent table load per byte: the next state
// needs the one before it, so a single walk runs at the latency of a load,
// not at the rate a core can issue them. A long input is scanned in two
// passes instead. hitLanes cuts it into four stretches and walks them in
// one loop, four independent chains the core overlaps; a stretch's walk
// starts from the root `longest` bytes before the stretch (no state is
// deeper than the longest pattern, so by the stretch's first byte it is in
// the state the plain walk would be in). The loop only notes which blocks
// of a stretch reached an output state; those blocks alone are walked again
// to collect the hits, given in order. tokenRuns then finds the token runs
// by skipping: a run of minRun bytes must cover every minRun-th byte.

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
	var st [lanes]uint32
	for k := 1; k < lanes; k++ {
		st[k] = a.warm(data[k*m-a.longest : k*m])
	}
	var hs [lanes][]laneHit
	for lo := 0; lo < m; lo += laneBlock {
		hi := min(lo+laneBlock, m)
		x0, x1, x2, x3 := d0[lo:hi], d1[lo:hi], d2[lo:hi], d3[lo:hi]
		x1, x2, x3 = x1[:len(x0)], x2[:len(x0)], x3[:len(x0)]
		s0, s1, s2, s3 := st[0], st[1], st[2], st[3]
		var f uint8 // bit k: lane k reached an output state in this block
		for i := range x0 {
			s0 = delta[s0+uint32(class[x0[i]])]
			s1 = delta[s1+uint32(class[x1[i]])]
			s2 = delta[s2+uint32(class[x2[i]])]
			s3 = delta[s3+uint32(class[x3[i]])]
			if s0 >= outBase {
				f |= 1
			}
			if s1 >= outBase {
				f |= 2
			}
			if s2 >= outBase {
				f |= 4
			}
			if s3 >= outBase {
				f |= 8
			}
		}
		if f != 0 {
			for k, x := range [lanes][]byte{x0, x1, x2, x3} {
				if f&(1<<k) != 0 {
					hs[k] = a.blockHits(hs[k], x, st[k], k*m+lo)
				}
			}
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
// does. A run that long covers every minRun-th byte, so the search looks
// at one byte in minRun and, where that one is a token, back to the last
// byte not yet known to be one.
func tokenRuns(data []byte) []span {
	var out []span
	n := len(data)
	// data[i-1] is not a token (or i is 0) and data[i:k+1] are tokens.
	i, k := 0, -1
	for i+minRun <= n {
		p := i + minRun - 1
		if !tokenTable[data[p]] {
			i, k = p+1, p
			continue
		}
		q := p - 1
		for q > k && tokenTable[data[q]] {
			q--
		}
		if q > k {
			i, k = q+1, p
			continue
		}
		j := p + 1
		for j < n && tokenTable[data[j]] {
			j++
		}
		out = append(out, span{i, j})
		i, k = j+1, j
	}
	return out
}
