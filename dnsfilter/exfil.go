package dnsfilter

import (
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/publicsuffix"
	"golang.org/x/time/rate"
)

// maxTrackedNames bounds the names remembered per registered domain per window:
// once a domain is over its threshold there is nothing more to learn from it.
const maxTrackedNames = 4096

// maxTrackedDomains bounds the registered domains tracked per sandbox per window.
const maxTrackedDomains = 4096

// maxSeenNames bounds the names remembered per sandbox per window, whatever their
// domains: without it a flood of distinct names over many domains (rate-limited
// or not, every query is counted) would grow the map by millions of entries a
// minute. A new name once the map is full is flagged many_unique_names.
const maxSeenNames = 16384

// signals computes one sandbox's exfiltration flags. It is safe for concurrent use.
type signals struct {
	cfg     *compiled
	limiter *rate.Limiter

	mu          sync.RWMutex
	windowStart time.Time
	domains     map[string]*domainNames // registered domain -> names under it
	seen        map[string]bool         // name -> it came after its domain's threshold
}

type domainNames struct {
	count atomic.Int32 // distinct names seen this window, saturating at maxTrackedNames+1
}

func newSignals(cfg *compiled) *signals {
	return &signals{
		cfg:     cfg,
		limiter: rate.NewLimiter(rate.Limit(cfg.RateLimit), cfg.RateBurst),
		domains: make(map[string]*domainNames),
		seen:    make(map[string]bool),
	}
}

// flags returns the flags a query for the normalized name earns, appended to dst.
func (s *signals) flags(dst []string, name string, now time.Time) []string {
	return s.charge(dst, name, now, 1)
}

// charge is flags for cost questions about name asked at once (a gateway lookup
// asks one per query type): it takes cost tokens from the rate bucket and counts
// the name once.
func (s *signals) charge(dst []string, name string, now time.Time, cost int) []string {
	if !s.limiter.AllowN(now, cost) {
		dst = append(dst, FlagRateLimited)
	}
	if s.unique(name, now) {
		dst = append(dst, FlagManyUniqueNames)
	}
	long, entropic := labelSignals(name, s.cfg.LongLabel, s.cfg.EntropyMinLen, s.cfg.Entropy)
	if long {
		dst = append(dst, FlagLongLabel)
	}
	if entropic {
		dst = append(dst, FlagHighEntropy)
	}
	return dst
}

// unique records name under its registered domain and reports whether the name
// is one too many: the first time it was seen in the current window, its domain
// had already reached the distinct-name threshold. Names first seen below the
// threshold stay unflagged for the rest of the window, so a sandbox that is
// blocked for spraying new names under a domain keeps the names it already used;
// only new names (the ones that would carry data upstream) are refused. A name
// already seen in this window costs one read lock.
func (s *signals) unique(name string, now time.Time) bool {
	limit := int32(s.cfg.UniqueNames)
	s.mu.RLock()
	if now.Sub(s.windowStart) < s.cfg.UniqueWindow && !now.Before(s.windowStart) {
		if over, ok := s.seen[name]; ok {
			s.mu.RUnlock()
			return over
		}
	}
	s.mu.RUnlock()

	reg, err := publicsuffix.EffectiveTLDPlusOne(name)
	if err != nil {
		// A bare public suffix (or an IP-like name): count it under itself.
		reg = name
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.windowStart) >= s.cfg.UniqueWindow || now.Before(s.windowStart) {
		s.windowStart = now
		clear(s.domains)
		clear(s.seen)
	}
	if over, ok := s.seen[name]; ok {
		return over
	}
	if len(s.seen) >= maxSeenNames {
		return true
	}
	d := s.domains[reg]
	if d == nil {
		if len(s.domains) >= maxTrackedDomains {
			// Too many registered domains in one window is itself a signal.
			return true
		}
		d = new(domainNames)
		s.domains[strings.Clone(reg)] = d
	}
	n := d.count.Load()
	over := n >= limit
	if n <= maxTrackedNames {
		d.count.Add(1)
		s.seen[strings.Clone(name)] = over
	}
	return over
}

// labelSignals reports whether any label of name is longer than longLabel, and
// whether any run of a label between hyphens, of at least minLen characters, has
// a Shannon entropy of at least threshold bits per character. Runs that mix
// letters and digits (hex, base32, base64 without padding) are held to a
// threshold half a bit lower: their alphabet is the encoder's, not a language's,
// and hex cannot exceed 4 bits per character. Splitting at hyphens keeps
// word-built labels ("production-api-gateway") from adding up to a high score.
func labelSignals(name string, longLabel, minLen int, threshold float64) (long, entropic bool) {
	for label := range strings.SplitSeq(name, ".") {
		if len(label) > longLabel {
			long = true
		}
		if entropic || len(label) < minLen {
			continue
		}
		for run := range strings.SplitSeq(label, "-") {
			if len(run) < minLen {
				continue
			}
			t := threshold
			if mixesLettersAndDigits(run) {
				t -= 0.5
			}
			if shannon(run) >= t {
				entropic = true
				break
			}
		}
	}
	return long, entropic
}

func mixesLettersAndDigits(s string) bool {
	var letter, digit bool
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= '0' && c <= '9':
			digit = true
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
			letter = true
		}
	}
	return letter && digit
}

// shannon is the Shannon entropy of s in bits per byte.
func shannon(s string) float64 {
	if s == "" {
		return 0
	}
	var counts [256]uint16
	for i := 0; i < len(s); i++ {
		counts[s[i]]++
	}
	n := float64(len(s))
	var h float64
	for _, c := range counts {
		if c == 0 {
			continue
		}
		p := float64(c) / n
		h -= p * math.Log2(p)
	}
	return h
}
