package audit

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// maxPending bounds the records a failed writer keeps in memory for when
// writing works again; past it, accepted records are lost (counted in the
// outage record and in Dropped).
const maxPending = 32 << 20

// appendRecord redacts, numbers, chains and buffers one caller record.
func (w *Writer) appendRecord(r *Record) {
	if w.outage != nil && len(w.buf) >= maxPending {
		w.outage.lost++
		w.dropped.Add(1)
		return
	}
	r.Checkpoint = nil
	r = redact(r)
	if r.TS.IsZero() || r.TS.Year() < 0 || r.TS.Year() > 9999 {
		r.TS = time.Now().UTC()
	} else {
		r.TS = r.TS.UTC()
	}
	start := len(w.buf)
	w.buf = w.appendLine(w.buf, r)
	if n := len(w.buf) - start; n > MaxRecordSize {
		// Hostile input (a huge path of escaped bytes, thousands of query keys)
		// must not make a line the readers refuse: that would break the chain.
		w.buf = w.buf[:start]
		r = shrink(r, n)
		w.buf = w.appendLine(w.buf, r)
	}
	// A failed writer does not rotate: the record waits in buf, and the
	// rotation happens at the first record after recovery.
	if n := int64(len(w.buf) - start); w.outage == nil && w.size > 0 && w.size+n > int64(w.cfg.MaxSize) {
		w.buf = w.buf[:start]
		w.rotate()
		start = len(w.buf)
		w.buf = w.appendLine(w.buf, r)
	}
	w.commit(start)
	if w.key != nil {
		w.sinceCkpt++
		if w.sinceCkpt >= w.cfg.CheckpointEvery {
			w.appendCheckpoint()
		}
	}
}

// appendOwn chains a record the writer writes itself (retention, outage).
func (w *Writer) appendOwn(r *Record) {
	r.TS = time.Now().UTC()
	start := len(w.buf)
	w.buf = w.appendLine(w.buf, r)
	w.commit(start)
}

// appendLine encodes r with the next seq, the current prev and the writer's
// node, plus a newline.
func (w *Writer) appendLine(dst []byte, r *Record) []byte {
	seq := w.seq + 1
	dst = append(dst, `{"seq":`...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, `,"ts":"`...)
	dst = r.TS.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","prev":"`...)
	dst = append(dst, w.prev[:]...)
	dst = append(dst, `","id":`...)
	if r.ID != "" {
		dst = appendString(dst, r.ID)
	} else {
		dst = append(dst, '"')
		dst = append(dst, w.idPrefix...)
		dst = append(dst, '-')
		dst = strconv.AppendUint(dst, seq, 10)
		dst = append(dst, '"')
	}
	dst = appendStrField(dst, `,"node":`, w.cfg.Node)
	dst = appendBody(dst, r)
	return append(dst, '\n')
}

// commit advances the chain over the line buffered at w.buf[start:].
func (w *Writer) commit(start int) {
	line := w.buf[start : len(w.buf)-1]
	sum := sha256.Sum256(line)
	hex.Encode(w.prev[:], sum[:])
	w.seq++
	w.size += int64(len(line) + 1)
	w.written.Add(1)
}

func (w *Writer) appendCheckpoint() {
	if w.seq == 0 || w.outage != nil {
		return
	}
	head := string(w.prev[:])
	sig := ed25519.Sign(w.key, CheckpointMessage(w.seq, head))
	r := Record{
		TS:   time.Now().UTC(),
		Kind: KindCheckpoint,
		Checkpoint: &Checkpoint{
			Head:      head,
			Seq:       w.seq,
			KeyID:     w.keyID,
			Signature: base64.StdEncoding.EncodeToString(sig),
		},
	}
	start := len(w.buf)
	w.buf = w.appendLine(w.buf, &r)
	w.commit(start)
	w.checkpoints.Add(1)
	w.sinceCkpt = 0
	w.lastCkpt = time.Now()
}

// flush writes buf. On failure buf is kept for recovery: bytes of it that did
// reach the file are cut there first (see recover).
func (w *Writer) flush() {
	if len(w.buf) == 0 || w.outage != nil {
		return
	}
	if _, err := w.write(w.buf); err != nil {
		w.fail(fmt.Errorf("write: %w", err))
		return
	}
	w.onDisk += int64(len(w.buf))
	w.diskSeq, w.diskPrev = w.seq, w.prev
	w.buf = w.buf[:0]
	w.unsynced = true
}

func (w *Writer) write(b []byte) (int, error) {
	if w.hooks.write != nil {
		return w.hooks.write(w.f, b)
	}
	return w.f.Write(b)
}

func (w *Writer) syncFile() {
	if !w.unsynced || w.outage != nil {
		return
	}
	if err := w.f.Sync(); err != nil {
		w.fail(fmt.Errorf("fsync: %w", err))
		return
	}
	w.unsynced = false
}

// fail marks the writer failed: Log, Reserve and Err report err from now on,
// and the run loop retries (see recover). A failure during an outage replaces
// the error but keeps the outage's start and counts.
func (w *Writer) fail(err error) {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	w.failure.Store(&wrapped)
	if w.outage == nil {
		w.outage = &outage{from: time.Now(), refusedBase: w.refusedFailing.Load(), reserveBase: w.reserveRefused.Load()}
		w.log.Error("audit writer failed; records are refused until writing works again", oplog.ErrorKey, err)
	}
	w.outage.err = err
}
