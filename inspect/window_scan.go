package inspect

import (
	"bytes"
	"container/list"
	"strings"
	"sync"
	"time"
)

// Window bounds beyond the Config ones.
const (
	windowPiece    = 256 // bytes of one field value a window keeps
	windowMinPiece = 4   // shorter values are no piece of a split credential
	// windowEdges is how many of the newest kept pieces a join may start
	// at, and how many of a request's new pieces it may end at, with a
	// word boundary on either side (a token's \b is not glued over by its
	// neighbours).
	windowEdges = 3
	// windowPairs bounds the neighbour pairs of one request's new pieces
	// a window joins.
	windowPairs = 64
)

// windows holds every sandbox's window, least recently used evicted.
type windows struct {
	mu   sync.Mutex
	max  int
	lru  *list.List // of *windowEntry, front most recent
	byID map[string]*list.Element
}

// windowEntry is one sandbox's window: its recent pieces, oldest first,
// at most Config.WindowBytes in all.
type windowEntry struct {
	id     string
	pieces [][]byte
	hot    []bool // pieces[i] was part of a finding
	size   int
	last   time.Time
}

func newWindows(max int) *windows {
	return &windows{max: max, lru: list.New(), byID: map[string]*list.Element{}}
}

func (ws *windows) entry(id string, now time.Time, ttl time.Duration) *windowEntry {
	if el, ok := ws.byID[id]; ok {
		ws.lru.MoveToFront(el)
		e := el.Value.(*windowEntry)
		if now.Sub(e.last) > ttl {
			e.pieces, e.hot, e.size = nil, nil, 0
		}
		return e
	}
	for ws.lru.Len() >= ws.max {
		old := ws.lru.Back()
		ws.lru.Remove(old)
		delete(ws.byID, old.Value.(*windowEntry).id)
	}
	e := &windowEntry{id: id}
	ws.byID[id] = ws.lru.PushFront(e)
	return e
}

func (ws *windows) forget(id string) {
	ws.mu.Lock()
	defer ws.mu.Unlock()
	if el, ok := ws.byID[id]; ok {
		ws.lru.Remove(el)
		delete(ws.byID, id)
	}
}

// index is the position of the kept piece equal to v, or -1.
func (e *windowEntry) index(v []byte) int {
	for i, p := range e.pieces {
		if bytes.Equal(p, v) {
			return i
		}
	}
	return -1
}

// remove drops the kept piece i.
func (e *windowEntry) remove(i int) {
	e.size -= len(e.pieces[i])
	e.pieces = append(e.pieces[:i:i], e.pieces[i+1:]...)
	e.hot = append(e.hot[:i:i], e.hot[i+1:]...)
}

// keep appends a piece, dropping the oldest past max bytes.
func (e *windowEntry) keep(p []byte, hot bool, max int) {
	e.pieces = append(e.pieces, p)
	e.hot = append(e.hot, hot)
	e.size += len(p)
	for e.size > max && len(e.pieces) > 0 {
		e.remove(0)
	}
}

