package daemon

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// Pool refill back-off after a failure: from poolRetryMin doubling to
// poolRetryMax, so a broken host is retried without a hot loop.
const (
	poolRetryMin = 100 * time.Millisecond
	poolRetryMax = 30 * time.Second
	// poolPrepareTimeout bounds one pooled sandbox's preparation.
	poolPrepareTimeout = 2 * time.Minute
	// poolQuiet is how long after a take the refill holds back while the
	// pool is above its low-water mark (half its target): the create that
	// took one usually runs its first command and is deleted within
	// milliseconds, and a preparation (a process start, mounts, a namespace,
	// a cgroup) competing with it for the CPUs made create + exec take 1.5x
	// as long. At or below the mark the refill runs at once, a batch at a
	// time.
	poolQuiet = 20 * time.Millisecond
	// poolShrinkAfter: with no take for this long the target falls back to
	// the configured size and the sandboxes above it are destroyed.
	poolShrinkAfter = time.Minute
	// poolMaxBatch bounds the preparations run at once.
	poolMaxBatch = 4
)

// Keys of the pool's operational log lines.
const (
	poolTargetKey   = "target"
	poolIntervalKey = "take_interval"
	poolPrepareKey  = "prepare_time"
)

// poolTarget is the depth the pool keeps given the configured size and
// bound and what it observed: interval, the smoothed time between takes, and
// prep, the smoothed time one preparation takes (0: not seen yet). While
// creates come faster than a preparation, a refill that starts when a take
// leaves the pool at its low-water mark (half the target) must cover the
// takes until its batch is ready: prep/interval of them, twice over for the
// burst around it.
func poolTarget(size, bound int, interval, prep time.Duration) int {
	if interval <= 0 || prep <= 0 {
		return size
	}
	need := 2 * int((prep+interval-1)/interval)
	return min(max(size, need), bound)
}

// ewma folds sample into avg (0: none yet) with weight 1/4.
func ewma(avg, sample time.Duration) time.Duration {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/4
}

// warmPool keeps sandboxes prepared ahead of the creates that will take
// them: a namespace with its rules (netns TakePooled) and an executor
// sandbox whose init waits in it (Prepare). A create takes one and gives it
// its id, limits, workspace and environment. A pooled sandbox serves exactly
// one create: it is destroyed with that sandbox, never handed out again.
//
// It sizes itself: size sandboxes while creates are rare, up to bound while
// they come faster than a preparation takes (poolTarget, from the observed
// take interval and preparation time), back to size after poolShrinkAfter
// without a take. The refill yields to the creates: it holds back for
// poolQuiet after a take unless the pool is at its low-water mark, and then
// prepares a batch at once (up to the CPUs, poolMaxBatch) so the creates
// that follow find the pool full rather than a preparation beside them.
type warmPool struct {
	size    int // the floor, what sandbox.pool_size asks for
	bound   int // the ceiling, pool.max
	batch   int // preparations run at once
	net     network
	exe     executor
	prepare func(n pooledNet) prepareSpec
	log     *slog.Logger

	mu     sync.Mutex
	ready  []*pooled
	closed bool
	// target is the depth the pool refills to, between size and bound.
	target int
	// lastTake, interval (smoothed time between takes) and prep (smoothed
	// preparation time) drive target.
	lastTake       time.Time
	interval, prep time.Duration
	// failure is the last preparation's error, nil once one succeeds
	// (health's pool part).
	failure error
	// broken counts the entries take dropped (airlock_pool_broken_total).
	broken atomic.Int64
	kick   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

// pooled is one prepared sandbox and its namespace.
type pooled struct {
	net pooledNet
	box box
}

// discard destroys a pooled sandbox that will never be handed out.
func (p *pooled) discard(log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := p.box.Destroy(ctx); err != nil {
		log.Error("pool: destroy", oplog.ErrorKey, err)
	}
	if err := p.net.Discard(); err != nil {
		log.Error("pool: discard namespace", oplog.ErrorKey, err)
	}
}

// newWarmPool starts filling a pool of size (0: no pool) that may grow to
// bound (at least size).
func newWarmPool(size, bound int, net network, exe executor, prepare func(pooledNet) prepareSpec, log *slog.Logger) *warmPool {
	p := &warmPool{size: size, bound: max(size, bound), target: size, batch: min(max(runtime.NumCPU(), 1), poolMaxBatch),
		net: net, exe: exe, prepare: prepare, log: log,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	if size <= 0 {
		close(p.done)
		return p
	}
	go p.fill()
	p.refill()
	return p
}

// depth is how many sandboxes are ready now.
func (p *warmPool) depth() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.ready)
}

// take hands out a ready sandbox (nil when none is) and starts a refill.
// An entry broken while it waited (its init died, its namespace removed or
// replaced from outside) is dropped, logged and counted (broken), and the
// next one tried: the create falls back to building its own, and the pool
// refills in its place.
func (p *warmPool) take() *pooled {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.size <= 0 {
		return nil
	}
	now := time.Now()
	if !p.lastTake.IsZero() {
		p.interval = ewma(p.interval, now.Sub(p.lastTake))
	}
	p.lastTake = now
	if t := poolTarget(p.size, p.bound, p.interval, p.prep); t > p.target {
		p.log.Info("pool: growing", poolTargetKey, t, poolIntervalKey, p.interval, poolPrepareKey, p.prep)
		p.target = t
	}
	for len(p.ready) > 0 {
		pb := p.ready[0]
		p.ready = p.ready[1:]
		p.refill()
		if err := pb.check(); err != nil {
			p.log.Warn("pool: dropped a broken sandbox", oplog.PathKey, pb.net.Path(), oplog.ErrorKey, err)
			p.broken.Add(1)
			go pb.discard(p.log)
			continue
		}
		return pb
	}
	return nil
}

