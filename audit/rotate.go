package audit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/airlock-dev/airlock/oplog"
)

// Extra keys of a retention record.
const (
	RetentionDeletedFiles = "deleted_files"      // base names, oldest first
	RetentionDeletedBytes = "deleted_bytes"      // their total size
	RetentionPrunedSeq    = "pruned_through_seq" // seq of the last line deleted
	RetentionPrunedHead   = "pruned_head"        // SHA-256 of that line: the prev of the first line kept
)

// rotate checkpoints and closes the live file, renames it to the next
// <file>.<n>, opens a fresh live file (the chain carries on) and applies
// retention. A step that fails marks the writer failed; recover finds the
// live file again, whichever step it was.
func (w *Writer) rotate() {
	if w.key != nil {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	if w.outage != nil {
		return
	}
	err := w.f.Close()
	w.f = nil
	if err != nil {
		w.fail(fmt.Errorf("close before rotation: %w", err))
		return
	}
	n, err := nextRotationIndex(w.cfg.File)
	if err != nil {
		w.fail(err)
		return
	}
	rotated := w.cfg.File + "." + strconv.FormatUint(n, 10)
	if err := os.Rename(w.cfg.File, rotated); err != nil {
		w.fail(fmt.Errorf("rotate: %w", err))
		return
	}
	f, err := os.OpenFile(w.cfg.File, os.O_RDWR|os.O_CREATE|os.O_EXCL|os.O_APPEND, DefaultFileMode)
	if err != nil {
		w.fail(fmt.Errorf("rotate: open new file: %w", err))
		return
	}
	if err := lockLive(f, w.cfg.File); err != nil {
		f.Close()
		w.fail(fmt.Errorf("rotate: %w", err))
		return
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		w.fail(fmt.Errorf("rotate: %w", err))
		return
	}
	w.f, w.fileInfo, w.size, w.onDisk = f, st, 0, 0
	if err := syncDir(w.cfg.File); err != nil {
		w.fail(fmt.Errorf("rotate: sync directory: %w", err))
		return
	}
	w.rotations.Add(1)
	w.log.Info("audit file rotated", "rotated_to", rotated, "seq", w.seq)
	w.prune()
}

// prune deletes the oldest rotated files beyond MaxFiles and MaxBytes. The
// newest rotated file is always kept: it ends with the signed checkpoint the
// live file continues from, so what is kept always holds a signed checkpoint
// newer than everything deleted. Before deleting, the writer appends (and
// syncs) a retention record naming the files and the seq and hash of the
// last line they hold, then a checkpoint over it; a crash between the two
// leaves files the record calls deleted, which Verify accepts.
func (w *Writer) prune() {
	if w.cfg.MaxFiles == 0 && w.cfg.MaxBytes == 0 {
		return
	}
	del, bytes, err := w.pruneCandidates()
	if err != nil {
		w.log.Warn("audit retention: cannot list rotated files; nothing deleted", oplog.ErrorKey, err)
		return
	}
	if len(del) == 0 {
		return
	}
	last, _, err := lastWholeLine(del[len(del)-1])
	var head struct {
		Seq uint64 `json:"seq"`
	}
	if err == nil && (last == nil || json.Unmarshal(last, &head) != nil || head.Seq == 0) {
		err = fmt.Errorf("%s does not end with a valid record", del[len(del)-1])
	}
	if err != nil {
		w.log.Warn("audit retention: nothing deleted", oplog.ErrorKey, err)
		return
	}
	sum := sha256.Sum256(last)
	names := make([]string, len(del))
	for i, p := range del {
		names[i] = filepath.Base(p)
	}
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put(RetentionDeletedFiles, names)
	put(RetentionDeletedBytes, bytes)
	put(RetentionPrunedSeq, head.Seq)
	put(RetentionPrunedHead, hex.EncodeToString(sum[:]))
	w.appendOwn(&Record{Kind: KindRetention, Extra: extra})
	if w.key != nil {
		w.appendCheckpoint()
	}
	w.flush()
	w.syncFile()
	if w.outage != nil {
		return // not recorded on disk: delete nothing
	}
	for _, p := range del {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			w.log.Warn("audit retention: delete failed", oplog.FileKey, p, oplog.ErrorKey, err)
			continue
		}
		w.pruned.Add(1)
	}
	if err := syncDir(w.cfg.File); err != nil {
		w.log.Warn("audit retention: sync directory", oplog.ErrorKey, err)
	}
	w.log.Info("audit retention deleted rotated files", "files", names, "bytes", bytes, "pruned_through_seq", head.Seq)
}

// pruneCandidates returns the oldest rotated files that retention deletes
// (oldest first) and their total size.
func (w *Writer) pruneCandidates() ([]string, int64, error) {
	files, err := RotatedFiles(w.cfg.File)
	if err != nil || len(files) < 2 {
		return nil, 0, err
	}
	sizes := make([]int64, len(files))
	for i, p := range files {
		st, err := os.Stat(p)
		if err != nil {
			return nil, 0, fmt.Errorf("audit: %w", err)
		}
		sizes[i] = st.Size()
	}
	// Keep the newest, then older ones while both bounds allow.
	kept, keptBytes := 1, sizes[len(files)-1]
	cut := 0
	for i := len(files) - 2; i >= 0; i-- {
		if w.cfg.MaxFiles > 0 && kept+1 > w.cfg.MaxFiles || w.cfg.MaxBytes > 0 && keptBytes+sizes[i] > int64(w.cfg.MaxBytes) {
			cut = i + 1
			break
		}
		kept++
		keptBytes += sizes[i]
	}
	var total int64
	for _, s := range sizes[:cut] {
		total += s
	}
	return files[:cut], total, nil
}
