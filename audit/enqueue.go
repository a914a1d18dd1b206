package audit

import (
	"errors"
	"fmt"
)

// Log queues r. The writer copies r; the caller must not modify r's slices or
// maps after the call. Log returns nil once the record is queued, ErrOverflow
// when the queue is full and Overflow is "deny", ErrClosed after Close, and an
// ErrFailed error once a write has failed. Any error means: deny the request.
func (w *Writer) Log(r *Record) error {
	if err := checkCallerRecord(r); err != nil {
		w.dropped.Add(1)
		return err
	}
	if err := w.failure.Load(); err != nil {
		w.dropped.Add(1)
		w.refusedFailing.Add(1)
		return *err
	}
	if err := w.takeRoom(); err != nil {
		w.dropped.Add(1)
		return err
	}
	if err := w.enqueue(item{rec: *r}); err != nil {
		w.dropped.Add(1)
		return err
	}
	return nil
}

// Reserve takes a place in the queue for one record, so that the
// Reservation's Log is never refused for overflow: a caller that must not let
// a request out unless its record will be accepted reserves first. With
// Overflow "deny" a full queue (queued records and held reservations) makes
// Reserve fail at once with ErrOverflow; with "block" it waits for room. It
// fails with ErrClosed after Close and with the failure while a write is
// failing. Exactly one of the Reservation's Log or Cancel must be called.
func (w *Writer) Reserve() (Reservation, error) {
	if err := w.failure.Load(); err != nil {
		w.reserveRefused.Add(1)
		return nil, *err
	}
	if err := w.takeRoom(); err != nil {
		w.reserveRefused.Add(1)
		return nil, err
	}
	w.mu.RLock()
	closed := w.closed
	w.mu.RUnlock()
	if closed {
		w.room.release()
		w.reserveRefused.Add(1)
		return nil, ErrClosed
	}
	return &reservation{w: w}, nil
}

// takeRoom takes one place of the queue by the overflow policy, without
// holding w.mu: a wait for room must never hold up Close, or the Log of a
// reservation that would free it. It fails with ErrClosed once the writer is
// closed.
func (w *Writer) takeRoom() error {
	if w.room.tryTake() {
		return nil
	}
	w.overflow.Add(1)
	if w.cfg.Overflow == OverflowDeny {
		return ErrOverflow
	}
	if !w.room.take() {
		return ErrClosed
	}
	return nil
}

// enqueue sends it, for which the caller holds a place, unless the writer is
// closed (the place is then given back). The send never blocks: the channel
// is as large as the room.
func (w *Writer) enqueue(it item) error {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.room.release()
		return ErrClosed
	}
	w.queue <- it
	return nil
}

// checkCallerRecord refuses what no caller may log: the kinds the writer
// writes itself (a forged retention or outage record would mislead a
// verifier).
func checkCallerRecord(r *Record) error {
	if r == nil {
		return errors.New("audit: nil record")
	}
	switch r.Kind {
	case KindCheckpoint, KindRetention, KindOutage, KindCrashRecovered:
		return fmt.Errorf("audit: kind %q is reserved for the writer", r.Kind)
	}
	return nil
}

// Err reports whether the writer still accepts records: nil while it does, the
// failure once a write has failed, ErrClosed after Close. A caller about to let
// traffic through checks it first, so a broken log stops traffic before the
// request goes out, not only once its record is refused afterwards.
func (w *Writer) Err() error {
	if err := w.failure.Load(); err != nil {
		return *err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		return ErrClosed
	}
	return nil
}

// Sync waits until every record queued before the call is written and synced.
func (w *Writer) Sync() error {
	ch := make(chan error, 1)
	// A barrier waits for room whatever the overflow policy.
	if !w.room.take() {
		return ErrClosed
	}
	if err := w.enqueue(item{sync: ch}); err != nil {
		return err
	}
	return <-ch
}

// Close stops accepting records, drains the queue, writes a final checkpoint,
// syncs and closes the file. It is safe to call more than once.
func (w *Writer) Close() error {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.queue)
	}
	w.mu.Unlock()
	w.room.close() // whoever waits for room now fails with ErrClosed
	<-w.done
	return w.closeErr
}
