package secrets

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// version is one fetched value of a secret. Immutable once built.
type version struct {
	value Value
	id    string // "v1", "v2", ... per secret, per process
	fp    string // keyed HMAC fingerprint
	scrub *scrubber
}

// secret is a compiled SecretConfig with its cache.
type secret struct {
	cfg   SecretConfig
	kind  string // env, file, command
	fpKey []byte
	log   *slog.Logger
	now   func() time.Time

	mu       sync.Mutex
	cur      *version
	n        int
	fileKey  fileKey
	expires  time.Time
	lastErr  error
	errUntil time.Time
}

type fileKey struct {
	size, mtime, ctime int64
	ino, dev           uint64
}

func newSecret(cfg SecretConfig, fpKey []byte, log *slog.Logger) *secret {
	s := &secret{cfg: cfg, fpKey: fpKey, now: time.Now}
	switch {
	case cfg.Env != "":
		s.kind = "env"
	case cfg.File != "":
		s.kind = "file"
	default:
		s.kind = "command"
	}
	s.log = log.With("secret", cfg.ID, "source", s.kind)
	return s
}

// get returns the current version, fetching it when the source may have changed.
// Errors are *UnavailableError and never contain the value.
func (s *secret) get(ctx context.Context) (*version, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var (
		raw string
		err error
	)
	switch s.kind {
	case "env":
		v, ok := os.LookupEnv(s.cfg.Env)
		if !ok {
			err = fmt.Errorf("environment variable %s is not set", s.cfg.Env)
		}
		raw = v
	case "file":
		var changed bool
		raw, changed, err = s.readFile()
		if err == nil && !changed {
			return s.cur, nil
		}
	case "command":
		now := s.now()
		if s.cur != nil && now.Before(s.expires) {
			return s.cur, nil
		}
		if s.lastErr != nil && now.Before(s.errUntil) {
			return nil, &UnavailableError{SecretID: s.cfg.ID, Err: s.lastErr}
		}
		raw, err = s.runCommand(ctx)
		if err != nil {
			s.lastErr, s.errUntil = err, s.now().Add(s.cfg.RetryAfter)
		}
	}
	if err == nil {
		err = checkValue(raw)
	}
	if err != nil {
		s.log.Error("secret source failed", oplog.ErrorKey, err)
		if s.kind == "file" {
			s.fileKey = fileKey{} // read again next time
		}
		return nil, &UnavailableError{SecretID: s.cfg.ID, Err: err}
	}
	if s.kind == "command" {
		s.expires = s.now().Add(s.cfg.TTL)
		s.lastErr = nil
	}
	if s.cur != nil && s.cur.value.reveal() == raw {
		return s.cur, nil
	}
	s.n++
	v := &version{
		value: newValue(raw),
		id:    "v" + strconv.Itoa(s.n),
		fp:    fingerprint(s.fpKey, s.cfg.ID, raw),
		scrub: newScrubber(CanaryForms(raw)),
	}
	s.cur = v
	s.log.Info("secret version loaded", "version", v.id, "fingerprint", v.fp)
	return v, nil
}

// readFile re-reads the file when its identity or timestamps changed.
func (s *secret) readFile() (string, bool, error) {
	f, err := os.Open(s.cfg.File)
	if err != nil {
		return "", false, fmt.Errorf("open %s: %w", s.cfg.File, errors.Unwrap(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", false, fmt.Errorf("stat %s: %w", s.cfg.File, errors.Unwrap(err))
	}
	if !fi.Mode().IsRegular() {
		return "", false, fmt.Errorf("%s is not a regular file", s.cfg.File)
	}
	k := fileKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		k.ctime = st.Ctim.Sec*1e9 + st.Ctim.Nsec
		k.ino, k.dev = st.Ino, st.Dev
	}
	if s.cur != nil && k == s.fileKey {
		return "", false, nil
	}
	data, err := io.ReadAll(io.LimitReader(f, DefaultMaxCommandOutput+1))
	if err != nil {
		return "", false, fmt.Errorf("read %s: %w", s.cfg.File, errors.Unwrap(err))
	}
	if len(data) > DefaultMaxCommandOutput {
		return "", false, fmt.Errorf("%s is larger than %d bytes", s.cfg.File, DefaultMaxCommandOutput)
	}
	s.fileKey = k
	v := strings.TrimSuffix(string(data), "\n")
	v = strings.TrimSuffix(v, "\r")
	return v, true, nil
}

// runCommand runs the command without a shell. Its stderr is never logged or
// returned: it may hold the value. Only its size and the exit status are.
func (s *secret) runCommand(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.cfg.Command[0], s.cfg.Command[1:]...)
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = DefaultMaxCommandOutput, DefaultMaxCommandOutput
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if stderr.Len() > 0 {
		s.log.Warn("secret command wrote to stderr (not shown: it may hold the value)",
			"stderr_bytes", stderr.total)
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		return "", fmt.Errorf("command %s timed out after %v", s.cfg.Command[0], s.cfg.Timeout)
	case err != nil:
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("command %s failed: %s", s.cfg.Command[0], ee.ProcessState.String())
		}
		return "", fmt.Errorf("command %s could not run: %w", s.cfg.Command[0], errors.Unwrap(err))
	case stdout.total > stdout.max:
		return "", fmt.Errorf("command %s wrote more than %d bytes", s.cfg.Command[0], stdout.max)
	}
	return strings.TrimSpace(stdout.String()), nil
}

// limitedBuffer keeps at most max bytes and counts the rest.
type limitedBuffer struct {
	bytes.Buffer
	max   int
	total int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.total += len(p)
	if room := b.max - b.Len(); room > 0 {
		if len(p) > room {
			b.Buffer.Write(p[:room])
		} else {
			b.Buffer.Write(p)
		}
	}
	return len(p), nil
}

// checkValue refuses values that cannot safely go in a header or be scrubbed.
func checkValue(v string) error {
	switch {
	case v == "":
		return errors.New("empty value")
	case len(v) < MinValueLength:
		return fmt.Errorf("value shorter than %d bytes cannot be scrubbed safely", MinValueLength)
	case hasCtl(v):
		return errors.New("value contains a control character (CR, LF, NUL, ...)")
	case strings.Contains(strings.ToLower(v), PlaceholderPrefix):
		return errors.New("value looks like a placeholder")
	}
	return nil
}

// fingerprint is a keyed HMAC-SHA256 of the secret id and value, truncated to
// 128 bits: equal values compare equal within one key, and the value cannot be
// brute-forced from the log without the key.
func fingerprint(key []byte, id, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write([]byte(value))
	return "hmac-sha256:" + hex.EncodeToString(m.Sum(nil)[:16])
}

// loadFingerprintKey reads a key file (raw bytes, or hex/base64 text) of at
// least 32 bytes.
func loadFingerprintKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("fingerprint_key_file: %w", err)
	}
	t := strings.TrimSpace(string(data))
	if b, err := hex.DecodeString(t); err == nil && len(b) >= 32 {
		return b, nil
	}
	if b, err := base64.StdEncoding.DecodeString(t); err == nil && len(b) >= 32 {
		return b, nil
	}
	if len(data) >= 32 {
		return data, nil
	}
	return nil, fmt.Errorf("fingerprint_key_file: %s holds fewer than 32 bytes of key", path)
}
