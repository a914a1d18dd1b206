package audit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
