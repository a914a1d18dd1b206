package dnsfilter

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sync/singleflight"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/oplog"
)

// Resolver resolves names through the configured upstreams with the shared cache,
// singleflight and rebinding filter. The Filter answers sandboxes from it and the
// gateway's dialer calls LookupNetIP on it, so both see the same addresses.
type Resolver struct {
	cfg       *compiled
	guard     *ipguard.Guard
	log       *slog.Logger
	upstreams []*upstream
	cache     *answerCache
	flight    singleflight.Group
	now       func() time.Time
	// waiting counts callers waiting on an upstream exchange (cache misses in
	// flight), shared or not.
	waiting atomic.Int32
	metrics *metrics
	// owner holds the sandboxes whose limits LookupForSandbox charges.
	owner *Filter
}

type cacheKey struct {
	name  string // normalized, no trailing dot
	qtype uint16
}

// answer is one cached upstream result, already filtered. It is immutable once
// cached, except for its rendered view.
type answer struct {
	rcode    int
	rrs      []dns.RR // answer section: CNAMEs and records of the asked type
	ttl      uint32   // the clamped TTL, in seconds
	expires  time.Time
	upstream string
	dropped  int // records removed by the rebinding guard
	rendered atomic.Pointer[rendered]
}

// rendered is an answer's records with TTLs for one second of remaining life,
// shared read-only by every reply in that second (dns.Msg.Pack does not modify RRs).
type rendered struct {
	sec   int64
	rrs   []dns.RR
	wire  []byte // rrs packed without compression, ready to append to a reply
	audit []audit.Answer
}

// upstream is one configured resolver.
type upstream struct {
	spec upstreamSpec
	udp  *dns.Client
	tcp  *dns.Client // TCP fallback, or the TLS client for DNS over TLS
	m    *upstreamMetrics
}

func newResolver(cfg *compiled, guard *ipguard.Guard, log *slog.Logger, m *metrics) (*Resolver, error) {
	r := &Resolver{cfg: cfg, guard: guard, log: log, cache: newAnswerCache(cfg.CacheSize), now: time.Now, metrics: m}
	for _, spec := range cfg.upstreams {
		label := spec.addr
		if spec.tls {
			label = "tls://" + spec.addr
		}
		u := &upstream{spec: spec, m: m.forUpstream(label)}
		if spec.tls {
			tc := &tls.Config{MinVersion: tls.VersionTLS12}
			if cfg.tlsConfig != nil {
				tc = cfg.tlsConfig.Clone()
			}
			tc.ServerName = spec.serverName
			tc.InsecureSkipVerify = false
			u.tcp = &dns.Client{Net: "tcp-tls", TLSConfig: tc, Timeout: cfg.Timeout}
		} else {
			u.udp = &dns.Client{Net: "udp", UDPSize: DefaultEDNSSize, Timeout: cfg.Timeout}
			u.tcp = &dns.Client{Net: "tcp", Timeout: cfg.Timeout}
		}
		r.upstreams = append(r.upstreams, u)
	}
	return r, nil
}

// errUpstream is returned when no upstream gave a usable answer.
var errUpstream = errors.New("dnsfilter: no upstream answered")

// lookup returns the filtered answer for name (normalized, no trailing dot) and
// qtype, from the cache or from one shared upstream exchange.
func (r *Resolver) lookup(ctx context.Context, name string, qtype uint16) (*answer, bool, error) {
	key := cacheKey{name, qtype}
	if a, ok := r.cached(name, qtype, r.now()); ok {
		return a, true, nil
	}
	ch := r.flight.DoChan(name+"/"+qtypeString(qtype), func() (any, error) {
		// Detached from any one caller: a caller that gives up must not fail the
		// others waiting on the same exchange.
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.Timeout*time.Duration(len(r.upstreams)+1))
		defer cancel()
		a, err := r.exchange(ctx, name, qtype)
		if err != nil {
			return nil, err
		}
		if a.rcode == dns.RcodeSuccess || a.rcode == dns.RcodeNameError {
			r.cache.add(key, a, r.now())
		}
		return a, nil
	})
	r.waiting.Add(1)
	defer r.waiting.Add(-1)
	select {
	case res := <-ch:
		if res.Err != nil {
			return nil, false, res.Err
		}
		return res.Val.(*answer), false, nil
	case <-ctx.Done():
		return nil, false, ctx.Err()
	}
}

