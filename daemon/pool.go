package daemon

import (
	"context"
	"errors"
	"log/slog"
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
	// poolRefillDelay is how long a refill waits after a take while
	// another sandbox is still ready: the create that took one usually runs
	// its first command within milliseconds, and a preparation (a Go
	// process start, mounts, a namespace and a cgroup move) competing with
	// it for the CPUs made that create + exec take 1.5x as long. An empty
	// pool refills at once.
	poolRefillDelay = 50 * time.Millisecond
)

// warmPool keeps size sandboxes prepared ahead of the creates that will take
// them: a namespace with its rules (netns TakePooled) and an executor
// sandbox whose init waits in it (Prepare). A create takes one and gives it
// its id, limits, workspace and environment; the pool refills in the
// background (after poolRefillDelay while one is still ready). A pooled sandbox serves exactly one create: it is destroyed
// with that sandbox, never handed out again.
type warmPool struct {
	size    int
	net     network
	exe     executor
	prepare func(netns string) prepareSpec
	log     *slog.Logger

	mu     sync.Mutex
	ready  []*pooled
	closed bool
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

// newWarmPool starts filling a pool of size (0: no pool).
func newWarmPool(size int, net network, exe executor, prepare func(string) prepareSpec, log *slog.Logger) *warmPool {
	p := &warmPool{size: size, net: net, exe: exe, prepare: prepare, log: log,
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

// fill prepares sandboxes until the pool is full, whenever kicked.
func (p *warmPool) fill() {
	defer close(p.done)
	retry := poolRetryMin
	for {
		select {
		case <-p.stop:
			return
		case <-p.kick:
		}
		if d := p.depth(); d > 0 && d < p.size {
			select {
			case <-p.stop:
				return
			case <-time.After(poolRefillDelay):
			}
		}
		for p.depth() < p.size {
			pb, err := p.make()
			p.mu.Lock()
			p.failure = err
			p.mu.Unlock()
			if err != nil {
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
			p.mu.Lock()
			if p.closed {
				p.mu.Unlock()
				pb.discard(p.log)
				return
			}
			p.ready = append(p.ready, pb)
			p.mu.Unlock()
		}
	}
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
	b, err := p.exe.Prepare(ctx, p.prepare(n.Path()))
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
