package audit

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/test/roottest"
)

// waitHealthy waits (bounded) until w accepts records again.
func waitHealthy(t *testing.T, w *Writer) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for w.Err() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("writer still failing 20s after writing works again: %v", w.Err())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// outageRecords returns the outage records of a verified chain.
func outageRecords(t *testing.T, files ...string) []Record {
	t.Helper()
	var out []Record
	for _, p := range files {
		for _, l := range readLines(t, p) {
			if r := decodeLine(t, l); r.Kind == KindOutage {
				out = append(out, r)
			}
		}
	}
	return out
}

func extraInt(t *testing.T, r Record, k string) int {
	t.Helper()
	var n int
	if err := json.Unmarshal(r.Extra[k], &n); err != nil {
		t.Fatalf("%s: %v in %+v", k, err, r)
	}
	return n
}

// Regression: a failed write was permanent, after which every request of
// every sandbox was refused until airlock restarted. The writer now retries;
// once writing works it cuts the partial write, writes what it had accepted,
// appends an outage record and accepts records again, and the chain verifies
// across the outage with nothing accepted lost.
func TestWriterRecoversAfterWriteFailure(t *testing.T) {
	for _, partial := range []bool{false, true} {
		t.Run(fmt.Sprintf("partial=%v", partial), func(t *testing.T) {
			cfg := testConfig(t)
			cfg.RetryMin, cfg.RetryMax = time.Millisecond, 20*time.Millisecond
			var full atomic.Bool
			write := func(f *os.File, b []byte) (int, error) {
				if !full.Load() {
					return f.Write(b)
				}
				if partial && len(b) > 1 {
					n, _ := f.Write(b[:len(b)/2]) // a torn line is left behind
					return n, syscall.ENOSPC
				}
				return 0, syscall.ENOSPC
			}
			w, err := newWriter(cfg, nil, writerHooks{write: write})
			if err != nil {
				t.Fatal(err)
			}
			logN := func(n, from int) (accepted, refused int) {
				for i := range n {
					if w.Log(sampleRecord(from+i)) == nil {
						accepted++
					} else {
						refused++
					}
				}
				return
			}
			before, _ := logN(10, 0)
			if err := w.Sync(); err != nil {
				t.Fatal(err)
			}
			full.Store(true)
			// Accepted until the writer has tried one of them and failed; the
			// rest, if it is that quick, are refused and counted as refused.
			during, duringRefused := logN(5, 100)
			if err := w.Sync(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Sync with the disk full: got %v, want ErrFailed", err)
			}
			if err := w.Err(); !errors.Is(err, ErrFailed) {
				t.Fatalf("Err with the disk full: got %v, want ErrFailed", err)
			}
			_, refused := logN(3, 200)
			if refused != 3 {
				t.Fatalf("got %d of 3 records refused while failed, want 3", refused)
			}
			full.Store(false)
			waitHealthy(t, w)
			after, _ := logN(4, 300)
			if err := w.Close(); err != nil {
				t.Fatalf("Close after recovery: %v", err)
			}
			rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, cfg.File)
			if err != nil {
				t.Fatalf("verify across the outage: %v", err)
			}
			if want := before + during + after + 1; rep.Records != want {
				t.Fatalf("got %d records, want %d (10 before, %d accepted during, %d after, 1 outage)", rep.Records, want, during, after)
			}
			o := outageRecords(t, cfg.File)
			if len(o) != 1 || extraInt(t, o[0], "refused") != duringRefused+3 || o[0].Error == "" || o[0].Reasons[0].ID != ReasonAuditUnavailable {
				t.Fatalf("outage records: got %+v, want one naming %d refused and the error", o, duringRefused+3)
			}
			if st := w.Stats(); st.Recoveries != 1 {
				t.Fatalf("stats: got %+v, want 1 recovery", st)
			}
		})
	}
}

