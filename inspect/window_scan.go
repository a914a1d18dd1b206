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
			e.pieces, e.size = nil, 0
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

// holds reports whether the window already keeps v.
func (e *windowEntry) holds(v []byte) bool {
	for _, p := range e.pieces {
		if bytes.Equal(p, v) {
			return true
		}
	}
	return false
}

// keep appends pieces, dropping the oldest past max bytes.
func (e *windowEntry) keep(pieces [][]byte, max int) {
	for _, p := range pieces {
		e.pieces = append(e.pieces, append([]byte(nil), p...))
		e.size += len(p)
	}
	for e.size > max && len(e.pieces) > 0 {
		e.size -= len(e.pieces[0])
		e.pieces[0] = nil
		e.pieces = e.pieces[1:]
	}
}

// add scans only the joins that include the request's new pieces: a
// request's value the window already keeps (the same query every request
// repeats) or one too short to be part of a split credential adds no piece
// and costs no scan, so a steady stream of like requests is not rescanned.
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
	var fresh [][]byte
	for _, v := range cur {
		if !e.holds(v) {
			fresh = append(fresh, v)
		}
	}
	if len(fresh) == 0 {
		return nil
	}
	// A secret whole within the new pieces is ScanFields' finding, not
	// the window's; those pieces are spent (not kept), so neither a later
	// join nor the same pieces sent again pass for a window the secret
	// already went through.
	alone := s.windowScan(where, windowJoins(nil, fresh))
	own := map[string]bool{}
	for _, f := range alone {
		own[windowKey(f)] = true
	}
	var out []Finding
	if len(e.pieces) > 0 && len(fresh) > 0 {
		for _, f := range s.windowScan(where, windowJoins(e.pieces, fresh)) {
			if own[windowKey(f)] {
				continue
			}
			f.Split = true
			out = append(out, f)
		}
		if len(out) > 0 {
			// The kept pieces are spent: reported once, not joined again.
			e.pieces, e.size = nil, 0
		}
	}
	if len(alone) > 0 {
		return out
	}
	e.keep(fresh, s.cfg.WindowBytes)
	return out
}

// windowScan is the credential and canary findings of medium or high
// confidence in data.
func (s *Scanner) windowScan(where string, data []byte) []Finding {
	st := s.newState(where)
	st.minConf = true
	st.layer(data, "", 0)
	var out []Finding
	for _, f := range st.findings() {
		if f.Class == ClassCredential || f.Class == ClassCanary {
			out = append(out, f)
		}
	}
	return out
}

func windowKey(f Finding) string {
	return f.Detector + "\x00" + f.Fingerprint + "\x00" + f.Encoding
}

// windowJoins is the text a window scans for a secret whose pieces are old
// (kept, oldest first) followed by fresh ones: all of them glued (a secret
// cut in many pieces), then, each on its own line, the runs that start at
// one of the newest windowEdges old pieces (or, without old ones, at a
// fresh piece) and end at one of the first windowEdges fresh pieces, so a
// format that must start or end at a word boundary is not hidden by the
// pieces around it. Control bytes are dropped (appendText).
func windowJoins(old, fresh [][]byte) []byte {
	var out []byte
	for _, p := range old {
		out = appendText(out, p)
	}
	for _, p := range fresh {
		out = appendText(out, p)
	}
	starts := old
	if len(old) == 0 {
		starts = fresh
	}
	for i := max(0, len(starts)-windowEdges); i < len(starts); i++ {
		for j := 0; j < min(windowEdges, len(fresh)); j++ {
			out = append(out, '\n')
			if len(old) > 0 {
				for _, p := range old[i:] {
					out = appendText(out, p)
				}
				for _, p := range fresh[:j+1] {
					out = appendText(out, p)
				}
			} else if i <= j {
				for _, p := range fresh[i : j+1] {
					out = appendText(out, p)
				}
			}
		}
	}
	return out
}
