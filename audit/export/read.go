package export

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Position is where shipping stands: the last seq shipped (0: none) and the
// hash of its line ("" when unknown, after a gap).
type Position struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash,omitempty"`
}

// ReadOptions say which files Read reads.
type ReadOptions struct {
	// Live is the live audit file: its chain (rotated siblings oldest first,
	// then Live) is read and, with Follow, followed across rotations.
	Live string
	// Files, when Live is empty, are read in order as one chain.
	Files []string
	// Follow keeps reading Live's appended lines until ctx ends.
	Follow bool
	// Poll is the follow interval (audit.DefaultTailPoll when zero).
	Poll time.Duration
}

// maxResync bounds how often Read lists the files again before it calls a
// hole in the middle of the chain a gap (a rotation racing the listing heals
// on the next listing; a deleted middle file does not).
const maxResync = 5

// errResync means a line arrived past the next seq expected: list the files
// again.
var errResync = errors.New("export: seq ahead of the files read")

// Read passes every record after `after` to fn, in seq order, each once, as
// an Event; records that no file holds any more (retention deleted them) are
// passed as one Gap event first. With Follow it returns when ctx ends; fn's
// error stops it.
func Read(ctx context.Context, opts ReadOptions, after Position, log *slog.Logger, fn func(Event) error) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Poll <= 0 {
		opts.Poll = audit.DefaultTailPoll
	}
	r := &reader{opts: opts, after: after, log: log, fn: fn}
	if opts.Live == "" {
		return r.catchUp(opts.Files, true)
	}
	for resyncs := 0; ctx.Err() == nil; {
		files, err := audit.ChainFiles(opts.Live)
		if err != nil {
			return err
		}
		err = r.catchUp(files, resyncs >= maxResync)
		if err == nil && opts.Follow {
			err = audit.Tail(ctx, opts.Live, audit.TailOptions{Lines: -1, Follow: true, Poll: opts.Poll}, r.line)
		}
		switch {
		case err == nil:
			if !opts.Follow {
				return nil
			}
			resyncs = 0
		case errors.Is(err, errResync), errors.Is(err, fs.ErrNotExist):
			// A rotation between listing and reading: list again.
			resyncs++
		default:
			return err
		}
		select {
		case <-ctx.Done():
		case <-time.After(opts.Poll):
		}
	}
	return nil
}

type reader struct {
	opts  ReadOptions
	after Position
	log   *slog.Logger
	fn    func(Event) error
	// gapOK lets emit turn a seq ahead into a gap (the file listing is final).
	gapOK bool
}

// catchUp reads files in order from r.after. A chain that starts past the
// next seq expected is a gap (retention deleted the front); a hole further on
// is a gap only when final, else errResync.
func (r *reader) catchUp(files []string, final bool) error {
	for i, p := range files {
		if i+1 < len(files) {
			// Skip a file wholly shipped: the next one starts at or before
			// the next seq to ship.
			if first, ok, err := firstSeq(files[i+1]); err != nil {
				return err
			} else if ok && first <= r.after.Seq+1 {
				continue
			}
		}
		r.gapOK = i == 0 || final
		if err := r.readFile(p); err != nil {
			return err
		}
	}
	r.gapOK = false
	return nil
}

// readFile emits p's whole lines (a last line without its newline is still
// being written and is left for the next read).
func (r *reader) readFile(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 64<<10)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			rest, rerr := br.ReadBytes('\n')
			line, err = append(append([]byte(nil), line...), rest...), rerr
			if len(line) > audit.MaxLineSize {
				return fmt.Errorf("export: %s: line longer than %d bytes", p, audit.MaxLineSize)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("export: %s: %w", p, err)
		}
		if err := r.line(line[:len(line)-1]); err != nil {
			if !errors.Is(err, errResync) {
				err = fmt.Errorf("export: %s: %w", p, err)
			}
			return err
		}
		r.gapOK = false // a hole after the first line read is in the middle
	}
}

// line emits one line if it is the next seq.
func (r *reader) line(line []byte) error {
	if seq, ok := quickSeq(line); ok && seq <= r.after.Seq {
		return nil // shipped already: not decoded again
	}
	e, err := newEvent(line)
	if err != nil {
		return err
	}
	seq := e.Record.Seq
	if seq <= r.after.Seq {
		return nil
	}
	if seq > r.after.Seq+1 {
		if !r.gapOK {
			return errResync
		}
		g := &Gap{From: r.after.Seq + 1, Through: seq - 1, Reason: "no file of the chain holds these records (retention deleted them, or a file was removed, before they were shipped)"}
		r.log.Warn("audit export: records gone before they were shipped", "from_seq", g.From, "through_seq", g.Through)
		if err := r.fn(Event{Gap: g}); err != nil {
			return err
		}
		r.after = Position{Seq: g.Through}
	}
	if r.after.Hash != "" && e.Record.Prev != r.after.Hash {
		r.log.Warn("audit export: record does not chain to the last one shipped (the log was replaced or altered); shipping on", "seq", seq)
	}
	if err := r.fn(e); err != nil {
		return err
	}
	r.after = Position{Seq: seq, Hash: e.Hash}
	return nil
}

// firstSeq reads p's first line's seq; ok is false for an empty file.
func firstSeq(p string) (uint64, bool, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, false, fmt.Errorf("export: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReaderSize(f, 64<<10).ReadBytes('\n')
	if errors.Is(err, io.EOF) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("export: %s: %w", p, err)
	}
	e, err := newEvent(line[:len(line)-1])
	if err != nil {
		return 0, false, fmt.Errorf("export: %s: %w", p, err)
	}
	return e.Record.Seq, true, nil
}

// quickSeq reads the seq of a line the writer wrote (it begins {"seq":N,)
// without decoding the rest; ok is false for any other shape.
func quickSeq(line []byte) (uint64, bool) {
	const prefix = `{"seq":`
	if len(line) < len(prefix)+2 || string(line[:len(prefix)]) != prefix {
		return 0, false
	}
	var n uint64
	i := len(prefix)
	for ; i < len(line) && line[i] >= '0' && line[i] <= '9' && i < len(prefix)+20; i++ {
		n = n*10 + uint64(line[i]-'0')
	}
	if i == len(prefix) || i >= len(line) || line[i] != ',' {
		return 0, false
	}
	return n, true
}