// The writer must not continue a chain someone changed while it was failing.
func TestWriterStaysFailedWhenFileChanged(t *testing.T) {
	cfg := testConfig(t)
	cfg.RetryMin, cfg.RetryMax = time.Millisecond, 5*time.Millisecond
	var full atomic.Bool
	w, err := newWriter(cfg, nil, writerHooks{write: func(f *os.File, b []byte) (int, error) {
		if full.Load() {
			return 0, syscall.ENOSPC
		}
		return f.Write(b)
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := range 5 {
		_ = w.Log(sampleRecord(i))
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	full.Store(true)
	_ = w.Log(sampleRecord(9))
	_ = w.Sync()
	// Cut the last line on disk, then let writes work.
	lines := readLines(t, cfg.File)
	if err := os.WriteFile(cfg.File, join(lines[:len(lines)-1]), 0o600); err != nil {
		t.Fatal(err)
	}
	full.Store(false)
	time.Sleep(100 * time.Millisecond) // many retries at 5 ms
	if err := w.Err(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Err after the file lost a line: got %v, want still failed", err)
	}
}

// TestRootWriterRecoversOnFullFilesystem fills a real tmpfs, then enlarges
// it: the writer fails closed while full, writes again once there is room,
// and the chain verifies across the outage with nothing accepted lost.
func TestRootWriterRecoversOnFullFilesystem(t *testing.T) {
	roottest.Require(t)
	dir := mountTmpfs(t, "size=64k")
	cfg := Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(t.TempDir(), "audit.key"),
		RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond, SyncInterval: 10 * time.Millisecond}
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	accepted := 0
	for i := 0; i < 100000 && w.Err() == nil; i++ {
		if w.Log(sampleRecord(i)) == nil {
			accepted++
		}
		if i%50 == 0 {
			_ = w.Sync()
		}
	}
	if err := w.Err(); !errors.Is(err, ErrFailed) || !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Err on a full filesystem: got %v, want ErrFailed wrapping ENOSPC", err)
	}
	if err := w.Log(sampleRecord(0)); !errors.Is(err, ErrFailed) {
		t.Fatalf("Log on a full filesystem: got %v, want ErrFailed", err)
	}
	if out, err := exec.Command("mount", "-o", "remount,size=4m", dir).CombinedOutput(); err != nil {
		t.Fatalf("enlarge tmpfs: %v: %s", err, out)
	}
	waitHealthy(t, w)
	for i := range 10 {
		if err := w.Log(sampleRecord(i)); err != nil {
			t.Fatalf("Log after recovery: %v", err)
		}
		accepted++
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, cfg.File)
	if err != nil {
		t.Fatalf("verify across the outage: %v", err)
	}
	o := outageRecords(t, cfg.File)
	if len(o) != 1 || extraInt(t, o[0], "refused") < 1 {
		t.Fatalf("outage records: got %+v, want one naming the refused record", o)
	}
	if rep.Records != accepted+1 {
		t.Fatalf("got %d records, want %d accepted + 1 outage: an accepted record was lost", rep.Records, accepted)
	}
}

// TestRootWriterRecoversFromFailedRotation: with no inode left, rotation
// renames the live file but cannot create the next one; once inodes are
// free the writer creates it and continues the chain from the rotated file.
func TestRootWriterRecoversFromFailedRotation(t *testing.T) {
	roottest.Require(t)
	dir := mountTmpfs(t, "size=4m,nr_inodes=3") // the root dir, the live file, one rotated file
	cfg := Config{File: filepath.Join(dir, "audit.jsonl"), SigningKeyFile: filepath.Join(t.TempDir(), "audit.key"),
		MaxSize: 4096, RetryMin: time.Millisecond, RetryMax: 20 * time.Millisecond}
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	accepted := 0
	for i := 0; i < 10000 && w.Err() == nil; i++ {
		if w.Log(sampleRecord(i)) == nil {
			accepted++
		}
		_ = w.Sync()
	}
	if err := w.Err(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Err with no inode for the next file: got %v, want ErrFailed", err)
	}
	if _, err := os.Stat(cfg.File); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("live file after the failed rotation: %v, want it renamed away", err)
	}
	if out, err := exec.Command("mount", "-o", "remount,nr_inodes=100", dir).CombinedOutput(); err != nil {
		t.Fatalf("enlarge tmpfs: %v: %s", err, out)
	}
	waitHealthy(t, w)
	for i := range 40 {
		if w.Log(sampleRecord(i)) == nil {
			accepted++
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := ChainFiles(cfg.File)
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, files...)
	if err != nil {
		t.Fatalf("verify across the failed rotation: %v", err)
	}
	if rep.Records != accepted+len(outageRecords(t, files...)) {
		t.Fatalf("got %d records, want %d accepted + the outage record", rep.Records, accepted)
	}
}

// mountTmpfs mounts a tmpfs with opts on a fresh directory, unmounted at
// cleanup.
func mountTmpfs(t *testing.T, opts string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "alk-audit-tmpfs")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", opts, "alk-audit-test", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}
