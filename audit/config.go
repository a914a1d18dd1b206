package audit

import (
	"errors"
	"fmt"
	"time"

	"github.com/airlock-dev/airlock/hostname"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultQueueSize          = 8192
	DefaultOverflow           = OverflowBlock
	DefaultSyncInterval       = time.Second
	DefaultMaxSize            = 100 << 20 // bytes
	DefaultCheckpointEvery    = 1000
	DefaultCheckpointInterval = time.Minute
	DefaultFileMode           = 0o600
	DefaultRetryMin           = 100 * time.Millisecond
	DefaultRetryMax           = 5 * time.Second
)

// Overflow policies: what Log does when the queue is full.
const (
	// OverflowBlock makes Log wait for room: no record is lost, callers slow down.
	OverflowBlock = "block"
	// OverflowDeny makes Log return ErrOverflow at once; the caller must refuse
	// the request it was about to allow.
	OverflowDeny = "deny"
)

// Config configures a Writer. Zero fields take the Default* values.
type Config struct {
	// File is the live audit file, appended to. Required. Rotated files sit
	// beside it as File.1, File.2, ... (higher is newer).
	File string
	// QueueSize bounds the number of records waiting for the writer goroutine.
	QueueSize int
	// Overflow is "block" (default) or "deny"; see OverflowBlock, OverflowDeny.
	Overflow string
	// SyncInterval bounds how long an appended record may sit unsynced (fsync).
	SyncInterval time.Duration
	// MaxSize rotates the live file before a line would make it larger than
	// this many bytes.
	MaxSize int64
	// SigningKeyFile holds the Ed25519 key that signs checkpoints (PKCS#8 PEM, a
	// PEM block of the 32-byte seed, or the raw 32-byte seed). It is created with
	// mode 0600 when missing, with its public key beside it as SigningKeyFile.pub.
	// Empty disables checkpoints: the chain still catches edits, insertions and
	// deletions, but not a rewrite of the whole chain.
	SigningKeyFile string
	// CheckpointEvery writes a signed checkpoint after this many records.
	CheckpointEvery int
	// CheckpointInterval writes a signed checkpoint when records have been
	// appended since the last one and this much time has passed.
	CheckpointInterval time.Duration
	// MaxFiles, when positive, is the most rotated files kept: after a
	// rotation the oldest beyond it are deleted. Zero keeps every file.
	MaxFiles int
	// MaxBytes, when positive, bounds the rotated files' total size: after a
	// rotation the oldest are deleted until the rest fit. Zero: no bound. The
	// newest rotated file is always kept (its last line is the signed
	// checkpoint the live file continues from), so the chain on disk is at
	// most MaxBytes plus one rotated file plus the live file (MaxSize).
	MaxBytes int64
	// Node is stamped on every record (Record.Node): the machine the log
	// belongs to, so copies collected from many machines stay apart. Empty
	// leaves the field out. At most 253 bytes of letters, digits, '-', '.'
	// and '_' (a Kubernetes node name, a host name).
	Node string
	// RetryMin and RetryMax bound the back-off between attempts to write
	// again after a failed write (a full disk): it starts at RetryMin and
	// doubles up to RetryMax.
	RetryMin time.Duration
	RetryMax time.Duration
}

func (c *Config) applyDefaults() {
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Overflow == "" {
		c.Overflow = DefaultOverflow
	}
	if c.SyncInterval == 0 {
		c.SyncInterval = DefaultSyncInterval
	}
	if c.MaxSize == 0 {
		c.MaxSize = DefaultMaxSize
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = DefaultCheckpointEvery
	}
	if c.CheckpointInterval == 0 {
		c.CheckpointInterval = DefaultCheckpointInterval
	}
	if c.RetryMin == 0 {
		c.RetryMin = DefaultRetryMin
	}
	if c.RetryMax == 0 {
		c.RetryMax = max(DefaultRetryMax, c.RetryMin)
	}
}

// Validate reports the first bad field, naming it and the allowed values.
func (c *Config) Validate() error {
	switch {
	case c.File == "":
		return errors.New("audit: file is required")
	case c.QueueSize < 1:
		return fmt.Errorf("audit: queue_size %d: want at least 1", c.QueueSize)
	case c.Overflow != OverflowBlock && c.Overflow != OverflowDeny:
		return fmt.Errorf("audit: overflow %q: want %q or %q", c.Overflow, OverflowBlock, OverflowDeny)
	case c.SyncInterval <= 0:
		return fmt.Errorf("audit: sync_interval %v: want a positive duration", c.SyncInterval)
	case c.MaxSize < 4096:
		return fmt.Errorf("audit: max_size %d: want at least 4096 bytes", c.MaxSize)
	case c.CheckpointEvery < 1:
		return fmt.Errorf("audit: checkpoint_every %d: want at least 1", c.CheckpointEvery)
	case c.CheckpointInterval <= 0:
		return fmt.Errorf("audit: checkpoint_interval %v: want a positive duration", c.CheckpointInterval)
	case c.MaxFiles < 0:
		return fmt.Errorf("audit: max_files %d: want 0 (keep every file) or more", c.MaxFiles)
	case c.MaxBytes < 0:
		return fmt.Errorf("audit: max_bytes %d: want 0 (no bound) or more", c.MaxBytes)
	case !ValidNode(c.Node):
		return fmt.Errorf("audit: node %q: want at most 253 letters, digits, '-', '.' or '_'", c.Node)
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("audit: retry_min %v, retry_max %v: want 0 < retry_min <= retry_max", c.RetryMin, c.RetryMax)
	}
	return nil
}

// ValidNode reports whether name may be a Config.Node (hostname.ValidNode).
func ValidNode(name string) bool { return hostname.ValidNode(name) }
