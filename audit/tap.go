package audit

import (
	"sync"
	"sync/atomic"
	"time"
)

// DefaultTapBuffer is a subscription's buffer when Subscribe is given none.
const DefaultTapBuffer = 256

// Tap is an Observer that hands every record the log accepted to the
// subscribers of its sandbox, so a live view (the daemon's events stream) sees
// what the log holds as it is written (Observed shows it only accepted
// records: a refused record never reaches a subscriber). Delivery never blocks a caller: a
// subscriber whose buffer is full loses the record, and Dropped counts it.
// A delivered record is redacted exactly as the writer redacts it, and has no
// Seq or Prev (the writer assigns them later); a zero TS is set to the time
// of delivery. Safe for concurrent use.
type Tap struct {
	mu   sync.RWMutex
	subs map[string][]*Subscription // by sandbox id
	kept map[string]*history        // by sandbox id, for those Keep was called for
}

// History bounds, per sandbox, for Keep.
const (
	DefaultHistoryRecords = 500
	DefaultHistoryBytes   = 256 << 10 // of the records' JSON
)

// history is a sandbox's last records as delivered (redacted, no Seq or
// Prev), oldest first, at most max records and maxBytes of JSON.
type history struct {
	mu            sync.Mutex
	recs          []Record
	sizes         []int
	bytes         int
	max, maxBytes int
	omitted       int64 // records no longer (or never) kept
}

func (h *history) add(r *Record) {
	n := len(AppendJSON(nil, r))
	h.mu.Lock()
	defer h.mu.Unlock()
	if n > h.maxBytes {
		h.omitted++
		return
	}
	for len(h.recs) > 0 && (len(h.recs) >= h.max || h.bytes+n > h.maxBytes) {
		h.bytes -= h.sizes[0]
		h.recs, h.sizes = h.recs[1:], h.sizes[1:]
		h.omitted++
	}
	h.recs = append(h.recs, *r)
	h.sizes = append(h.sizes, n)
	h.bytes += n
}

var _ Observer = (*Tap)(nil)

// NewTap returns a Tap with no subscribers.
func NewTap() *Tap {
	return &Tap{subs: map[string][]*Subscription{}, kept: map[string]*history{}}
}

// Keep starts keeping sandboxID's records as they are delivered: at most
// maxRecords (DefaultHistoryRecords when < 1) and maxBytes of their JSON
// (DefaultHistoryBytes when < 1), the oldest going first. Forget stops it
// and frees them.
func (t *Tap) Keep(sandboxID string, maxRecords, maxBytes int) {
	if maxRecords < 1 {
		maxRecords = DefaultHistoryRecords
	}
	if maxBytes < 1 {
		maxBytes = DefaultHistoryBytes
	}
	t.mu.Lock()
	t.kept[sandboxID] = &history{max: maxRecords, maxBytes: maxBytes}
	t.mu.Unlock()
}

// Forget drops sandboxID's kept records.
func (t *Tap) Forget(sandboxID string) {
	t.mu.Lock()
	delete(t.kept, sandboxID)
	t.mu.Unlock()
}

// SubscribeHistory is Subscribe that also returns the records kept for
// sandboxID so far (Keep), oldest first, and how many older ones were not
// kept. No record is in both the history and the subscription, and none
// falls between them.
func (t *Tap) SubscribeHistory(sandboxID string, buffer int) (*Subscription, []Record, int64) {
	if buffer < 1 {
		buffer = DefaultTapBuffer
	}
	s := &Subscription{tap: t, sandbox: sandboxID, c: make(chan Record, buffer)}
	// publish holds the read lock while it keeps and delivers a record:
	// under the write lock, a record is either kept already or not yet
	// published.
	t.mu.Lock()
	t.subs[sandboxID] = append(t.subs[sandboxID], s)
	var recs []Record
	var omitted int64
	if h := t.kept[sandboxID]; h != nil {
		h.mu.Lock()
		recs, omitted = append([]Record(nil), h.recs...), h.omitted
		h.mu.Unlock()
	}
	t.mu.Unlock()
	return s, recs, omitted
}

// Subscription receives the records of one sandbox (Record.Sandbox equal to
// the id given to Subscribe) from the moment Subscribe returns.
type Subscription struct {
	tap     *Tap
	sandbox string
	dropped atomic.Int64

	mu     sync.Mutex // guards closed against the close of c
	closed bool
	c      chan Record
}

// Subscribe starts delivering sandboxID's records into a buffer of buffer
// records (DefaultTapBuffer when buffer < 1). The caller must Close the
// subscription when done.
func (t *Tap) Subscribe(sandboxID string, buffer int) *Subscription {
	if buffer < 1 {
		buffer = DefaultTapBuffer
	}
	s := &Subscription{tap: t, sandbox: sandboxID, c: make(chan Record, buffer)}
	t.mu.Lock()
	t.subs[sandboxID] = append(t.subs[sandboxID], s)
	t.mu.Unlock()
	return s
}

// C is the channel records arrive on. It is closed by Close.
func (s *Subscription) C() <-chan Record { return s.c }

// Dropped is how many records this subscription lost because its buffer was
// full.
func (s *Subscription) Dropped() int64 { return s.dropped.Load() }

// Close stops delivery and closes C. It is safe to call more than once and
// concurrently with Log.
func (s *Subscription) Close() {
	t := s.tap
	t.mu.Lock()
	list := t.subs[s.sandbox]
	for i, x := range list {
		if x == s {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(t.subs, s.sandbox)
	} else {
		t.subs[s.sandbox] = list
	}
	t.mu.Unlock()
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.c)
	}
	s.mu.Unlock()
}

// deliver offers r without waiting.
func (s *Subscription) deliver(r *Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	select {
	case s.c <- *r:
	default:
		s.dropped.Add(1)
	}
}

// Observe delivers r, a record the log accepted, to its sandbox's
// subscribers and history.
func (t *Tap) Observe(r *Record) { t.publish(r) }

// publish delivers r to its sandbox's subscribers. With none (the common
// case) it costs a map lookup under a read lock.
func (t *Tap) publish(r *Record) {
	if r == nil {
		return
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	list, h := t.subs[r.Sandbox], t.kept[r.Sandbox]
	if len(list) == 0 && h == nil {
		return
	}
	c := redact(r)
	if c == r {
		cp := *r
		c = &cp
	}
	c.Seq, c.Prev, c.Checkpoint = 0, "", nil
	if c.TS.IsZero() {
		c.TS = time.Now().UTC()
	}
	if h != nil {
		h.add(c)
	}
	for _, s := range list {
		s.deliver(c)
	}
}