// add scans only the joins that include the request's new pieces: a value
// the window keeps already (the same query every request repeats) or one
// too short to be part of a split credential adds no piece and costs no
// scan, so a steady stream of like requests is not rescanned.
//
// A join's finding is the window's when its match spans kept and new
// bytes. One revealed by a decoding (no position) is the window's when
// neither the new pieces alone nor the kept pieces alone hold it: a kept
// encoded secret (a request refused for it) is not blamed on every request
// after it (a benign LLM call was refused as a split escaped key).
//
// Every piece a finding took bytes from is marked (hot), the pieces of a
// secret found within one request included, so the same pieces sent again
// one per request (a retry after a block) are new pieces and rescanned.
func (ws *windows) add(s *Scanner, id string, fields []Field) []Finding {
	var cur [][]byte
	where := ""
	for _, f := range fields {
		v := f.Value
		if len(v) > windowPiece || len(v) < windowMinPiece {
			continue // a large value is no piece of a split; ScanFields has it
		}
		if where == "" {
			where = f.Where
		}
		cur = append(cur, v)
	}

	ws.mu.Lock()
	defer ws.mu.Unlock()
	now := s.cfg.Now()
	e := ws.entry(id, now, s.cfg.Window)
	e.last = now
	// A value the window keeps already adds nothing, unless it was part
	// of a finding: sent again, it is a new piece (a retry of a blocked
	// secret, or its next part) and moves to the end.
	var fresh [][]byte
	for _, v := range cur {
		i := e.index(v)
		if i >= 0 && !e.hot[i] {
			continue
		}
		if i >= 0 {
			e.remove(i)
		}
		fresh = append(fresh, v)
	}
	if len(fresh) == 0 {
		return nil
	}
	old, oldHot := e.pieces, e.hot
	text, segs := windowJoins(old, fresh)
	inHit := make([]bool, len(old)+len(fresh))
	var out []Finding
	var decoded []hit // revealed by a decoding, not yet attributed
	for _, h := range s.windowHits(where, text) {
		if h.pos < 0 {
			decoded = append(decoded, h)
			continue
		}
		split, in := spansEdge(segs, h.pos, h.end)
		for _, i := range in {
			inHit[i] = true
		}
		if split {
			h.Split = true
			out = append(out, h.Finding)
		}
	}
	if len(decoded) > 0 {
		out = append(out, s.windowDecoded(where, old, fresh, segs, text, decoded, inHit)...)
	}
	// A hit spanning only kept pieces was reported when its last piece
	// came (spansEdge), so every piece stays, marked when it was in one.
	e.pieces, e.hot, e.size = nil, nil, 0
	for i, p := range old {
		e.keep(p, oldHot[i] || inHit[i], s.cfg.WindowBytes)
	}
	for i, p := range fresh {
		e.keep(append([]byte(nil), p...), inHit[len(old)+i], s.cfg.WindowBytes)
	}
	return out
}

// windowDecoded sorts the hits a decoding revealed in a join (they have no
// position): one the new pieces alone hold is theirs (ScanFields reports
// it) and marks them; one the kept pieces alone hold was there before this
// request; any other is the window's, a split. The pieces of the smallest
// join run that holds it are marked. Only a join holding an encoded secret
// comes here, so the extra scans cost nothing on clean traffic.
func (s *Scanner) windowDecoded(where string, old, fresh [][]byte, segs []joinSeg, text []byte, decoded []hit, inHit []bool) []Finding {
	keys := func(pieces [][]byte) map[string][]string {
		m := map[string][]string{}
		for _, h := range s.windowHits(where, windowRuns(pieces)) {
			k := h.Detector + "\x00" + h.Fingerprint
			m[k] = append(m[k], h.Encoding)
		}
		return m
	}
	// holds reports whether pieces whose keys are m reveal f: the same
	// secret by the same detector, in f's encoding or one f's ends with
	// (an escape layer of a new piece laid over a kept base32 value is
	// still the kept value).
	holds := func(m map[string][]string, f Finding) bool {
		for _, enc := range m[f.Detector+"\x00"+f.Fingerprint] {
			if enc == f.Encoding || strings.HasSuffix(f.Encoding, "+"+enc) {
				return true
			}
		}
		return false
	}
	own := keys(fresh)
	var kept map[string][]string
	var out []Finding
	seen := map[string]bool{}
	for _, h := range decoded {
		k := windowKey(h.Finding)
		if seen[k] {
			continue
		}
		seen[k] = true
		if holds(own, h.Finding) {
			for i := range fresh {
				inHit[len(old)+i] = true
			}
			continue
		}
		if kept == nil {
			kept = keys(old)
		}
		if holds(kept, h.Finding) {
			continue
		}
		// The smallest run holding it: its pieces are the secret's.
		best := -1
		for gi := len(segs) - 1; gi >= 0; gi-- {
			g := segs[gi]
			if best >= 0 && len(g.at) >= len(segs[best].at) {
				continue
			}
			for _, x := range s.windowHits(where, text[g.lo:g.hi]) {
				if windowKey(x.Finding) == k {
					best = gi
					break
				}
			}
		}
		if best >= 0 {
			for j := range segs[best].at {
				inHit[segs[best].from+j] = true
			}
		}
		h.Split = true
		out = append(out, h.Finding)
	}
	return out
}

