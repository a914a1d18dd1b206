package budget

import (
	"sync"
	"time"
)

// Hooks are what a Meter calls. Write is required; the others may be nil.
type Hooks struct {
	// Write writes a closed window's summary record; final is set for the
	// one written by Close. An error carries the counts into the next
	// window (after Close: to Lost).
	Write func(s *Summary, final bool) error
	// Lost is given a summary refused after Close, whose counts have no
	// later window to go to: report them (at Error), never drop them
	// silently.
	Lost func(s *Summary, err error)
	// Windows is told +1 when a window opens and -1 when one closes (a gauge
	// of sandboxes over budget).
	Windows func(delta int)
}

// Meter is one sandbox's budget: a Bucket of individual records (Allow) and
// one open Summary window at a time for what is over it (Count). Windows
// open and close under mu, so they never overlap; writeMu orders summary
// writes so the final one is the last. Safe for concurrent use.
type Meter struct {
	bucket   *Bucket
	interval time.Duration
	hooks    Hooks

	writeMu sync.Mutex

	mu     sync.Mutex
	cur    *Summary
	timer  *time.Timer
	closed bool
}

// NewMeter returns a Meter whose bucket holds burst records refilled at rate
// per second, and whose windows last interval. rate, burst and interval must
// be positive (the callers' configs validate them); hooks.Write must be set.
func NewMeter(rate float64, burst int, interval time.Duration, hooks Hooks, now time.Time) *Meter {
	return &Meter{bucket: NewBucket(rate, burst, now), interval: interval, hooks: hooks}
}

// Allow reports whether an event at now may have its own record.
func (m *Meter) Allow(now time.Time) bool { return m.bucket.Take(now) }

// Count counts one event into the open window, opening one if none is: N
// goes up by one and add counts the rest. It reports false once the Meter is
// closed; the caller then writes the event's own record.
func (m *Meter) Count(add func(*Summary)) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	if m.cur == nil {
		m.open(NewSummary(time.Now()))
	}
	m.cur.N++
	add(m.cur)
	return true
}

// Open reports whether a window is open.
func (m *Meter) Open() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.cur != nil
}

// open makes s the open window and arms its timer; m.mu is held.
func (m *Meter) open(s *Summary) {
	m.cur = s
	m.timer = time.AfterFunc(m.interval, m.flushDue)
	if m.hooks.Windows != nil {
		m.hooks.Windows(1)
	}
}

// take closes the open window, if any, and returns it; m.mu is held.
func (m *Meter) take() *Summary {
	s := m.cur
	m.cur = nil
	if s != nil {
		s.End = time.Now()
		if m.hooks.Windows != nil {
			m.hooks.Windows(-1)
		}
	}
	return s
}

// flushDue writes the window's summary when its interval ends (timer
// goroutine); a refused one is carried into the next window.
func (m *Meter) flushDue() {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.Lock()
	s := m.take()
	m.mu.Unlock()
	if s == nil {
		return
	}
	if err := m.hooks.Write(s, false); err != nil {
		m.mu.Lock()
		defer m.mu.Unlock()
		switch {
		case m.closed:
			m.lost(s, err)
		case m.cur == nil:
			m.open(s)
		default:
			m.cur.Merge(s)
		}
	}
}

// Close writes the final summary, if any event is still uncounted, and makes
// later Counts fail. It waits for a summary being written.
func (m *Meter) Close() {
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	m.mu.Lock()
	m.closed = true
	s := m.take()
	if m.timer != nil {
		m.timer.Stop()
	}
	m.mu.Unlock()
	if s == nil {
		return
	}
	if err := m.hooks.Write(s, true); err != nil {
		m.lost(s, err)
	}
}

func (m *Meter) lost(s *Summary, err error) {
	if m.hooks.Lost != nil {
		m.hooks.Lost(s, err)
	}
}
