package dnsfilter

import (
	"net/netip"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// The filter remembers, per sandbox, which name it answered with which
// address, for the TTL the sandbox was given, so the gateway can decide a
// connection the sandbox makes to a bare address (raw TCP: ssh, a database)
// by the name it resolved (NameFor). An address the filter never gave the
// sandbox has no name here, and is decided as the address it is.

// NameFor returns the name the filter most recently answered the sandbox
// sandboxID with addr for, while the TTL sent with that answer lasts. Several
// names may answer with one address (a CDN): the most recent answer wins, and
// an older name for the address is forgotten. An address never answered to
// this sandbox, answered to another sandbox, past its TTL, or dropped by the
// bounds (Config.NameMemoPerSandbox, NameMemoTotal), and a sandbox the filter
// does not serve, all give ok false: the caller decides the bare address
// (fail closed).
func (f *Filter) NameFor(sandboxID string, addr netip.Addr) (name string, ok bool) {
	s := f.sandbox(sandboxID)
	if s == nil {
		return "", false
	}
	return f.memo.get(s, addr.Unmap(), f.res.now())
}

// NameFor is (*Filter).NameFor of the Filter this Resolver belongs to: the
// gateway receives the Resolver and finds it through gateway.SandboxNamer.
func (r *Resolver) NameFor(sandboxID string, addr netip.Addr) (name string, ok bool) {
	return r.owner.NameFor(sandboxID, addr)
}

// remember records the addresses of an answer that is about to be sent to the
// sandbox, each until the TTL it carries runs out.
func (s *sandboxServer) remember(name string, rrs []dns.RR, now time.Time) {
	var buf [8]memoAddr
	as := buf[:0]
	for _, rr := range rrs {
		if ip, ok := rrAddr(rr); ok {
			ttl := time.Duration(rr.Header().Ttl) * time.Second
			as = append(as, memoAddr{addr: ip.Unmap(), expires: now.Add(ttl)})
		}
	}
	if len(as) > 0 {
		s.f.memo.put(s, name, as)
	}
}

type memoAddr struct {
	addr    netip.Addr
	expires time.Time
}

// nameMemo holds every sandbox's address -> name entries under one lock, in
// two orders (all entries, and each sandbox's), oldest first, so the bounds
// drop the oldest. Entries are keyed by the sandbox's server, not its id: an
// answer still being sent by a sandbox that was stopped (and perhaps served
// again under the same id) can never be found by the new one.
type nameMemo struct {
	perSandbox int
	total      int

	mu    sync.RWMutex
	sbs   map[*sandboxServer]*memoSandbox
	all   memoList // every entry, by age
	count int      // entries held
}

// memoSandbox is one sandbox's entries.
type memoSandbox struct {
	m   map[netip.Addr]*memoEntry
	own memoList // this sandbox's entries, by age
}

// memoEntry is one address's name, linked into both orders.
type memoEntry struct {
	sb      *memoSandbox
	owner   *sandboxServer
	addr    netip.Addr
	name    string
	expires time.Time
	all     memoLink
	own     memoLink
}

type memoLink struct{ prev, next *memoEntry }

// memoList is an intrusive doubly linked list through one of memoEntry's
// links (which one is fixed per list by link).
type memoList struct {
	head, tail *memoEntry
	link       func(*memoEntry) *memoLink
}

func (l *memoList) pushBack(e *memoEntry) {
	k := l.link(e)
	k.prev, k.next = l.tail, nil
	if l.tail != nil {
		l.link(l.tail).next = e
	} else {
		l.head = e
	}
	l.tail = e
}

func (l *memoList) remove(e *memoEntry) {
	k := l.link(e)
	if k.prev != nil {
		l.link(k.prev).next = k.next
	} else {
		l.head = k.next
	}
	if k.next != nil {
		l.link(k.next).prev = k.prev
	} else {
		l.tail = k.prev
	}
	k.prev, k.next = nil, nil
}

func linkAll(e *memoEntry) *memoLink { return &e.all }
func linkOwn(e *memoEntry) *memoLink { return &e.own }

func newNameMemo(perSandbox, total int) *nameMemo {
	return &nameMemo{
		perSandbox: perSandbox, total: total,
		sbs: make(map[*sandboxServer]*memoSandbox),
		all: memoList{link: linkAll},
	}
}

// get returns s's unexpired name for addr.
func (m *nameMemo) get(s *sandboxServer, addr netip.Addr, now time.Time) (string, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	sb := m.sbs[s]
	if sb == nil {
		return "", false
	}
	e := sb.m[addr]
	if e == nil || !now.Before(e.expires) {
		return "", false
	}
	return e.name, true
}

// put records name for each address, as the most recent answer: an address
// already known (under any name) takes the new name and expiry and becomes
// the newest entry. Past a bound, the oldest entries go.
func (m *nameMemo) put(s *sandboxServer, name string, as []memoAddr) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.sbs[s]
	if sb == nil {
		sb = &memoSandbox{m: make(map[netip.Addr]*memoEntry), own: memoList{link: linkOwn}}
		m.sbs[s] = sb
	}
	for _, a := range as {
		e := sb.m[a.addr]
		if e != nil {
			m.all.remove(e)
			sb.own.remove(e)
		} else {
			e = &memoEntry{sb: sb, owner: s, addr: a.addr}
			sb.m[a.addr] = e
			m.count++
		}
		e.name, e.expires = name, a.expires
		m.all.pushBack(e)
		sb.own.pushBack(e)
		if len(sb.m) > m.perSandbox {
			m.drop(sb.own.head)
		}
		for m.count > m.total {
			m.drop(m.all.head)
		}
	}
}

// drop removes e from both orders and its sandbox's map.
func (m *nameMemo) drop(e *memoEntry) {
	m.all.remove(e)
	e.sb.own.remove(e)
	delete(e.sb.m, e.addr)
	if len(e.sb.m) == 0 {
		delete(m.sbs, e.owner)
	}
	m.count--
}

// forget drops every entry of s (the sandbox stopped).
func (m *nameMemo) forget(s *sandboxServer) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sb := m.sbs[s]
	if sb == nil {
		return
	}
	for e := sb.own.head; e != nil; {
		next := e.own.next
		m.drop(e)
		e = next
	}
}