// spansEdge reports whether text[pos:end] of a join takes bytes from both
// sides of a segment's kept/new edge, and which pieces (old, then fresh,
// numbered together) it takes bytes from.
func spansEdge(segs []joinSeg, pos, end int) (split bool, in []int) {
	for _, g := range segs {
		if pos < g.lo || end > g.hi {
			continue
		}
		if pos < g.edge && g.edge < end {
			split = true
		}
		for k, at := range g.at {
			if at.lo < end && pos < at.hi {
				in = append(in, g.from+k)
			}
		}
	}
	return split, in
}

// windowHits is the credential and canary hits of medium or high
// confidence in data, one per value and encoding.
func (s *Scanner) windowHits(where string, data []byte) []hit {
	st := s.newState(where)
	st.minConf, st.atEach = true, true
	st.layer(data, "", 0)
	best := st.findings()
	keep := make(map[string]bool, len(best))
	for _, f := range best {
		keep[windowKey(f)] = true
	}
	var out []hit
	for _, h := range st.hits {
		if (h.Class == ClassCredential || h.Class == ClassCanary) && keep[windowKey(h.Finding)] {
			out = append(out, h)
		}
	}
	return out
}

func windowKey(f Finding) string {
	return f.Detector + "\x00" + f.Fingerprint + "\x00" + f.Encoding
}

// joinSeg is one run of a join's text: kept pieces from lo, new ones from
// edge, up to hi; at are its pieces' bounds, the first being piece from
// (old and fresh numbered together).
type joinSeg struct {
	lo, edge, hi int
	from         int
	at           []span
}

// windowJoins is the text a window scans for a secret whose pieces are old
// (kept, oldest first) followed by fresh ones: all of them glued (a secret
// cut in many pieces), then, each on its own line, the runs that start at
// one of the newest windowEdges old pieces, or at any fresh one, and end
// at one of the first windowEdges fresh ones after, so a format that must
// start or end at a word boundary is not hidden by the pieces around it.
// Control bytes are dropped (appendText).
func windowJoins(old, fresh [][]byte) ([]byte, []joinSeg) {
	all := append(append([][]byte(nil), old...), fresh...)
	var out []byte
	var segs []joinSeg
	seg := func(i, j int) { // pieces all[i:j]
		g := joinSeg{lo: len(out), edge: -1, from: i}
		for k := i; k < j; k++ {
			if k == len(old) {
				g.edge = len(out)
			}
			lo := len(out)
			out = appendText(out, all[k])
			g.at = append(g.at, span{lo, len(out)})
		}
		g.hi = len(out)
		segs = append(segs, g)
		out = append(out, '\n')
	}
	seg(0, len(all))
	for i := max(0, len(old)-windowEdges); i < len(all); i++ {
		for j := max(i+1, len(old)+1); j <= min(len(old)+windowEdges, len(all)); j++ {
			if i > 0 || j < len(all) {
				seg(i, j)
			}
		}
	}
	// Each later new piece with its neighbour, as splitScan joins a
	// request's values: a secret in two of them is found, and its pieces
	// marked, even when they are not among the first new ones.
	for i := len(old) + windowEdges - 1; i+1 < len(all) && i < len(old)+windowPairs; i++ {
		if i > 0 || i+2 < len(all) {
			seg(i, i+2)
		}
	}
	return out, segs
}

// windowRuns is the text of pieces alone: all of them glued, then every run
// of up to windowEdges neighbours on a line of its own (each piece alone
// included), so what a join found at a line's start is found here too.
func windowRuns(pieces [][]byte) []byte {
	var out []byte
	for _, p := range pieces {
		out = appendText(out, p)
	}
	for i := range pieces {
		for j := i + 1; j <= min(i+windowEdges, len(pieces)); j++ {
			out = append(out, '\n')
			for _, p := range pieces[i:j] {
				out = appendText(out, p)
			}
		}
	}
	return out
}
