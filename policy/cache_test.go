package policy

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

func TestDecisionCacheLRU(t *testing.T) {
	d := func(id string) Decision { return Decision{Allowed: true, Reasons: []Reason{{ID: id, Msg: "m"}}} }
	tests := []struct {
		name     string
		maxItems int
		maxBytes int64
		adds     []string
		touch    string // got before the last add
		want     []string
		gone     []string
	}{
		{"count bound evicts the oldest", 2, 1 << 20, []string{"a", "b", "c"}, "", []string{"b", "c"}, []string{"a"}},
		{"a get makes an entry recent", 2, 1 << 20, []string{"a", "b", "c"}, "a", []string{"a", "c"}, []string{"b"}},
		{"re-adding a key keeps one entry", 2, 1 << 20, []string{"a", "a", "b"}, "", []string{"a", "b"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newDecisionCache(tc.maxItems, tc.maxBytes)
			for i, k := range tc.adds {
				if i == len(tc.adds)-1 && tc.touch != "" {
					if _, ok := c.get(tc.touch); !ok {
						t.Fatalf("got no entry for %q before the last add", tc.touch)
					}
				}
				c.add(k, d(k))
			}
			for _, k := range tc.want {
				got, ok := c.get(k)
				if !ok || got.Reasons[0].ID != k {
					t.Fatalf("key %q: got %+v %v, want its decision", k, got, ok)
				}
			}
			for _, k := range tc.gone {
				if _, ok := c.get(k); ok {
					t.Fatalf("key %q: got an entry, want it evicted", k)
				}
			}
			var sum int64
			for k, e := range c.items {
				sum += entrySize(k, &e.d)
			}
			if c.Len() != len(tc.want) || c.Bytes() != sum || c.Bytes() > tc.maxBytes {
				t.Fatalf("got len %d bytes %d (entries sum %d), want len %d and bytes <= %d", c.Len(), c.Bytes(), sum, len(tc.want), tc.maxBytes)
			}
		})
	}
}

// The byte bound evicts the least recently used entries, and the accounted
// bytes are exactly the sum of the entries' sizes.
func TestDecisionCacheByteBound(t *testing.T) {
	const budget = 1 << 20
	c := newDecisionCache(1<<30, budget)
	key := func(i int) string { return fmt.Sprintf("%0512d", i) }
	d := Decision{Reasons: []Reason{{ID: "x", Msg: "m"}}}
	per := entrySize(key(0), &d)
	fit := int(budget / per)
	for i := range 2 * fit {
		c.add(key(i), d)
		if c.Bytes() > budget {
			t.Fatalf("add %d: got %d bytes, want <= %d", i, c.Bytes(), budget)
		}
	}
	if c.Len() != fit || c.Bytes() != int64(fit)*per {
		t.Fatalf("got %d entries, %d bytes, want %d and %d", c.Len(), c.Bytes(), fit, int64(fit)*per)
	}
	for _, i := range []int{0, fit - 1} {
		if _, ok := c.get(key(i)); ok {
			t.Fatalf("key %d: got an entry, want it evicted", i)
		}
	}
	for _, i := range []int{fit, 2*fit - 1} {
		if _, ok := c.get(key(i)); !ok {
			t.Fatalf("key %d: got no entry, want it kept", i)
		}
	}
	if long := strings.Repeat("k", budget/cacheKeyShare+1); c.cacheable(long) {
		t.Fatalf("got a %d-byte key cacheable, want the limit %d", len(long), budget/cacheKeyShare)
	}
}

// floodInput is a distinct request whose cache key is about size bytes: a
// header the sandbox controls.
func floodInput(i, size int) *Input {
	in := httpIn("GET", "pypi.org", fmt.Sprintf("/simple/p%d/", i))
	in.HTTP.Headers = map[string]string{"x-pad": strings.Repeat("a", size)}
	return in
}

