package inspect

import (
	"hash/maphash"
	"sync"
)

// cleanCache remembers, by a keyed 128-bit hash, small inputs of Scan and
// ScanFields that gave no finding at all, so the values a sandbox repeats
// on every request (its User-Agent, Accept and other headers; a URL it
// polls) cost a hash instead of a scan. A result is a pure function of the
// input and the scanner's configuration, with one exception the cache
// tracks: a canary issued later (Canaries.For) clears it. Only the hashes
// are kept, never a value; the seeds are random per process, so a value
// cannot be made to collide with a clean one. Bounded: past cleanMax
// entries it starts over.
type cleanCache struct {
	seed1, seed2 maphash.Seed

	mu  sync.RWMutex
	gen uint64 // Canaries.gen the entries were made under
	set map[[2]uint64]struct{}
}

// Clean cache bounds: the inputs it takes (total value bytes) and the
// entries it holds.
const (
	cleanMaxInput = 4 << 10
	cleanMax      = 4096
)

func newCleanCache() *cleanCache {
	return &cleanCache{seed1: maphash.MakeSeed(), seed2: maphash.MakeSeed(), set: map[[2]uint64]struct{}{}}
}

// key hashes fields (each Where and Value, length-prefixed so no two lists
// hash alike by concatenation) and the kind of call. ok is false when the
// input is too large to be worth remembering.
func (c *cleanCache) key(kind byte, fields []Field) (k [2]uint64, ok bool) {
	n := 0
	for i := range fields {
		n += len(fields[i].Value)
	}
	if n > cleanMaxInput {
		return k, false
	}
	var h1, h2 maphash.Hash
	h1.SetSeed(c.seed1)
	h2.SetSeed(c.seed2)
	hashFields(&h1, kind, fields)
	hashFields(&h2, kind, fields)
	return [2]uint64{h1.Sum64(), h2.Sum64()}, true
}

func hashFields(h *maphash.Hash, kind byte, fields []Field) {
	h.WriteByte(kind)
	for i := range fields {
		writeLen(h, len(fields[i].Where))
		h.WriteString(fields[i].Where)
		writeLen(h, len(fields[i].Value))
		h.Write(fields[i].Value)
	}
}

func writeLen(h *maphash.Hash, n int) {
	var b [4]byte
	b[0], b[1], b[2], b[3] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	h.Write(b[:])
}

// has reports whether k is known clean under canary generation gen.
func (c *cleanCache) has(k [2]uint64, gen uint64) bool {
	c.mu.RLock()
	_, ok := c.set[k]
	ok = ok && c.gen == gen
	c.mu.RUnlock()
	return ok
}

// put records k as clean under gen.
func (c *cleanCache) put(k [2]uint64, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case gen < c.gen:
		return // scanned before a canary was issued: no longer known clean
	case gen > c.gen || len(c.set) >= cleanMax:
		clear(c.set)
		c.gen = gen
	}
	c.set[k] = struct{}{}
}
