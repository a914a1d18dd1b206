package audit

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Defaults applied by New to zero Config fields.
const (
	DefaultQueueSize          = 8192
	DefaultOverflow           = OverflowBlock
	DefaultSyncInterval       = time.Second
	DefaultMaxSize            = Size(100 << 20)
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
	File string `yaml:"file"`
	// QueueSize bounds the number of records waiting for the writer goroutine.
	QueueSize int `yaml:"queue_size"`
	// Overflow is "block" (default) or "deny"; see OverflowBlock, OverflowDeny.
	Overflow string `yaml:"overflow"`
	// SyncInterval bounds how long an appended record may sit unsynced (fsync).
	SyncInterval time.Duration `yaml:"sync_interval"`
	// MaxSize rotates the live file before a line would make it larger than this
	// ("100MB", "512KiB" or a byte count in YAML).
	MaxSize Size `yaml:"max_size"`
	// SigningKeyFile holds the Ed25519 key that signs checkpoints (PKCS#8 PEM, a
	// PEM block of the 32-byte seed, or the raw 32-byte seed). It is created with
	// mode 0600 when missing, with its public key beside it as SigningKeyFile.pub.
	// Empty disables checkpoints: the chain still catches edits, insertions and
	// deletions, but not a rewrite of the whole chain.
	SigningKeyFile string `yaml:"signing_key_file"`
	// CheckpointEvery writes a signed checkpoint after this many records.
	CheckpointEvery int `yaml:"checkpoint_every"`
	// CheckpointInterval writes a signed checkpoint when records have been
	// appended since the last one and this much time has passed.
	CheckpointInterval time.Duration `yaml:"checkpoint_interval"`
	// MaxFiles, when positive, is the most rotated files kept: after a
	// rotation the oldest beyond it are deleted. Zero keeps every file.
	MaxFiles int `yaml:"max_files"`
	// MaxBytes, when positive, bounds the rotated files' total size: after a
	// rotation the oldest are deleted until the rest fit. Zero: no bound. The
	// newest rotated file is always kept (its last line is the signed
	// checkpoint the live file continues from), so the chain on disk is at
	// most MaxBytes plus one rotated file plus the live file (MaxSize).
	MaxBytes Size `yaml:"max_bytes"`
	// RetryMin and RetryMax bound the back-off between attempts to write
	// again after a failed write (a full disk): it starts at RetryMin and
	// doubles up to RetryMax.
	RetryMin time.Duration `yaml:"retry_min"`
	RetryMax time.Duration `yaml:"retry_max"`
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
		return fmt.Errorf("audit: max_size %d: want at least 4096 bytes", int64(c.MaxSize))
	case c.CheckpointEvery < 1:
		return fmt.Errorf("audit: checkpoint_every %d: want at least 1", c.CheckpointEvery)
	case c.CheckpointInterval <= 0:
		return fmt.Errorf("audit: checkpoint_interval %v: want a positive duration", c.CheckpointInterval)
	case c.MaxFiles < 0:
		return fmt.Errorf("audit: max_files %d: want 0 (keep every file) or more", c.MaxFiles)
	case c.MaxBytes < 0:
		return fmt.Errorf("audit: max_bytes %d: want 0 (no bound) or more", int64(c.MaxBytes))
	case c.RetryMin <= 0 || c.RetryMax < c.RetryMin:
		return fmt.Errorf("audit: retry_min %v, retry_max %v: want 0 < retry_min <= retry_max", c.RetryMin, c.RetryMax)
	}
	return nil
}

// Size is a byte count that reads "100MB", "512KiB", "1G" or a plain number.
// K/M/G/T (with or without B) and KiB/MiB/GiB/TiB are all powers of 1024.
type Size int64

// UnmarshalText parses a size; YAML and flag decoding use it.
func (s *Size) UnmarshalText(b []byte) error {
	v, err := ParseSize(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// String formats s as a plain byte count.
func (s Size) String() string { return strconv.FormatInt(int64(s), 10) }

// ParseSize parses a byte count such as "100MB" (see Size).
func ParseSize(str string) (Size, error) {
	t := strings.ToUpper(strings.TrimSpace(str))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
	} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("audit: size %q: want a byte count such as 1048576, 512K or 100MB", str)
	}
	return Size(n * mult), nil
}
