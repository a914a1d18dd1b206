package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// ReasonAuditUnavailable is the reason id of an outage record.
const ReasonAuditUnavailable = "audit_unavailable"

// outage is a failure the writer has not yet recovered from.
type outage struct {
	from                     time.Time
	err                      error
	refusedBase, reserveBase uint64 // counters when it began
	lost                     int    // accepted records dropped past maxPending
}

// recover tries to write again after a failure: it reopens (or re-seeks) the
// live file, cuts what a partial write left after the last line written,
// checks that the chain on disk ends where the held records begin, writes
// them, then an outage record and a checkpoint. Only then do Log and Err
// report success again. On failure the back-off doubles (RetryMin..RetryMax).
func (w *Writer) recover() {
	o := w.outage
	if err := w.reopen(); err != nil {
		w.stillFailing(err)
		return
	}
	w.outage = nil // let flush write
	w.flush()
	w.syncFile()
	if w.outage != nil {
		// Failed again before anything new was written: the same outage.
		w.outage.from, w.outage.refusedBase, w.outage.reserveBase = o.from, o.refusedBase, o.reserveBase
		w.outage.lost += o.lost
		w.stillFailing(w.outage.err)
		return
	}
	until := time.Now()
	w.appendOwn(o.record(until, w.refusedFailing.Load()-o.refusedBase, w.reserveRefused.Load()-o.reserveBase))
	if w.key != nil {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	if w.outage != nil {
		// The outage record waits in buf with the rest; this is a new outage.
		w.stillFailing(w.outage.err)
		return
	}
	w.failure.Store(nil)
	w.backoff = w.cfg.RetryMin
	w.recoveries.Add(1)
	w.log.Warn("audit writer writes again after a failure", "unavailable_from", o.from, "unavailable_for", until.Sub(o.from),
		"refused", w.refusedFailing.Load()-o.refusedBase, "lost", o.lost, "seq", w.seq)
}

func (w *Writer) stillFailing(err error) {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	w.failure.Store(&wrapped)
	w.outage.err = err
	w.backoff = min(2*w.backoff, w.cfg.RetryMax)
	w.log.Debug("audit writer still failing", oplog.ErrorKey, err, "retry_in", w.backoff)
}

// reopen makes w.f the live file again, positioned after the last line
// written successfully, and checks the chain on disk ends with that line.
func (w *Writer) reopen() error {
	path := w.cfg.File
	if w.f != nil {
		if st, err := os.Stat(path); err != nil || !os.SameFile(st, w.fileInfo) {
			w.f.Close() // renamed or replaced: the chain continues in path
			w.f = nil
		}
	}
	f, opened := w.f, false
	if f == nil {
		nf, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, DefaultFileMode)
		if err != nil {
			return fmt.Errorf("open: %w", err)
		}
		if err := lockLive(nf, path); err != nil {
			nf.Close()
			return err
		}
		f, opened = nf, true
	}
	fail := func(err error) error {
		if opened {
			f.Close()
		}
		return err
	}
	st, err := f.Stat()
	if err != nil {
		return fail(fmt.Errorf("stat: %w", err))
	}
	same := w.fileInfo != nil && os.SameFile(st, w.fileInfo)
	end := int64(0)
	if same {
		end = w.onDisk
	}
	switch {
	case st.Size() < end:
		return fail(fmt.Errorf("%s has %d bytes but %d were written to it: lines written before the failure are gone", path, st.Size(), end))
	case st.Size() > end && !same:
		return fail(fmt.Errorf("%s was replaced by a file of %d bytes this writer did not write", path, st.Size()))
	case st.Size() > end:
		// A write cut short: its bytes are a prefix of buf, written again below.
		if err := f.Truncate(end); err != nil {
			return fail(fmt.Errorf("cut partial write: %w", err))
		}
		w.log.Warn("audit file: cut the bytes of a partial write before writing them again", "bytes", st.Size()-end, "offset", end)
	}
	if err := w.checkDiskHead(f, end); err != nil {
		return fail(err)
	}
	if opened {
		if err := syncDir(path); err != nil {
			return fail(fmt.Errorf("sync directory: %w", err))
		}
		if st, err = f.Stat(); err != nil {
			return fail(fmt.Errorf("stat: %w", err))
		}
	}
	w.f, w.fileInfo, w.onDisk = f, st, end
	w.size = end + int64(len(w.buf))
	return nil
}

// checkDiskHead checks that the chain on disk (f's first end bytes, or the
// newest rotated file when end is 0) ends with the last line this writer
// wrote successfully, so the held records continue it.
func (w *Writer) checkDiskHead(f *os.File, end int64) error {
	var last []byte
	from := w.cfg.File
	if end > 0 {
		ti, err := readTail(f, end)
		if err != nil {
			return fmt.Errorf("read tail: %w", err)
		}
		if ti.lastEnd != end {
			return fmt.Errorf("%s does not end with a whole line at byte %d", from, end)
		}
		last = ti.lastLine
	} else {
		rotated, err := RotatedFiles(w.cfg.File)
		if err != nil {
			return err
		}
		if n := len(rotated); n > 0 {
			from = rotated[n-1]
			if last, _, err = lastWholeLine(from); err != nil {
				return err
			}
		}
	}
	if last == nil {
		if w.diskSeq == 0 {
			return nil
		}
		return fmt.Errorf("the chain on disk ends before seq %d, the last line written", w.diskSeq)
	}
	var head struct {
		Seq uint64 `json:"seq"`
	}
	sum := sha256.Sum256(last)
	var hexSum [64]byte
	hex.Encode(hexSum[:], sum[:])
	if json.Unmarshal(last, &head) != nil || head.Seq != w.diskSeq || hexSum != w.diskPrev {
		return fmt.Errorf("%s: the last line on disk (seq %d) is not the last line written (seq %d): the file changed while writes were failing", from, head.Seq, w.diskSeq)
	}
	return nil
}

// record is the outage record written once the log works again.
func (o *outage) record(until time.Time, refused, reserveRefused uint64) *Record {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put("unavailable_from", o.from.UTC().Format(time.RFC3339Nano))
	put("unavailable_until", until.UTC().Format(time.RFC3339Nano))
	put("unavailable_ms", until.Sub(o.from).Milliseconds())
	put("refused", refused)
	put("reservations_refused", reserveRefused)
	if o.lost > 0 {
		put("lost", o.lost)
	}
	return &Record{
		Kind:  KindOutage,
		Error: o.err.Error(),
		Reasons: []Reason{{ID: ReasonAuditUnavailable, Msg: fmt.Sprintf(
			"the audit log could not be written for %v; %d records were refused meanwhile", until.Sub(o.from).Round(time.Millisecond), refused)}},
		Extra: extra,
	}
}
