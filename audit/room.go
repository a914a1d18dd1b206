package audit

import (
	"errors"
	"sync"
	"sync/atomic"
)

// room counts the writer's queue places in use: records queued and not yet
// taken by the writer goroutine, Sync barriers, and reservations not yet used.
// It bounds the queue instead of the channel's capacity, so a reservation
// holds a place no plain Log can take; the channel is as large as the room,
// so a send by a holder of a place never blocks.
type room struct {
	size    int64
	used    atomic.Int64
	waiters atomic.Int64
	mu      sync.Mutex
	cond    sync.Cond
	closed  bool // guarded by mu: take fails instead of waiting
}

func newRoom(size int) *room {
	r := &room{size: int64(size)}
	r.cond.L = &r.mu
	return r
}

// tryTake takes a place if one is free.
func (r *room) tryTake() bool {
	for {
		n := r.used.Load()
		if n >= r.size {
			return false
		}
		if r.used.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// take takes a place, waiting for one; false once the room is closed.
func (r *room) take() bool {
	if r.tryTake() {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A release that misses this count (it read waiters before the Add) freed
	// its place before tryTake below, which then finds it.
	r.waiters.Add(1)
	defer r.waiters.Add(-1)
	for !r.tryTake() {
		if r.closed {
			return false
		}
		r.cond.Wait()
	}
	return true
}

// close makes every take that waits, and every later one that would, fail.
func (r *room) close() {
	r.mu.Lock()
	r.closed = true
	r.cond.Broadcast()
	r.mu.Unlock()
}

// release gives a place back and wakes one waiter, if any.
func (r *room) release() {
	r.used.Add(-1)
	if r.waiters.Load() > 0 {
		r.mu.Lock()
		r.cond.Signal()
		r.mu.Unlock()
	}
}

// free gives a place back without waking a waiter: the writer goroutine frees
// each item it takes and calls wake once per batch, so a full queue costs it
// one wake-up per batch, not one per record.
func (r *room) free() { r.used.Add(-1) }

// wake wakes every waiter after places were freed; a waiter that finds none
// waits again.
func (r *room) wake() {
	if r.waiters.Load() > 0 {
		r.mu.Lock()
		r.cond.Broadcast()
		r.mu.Unlock()
	}
}

// errReservationUsed is returned by a reservation's second Log.
var errReservationUsed = errors.New("audit: reservation already used or cancelled")

// reservation is a Writer's Reservation: one place of its room.
type reservation struct {
	w    *Writer
	done atomic.Bool
}

var (
	_ Reserver    = (*Writer)(nil)
	_ Reservation = (*reservation)(nil)
)

// Log queues r into the reserved place (see Writer.Log for the copy rule). It
// is never refused for overflow; it fails only after Close, or for a record
// no caller may write. While the writer is failed the record is still queued:
// the event it describes has happened, and the writer keeps it for when
// writing works again.
func (res *reservation) Log(r *Record) error {
	if !res.done.CompareAndSwap(false, true) {
		return errReservationUsed
	}
	w := res.w
	if err := checkCallerRecord(r); err != nil {
		w.room.release()
		w.dropped.Add(1)
		return err
	}
	if err := w.enqueue(item{rec: *r}); err != nil {
		w.dropped.Add(1)
		return err
	}
	return nil
}

// Cancel gives the place back. A second call, or one after Log, does nothing.
func (res *reservation) Cancel() {
	if res.done.CompareAndSwap(false, true) {
		res.w.room.release()
	}
}
