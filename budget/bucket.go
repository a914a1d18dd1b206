package budget

import (
	"math"
	"sync/atomic"
	"time"
)

// Bucket is a GCRA token bucket: one atomic theoretical arrival time, no
// lock; a Take costs a load and a compare-and-swap.
type Bucket struct {
	base      time.Time
	interval  int64 // nanoseconds per token
	tolerance int64 // nanoseconds of burst
	tat       atomic.Int64
}

// NewBucket returns a full bucket of burst tokens refilled at rate per
// second, starting at now. rate and burst must be positive.
func NewBucket(rate float64, burst int, now time.Time) *Bucket {
	const maxNS = float64(1 << 62)
	interval := math.Min(math.Max(1e9/rate, 1), maxNS)
	tol := math.Min(interval*float64(burst), maxNS)
	return &Bucket{base: now, interval: int64(interval), tolerance: int64(tol)}
}

// Take reports whether one more event at now fits, and takes its token if so.
func (b *Bucket) Take(now time.Time) bool {
	at := int64(now.Sub(b.base))
	for {
		tat := b.tat.Load()
		next := max(tat, at) + b.interval
		if next-at > b.tolerance {
			return false
		}
		if b.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}