// cached returns the unexpired cached answer for name and qtype, if any.
func (r *Resolver) cached(name string, qtype uint16, now time.Time) (*answer, bool) {
	key := cacheKey{name, qtype}
	a := r.cache.get(key)
	if a == nil {
		return nil, false
	}
	if now.Before(a.expires) {
		return a, true
	}
	r.cache.remove(key, a)
	return nil, false
}

// answerCache is a bounded map with a read-locked hit path. When full, it drops
// expired entries and then arbitrary ones (Go's map order) down to 7/8 of its
// size: cheaper than LRU bookkeeping on every hit, and a dropped entry costs
// one upstream exchange.
type answerCache struct {
	mu  sync.RWMutex
	max int
	m   map[cacheKey]*answer
}

func newAnswerCache(max int) *answerCache {
	return &answerCache{max: max, m: make(map[cacheKey]*answer)}
}

func (c *answerCache) get(k cacheKey) *answer {
	c.mu.RLock()
	a := c.m[k]
	c.mu.RUnlock()
	return a
}

func (c *answerCache) add(k cacheKey, a *answer, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.m[k]; !ok && len(c.m) >= c.max {
		for key, v := range c.m {
			if !now.Before(v.expires) {
				delete(c.m, key)
			}
		}
		for key := range c.m {
			if len(c.m) < c.max*7/8 || len(c.m) == 0 {
				break
			}
			delete(c.m, key)
		}
	}
	c.m[k] = a
}

// remove deletes k if it still maps to a (a newer answer may have replaced it).
func (c *answerCache) remove(k cacheKey, a *answer) {
	c.mu.Lock()
	if c.m[k] == a {
		delete(c.m, k)
	}
	c.mu.Unlock()
}

// exchange asks the upstreams in order until one gives NOERROR or NXDOMAIN.
func (r *Resolver) exchange(ctx context.Context, name string, qtype uint16) (*answer, error) {
	q := new(dns.Msg)
	q.Id = dns.Id()
	q.RecursionDesired = true
	q.Question = []dns.Question{{Name: dns.Fqdn(name), Qtype: qtype, Qclass: dns.ClassINET}}
	// Our own OPT: a buffer size and nothing else. The sandbox's OPT (and any
	// client subnet in it) never leaves the filter.
	q.SetEdns0(DefaultEDNSSize, false)
	var errs []error
	for _, u := range r.upstreams {
		t0 := time.Now()
		resp, err := u.exchange(ctx, q)
		u.m.latency.Observe(time.Since(t0).Seconds())
		var checkErr error
		if err == nil {
			checkErr = checkResponse(q, resp)
		}
		u.m.results[upstreamResult(resp, err, checkErr)].Inc()
		if err == nil {
			err = checkErr
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", u.spec.addr, err))
			continue
		}
		return r.filter(name, qtype, resp, u.spec.addr), nil
	}
	err := errors.Join(errs...)
	r.log.Warn("upstreams failed", "qname", name, "qtype", dns.TypeToString[qtype], oplog.ErrorKey, err)
	return nil, fmt.Errorf("%w: %w", errUpstream, err)
}

func (u *upstream) exchange(ctx context.Context, q *dns.Msg) (*dns.Msg, error) {
	if u.udp == nil {
		resp, _, err := u.tcp.ExchangeContext(ctx, q, u.spec.addr)
		return resp, err
	}
	resp, _, err := u.udp.ExchangeContext(ctx, q, u.spec.addr)
	if err == nil && resp.Truncated {
		u.m.tcp.Inc()
		resp, _, err = u.tcp.ExchangeContext(ctx, q, u.spec.addr)
	}
	return resp, err
}

// checkResponse makes sure resp answers q and is worth using.
func checkResponse(q, resp *dns.Msg) error {
	if !resp.Response {
		return errors.New("reply without the QR bit")
	}
	if resp.Truncated {
		return errors.New("reply truncated over TCP")
	}
	if len(resp.Question) != 1 || resp.Question[0].Qtype != q.Question[0].Qtype ||
		!strings.EqualFold(resp.Question[0].Name, q.Question[0].Name) {
		return errors.New("reply to a different question")
	}
	if resp.Rcode != dns.RcodeSuccess && resp.Rcode != dns.RcodeNameError {
		return fmt.Errorf("rcode %s", rcodeString(resp.Rcode))
	}
	return nil
}

