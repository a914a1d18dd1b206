package secrets

import "sync"

// mintCache holds what was minted per binding and sandbox (an AWS session,
// an OAuth or GitHub App token), one entry per key; the entry's own lock
// makes one mint at a time per key.
type mintCache[E any] struct {
	mu sync.Mutex
	m  map[tokenKey]*E
}

// tokenKey: a binding's minted credential, per sandbox for per-sandbox ones
// (AWS sessions, GitHub App installation tokens, oauth.per_sandbox); sandbox
// "" for one shared by the binding.
type tokenKey struct {
	binding int
	sandbox string
}

// entry returns k's entry, making it when there is none.
func (c *mintCache[E]) entry(k tokenKey) *E {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[tokenKey]*E{}
	}
	e := c.m[k]
	if e == nil {
		e = new(E)
		c.m[k] = e
	}
	return e
}

// take removes and returns a sandbox's entries (none for sandbox "").
func (c *mintCache[E]) take(sandbox string) map[tokenKey]*E {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[tokenKey]*E{}
	for k, e := range c.m {
		if k.sandbox == sandbox && sandbox != "" {
			out[k] = e
			delete(c.m, k)
		}
	}
	return out
}