// check fails when pb can no longer serve a create.
func (pb *pooled) check() error {
	select {
	case <-pb.box.Done():
		return errors.New("its init exited while it waited")
	default:
	}
	return pb.net.Check()
}

// problem is why the last preparation failed ("" when it succeeded).
func (p *warmPool) problem() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failure == nil {
		return ""
	}
	return "preparing a sandbox failed: " + p.failure.Error()
}

func (p *warmPool) refill() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// fill prepares sandboxes until the pool holds its target, whenever kicked,
// yielding to the creates (see warmPool), and shrinks an idle pool.
func (p *warmPool) fill() {
	defer close(p.done)
	retry := poolRetryMin
	shrink := time.NewTimer(poolShrinkAfter)
	defer shrink.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		case <-shrink.C:
			p.shrink()
			shrink.Reset(poolShrinkAfter)
			continue
		}
		for {
			n, wait := p.want()
			if n == 0 {
				break
			}
			if wait > 0 {
				select {
				case <-p.stop:
					return
				case <-time.After(wait):
				}
				continue
			}
			if err := p.prepareBatch(n); err != nil {
				p.log.Error("pool: prepare a sandbox", oplog.ErrorKey, err)
				select {
				case <-p.stop:
					return
				case <-time.After(retry):
				}
				retry = min(2*retry, poolRetryMax)
				continue
			}
			retry = poolRetryMin
			if p.isClosed() {
				return
			}
		}
	}
}

// want is how many sandboxes to prepare now (0: the pool holds its
// target), or how long to hold back first: a take came within poolQuiet and
// the pool is above its low-water mark.
func (p *warmPool) want() (n int, wait time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := len(p.ready)
	if p.closed || d >= p.target {
		return 0, 0
	}
	if since := time.Since(p.lastTake); d > p.target/2 && since < poolQuiet {
		return 1, poolQuiet - since
	}
	return min(p.target-d, p.batch), 0
}

// prepareBatch prepares n sandboxes at once and adds those that succeed;
// the error is the last failure (nil when all succeeded).
func (p *warmPool) prepareBatch(n int) error {
	type made struct {
		pb   *pooled
		took time.Duration
		err  error
	}
	out := make(chan made, n)
	for range n {
		go func() {
			t0 := time.Now()
			pb, err := p.make()
			out <- made{pb, time.Since(t0), err}
		}()
	}
	var last error
	for range n {
		m := <-out
		p.mu.Lock()
		if m.err != nil {
			last = m.err
		} else {
			p.prep = ewma(p.prep, m.took)
			if p.closed {
				p.mu.Unlock()
				m.pb.discard(p.log)
				continue
			}
			p.ready = append(p.ready, m.pb)
		}
		p.failure = last
		p.mu.Unlock()
	}
	return last
}

// shrink lowers an idle pool's target back to its size and destroys the
// sandboxes above it.
func (p *warmPool) shrink() {
	p.mu.Lock()
	if p.closed || time.Since(p.lastTake) < poolShrinkAfter || p.target <= p.size {
		p.mu.Unlock()
		return
	}
	p.log.Info("pool: shrinking after an idle spell", poolTargetKey, p.size)
	p.target = p.size
	var extra []*pooled
	if len(p.ready) > p.size {
		extra = append(extra, p.ready[p.size:]...)
		p.ready = p.ready[:p.size]
	}
	p.mu.Unlock()
	for _, pb := range extra {
		pb.discard(p.log)
	}
}

func (p *warmPool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// make prepares one sandbox in a pooled namespace.
func (p *warmPool) make() (*pooled, error) {
	ctx, cancel := context.WithTimeout(context.Background(), poolPrepareTimeout)
	defer cancel()
	go func() {
		select {
		case <-p.stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	n, err := p.net.TakePooled(ctx)
	if err != nil {
		return nil, err
	}
	b, err := p.exe.Prepare(ctx, p.prepare(n))
	if err != nil {
		if derr := n.Discard(); derr != nil {
			p.log.Error("pool: discard namespace", oplog.ErrorKey, derr)
		}
		return nil, err
	}
	return &pooled{net: n, box: b}, nil
}

// close stops the refills and destroys the sandboxes still waiting.
func (p *warmPool) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.done
		return
	}
	p.closed = true
	ready := p.ready
	p.ready = nil
	p.mu.Unlock()
	if p.size > 0 {
		close(p.stop)
	}
	<-p.done
	var wg sync.WaitGroup
	for _, pb := range ready {
		wg.Add(1)
		go func() { defer wg.Done(); pb.discard(p.log) }()
	}
	wg.Wait()
}

// poolSpec is the warm pool's prepare spec for n: a rootless slot's island
// is built by init, a root namespace is joined by its path.
func (d *Daemon) poolSpec(n pooledNet) prepareSpec {
	spec := d.prepareSpec(n.Path())
	if slot, ok := n.(*islandSlot); ok {
		spec.Island, spec.OnIsland = slot.spec, slot.receive
	}
	return spec
}
