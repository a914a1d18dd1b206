package gateway

import (
	"hash/maphash"
	"strconv"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/airlock-dev/airlock/policy"
)

// decisionCacheTTL bounds how long a cached decision is reused even under an
// unchanged revision (policies that read the clock).
const decisionCacheTTL = 5 * time.Second

// decisionCache caches decisions per policy revision. It is used only when the
// Decider implements Revisioner; the key covers every field of the input, the
// headers through a per-process seeded hash.
type decisionCache struct {
	rv    Revisioner
	seed  maphash.Seed
	cache *lru.Cache[decisionKey, cachedDecision]
}

type decisionKey struct {
	rev         string
	sandbox     string
	kind        policy.Kind
	host        string
	port        int
	ip          string
	method      string
	scheme      string
	path        string
	sni         string
	intercepted bool
	rest        uint64 // seeded hash of headers, query and labels
}

type cachedDecision struct {
	d       policy.Decision
	expires int64
}

func newDecisionCache(rv Revisioner, size int) *decisionCache {
	c, _ := lru.New[decisionKey, cachedDecision](size)
	return &decisionCache{rv: rv, seed: maphash.MakeSeed(), cache: c}
}

// key returns the cache key of in; ok is false when in must not be cached.
func (c *decisionCache) key(in *policy.Input) (decisionKey, bool) {
	k := decisionKey{
		rev:     c.rv.PolicyRevision(),
		sandbox: in.Sandbox.ID,
		kind:    in.Kind,
		host:    in.Destination.Host,
		port:    in.Destination.Port,
		ip:      in.Destination.IP,
	}
	if k.rev == "" || in.DNS != nil || in.Attributes != nil {
		return k, false
	}
	var sum uint64
	for name, v := range in.Sandbox.Labels {
		sum += maphash.String(c.seed, "l\x00"+name+"\x00"+v)
	}
	if in.HTTP != nil {
		k.method, k.scheme, k.path = in.HTTP.Method, in.HTTP.Scheme, in.HTTP.Path
		for name, v := range in.HTTP.Headers {
			sum += hash2(c.seed, name, v)
		}
		for name, vs := range in.HTTP.Query {
			for i, v := range vs {
				sum += maphash.String(c.seed, "q\x00"+name+"\x00"+strconv.Itoa(i)+"\x00"+v)
			}
		}
	}
	if in.TLS != nil {
		k.sni, k.intercepted = in.TLS.SNI, in.TLS.Intercepted
		sum += 1
	}
	k.rest = sum
	return k, true
}

func hash2(seed maphash.Seed, a, b string) uint64 {
	var h maphash.Hash
	h.SetSeed(seed)
	h.WriteString(a)
	h.WriteByte(0)
	h.WriteString(b)
	return h.Sum64()
}

func (c *decisionCache) get(k decisionKey) (policy.Decision, bool) {
	v, ok := c.cache.Get(k)
	if !ok || time.Now().UnixNano() > v.expires {
		return policy.Decision{}, false
	}
	return v.d, true
}

func (c *decisionCache) put(k decisionKey, d policy.Decision) {
	c.cache.Add(k, cachedDecision{d: d, expires: time.Now().Add(decisionCacheTTL).UnixNano()})
}
