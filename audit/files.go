package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// RotatedFiles lists the rotated siblings of path (path.1, path.2, ...) oldest
// first. Torn-tail copies (path.torn-*) are not part of the chain and are not
// listed.
func RotatedFiles(path string) ([]string, error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("audit: list rotated files: %w", err)
	}
	type numbered struct {
		n    uint64
		path string
	}
	var found []numbered
	for _, e := range ents {
		suffix, ok := strings.CutPrefix(e.Name(), base+".")
		if !ok || e.IsDir() {
			continue
		}
		n, err := strconv.ParseUint(suffix, 10, 64)
		if err != nil || n == 0 || strconv.FormatUint(n, 10) != suffix {
			continue
		}
		found = append(found, numbered{n, filepath.Join(filepath.Dir(path), e.Name())})
	}
	slices.SortFunc(found, func(a, b numbered) int { return compareUint(a.n, b.n) })
	out := make([]string, len(found))
	for i, f := range found {
		out[i] = f.path
	}
	return out, nil
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// ChainFiles lists every file of the chain whose live file is path, in chain
// order: the rotated siblings oldest first, then path itself if it exists.
func ChainFiles(path string) ([]string, error) {
	files, err := RotatedFiles(path)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); err == nil {
		files = append(files, path)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("audit: %w", err)
	}
	return files, nil
}

func nextRotationIndex(path string) (uint64, error) {
	files, err := RotatedFiles(path)
	if err != nil {
		return 0, err
	}
	if len(files) == 0 {
		return 1, nil
	}
	last := files[len(files)-1]
	n, err := strconv.ParseUint(last[strings.LastIndexByte(last, '.')+1:], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("audit: rotated file %s: %w", last, err)
	}
	return n + 1, nil
}

// tailInfo describes the end of an audit file as found at open.
type tailInfo struct {
	lastLine []byte // the last whole line, without its newline; nil if none
	lastEnd  int64  // offset just past the last whole line's newline
	size     int64  // file size
}

// readTail finds the last whole line of f (size bytes long) by reading backwards.
func readTail(f io.ReaderAt, size int64) (tailInfo, error) {
	ti := tailInfo{size: size}
	const chunk = 64 << 10
	// Find the last newline.
	lastNL := int64(-1)
	var buf []byte
	for end := size; end > 0 && lastNL < 0; {
		start := max(0, end-chunk)
		b := make([]byte, end-start)
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return ti, err
		}
		if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
			lastNL = start + int64(i)
			buf = b[:i]
			break
		}
		end = start
	}
	if lastNL < 0 {
		return ti, nil
	}
	ti.lastEnd = lastNL + 1
	// Collect the line that ends at lastNL.
	line := buf
	pos := lastNL - int64(len(buf))
	for {
		if i := bytes.LastIndexByte(line, '\n'); i >= 0 {
			ti.lastLine = slices.Clone(line[i+1:])
			return ti, nil
		}
		if pos == 0 {
			ti.lastLine = slices.Clone(line)
			return ti, nil
		}
		start := max(0, pos-chunk)
		b := make([]byte, pos-start)
		if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
			return ti, err
		}
		line = append(b, line...)
		pos = start
	}
}

