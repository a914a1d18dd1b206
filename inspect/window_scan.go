package inspect

import (
	"bytes"
	"container/list"
	"sync"
	"time"
)

// Window bounds beyond the Config ones.
const (
	windowPiece    = 256 // bytes of one field value a window keeps
	windowMinPiece = 4   // shorter values are no piece of a split credential
	windowKnown    = 128 // decoded findings a window remembers reporting
	// windowEdges is how many of the newest kept pieces a join may start
	// at, and how many of a request's new pieces it may end at, with a
	// word boundary on either side (a token's \b is not glued over by its
	// neighbours).
	windowEdges = 3
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
	known  map[string]bool // decoded findings reported, oldest first in order
	order  []string
}

func newWindows(max int) *windows {
	return &windows{max: max, lru: list.New(), byID: map[string]*list.Element{}}
}

func (ws *windows) entry(id string, now time.Time, ttl time.Duration) *windowEntry {
	if el, ok := ws.byID[id]; ok {
		ws.lru.MoveToFront(el)
		e := el.Value.(*windowEntry)
		if now.Sub(e.last) > ttl {
			e.pieces, e.hot, e.size, e.known, e.order = nil, nil, 0, nil, nil
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

func (e *windowEntry) remember(key string) {
	if len(e.order) >= windowKnown {
		delete(e.known, e.order[0])
		e.order = e.order[1:]
	}
	if e.known == nil {
		e.known = map[string]bool{}
	}
	e.known[key] = true
	e.order = append(e.order, key)
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
// A join's finding is the window's when its match spans kept and new
// bytes; one revealed by a decoding (no position) when the window has not
// reported it before and the new pieces alone do not hold it.
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
	// A value the window keeps already adds nothing, unless it was part of
	// a finding: sent again, it is a new piece (a retry of a blocked
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
	var own map[string]bool // decoded findings of the new pieces alone
	for _, h := range s.windowHits(where, text) {
		if h.pos >= 0 {
			split, in := spansEdge(segs, h.pos, h.end)
			for _, i := range in {
				inHit[i] = true
			}
			if !split {
				continue
			}
		} else {
			if own == nil {
				own = map[string]bool{}
				alone, _ := windowJoins(nil, fresh)
				for _, a := range s.windowHits(where, alone) {
					own[windowKey(a.Finding)] = true
				}
			}
			k := windowKey(h.Finding)
			if own[k] || e.known[k] || len(old) == 0 {
				continue
			}
			e.remember(k)
		}
		h.Split = true
		out = append(out, h.Finding)
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
	return out, segs
}
