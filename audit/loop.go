package audit

import (
	"fmt"
	"time"
)

// flushSize is how much encoded output the writer buffers before a write(2).
const flushSize = 256 << 10

// batchLinger: a record that arrives less than this after the previous batch
// was taken waits out the rest of it, so the records that follow are queued
// without waking the writer and go out in one write(2). Busy (thousands of
// records a second), the writer then wakes and writes once or twice per
// linger instead of once per record; records further apart than this are
// written at once.
const batchLinger = 500 * time.Microsecond

func (w *Writer) run() {
	defer close(w.done)
	tick := time.NewTicker(w.cfg.SyncInterval)
	defer tick.Stop()
	for {
		var retry <-chan time.Time
		if w.retry != nil {
			retry = w.retry.C
		}
		select {
		case it, ok := <-w.queue:
			if ok && it.sync == nil {
				w.linger()
			}
			if !ok || !w.batch(&it) {
				w.shutdown()
				return
			}
		case <-tick.C:
			w.tick()
		case <-retry:
			w.retry = nil
			w.recover()
		}
		if w.outage != nil && w.retry == nil {
			w.retry = time.NewTimer(w.backoff)
		}
	}
}

// linger waits out the rest of batchLinger since the last batch was taken.
func (w *Writer) linger() {
	now := time.Now()
	if d := now.Sub(w.lastBatch); d < batchLinger {
		time.Sleep(batchLinger - d)
		now = now.Add(batchLinger - d)
	}
	w.lastBatch = now
}

// batch handles first and whatever else is already queued (up to a buffer's
// worth) before paying for one write(2). Places are freed as items are taken;
// waiters are woken at the start of the batch and before the write, not once
// per record. It reports false when the queue was closed meanwhile.
func (w *Writer) batch(first *item) bool {
	w.room.free()
	w.room.wake()
	w.handle(first)
	for len(w.buf) < flushSize {
		select {
		case it, ok := <-w.queue:
			if !ok {
				w.room.wake()
				return false
			}
			w.room.free()
			w.handle(&it)
			continue
		default:
		}
		break
	}
	w.room.wake()
	w.flush()
	return true
}

func (w *Writer) handle(it *item) {
	if w.hooks.gate != nil {
		<-w.hooks.gate
	}
	if it.sync != nil {
		w.flush()
		w.syncFile()
		if err := w.failure.Load(); err != nil {
			it.sync <- *err
		} else {
			it.sync <- nil
		}
		return
	}
	w.appendRecord(&it.rec)
}

func (w *Writer) tick() {
	if w.key != nil && w.sinceCkpt > 0 && time.Since(w.lastCkpt) >= w.cfg.CheckpointInterval {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
}

// shutdown writes the final checkpoint and closes the file. A writer that is
// failed tries once more to write what it holds; what it still cannot write
// is named in the operational log.
func (w *Writer) shutdown() {
	if w.retry != nil {
		w.retry.Stop()
		w.retry = nil
	}
	if w.outage != nil {
		w.recover()
	}
	if w.key != nil && w.sinceCkpt > 0 {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	if w.outage != nil && len(w.buf) > 0 {
		w.log.Error("audit writer closed while failed: records it had accepted could not be written",
			"bytes", len(w.buf), "from_seq", w.diskSeq+1, "through_seq", w.seq)
	}
	if w.f != nil {
		if err := w.f.Close(); err != nil && w.outage == nil {
			w.fail(fmt.Errorf("close: %w", err))
		}
	}
	if err := w.failure.Load(); err != nil {
		w.closeErr = *err
	}
}