// filter keeps the answer records that belong to the question (the CNAME chain from
// name and records of qtype), drops addresses the guard refuses, and computes the
// clamped expiry.
func (r *Resolver) filter(name string, qtype uint16, resp *dns.Msg, up string) *answer {
	now := r.now()
	a := &answer{rcode: resp.Rcode, upstream: up}
	minTTL := uint32(math.MaxUint32)
	owner := dns.Fqdn(name)
	hadAddr := false
	keep := func(rr dns.RR) {
		minTTL = min(minTTL, rr.Header().Ttl)
		a.rrs = append(a.rrs, lowerOwner(rr))
	}
	// Follow the CNAME chain from the question's name, so records for any other
	// owner (cache poisoning attempts, glue) are ignored.
	for range 16 {
		next := ""
		for _, rr := range resp.Answer {
			h := rr.Header()
			if h.Class != dns.ClassINET || !strings.EqualFold(h.Name, owner) {
				continue
			}
			if c, ok := rr.(*dns.CNAME); ok && qtype != dns.TypeCNAME {
				if next == "" {
					next = strings.ToLower(c.Target)
					keep(rr)
				}
				continue
			}
			if h.Rrtype != qtype {
				continue
			}
			if ip, ok := rrAddr(rr); ok {
				hadAddr = true
				if err := r.guard.Check(ip); err != nil {
					a.dropped++
					continue
				}
			}
			keep(rr)
		}
		if next == "" {
			break
		}
		owner = next
	}
	if a.dropped > 0 && hadAddr && !hasType(a.rrs, qtype) {
		// Every address was refused: answer NODATA, not a dangling chain.
		a.rrs = nil
	}
	if !hasType(a.rrs, qtype) {
		// Negative (NXDOMAIN or NODATA): the SOA says how long, RFC 2308.
		minTTL = math.MaxUint32
		for _, rr := range resp.Ns {
			if soa, ok := rr.(*dns.SOA); ok {
				minTTL = min(soa.Hdr.Ttl, soa.Minttl)
			}
		}
		if minTTL == math.MaxUint32 {
			minTTL = 0 // no SOA: MinTTL
		}
	}
	ttl := time.Duration(minTTL) * time.Second
	ttl = max(r.cfg.MinTTL, min(r.cfg.MaxTTL, ttl))
	a.expires = now.Add(ttl)
	a.ttl = uint32(ttl / time.Second)
	return a
}

func hasType(rrs []dns.RR, t uint16) bool {
	for _, rr := range rrs {
		if rr.Header().Rrtype == t {
			return true
		}
	}
	return false
}

func lowerOwner(rr dns.RR) dns.RR {
	rr = dns.Copy(rr)
	rr.Header().Name = strings.ToLower(rr.Header().Name)
	return rr
}

func rrAddr(rr dns.RR) (netip.Addr, bool) {
	switch v := rr.(type) {
	case *dns.A:
		ip, ok := netip.AddrFromSlice(v.A.To4())
		return ip, ok
	case *dns.AAAA:
		ip, ok := netip.AddrFromSlice(v.AAAA.To16())
		return ip.Unmap(), ok
	}
	return netip.Addr{}, false
}

// view returns the answer's records with TTLs counting down to expiry.
func (a *answer) view(now time.Time) *rendered {
	remaining := a.expires.Sub(now)
	sec := now.Unix()
	if v := a.rendered.Load(); v != nil && v.sec == sec {
		return v
	}
	ttl := uint32((remaining + time.Second - 1) / time.Second)
	ttl = max(min(ttl, a.ttl), 1)
	v := &rendered{sec: sec, rrs: make([]dns.RR, len(a.rrs)), audit: make([]audit.Answer, len(a.rrs))}
	for i, rr := range a.rrs {
		c := dns.Copy(rr)
		c.Header().Ttl = ttl
		v.rrs[i] = c
		v.audit[i] = audit.Answer{Type: dns.TypeToString[c.Header().Rrtype], Data: rrData(c), TTL: ttl}
	}
	if w, err := packRRs(v.rrs); err == nil {
		v.wire = w
	}
	a.rendered.Store(v)
	return v
}

// packRRs packs rrs back to back, uncompressed.
func packRRs(rrs []dns.RR) ([]byte, error) {
	n := 0
	for _, rr := range rrs {
		n += dns.Len(rr)
	}
	buf := make([]byte, n)
	off := 0
	for _, rr := range rrs {
		var err error
		if off, err = dns.PackRR(rr, buf, off, nil, false); err != nil {
			return nil, err
		}
	}
	return buf[:off], nil
}

// rrData is the record's data in presentation form, without its header.
func rrData(rr dns.RR) string {
	switch v := rr.(type) {
	case *dns.A:
		return v.A.String()
	case *dns.AAAA:
		return v.AAAA.String()
	case *dns.CNAME:
		return v.Target
	}
	s := rr.String()
	hdr := rr.Header().String()
	return strings.TrimPrefix(s, hdr)
}