func syncDir(path string) error {
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// open opens the live file and sets seq and prev from the chain's last line.
// It returns what it found of a writer that did not close the log (see
// recoverCrash).
func (w *Writer) open() (*crashSigns, error) {
	signs := &crashSigns{}
	err := w.openLive(signs)
	return signs, err
}

// openLive is open's work.
func (w *Writer) openLive(signs *crashSigns) error {
	path := w.cfg.File
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, DefaultFileMode)
	if err != nil {
		return fmt.Errorf("audit: open: %w", err)
	}
	// One writer per chain: taken before the tail is read (or a torn tail cut),
	// so a second process never truncates or interleaves the first one's lines.
	if err := lockLive(f, path); err != nil {
		f.Close()
		return err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: open: %w", err)
	}
	ti, err := readTail(f, st.Size())
	if err != nil {
		f.Close()
		return fmt.Errorf("audit: read tail of %s: %w", path, err)
	}
	if ti.lastEnd < ti.size {
		saved, err := w.cutTornTail(f, ti)
		if err != nil {
			f.Close()
			return err
		}
		signs.tornBytes, signs.tornSaved = int(ti.size-ti.lastEnd), saved
	}
	w.f, w.size = f, ti.lastEnd
	last := ti.lastLine
	from, fromEnd := path, ti.lastEnd
	if last == nil {
		// An empty live file continues the newest rotated sibling's chain.
		rotated, err := RotatedFiles(path)
		if err != nil {
			f.Close()
			return err
		}
		if n := len(rotated); n > 0 {
			from = rotated[n-1]
			if last, fromEnd, err = lastWholeLine(from); err != nil {
				f.Close()
				return err
			}
		}
	}
	if last == nil {
		w.seq = 0
		copy(w.prev[:], GenesisPrev)
		return syncDir(path)
	}
	var head struct {
		Seq  uint64 `json:"seq"`
		Kind string `json:"kind"`
	}
	if err := json.Unmarshal(last, &head); err != nil || head.Seq == 0 {
		f.Close()
		return fmt.Errorf("audit: %s: last line is not a valid record (%v); run `airlock audit verify` and move the file aside", from, err)
	}
	signs.tailFile, signs.tailEnd, signs.tailKind = from, fromEnd, head.Kind
	w.seq = head.Seq
	sum := sha256.Sum256(last)
	hex.Encode(w.prev[:], sum[:])
	return nil
}

// lockLive takes an exclusive, non-blocking flock on the open live file f and
// checks that path still names it. Two writers appending to one chain would
// interleave two seq/prev sequences and break it for good (two `airlock run`s
// sharing the default audit file did). The lock is released when f is closed:
// at Close, or at rotation once the file has its new name. A second writer is
// refused at New; if one starts in the instant a rotation has no live file, one
// of the two fails closed (its records are refused), and neither writes into
// the other's chain.
func lockLive(f *os.File, path string) error {
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return fmt.Errorf("audit: %s is being written by another process (one writer per audit file: give each airlock its own audit.file, or run the sandboxes under one `airlock serve`): %w", path, ErrInUse)
		}
		return fmt.Errorf("audit: lock %s: %w", path, err)
	}
	fst, err := f.Stat()
	if err != nil {
		return fmt.Errorf("audit: lock %s: %w", path, err)
	}
	pst, err := os.Stat(path)
	if err != nil || !os.SameFile(fst, pst) {
		return fmt.Errorf("audit: %s was rotated or replaced by another process while opening it: %w", path, ErrInUse)
	}
	return nil
}

// lastWholeLine returns path's last whole line and the offset just past it.
func lastWholeLine(path string) ([]byte, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("audit: %w", err)
	}
	ti, err := readTail(f, st.Size())
	if err != nil {
		return nil, 0, fmt.Errorf("audit: read tail of %s: %w", path, err)
	}
	return ti.lastLine, ti.lastEnd, nil
}

// cutTornTail copies the bytes after the last newline (a line a crash cut short)
// to <file>.torn-<UTC time>, then truncates the live file to its last whole line.
// It returns the copy's name.
func (w *Writer) cutTornTail(f *os.File, ti tailInfo) (string, error) {
	torn := make([]byte, ti.size-ti.lastEnd)
	if _, err := f.ReadAt(torn, ti.lastEnd); err != nil {
		return "", fmt.Errorf("audit: read torn tail: %w", err)
	}
	name := w.cfg.File + ".torn-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := writeFileSync(name, torn); err != nil {
		return "", fmt.Errorf("audit: save torn tail: %w", err)
	}
	if err := f.Truncate(ti.lastEnd); err != nil {
		return "", fmt.Errorf("audit: truncate torn tail: %w", err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("audit: sync after truncate: %w", err)
	}
	w.log.Warn("audit file had a torn last line (crash mid-write); moved it aside",
		"torn_bytes", len(torn), "saved_to", name, "kept_bytes", ti.lastEnd)
	return name, nil
}

func writeFileSync(name string, b []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, DefaultFileMode)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
