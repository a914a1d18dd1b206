package audit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// DefaultTailPoll is how often Tail looks for appended lines and rotation.
const DefaultTailPoll = 200 * time.Millisecond

// TailOptions tune Tail.
type TailOptions struct {
	// Lines is how many existing whole lines to emit first; negative emits all.
	Lines int
	// Follow keeps reading appended lines, across rotation, until ctx ends.
	Follow bool
	// Poll is the follow interval (DefaultTailPoll when zero).
	Poll time.Duration
}

// Tail emits whole lines of the live audit file at path to fn (without the
// newline; fn must not keep the slice). With Follow it polls for appended
// lines; when the writer rotates the file (path now names a different file), it
// finishes the old file and continues at the start of the next file of the
// chain (a rotated sibling if the writer rotated again meanwhile, else path). A partial
// line is held back until its newline arrives.
func Tail(ctx context.Context, path string, opts TailOptions, fn func(line []byte) error) error {
	if opts.Poll <= 0 {
		opts.Poll = DefaultTailPoll
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer func() { f.Close() }()
	// Emit the last opts.Lines whole lines.
	var ring [][]byte
	var pending []byte
	off := int64(0)
	lr := newLineReader(f)
	for {
		line, complete, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("audit: %s: %w", path, err)
		}
		if !complete {
			pending = append(pending[:0], line...)
			break
		}
		off += int64(len(line) + 1)
		if opts.Lines < 0 {
			if err := fn(line); err != nil {
				return err
			}
			continue
		}
		if opts.Lines == 0 {
			continue
		}
		if len(ring) == opts.Lines {
			ring = append(ring[:0], ring[1:]...)
		}
		ring = append(ring, append([]byte(nil), line...))
	}
	for _, l := range ring {
		if err := fn(l); err != nil {
			return err
		}
	}
	if !opts.Follow {
		return nil
	}
	off += int64(len(pending))
	t := time.NewTicker(opts.Poll)
	defer t.Stop()
	buf := make([]byte, 64<<10)
	for {
		// Drain whatever the current file has beyond off.
		for {
			n, err := f.ReadAt(buf, off)
			if n > 0 {
				off += int64(n)
				if pending, err = emitLines(append(pending, buf[:n]...), fn); err != nil {
					return err
				}
			}
			if err != nil || n < len(buf) {
				if err != nil && !errors.Is(err, io.EOF) {
					return fmt.Errorf("audit: %s: %w", path, err)
				}
				break
			}
		}
		// Rotated? Then the old file is complete: move to the new one.
		cur, err := f.Stat()
		if err != nil {
			return fmt.Errorf("audit: %w", err)
		}
		if st, err := os.Stat(path); err == nil && !os.SameFile(cur, st) {
			nf, err := os.Open(nextInChain(path, cur))
			if err == nil {
				// One last read of the old file before switching.
				for {
					n, rerr := f.ReadAt(buf, off)
					if n > 0 {
						off += int64(n)
						if pending, err = emitLines(append(pending, buf[:n]...), fn); err != nil {
							nf.Close()
							return err
						}
					}
					if rerr != nil || n < len(buf) {
						break
					}
				}
				f.Close()
				f, off, pending = nf, 0, pending[:0]
				continue
			}
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("audit: %w", err)
		}
		if cur.Size() < off {
			// Truncated in place (torn-tail recovery): resume at the new end.
			off, pending = cur.Size(), pending[:0]
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// nextInChain names the file that follows cur in path's chain: the next
// rotated sibling when the writer rotated more than once between polls, else
// the live file.
func nextInChain(path string, cur os.FileInfo) string {
	files, err := ChainFiles(path)
	if err != nil {
		return path
	}
	for i, f := range files {
		if st, err := os.Stat(f); err == nil && os.SameFile(st, cur) && i+1 < len(files) {
			return files[i+1]
		}
	}
	return path
}

// emitLines passes every whole line in b to fn and returns the partial rest.
func emitLines(b []byte, fn func([]byte) error) ([]byte, error) {
	start := 0
	for i, c := range b {
		if c == '\n' {
			if err := fn(b[start:i]); err != nil {
				return nil, err
			}
			start = i + 1
		}
	}
	rest := copy(b, b[start:])
	return b[:rest], nil
}