// LookupNetIP resolves host to the addresses the gateway may dial: the same cached,
// guard-filtered answers sandboxes are given. network is "ip", "ip4" or "ip6", as
// for (*net.Resolver).LookupNetIP. An IP literal is returned as it is if the guard
// lets it through. Policy is not consulted: the caller has already asked it about
// the name. No sandbox's limits are charged: for a lookup made on a sandbox's
// behalf the gateway calls LookupForSandbox.
func (r *Resolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	types, err := r.questionTypes(network, host)
	if err != nil {
		return nil, err
	}
	name, ip, err := r.target(host)
	if err != nil {
		return nil, err
	}
	if ip.IsValid() {
		return []netip.Addr{ip}, nil
	}
	return r.addrs(ctx, host, name, types, nil)
}

// questionTypes are the query types that answer a lookup on network.
func (r *Resolver) questionTypes(network, host string) ([]uint16, error) {
	switch network {
	case "ip":
		if r.cfg.IPv6 {
			return []uint16{dns.TypeA, dns.TypeAAAA}, nil
		}
		return []uint16{dns.TypeA}, nil
	case "ip4":
		return []uint16{dns.TypeA}, nil
	case "ip6":
		if !r.cfg.IPv6 {
			return nil, &net.DNSError{Err: "no IPv6 addresses (dnsfilter ipv6 is off)", Name: host, IsNotFound: true}
		}
		return []uint16{dns.TypeAAAA}, nil
	}
	return nil, &net.DNSError{Err: "unsupported network " + network, Name: host}
}

// target normalizes host. It returns the name to resolve, or the address when
// host is an IP literal the guard lets through.
func (r *Resolver) target(host string) (string, netip.Addr, error) {
	name, err := hostname.Normalize(host)
	if err != nil {
		return "", netip.Addr{}, &net.DNSError{Err: err.Error(), Name: host, IsNotFound: true}
	}
	if ip, ok := hostname.ParseIP(name); ok {
		if err := r.guard.Check(ip); err != nil {
			return "", netip.Addr{}, &net.DNSError{Err: err.Error(), Name: host}
		}
		return "", ip, nil
	}
	return name, netip.Addr{}, nil
}

// addrs resolves the normalized name for each of types, from the cache or the
// upstreams. beforeMiss, when set, is called before an upstream exchange would
// be needed; its error ends the lookup and is returned as it is.
func (r *Resolver) addrs(ctx context.Context, host, name string, types []uint16, beforeMiss func() error) ([]netip.Addr, error) {
	var out []netip.Addr
	var lastErr error
	for _, t := range types {
		a, hit := r.cached(name, t, r.now())
		if !hit {
			if beforeMiss != nil {
				if err := beforeMiss(); err != nil {
					return nil, err
				}
			}
			var err error
			if a, hit, err = r.lookup(ctx, name, t); err != nil {
				r.metrics.cacheLookup(sourceGateway, hit)
				lastErr = err
				continue
			}
		}
		r.metrics.cacheLookup(sourceGateway, hit)
		for _, rr := range a.rrs {
			if ip, ok := rrAddr(rr); ok {
				out = append(out, ip)
			}
		}
	}
	if len(out) == 0 {
		if lastErr != nil {
			return nil, &net.DNSError{Err: lastErr.Error(), Name: host, IsTemporary: true}
		}
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return out, nil
}

// rcodeString is dns.RcodeToString's name for rc; the rcodes the filter
// sends are a switch, not a map lookup (it runs for every query).
func rcodeString(rc int) string {
	switch rc {
	case dns.RcodeSuccess:
		return "NOERROR"
	case dns.RcodeFormatError:
		return "FORMERR"
	case dns.RcodeServerFailure:
		return "SERVFAIL"
	case dns.RcodeNameError:
		return "NXDOMAIN"
	case dns.RcodeNotImplemented:
		return "NOTIMP"
	case dns.RcodeRefused:
		return "REFUSED"
	}
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprintf("RCODE%d", rc)
}

// qtypeString is dns.TypeToString's name for t; the common types are a
// switch, not a map lookup.
func qtypeString(t uint16) string {
	switch t {
	case dns.TypeA:
		return "A"
	case dns.TypeAAAA:
		return "AAAA"
	case dns.TypeHTTPS:
		return "HTTPS"
	case dns.TypeCNAME:
		return "CNAME"
	case dns.TypePTR:
		return "PTR"
	}
	if s, ok := dns.TypeToString[t]; ok {
		return s
	}
	return fmt.Sprintf("TYPE%d", t)
}