// Regression: the decision cache was bounded by count only
// while its keys hold whole headers and queries, so a sandbox sending distinct
// requests with large headers made it hold up to 10,000 large keys. Now the
// bytes it accounts stay under Config.CacheBytes through a flood, and hits
// still work.
func TestCacheBoundedByBytesUnderFlood(t *testing.T) {
	const budget = 1 << 20
	e := newEngine(t, Config{CacheBytes: budget, EvalTimeout: 10 * time.Second})
	c := e.cur.Load().cache
	ctx := context.Background()
	keySize := budget / cacheKeyShare / 2 // cacheable
	for i := range 2000 {                 // 2000 x 512 B keys: 1 MiB of keys alone, plus overhead
		if d := e.Decide(ctx, floodInput(i, keySize)); !d.Allowed {
			t.Fatalf("flood %d: got %+v, want allowed", i, d)
		}
		if c.Bytes() > budget {
			t.Fatalf("flood %d: got %d bytes accounted, want <= %d", i, c.Bytes(), budget)
		}
	}
	if c.Len() == 0 || c.Len() >= 2000 {
		t.Fatalf("got %d entries after the flood, want some but not all", c.Len())
	}
	// Hits work: the latest inputs are cached and answered from the cache.
	last := floodInput(1999, keySize)
	x := prepare(last)
	if _, ok := c.get(cacheKey(&x)); !ok {
		t.Fatal("got no cache entry for the latest input")
	}
	n := c.Len()
	if d := e.Decide(ctx, last); !d.Allowed || d.Rev != e.Rev() || c.Len() != n {
		t.Fatalf("hit: got %+v, len %d (was %d)", d, c.Len(), n)
	}
	// A denied request is cached too, with its reasons counted.
	e.Decide(ctx, httpIn("POST", "pypi.org", "/legacy/"))
	if c.Bytes() > budget {
		t.Fatalf("got %d bytes, want <= %d", c.Bytes(), budget)
	}
}

// An input whose key alone is over CacheBytes/1024 is decided but never
// cached, so one request cannot take a large share of the budget.
func TestCacheSkipsHugeKeys(t *testing.T) {
	const budget = 1 << 20
	e := newEngine(t, Config{CacheBytes: budget, EvalTimeout: 10 * time.Second})
	c := e.cur.Load().cache
	big := floodInput(0, budget/cacheKeyShare+1)
	for range 2 {
		if d := e.Decide(context.Background(), big); !d.Allowed {
			t.Fatalf("got %+v, want allowed", d)
		}
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Fatalf("got %d entries, %d bytes, want the huge key not cached", c.Len(), c.Bytes())
	}
	small := floodInput(1, 10)
	e.Decide(context.Background(), small)
	if c.Len() != 1 {
		t.Fatalf("got %d entries, want the small input cached", c.Len())
	}
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Regression, measured on the heap with the default
// configuration: 3,000 distinct requests with 24 KiB headers (70 MiB of keys,
// under the 10,000-entry count bound that was the only bound) leave the cache
// holding about DefaultCacheBytes, not all of them.
func TestCacheMemoryBoundedDefault(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates about 100 MiB")
	}
	// Default cache bounds; a generous deadline, since -race on a shared
	// machine can stall one evaluation past the 100 ms default.
	e := newEngine(t, Config{EvalTimeout: 10 * time.Second})
	ctx := context.Background()
	before := heapInUse()
	const n, size = 3000, 24 << 10
	for i := range n {
		if d := e.Decide(ctx, floodInput(i, size)); !d.Allowed {
			t.Fatalf("flood %d: got %+v, want allowed", i, d)
		}
	}
	grown := int64(heapInUse()) - int64(before)
	c := e.cur.Load().cache
	t.Logf("after %d x %d KiB distinct inputs: %d entries, %.1f MiB accounted, heap grew %.1f MiB (bound %d MiB)",
		n, size>>10, c.Len(), float64(c.Bytes())/(1<<20), float64(grown)/(1<<20), DefaultCacheBytes>>20)
	if c.Bytes() > DefaultCacheBytes {
		t.Fatalf("got %d bytes accounted, want <= %d", c.Bytes(), DefaultCacheBytes)
	}
	if limit := int64(DefaultCacheBytes) * 3 / 2; grown > limit {
		t.Fatalf("got the heap grown by %d bytes, want <= %d (1.5 x DefaultCacheBytes)", grown, limit)
	}
	runtime.KeepAlive(e)
}

// The byte estimate of small entries is checked against the heap, so the
// bound means what it says for the common case too (many short keys).
func TestCacheEstimateMatchesHeap(t *testing.T) {
	const n = 20000
	c := newDecisionCache(n, 1<<30)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%064d", i)
	}
	reasons := []Reason{{ID: "default_deny", Msg: "no rule allows GET to evil.example"}}
	before := heapInUse()
	for i, k := range keys {
		c.add(k, Decision{Reasons: []Reason{{ID: reasons[0].ID, Msg: fmt.Sprintf("%s %d", reasons[0].Msg, i)}}, Rev: "shared"})
		keys[i] = "" // the cache's copy is what stays
	}
	grown := int64(heapInUse()) - int64(before)
	ratio := float64(grown) / float64(c.Bytes())
	t.Logf("%d entries: %d bytes accounted, heap grew %d (%.2f x)", n, c.Bytes(), grown, ratio)
	if ratio > 1.25 {
		t.Fatalf("got the heap grown %.2f x the accounted bytes, want <= 1.25 (raise cacheEntryOverhead)", ratio)
	}
	runtime.KeepAlive(c)
}
