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
)

// GenesisPrev is the Prev of the first record of a chain.
const GenesisPrev = "0000000000000000000000000000000000000000000000000000000000000000"

// KindCheckpoint is the Kind of the signed records the writer appends itself.
const KindCheckpoint = "checkpoint"

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
	reserveRefused                                     atomic.Uint64
	failure                                            atomic.Pointer[error]

	// Owned by the writer goroutine after New returns.
	f         *os.File
	size      int64 // bytes in f, including buffered ones
	buf       []byte
	seq       uint64
	prev      [64]byte
	sinceCkpt int
	lastCkpt  time.Time
	unsynced  bool
	idPrefix  string
	closeErr  error
	gate      chan struct{}
}

type item struct {
	rec  Record
	sync chan error // non-nil: a Sync barrier, rec is unused
}

var _ Logger = (*Writer)(nil)

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
}

// New opens (or creates) cfg.File, recovers a torn tail, continues the chain
// and starts the writer goroutine. logger may be nil.
func New(cfg Config, logger *slog.Logger) (*Writer, error) {
	return newWriter(cfg, logger, nil)
}

// newWriter is New with a gate for tests: when gate is non-nil the writer
// goroutine takes one value from it before each queued item, so a test can
// hold the queue full.
func newWriter(cfg Config, logger *slog.Logger, gate chan struct{}) (*Writer, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	w := &Writer{
		cfg:      cfg,
		log:      logger.With("component", "audit", "file", cfg.File),
		queue:    make(chan item, cfg.QueueSize),
		room:     newRoom(cfg.QueueSize),
		done:     make(chan struct{}),
		buf:      make([]byte, 0, flushSize+4096),
		lastCkpt: time.Now(),
		gate:     gate,
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
	if err := w.open(); err != nil {
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
		return *err
	}
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.dropped.Add(1)
		return ErrClosed
	}
	if err := w.takeRoom(); err != nil {
		w.dropped.Add(1)
		return err
	}
	w.queue <- item{rec: *r}
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
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.reserveRefused.Add(1)
		return nil, ErrClosed
	}
	if err := w.takeRoom(); err != nil {
		w.reserveRefused.Add(1)
		return nil, err
	}
	return &reservation{w: w}, nil
}

// takeRoom takes one place of the queue by the overflow policy; w.mu is
// read-held and the writer is open.
func (w *Writer) takeRoom() error {
	if w.room.tryTake() {
		return nil
	}
	w.overflow.Add(1)
	if w.cfg.Overflow == OverflowDeny {
		return ErrOverflow
	}
	w.room.take()
	return nil
}

// checkCallerRecord refuses what no caller may log.
func checkCallerRecord(r *Record) error {
	if r == nil {
		return errors.New("audit: nil record")
	}
	if r.Kind == KindCheckpoint {
		return fmt.Errorf("audit: kind %q is reserved for the writer", KindCheckpoint)
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
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return ErrClosed
	}
	w.room.take() // a barrier waits for room whatever the overflow policy
	w.queue <- item{sync: ch}
	w.mu.RUnlock()
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
		select {
		case it, ok := <-w.queue:
			if !ok {
				w.shutdown()
				return
			}
			if !w.batch(&it) {
				w.shutdown()
				return
			}
		case <-tick.C:
			w.tick()
		}
	}
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
	if w.gate != nil {
		<-w.gate
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

func (w *Writer) shutdown() {
	if w.key != nil && w.sinceCkpt > 0 {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	if err := w.f.Close(); err != nil && w.failure.Load() == nil {
		w.fail(fmt.Errorf("close: %w", err))
	}
	if err := w.failure.Load(); err != nil {
		w.closeErr = *err
	}
}

// appendRecord redacts, numbers, chains and buffers one caller record.
func (w *Writer) appendRecord(r *Record) {
	if w.failure.Load() != nil {
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
	if n := int64(len(w.buf) - start); w.size > 0 && w.size+n > int64(w.cfg.MaxSize) {
		w.buf = w.buf[:start]
		w.rotate()
		if w.failure.Load() != nil {
			w.dropped.Add(1)
			return
		}
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

// appendLine encodes r with the next seq and the current prev, plus a newline.
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
	if w.seq == 0 || w.failure.Load() != nil {
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

// rotate checkpoints and closes the live file, renames it to the next
// <file>.<n> and opens a fresh live file; the chain carries on.
func (w *Writer) rotate() {
	if w.key != nil {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	if w.failure.Load() != nil {
		return
	}
	if err := w.f.Close(); err != nil {
		w.fail(fmt.Errorf("close before rotation: %w", err))
		return
	}
	n, err := nextRotationIndex(w.cfg.File)
	if err != nil {
		w.fail(err)
		return
	}
	rotated := w.cfg.File + "." + strconv.FormatUint(n, 10)
	if err := os.Rename(w.cfg.File, rotated); err != nil {
		w.fail(fmt.Errorf("rotate: %w", err))
		return
	}
	f, err := os.OpenFile(w.cfg.File, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, DefaultFileMode)
	if err != nil {
		w.fail(fmt.Errorf("rotate: open new file: %w", err))
		return
	}
	if err := lockLive(f, w.cfg.File); err != nil {
		f.Close()
		w.fail(fmt.Errorf("rotate: %w", err))
		return
	}
	w.f, w.size = f, 0
	if err := syncDir(w.cfg.File); err != nil {
		w.fail(fmt.Errorf("rotate: sync directory: %w", err))
		return
	}
	w.rotations.Add(1)
	w.log.Info("audit file rotated", "rotated_to", rotated, "seq", w.seq)
}

func (w *Writer) flush() {
	if len(w.buf) == 0 {
		return
	}
	if w.failure.Load() != nil {
		w.buf = w.buf[:0]
		return
	}
	if _, err := w.f.Write(w.buf); err != nil {
		w.fail(fmt.Errorf("write: %w", err))
	}
	w.buf = w.buf[:0]
	w.unsynced = true
}

func (w *Writer) syncFile() {
	if !w.unsynced || w.failure.Load() != nil {
		return
	}
	if err := w.f.Sync(); err != nil {
		w.fail(fmt.Errorf("fsync: %w", err))
	}
	w.unsynced = false
}

func (w *Writer) fail(err error) {
	wrapped := fmt.Errorf("%w: %w", ErrFailed, err)
	if w.failure.CompareAndSwap(nil, &wrapped) {
		w.log.Error("audit writer failed; every further record is refused", "err", err)
	}
}
