package gateway

import (
	"context"
	"sync"
	"time"
)

// decisionCtx is the context of one policy decision: done at its deadline or
// when the decision ends (stop). Unlike context.WithTimeout it arms no timer
// until someone waits on it (Done, AfterFunc), so a decision the engine
// answers from its cache (which never looks at the context) costs no timer,
// no cancel context and no allocation beyond this struct.
//
// AfterFunc makes context.AfterFunc on it run without a goroutine: the
// engine's external cancel of a Rego evaluation is a timer of its own.
type decisionCtx struct {
	deadline time.Time

	mu    sync.Mutex
	err   error         // set once: context.DeadlineExceeded or context.Canceled
	done  chan struct{} // made on the first Done
	timer *time.Timer   // armed with done
	funcs []*decisionAfter
}

// decisionAfter is one AfterFunc registration; ran is set under mu when it
// was started or stopped.
type decisionAfter struct {
	f     func()
	timer *time.Timer
	ran   bool
}

var _ context.Context = (*decisionCtx)(nil)

func newDecisionCtx(timeout time.Duration) *decisionCtx {
	return &decisionCtx{deadline: time.Now().Add(timeout)}
}

func (c *decisionCtx) Deadline() (time.Time, bool) { return c.deadline, true }

func (c *decisionCtx) Value(any) any { return nil }

// Err is context.DeadlineExceeded from the deadline on (whether or not
// anything armed a timer), context.Canceled after stop.
func (c *decisionCtx) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
	return c.err
}

func (c *decisionCtx) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.done == nil {
		c.done = make(chan struct{})
		switch {
		case c.err != nil:
			close(c.done)
		case !time.Now().Before(c.deadline):
			c.endLocked(context.DeadlineExceeded)
		default:
			c.timer = time.AfterFunc(time.Until(c.deadline), c.expire)
		}
	}
	return c.done
}

func (c *decisionCtx) expire() {
	c.mu.Lock()
	c.endLocked(context.DeadlineExceeded)
	c.mu.Unlock()
}

// AfterFunc runs f in its own goroutine once the context is done (at once if
// it is); stop reports whether it kept f from starting (context.AfterFunc's
// contract).
func (c *decisionCtx) AfterFunc(f func()) (stop func() bool) {
	a := &decisionAfter{f: f}
	c.mu.Lock()
	if c.err == nil && !time.Now().Before(c.deadline) {
		c.endLocked(context.DeadlineExceeded)
	}
	if c.err != nil {
		a.ran = true
		c.mu.Unlock()
		go f()
		return func() bool { return false }
	}
	a.timer = time.AfterFunc(time.Until(c.deadline), func() { c.runAfter(a) })
	c.funcs = append(c.funcs, a)
	c.mu.Unlock()
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		if a.ran {
			return false
		}
		a.ran = true
		a.timer.Stop()
		return true
	}
}

func (c *decisionCtx) runAfter(a *decisionAfter) {
	c.mu.Lock()
	if a.ran {
		c.mu.Unlock()
		return
	}
	a.ran = true
	c.mu.Unlock()
	a.f()
}

// stop ends the context (context.Canceled unless its deadline passed) and
// releases its timers.
func (c *decisionCtx) stop() {
	c.mu.Lock()
	c.endLocked(context.Canceled)
	c.mu.Unlock()
}

// endLocked records err (the first end wins), closes done, stops the done
// timer and starts every AfterFunc not yet started or stopped.
func (c *decisionCtx) endLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	if c.done != nil {
		close(c.done)
	}
	if c.timer != nil {
		c.timer.Stop()
	}
	for _, a := range c.funcs {
		if !a.ran {
			a.ran = true
			a.timer.Stop()
			go a.f()
		}
	}
	c.funcs = nil
}
