package daemon

import (
	"runtime/debug"
	"time"
)

// What a daemon's start leaves behind. Starting compiles the policy (OPA),
// the content scanner's rules and the trust bundle and runs ~290 package
// initializers: the heap it grew for them stays mapped (the GC's headroom
// and the scavenger's slow return keep it). Once the daemon serves, its
// scanner is warm and its warm pool is full, settleMemory collects that
// garbage and returns the free heap to the kernel (debug.FreeOSMemory).
// It runs once, never per request. The pages of the binary the start
// touched stay resident: they are page cache either way, and dropping them
// from the resident set (madvise) would lower VmRSS without freeing memory.

// settleWait bounds the wait for the warm pool's first fill: a pool that
// cannot fill (a broken executor) does not keep the start's memory.
const settleWait = 30 * time.Second

// settleInBackground warms the scanner's rules off the start's path (the
// first scan would compile them itself), then settles the start's memory
// (settleMemory); Close ends the wait.
func (d *Daemon) settleInBackground() {
	var warm func() error
	if d.scanner != nil {
		warm = d.scanner.Warm
	}
	stop := make(chan struct{})
	d.closers = append(d.closers, func() error { close(stop); return nil })
	go d.settleMemory(warm, stop)
}

// settleMemory waits for the scanner's rules (warm, nil when there are
// none to compile) and the pool's first fill, then settles; stop ends the
// wait (the daemon closing).
func (d *Daemon) settleMemory(warm func() error, stop <-chan struct{}) {
	if warm != nil {
		_ = warm()
	}
	deadline := time.Now().Add(settleWait)
	for d.pool != nil && d.pool.depth() < d.pool.size && time.Now().Before(deadline) {
		select {
		case <-stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	select {
	case <-stop:
		return
	default:
	}
	debug.FreeOSMemory()
}
