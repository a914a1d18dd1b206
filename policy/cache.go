package policy

import (
	"strings"
	"sync"
)

// Sizing of the decision cache's byte estimate.
const (
	// cacheEntryOverhead is what one entry costs beyond its key and reasons:
	// the map slot, the entry with its list links and the Decision, rounded up
	// to allocation classes (TestCacheMemoryBounded checks the estimate
	// against the heap).
	cacheEntryOverhead = 128
	// cacheReasonOverhead is one Reason's two string headers.
	cacheReasonOverhead = 32
	// cacheKeyShare: a key longer than maxBytes/cacheKeyShare is never cached,
	// so no single input (a request with a huge query or header) can take a
	// large part of the budget or flush it in a few requests.
	cacheKeyShare = 1024
)

// decisionCache is a least-recently-used map from an input's cache key to its
// decision, bounded both by entry count and by an estimate of the bytes it
// holds (key, reasons, bookkeeping). Keys hold whole queries and headers, so a
// count alone would let a sandbox make it hold gigabytes. It is safe for
// concurrent use.
type decisionCache struct {
	maxItems int
	maxBytes int64
	maxKey   int

	mu    sync.Mutex
	bytes int64
	items map[string]*cacheEntry
	root  cacheEntry // sentinel: root.next is the most recently used
}

type cacheEntry struct {
	key        string
	d          Decision
	size       int64
	prev, next *cacheEntry
}

func newDecisionCache(maxItems int, maxBytes int64) *decisionCache {
	c := &decisionCache{
		maxItems: maxItems,
		maxBytes: maxBytes,
		maxKey:   int(maxBytes / cacheKeyShare),
		items:    map[string]*cacheEntry{},
	}
	c.root.prev, c.root.next = &c.root, &c.root
	return c
}

// cacheable reports whether a key is small enough to be stored at all.
func (c *decisionCache) cacheable(key string) bool { return len(key) <= c.maxKey }

// get returns the decision cached for key. The caller must not modify its
// Reasons (clone it).
func (c *decisionCache) get(key string) (Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit(c.items[key])
}

// getBytes is get with the key in bytes (appendCacheKey): the lookup makes no
// string of it.
func (c *decisionCache) getBytes(key []byte) (Decision, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit(c.items[string(key)])
}

// hit makes e the most recently used entry; called with c.mu held.
func (c *decisionCache) hit(e *cacheEntry) (Decision, bool) {
	if e == nil {
		return Decision{}, false
	}
	c.unlink(e)
	c.pushFront(e)
	return e.d, true
}

// add stores d under key (copied to its own exact-size memory, so the byte
// estimate is the truth), evicting the least recently used entries until both
// bounds hold. A key over the size limit is not stored.
func (c *decisionCache) add(key string, d Decision) {
	if !c.cacheable(key) {
		return
	}
	size := entrySize(key, &d)
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.bytes += size - e.size
		e.d, e.size = d, size
		c.unlink(e)
		c.pushFront(e)
	} else {
		key = strings.Clone(key)
		e := &cacheEntry{key: key, d: d, size: size}
		c.items[key] = e
		c.pushFront(e)
		c.bytes += size
	}
	for len(c.items) > 0 && (len(c.items) > c.maxItems || c.bytes > c.maxBytes) {
		old := c.root.prev
		c.unlink(old)
		delete(c.items, old.key)
		c.bytes -= old.size
	}
}

// Len is the number of cached decisions.
func (c *decisionCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items)
}

// Bytes is the estimated memory the cache holds.
func (c *decisionCache) Bytes() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

func (c *decisionCache) unlink(e *cacheEntry) {
	e.prev.next = e.next
	e.next.prev = e.prev
}

func (c *decisionCache) pushFront(e *cacheEntry) {
	e.prev = &c.root
	e.next = c.root.next
	c.root.next.prev = e
	c.root.next = e
}

// entrySize estimates what an entry holds: its key, its reasons' strings, and
// the fixed overhead. Rev and Mode are shared with the snapshot, not counted.
func entrySize(key string, d *Decision) int64 {
	n := int64(len(key)) + cacheEntryOverhead
	for _, r := range d.Reasons {
		n += cacheReasonOverhead + int64(len(r.ID)+len(r.Msg))
	}
	return n
}
