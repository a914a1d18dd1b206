package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// GenesisPrev is the Prev of the first record of a chain.
const GenesisPrev = "0000000000000000000000000000000000000000000000000000000000000000"

var (
	// ErrOverflow is returned by Log when the queue is full and Overflow is
	// "deny": the caller must refuse the request the record describes.
	ErrOverflow = errors.New("audit: queue full, record refused")
	// ErrClosed is returned by Log after Close.
	ErrClosed = errors.New("audit: writer closed")
	// ErrInUse is returned by New when another writer holds the audit file.
	ErrInUse = errors.New("audit file in use")
	// ErrFailed wraps the write or sync error that stopped the writer; every Log
	// after such a failure returns it, so callers deny rather than run unaudited.
	ErrFailed = errors.New("audit: writer failed")
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

// Writer appends records to the audit file from a single goroutine.
// Log is safe for concurrent use.
type Writer struct {
	cfg   Config
	log   *slog.Logger
	key   ed25519.PrivateKey
	keyID string

	mu     sync.RWMutex // guards closed against the close of queue
	closed bool
	queue  chan item // as large as room: a sender holding a place never blocks
	room   *room     // places in use: queued items and held reservations
	done   chan struct{}

	written, checkpoints, rotations, overflow, dropped atomic.Uint64
	reserveRefused, recoveries, pruned                 atomic.Uint64
	// refusedFailing counts Log calls refused while the writer was failed,
	// for the outage record written when it recovers.
	refusedFailing atomic.Uint64
	failure        atomic.Pointer[error]

	// Owned by the writer goroutine after New returns.
	f         *os.File
	fileInfo  os.FileInfo // identity of f, to know it again after a failure
	size      int64       // bytes in f, including buffered ones
	onDisk    int64       // bytes of f written successfully
	buf       []byte
	seq       uint64
	prev      [64]byte
	diskSeq   uint64   // seq of the last line written successfully
	diskPrev  [64]byte // hash of that line: where buf's first line chains on
	sinceCkpt int
	lastCkpt  time.Time
	lastBatch time.Time // when the writer last took a batch (batchLinger)
	unsynced  bool
	idPrefix  string
	closeErr  error
	hooks     writerHooks
	outage    *outage     // set from a failure until its outage record is written
	retry     *time.Timer // armed while failed
	backoff   time.Duration
}

// writerHooks are seams for tests; zero values mean the real thing.
type writerHooks struct {
	// gate, when non-nil, is received from before each queued item, so a test
	// can hold the queue full.
	gate chan struct{}
	// write replaces f.Write, so a test can fail writes (ENOSPC) and let them
	// work again.
	write func(f *os.File, b []byte) (int, error)
}

type item struct {
	rec  Record
	sync chan error // non-nil: a Sync barrier, rec is unused
}

var (
	_ Reserver = (*Writer)(nil)
	_ Health   = (*Writer)(nil)
	_ Health   = (*Budget)(nil)
	_ Health   = (*Observed)(nil)
)

// Stats are the writer's counters since New.
type Stats struct {
	Written     uint64 // records appended, checkpoints included
	Checkpoints uint64 // signed checkpoints appended
	Rotations   uint64 // files rotated
	Overflow    uint64 // Log and Reserve calls that found the queue full (blocked or refused)
	Dropped     uint64 // records refused: ErrOverflow, ErrClosed or ErrFailed
	// ReserveRefused counts Reserve calls refused (overflow, closed, failed).
	ReserveRefused uint64
	Queued         int // records waiting now
	// Reserved is the places held by reservations not yet used, as far as a
	// snapshot can tell (queued items and reservations are counted together).
	Reserved int
	// Recoveries counts failures the writer recovered from (see Config.RetryMin).
	Recoveries uint64
	// Pruned counts rotated files deleted by retention (MaxFiles, MaxBytes).
	Pruned uint64
}

// New opens (or creates) cfg.File, recovers a torn tail, continues the chain
// and starts the writer goroutine. When the previous writer did not close the
// file (a torn line, or with a signing key records after the last
// checkpoint), New first appends a crash_recovered record and a checkpoint
// covering them (see recoverCrash). logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Writer, error) {
	return newWriter(cfg, logger, writerHooks{})
}

// newWriter is New with test seams.
func newWriter(cfg Config, logger *slog.Logger, hooks writerHooks) (*Writer, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Writer{
		cfg:      cfg,
		log:      oplog.For(logger, "audit").With(oplog.FileKey, cfg.File),
		queue:    make(chan item, cfg.QueueSize),
		room:     newRoom(cfg.QueueSize),
		done:     make(chan struct{}),
		buf:      make([]byte, 0, flushSize+4096),
		lastCkpt: time.Now(),
		hooks:    hooks,
		backoff:  cfg.RetryMin,
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return nil, fmt.Errorf("audit: random id prefix: %w", err)
	}
	w.idPrefix = hex.EncodeToString(rnd[:])
	if cfg.SigningKeyFile != "" {
		k, err := LoadOrCreateSigningKey(cfg.SigningKeyFile)
		if err != nil {
			return nil, err
		}
		w.key = k
		w.keyID = KeyID(k.Public().(ed25519.PublicKey))
	} else {
		w.log.Warn("audit checkpoints disabled: no signing_key_file; a rewrite of the whole chain would go unnoticed")
	}
	signs, err := w.open()
	if err != nil {
		return nil, err
	}
	st, err := w.f.Stat()
	if err != nil {
		w.f.Close()
		return nil, fmt.Errorf("audit: %w", err)
	}
	w.fileInfo, w.onDisk = st, w.size
	w.diskSeq, w.diskPrev = w.seq, w.prev
	if err := w.recoverCrash(signs); err != nil {
		w.f.Close()
		return nil, err
	}
	go w.run()
	return w, nil
}

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

// Stats returns the writer's counters.
func (w *Writer) Stats() Stats {
	return Stats{
		Written:        w.written.Load(),
		Checkpoints:    w.checkpoints.Load(),
		Rotations:      w.rotations.Load(),
		Overflow:       w.overflow.Load(),
		Dropped:        w.dropped.Load(),
		ReserveRefused: w.reserveRefused.Load(),
		Queued:         len(w.queue),
		Reserved:       max(0, int(w.room.used.Load())-len(w.queue)),
		Recoveries:     w.recoveries.Load(),
		Pruned:         w.pruned.Load(),
	}
}

// PublicKey returns the checkpoint verification key, or nil when checkpoints
// are disabled.
func (w *Writer) PublicKey() ed25519.PublicKey {
	if w.key == nil {
		return nil
	}
	return w.key.Public().(ed25519.PublicKey)
}

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
