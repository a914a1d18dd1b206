package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
)

// ReasonCrashRecovered is the reason id of a crash_recovered record.
const ReasonCrashRecovered = "crash_recovered"

// Extra keys of a crash_recovered record.
const (
	CrashUnsignedRecords = "unsigned_records"     // records after the last checkpoint (0: none)
	CrashUnsignedFrom    = "unsigned_from_seq"    // the first of them
	CrashUnsignedThrough = "unsigned_through_seq" // the last of them: the dead writer's last line
	CrashUnsignedFile    = "unsigned_file"        // the file they are in
	CrashTornBytes       = "torn_bytes"           // bytes of a line the crash cut short
	CrashTornSavedTo     = "torn_saved_to"        // where they were copied before being cut off
)

// crashSigns is what open found that shows the previous writer did not close
// the log: a torn last line, or (with a signing key) whole lines after the
// last checkpoint. Close and rotation end every file with a checkpoint.
type crashSigns struct {
	tornBytes int
	tornSaved string
	// tailFile is the file whose last whole line the chain continues from,
	// tailEnd the offset just past that line, and tailKind its kind.
	tailFile string
	tailEnd  int64
	tailKind string
}

// recoverCrash runs in New, before the writer goroutine starts. When the
// previous writer died (a torn line, or with a key a tail not ended by a
// checkpoint), it appends a crash_recovered record saying what was found and,
// with a key, a checkpoint covering it and every record the dead writer left
// unsigned, and writes both out. So `verify --complete` passes after the next
// clean stop even if nothing else is logged, and a verifier's MaxUnsigned is
// not tripped by the dead writer's tail. A write failure here is an ordinary
// writer failure: Log refuses and the writer retries (see recover).
func (w *Writer) recoverCrash(c *crashSigns) error {
	unsigned := w.key != nil && c.tailKind != "" && c.tailKind != KindCheckpoint
	if c.tornBytes == 0 && !unsigned {
		return nil
	}
	rec := &Record{Kind: KindCrashRecovered, Extra: map[string]json.RawMessage{}}
	put := func(k string, v any) { rec.Extra[k], _ = json.Marshal(v) }
	var count int
	if unsigned {
		n, err := linesAfterCheckpoint(c.tailFile, c.tailEnd)
		if err != nil {
			return fmt.Errorf("audit: crash recovery: %w", err)
		}
		count = n
		put(CrashUnsignedRecords, count)
		put(CrashUnsignedFrom, w.seq-uint64(count)+1)
		put(CrashUnsignedThrough, w.seq)
		put(CrashUnsignedFile, c.tailFile)
	}
	msg := "the previous writer stopped without closing the log"
	if count > 0 {
		msg += fmt.Sprintf("; %d records (seq %d..%d) were not covered by a signed checkpoint: the checkpoint after this record covers them", count, w.seq-uint64(count)+1, w.seq)
	}
	if c.tornBytes > 0 {
		put(CrashTornBytes, c.tornBytes)
		put(CrashTornSavedTo, c.tornSaved)
		msg += fmt.Sprintf("; a line it was writing was cut short (%d bytes, saved to %s)", c.tornBytes, c.tornSaved)
	}
	rec.Reasons = []Reason{{ID: ReasonCrashRecovered, Msg: msg}}
	w.appendOwn(rec)
	if w.key != nil {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	w.log.Warn("audit log was not closed by its last writer (crash); recorded and signed",
		"unsigned_records", count, "torn_bytes", c.tornBytes, "seq", w.seq)
	return nil
}

// linesAfterCheckpoint counts the whole lines of path's first end bytes that
// come after its last checkpoint line (all of them when it has none), reading
// backwards so only the unsigned tail is decoded. A line that does not decode
// counts as a record: only a line whose kind is checkpoint stops the count.
func linesAfterCheckpoint(path string, end int64) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	const chunk = 64 << 10
	var (
		buf   []byte // f[pos:lineEnd]: the lines not yet looked at
		pos   = end
		count int
		head  struct {
			Kind string `json:"kind"`
		}
	)
	if end > 0 {
		pos = end - 1 // the last line's newline
	}
	for {
		i := bytes.LastIndexByte(buf, '\n')
		if i < 0 && pos > 0 {
			start := max(0, pos-chunk)
			b := make([]byte, pos-start, pos-start+int64(len(buf)))
			if _, err := f.ReadAt(b, start); err != nil && !errors.Is(err, io.EOF) {
				return 0, err
			}
			buf, pos = append(b, buf...), start
			if len(buf) > MaxLineSize+chunk && bytes.IndexByte(buf, '\n') < 0 {
				return 0, fmt.Errorf("%s: a line longer than %d bytes", path, MaxLineSize)
			}
			continue
		}
		line := buf[i+1:]
		if len(line) > 0 {
			head.Kind = ""
			if json.Unmarshal(line, &head) == nil && head.Kind == KindCheckpoint {
				return count, nil
			}
			count++
		}
		if i < 0 {
			return count, nil // reached the start of the file
		}
		buf = buf[:i]
	}
}
