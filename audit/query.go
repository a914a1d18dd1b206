package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Filter selects records in Query. Zero fields match everything.
type Filter struct {
	Sandbox string
	// Owner matches Record.Owner, the decimal uid of the sandbox's owner.
	Owner string
	// Node matches Record.Node, the machine whose writer wrote it.
	Node     string
	Kind     string // checkpoints are skipped unless Kind is "checkpoint"
	Decision string
	// Host matches Record.Host (or, when that is empty, QName without its
	// trailing dot) exactly; a leading "." or "*." matches the name and every
	// name under it: ".pypi.org" matches pypi.org and files.pypi.org.
	Host  string
	Since time.Time // TS at or after
	Until time.Time // TS before
}

// Match reports whether r passes f.
func (f *Filter) Match(r *Record) bool {
	if r.Kind == KindCheckpoint && f.Kind != KindCheckpoint {
		return false
	}
	if f.Sandbox != "" && r.Sandbox != f.Sandbox ||
		f.Owner != "" && r.Owner != f.Owner ||
		f.Node != "" && r.Node != f.Node ||
		f.Kind != "" && r.Kind != f.Kind ||
		f.Decision != "" && r.Decision != f.Decision ||
		!f.Since.IsZero() && r.TS.Before(f.Since) ||
		!f.Until.IsZero() && !r.TS.Before(f.Until) {
		return false
	}
	if f.Host == "" {
		return true
	}
	host := r.Host
	if host == "" {
		host = strings.TrimSuffix(r.QName, ".")
	}
	host = strings.ToLower(host)
	want := strings.ToLower(strings.TrimSuffix(f.Host, "."))
	if suffix, ok := strings.CutPrefix(want, "*."); ok {
		return host == suffix || strings.HasSuffix(host, "."+suffix)
	}
	if suffix, ok := strings.CutPrefix(want, "."); ok {
		return host == suffix || strings.HasSuffix(host, "."+suffix)
	}
	return host == want
}

// Query streams the records of files, in order, that pass f to fn, one at a
// time; fn must not keep r. A line that is not valid JSON is an error naming
// it; a torn last line is skipped (the writer cuts it at its next start).
// Returning a non-nil error from fn stops the scan and is returned.
func Query(ctx context.Context, files []string, f Filter, fn func(r *Record) error) error {
	for _, path := range files {
		if err := queryFile(ctx, path, &f, fn); err != nil {
			return err
		}
	}
	return nil
}

func queryFile(ctx context.Context, path string, f *Filter, fn func(r *Record) error) error {
	fh, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	defer fh.Close()
	return QueryReader(ctx, path, fh, *f, fn)
}

// QueryReader is Query over one reader; name is used in errors.
func QueryReader(ctx context.Context, name string, rd io.Reader, f Filter, fn func(r *Record) error) error {
	lr := newLineReader(rd)
	for n := 1; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		line, complete, err := lr.next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("audit: %s:%d: %w", name, n, err)
		}
		if !complete {
			return nil
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return fmt.Errorf("audit: %s:%d: %s: %w", name, n, ReasonBadJSON, err)
		}
		if !f.Match(&r) {
			continue
		}
		if err := fn(&r); err != nil {
			return err
		}
	}
}
