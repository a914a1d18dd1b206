package audit

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
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
