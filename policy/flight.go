package policy

import "sync"

// Identical decisions evaluated once. Connections opened together (a
// client's burst of CONNECTs to one host) ask the same input while its
// first evaluation runs, before the decision cache holds it; each would run
// the policy again, and on two loaded cores a burst of such evaluations is
// what pushes them past EvalTimeout. A flight is that first evaluation: the
// Decides of the same cache key on the same snapshot wait for it (await)
// instead of evaluating. Same key, same snapshot: the same input under the
// same policy revision, so the decision a waiter gets is the one it would
// have computed. A failure is never shared: a waiter then evaluates for
// itself, as it does when the evaluation has not landed within EvalTimeout.

// flight is one evaluation others wait for. d is written before done is
// closed.
type flight struct {
	done    chan struct{}
	d       Decision
	waiters int // under flights.mu (tests)
}

// flights maps a cache key to the evaluation under way for it.
type flights struct {
	mu sync.Mutex
	m  map[string]*flight
}

// join returns the flight for key and whether the caller started it (and
// must land it).
func (fs *flights) join(key []byte) (*flight, bool) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.m[string(key)]; ok {
		f.waiters++
		return f, false
	}
	if fs.m == nil {
		fs.m = map[string]*flight{}
	}
	f := &flight{done: make(chan struct{})}
	fs.m[string(key)] = f
	return f, true
}

// land publishes the flight's decision to its waiters and removes it.
func (fs *flights) land(key []byte, f *flight, d Decision) {
	fs.mu.Lock()
	delete(fs.m, string(key))
	fs.mu.Unlock()
	f.d = d.clone()
	close(f.done)
}

// waiting is how many Decides wait for key's flight (tests).
func (fs *flights) waiting(key string) int {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if f, ok := fs.m[key]; ok {
		return f.waiters
	}
	return -1
}
