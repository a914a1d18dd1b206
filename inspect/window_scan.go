package inspect

import (
	"container/list"
	"sync"
	"time"
)

// Window bounds beyond the Config ones.
const (
	windowPiece = 256 // bytes of one field value a window keeps
	windowKnown = 128 // findings a window remembers having seen
)

// windows holds every sandbox's window, least recently used evicted.
type windows struct {
	mu   sync.Mutex
	max  int
	lru  *list.List // of *windowEntry, front most recent
	byID map[string]*list.Element
}

type windowEntry struct {
	id    string
	tail  []byte
	last  time.Time
	known map[string]bool
	order []string
}

func newWindows(max int) *windows {
	return &windows{max: max, lru: list.New(), byID: map[string]*list.Element{}}
}

func (ws *windows) entry(id string, now time.Time, ttl time.Duration) *windowEntry {
	if el, ok := ws.byID[id]; ok {
		ws.lru.MoveToFront(el)
		e := el.Value.(*windowEntry)
		if now.Sub(e.last) > ttl {
			e.tail, e.known, e.order = nil, map[string]bool{}, nil
		}
		return e
	}
	for ws.lru.Len() >= ws.max {
		old := ws.lru.Back()
		ws.lru.Remove(old)
		delete(ws.byID, old.Value.(*windowEntry).id)
	}
	e := &windowEntry{id: id, known: map[string]bool{}}
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
	if e.known[key] {
		return
	}
	if len(e.order) >= windowKnown {
		delete(e.known, e.order[0])
		e.order = e.order[1:]
	}
	e.known[key] = true
	e.order = append(e.order, key)
}

func (ws *windows) add(s *Scanner, id string, fields []Field) []Finding {
	var cur []byte
	where := ""
	for _, f := range fields {
		v := f.Value
		if len(v) > windowPiece {
			continue // a large value is no piece of a split; ScanFields has it
		}
		if where == "" {
			where = f.Where
		}
		cur = append(cur, v...)
	}
	if len(cur) == 0 {
		return nil
	}
	alone := s.newState(where)
	alone.minConf = true
	alone.layer(cur, "", 0)

	ws.mu.Lock()
	defer ws.mu.Unlock()
	e := ws.entry(id, s.cfg.Now(), s.cfg.Window)
	e.last = s.cfg.Now()
	joined := append(append([]byte(nil), e.tail...), cur...)
	for _, h := range alone.hits {
		e.remember(h.Detector + "\x00" + h.Fingerprint + "\x00" + h.Encoding)
	}
	var out []Finding
	if len(e.tail) > 0 {
		j := s.newState(where)
		j.minConf = true
		j.layer(joined, "", 0)
		for _, f := range j.findings() {
			if f.Class != ClassCredential && f.Class != ClassCanary {
				continue
			}
			key := f.Detector + "\x00" + f.Fingerprint + "\x00" + f.Encoding
			if e.known[key] {
				continue
			}
			e.remember(key)
			f.Split = true
			out = append(out, f)
		}
	}
	if len(joined) > s.cfg.WindowBytes {
		joined = joined[len(joined)-s.cfg.WindowBytes:]
	}
	e.tail = joined
	return out
}
