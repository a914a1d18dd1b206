package audit

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testConfig is a writer config in a fresh temp dir with a signing key.
func testConfig(t *testing.T) Config {
	t.Helper()
	dir := t.TempDir()
	return Config{
		File:           filepath.Join(dir, "audit.jsonl"),
		SigningKeyFile: filepath.Join(dir, "audit.key"),
	}
}

func sampleRecord(i int) *Record {
	return &Record{
		Sandbox:  fmt.Sprintf("sb-%d", i%3),
		Kind:     []string{KindHTTP, KindConnect, KindDNS}[i%3],
		Decision: []string{DecisionAllow, DecisionDeny}[i%2],
		Host:     []string{"pypi.org", "files.pythonhosted.org", "evil.example"}[i%3],
		Port:     443,
		Method:   "GET",
		Path:     "/simple/requests/",
	}
}

// writeRecords logs n sample records through a new writer and closes it.
func writeRecords(t *testing.T, cfg Config, n int) (*Writer, ed25519.PublicKey) {
	t.Helper()
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	for i := range n {
		if err := w.Log(sampleRecord(i)); err != nil {
			t.Fatalf("Log %d: %v", i, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return w, w.PublicKey()
}

func readLines(t *testing.T, path string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := bytes.SplitAfter(b, []byte("\n"))
	if len(lines[len(lines)-1]) == 0 {
		lines = lines[:len(lines)-1]
	}
	return lines
}

func decodeLine(t *testing.T, line []byte) Record {
	t.Helper()
	var r Record
	if err := json.Unmarshal(line, &r); err != nil {
		t.Fatalf("decode %q: %v", line, err)
	}
	return r
}

func TestWriterChainAndCheckpoints(t *testing.T) {
	cfg := testConfig(t)
	cfg.CheckpointEvery = 10
	w, pub := writeRecords(t, cfg, 25)
	st := w.Stats()
	// 25 records, checkpoints after 10 and 20, and one at Close for the last 5.
	if st.Written != 28 || st.Checkpoints != 3 || st.Dropped != 0 {
		t.Fatalf("stats: got %+v, want 28 written, 3 checkpoints, 0 dropped", st)
	}
	lines := readLines(t, cfg.File)
	if len(lines) != 28 {
		t.Fatalf("got %d lines, want 28", len(lines))
	}
	first := decodeLine(t, lines[0])
	if first.Seq != 1 || first.Prev != GenesisPrev || first.ID == "" || first.TS.Location() != time.UTC {
		t.Fatalf("first record: got seq %d prev %q id %q loc %v", first.Seq, first.Prev, first.ID, first.TS.Location())
	}
	last := decodeLine(t, lines[27])
	if last.Kind != KindCheckpoint || last.Checkpoint.Seq != 27 {
		t.Fatalf("last line: got kind %q checkpoint %+v, want the Close checkpoint over seq 27", last.Kind, last.Checkpoint)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: pub}, cfg.File)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Records != 25 || rep.Checkpoints != 3 || rep.LastSeq != 28 || rep.SignedThrough != 27 || rep.Unsigned != 0 {
		t.Fatalf("report: got %+v", rep)
	}
	// The public key was written beside the signing key.
	pb, err := os.ReadFile(cfg.SigningKeyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ParsePublicKey(pb); err != nil || !got.Equal(pub) {
		t.Fatalf("public key file: got %x, %v; want %x", got, err, pub)
	}
	if st, _ := os.Stat(cfg.SigningKeyFile); st.Mode().Perm() != 0o600 {
		t.Fatalf("key mode: got %v, want 0600", st.Mode().Perm())
	}
	if st, _ := os.Stat(cfg.File); st.Mode().Perm() != 0o600 {
		t.Fatalf("audit file mode: got %v, want 0600", st.Mode().Perm())
	}
}

func TestWriterKeepsCallerIDAndTS(t *testing.T) {
	cfg := testConfig(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Date(2025, 3, 1, 12, 0, 0, 123, time.FixedZone("x", 3600))
	r := &Record{ID: "req-1", TS: ts, Kind: KindHTTP}
	if err := w.Log(r); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got := decodeLine(t, readLines(t, cfg.File)[0])
	if got.ID != "req-1" || !got.TS.Equal(ts) || got.TS.Location() != time.UTC {
		t.Fatalf("got id %q ts %v, want req-1 and %v in UTC", got.ID, got.TS, ts.UTC())
	}
	if r.Seq != 0 || r.Prev != "" {
		t.Fatalf("writer modified the caller's record: %+v", r)
	}
}

func TestWriterRefusesCheckpointKind(t *testing.T) {
	w, err := New(testConfig(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Log(&Record{Kind: KindCheckpoint}); err == nil {
		t.Fatal("got nil, want an error for a caller-made checkpoint")
	}
	if got := w.Stats().Dropped; got != 1 {
		t.Fatalf("dropped: got %d, want 1", got)
	}
}

func TestWriterOverflowDeny(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueSize = 2
	cfg.Overflow = OverflowDeny
	gate := make(chan struct{})
	w, err := newWriter(cfg, nil, writerHooks{gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	// The writer takes one item and waits at the gate; two more fill the queue.
	accepted := 0
	var refused error
	for i := range 10 {
		if err := w.Log(sampleRecord(i)); err != nil {
			refused = err
			break
		}
		accepted++
	}
	if !errors.Is(refused, ErrOverflow) {
		t.Fatalf("got %v, want ErrOverflow", refused)
	}
	if accepted < 2 || accepted > 3 {
		t.Fatalf("accepted %d before overflow, want 2 or 3", accepted)
	}
	st := w.Stats()
	if st.Overflow != 1 || st.Dropped != 1 {
		t.Fatalf("stats: got %+v, want overflow 1, dropped 1", st)
	}
	close(gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Every accepted record is in the file; the refused one is not.
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != accepted {
		t.Fatalf("records in file: got %d, want %d", rep.Records, accepted)
	}
}

func TestWriterOverflowBlock(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueSize = 1
	gate := make(chan struct{})
	w, err := newWriter(cfg, nil, writerHooks{gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	done := make(chan error, 1)
	go func() {
		for i := range n {
			if err := w.Log(sampleRecord(i)); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	// Release the writer one item at a time until the producer finishes; the
	// producer must have blocked (counted as overflow), never failed.
	for finished := false; !finished; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Log under block overflow: %v", err)
			}
			finished = true
		case gate <- struct{}{}:
		}
	}
	close(gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if st.Overflow == 0 || st.Dropped != 0 {
		t.Fatalf("stats: got %+v, want overflow > 0 and nothing dropped", st)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil || rep.Records != n {
		t.Fatalf("verify: got %d records, %v; want %d records", rep.Records, err, n)
	}
}

func TestWriterCloseDrainsAndRefusesAfter(t *testing.T) {
	cfg := testConfig(t)
	cfg.QueueSize = 1000
	gate := make(chan struct{})
	w, err := newWriter(cfg, nil, writerHooks{gate: gate})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 500 {
		if err := w.Log(sampleRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	close(gate)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Log(sampleRecord(0)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Log after Close: got %v, want ErrClosed", err)
	}
	if err := w.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil || rep.Records != 500 {
		t.Fatalf("verify: got %d records, %v; want 500", rep.Records, err)
	}
}

func TestWriterConcurrentLog(t *testing.T) {
	cfg := testConfig(t)
	cfg.CheckpointEvery = 50
	cfg.QueueSize = 16
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := w.Log(sampleRecord(g*1000 + i)); err != nil {
					t.Errorf("Log: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil || rep.Records != 1600 {
		t.Fatalf("verify: got %+v, %v; want 1600 records", rep, err)
	}
}

func TestWriterSyncAndInterval(t *testing.T) {
	cfg := testConfig(t)
	cfg.SyncInterval = 10 * time.Millisecond
	cfg.CheckpointInterval = 10 * time.Millisecond
	cfg.CheckpointEvery = 1 << 20
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Log(sampleRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := len(readLines(t, cfg.File)); got < 1 {
		t.Fatalf("after Sync: got %d lines, want at least 1", got)
	}
	// A quiet log still gets a time-based checkpoint (polled, bounded).
	deadline := time.Now().Add(10 * time.Second)
	for w.Stats().Checkpoints == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if w.Stats().Checkpoints == 0 {
		t.Fatal("no interval checkpoint was written")
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if _, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), MaxUnsigned: 0}, cfg.File); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

func TestWriterReopenContinuesChain(t *testing.T) {
	cfg := testConfig(t)
	_, pub := writeRecords(t, cfg, 5)
	_, pub2 := writeRecords(t, cfg, 5)
	if !pub.Equal(pub2) {
		t.Fatal("reopen made a new signing key")
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: pub}, cfg.File)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	if rep.Records != 10 || rep.Checkpoints != 2 || rep.LastSeq != 12 {
		t.Fatalf("report: got %+v, want 10 records, 2 checkpoints, last seq 12", rep)
	}
}

func TestWriterCrashMidWrite(t *testing.T) {
	cfg := testConfig(t)
	_, pub := writeRecords(t, cfg, 7)
	whole := readLines(t, cfg.File)
	// Simulate a crash mid-write: half of a next line, no newline.
	partial := []byte(`{"seq":9,"ts":"2025-01-01T00:00:00Z","prev":"ab`)
	f, err := os.OpenFile(cfg.File, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(partial); err != nil {
		t.Fatal(err)
	}
	f.Close()

	// Before reopening, verify finds the torn tail at the right line.
	_, err = VerifyFiles(VerifyOptions{PublicKey: pub}, cfg.File)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.Reason != ReasonTornTail || ve.Line != len(whole)+1 {
		t.Fatalf("verify torn file: got %v, want %s at line %d", err, ReasonTornTail, len(whole)+1)
	}

	// Reopen: the torn tail is saved aside and cut; appending continues the chain.
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Log(sampleRecord(100)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: pub}, cfg.File)
	if err != nil {
		t.Fatalf("verify after reopen: %v", err)
	}
	// After the 8 whole lines: the crash_recovered record, its checkpoint,
	// the new record and the closing checkpoint.
	if rep.Records != 9 || rep.LastSeq != uint64(len(whole)+4) {
		t.Fatalf("report: got %+v, want 9 records ending at seq %d", rep, len(whole)+4)
	}
	crash := decodeLine(t, readLines(t, cfg.File)[len(whole)])
	var tornBytes int
	var savedTo string
	json.Unmarshal(crash.Extra[CrashTornBytes], &tornBytes)
	json.Unmarshal(crash.Extra[CrashTornSavedTo], &savedTo)
	if crash.Kind != KindCrashRecovered || tornBytes != len(partial) || !strings.HasPrefix(savedTo, cfg.File+".torn-") || crash.Extra[CrashUnsignedRecords] != nil {
		t.Fatalf("got %+v, want a crash_recovered record naming the %d torn bytes and no unsigned records", crash, len(partial))
	}
	torn, _ := filepath.Glob(cfg.File + ".torn-*")
	if len(torn) != 1 {
		t.Fatalf("torn copies: got %v, want one", torn)
	}
	if b, _ := os.ReadFile(torn[0]); !bytes.Equal(b, partial) {
		t.Fatalf("torn copy: got %q, want %q", b, partial)
	}
	// The rest of the file is byte-identical to what was there before the crash.
	after := readLines(t, cfg.File)
	for i := range whole {
		if !bytes.Equal(after[i], whole[i]) {
			t.Fatalf("line %d changed by recovery", i+1)
		}
	}
}

func TestWriterCrashOnlyTornLine(t *testing.T) {
	cfg := testConfig(t)
	if err := os.WriteFile(cfg.File, []byte(`{"seq":1,"ts`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, pub := writeRecords(t, cfg, 2)
	rep, err := VerifyFiles(VerifyOptions{PublicKey: pub, Complete: true}, cfg.File)
	if err != nil || rep.FirstSeq != 1 || rep.Records != 3 {
		t.Fatalf("verify: got %+v, %v; want a fresh chain of a crash_recovered record and 2 records", rep, err)
	}
	if first := decodeLine(t, readLines(t, cfg.File)[0]); first.Kind != KindCrashRecovered || first.Seq != 1 {
		t.Fatalf("got first line %+v, want the crash_recovered record", first)
	}
}

func TestWriterRefusesCorruptLastLine(t *testing.T) {
	cfg := testConfig(t)
	writeRecords(t, cfg, 2)
	f, _ := os.OpenFile(cfg.File, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString("not json\n")
	f.Close()
	if _, err := New(cfg, nil); err == nil || !strings.Contains(err.Error(), "last line is not a valid record") {
		t.Fatalf("got %v, want a refusal naming the bad last line", err)
	}
}

func TestWriterRotation(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	cfg.CheckpointEvery = 7
	w, pub := writeRecords(t, cfg, 100)
	if w.Stats().Rotations < 3 {
		t.Fatalf("rotations: got %d, want at least 3 for 100 records in 4 KiB files", w.Stats().Rotations)
	}
	files, err := ChainFiles(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != int(w.Stats().Rotations)+1 || files[len(files)-1] != cfg.File {
		t.Fatalf("chain files: got %v", files)
	}
	for _, f := range files[:len(files)-1] {
		st, _ := os.Stat(f)
		if st.Size() > cfg.MaxSize+1024 {
			t.Fatalf("%s: %d bytes, want about MaxSize (one checkpoint over at most)", f, st.Size())
		}
		// Each rotated file ends with a checkpoint.
		lines := readLines(t, f)
		if r := decodeLine(t, lines[len(lines)-1]); r.Kind != KindCheckpoint {
			t.Fatalf("%s: last line kind %q, want checkpoint", f, r.Kind)
		}
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: pub}, files...)
	if err != nil {
		t.Fatalf("verify across files: %v", err)
	}
	if rep.Records != 100 || rep.Files != len(files) {
		t.Fatalf("report: got %+v", rep)
	}
	// Out of order, the link between files breaks at the first line of the
	// file after the misplaced one (a chain may start past seq 1 when a
	// retention record later explains it, so the start is judged at the end).
	swapped := append([]string{files[1], files[0]}, files[2:]...)
	_, err = VerifyFiles(VerifyOptions{PublicKey: pub}, swapped...)
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.File != files[0] || ve.Line != 1 || ve.Reason != ReasonSeqGap {
		t.Fatalf("swapped files: got %v, want seq gap at %s:1", err, files[0])
	}
	// A missing middle file is caught at the first line of the next one.
	missing := append([]string{files[0]}, files[2:]...)
	_, err = VerifyFiles(VerifyOptions{PublicKey: pub}, missing...)
	if !errors.As(err, &ve) || ve.File != files[2] || ve.Line != 1 || ve.Reason != ReasonSeqGap {
		t.Fatalf("missing file: got %v, want seq gap at %s:1", err, files[2])
	}
	// The live file alone is a partial chain.
	if _, err := VerifyFiles(VerifyOptions{PublicKey: pub, Partial: true}, cfg.File); err != nil {
		t.Fatalf("partial verify of the live file: %v", err)
	}
	// Reopen after rotation continues from the live file.
	_, _ = writeRecords(t, cfg, 3)
	files, _ = ChainFiles(cfg.File)
	if _, err := VerifyFiles(VerifyOptions{PublicKey: pub}, files...); err != nil {
		t.Fatalf("verify after reopen: %v", err)
	}
}

func TestWriterReopenAfterRotationWithEmptyLiveFile(t *testing.T) {
	cfg := testConfig(t)
	_, pub := writeRecords(t, cfg, 3)
	// An operator (or a crash right after rotation) leaves only the rotated file.
	if err := os.Rename(cfg.File, cfg.File+".1"); err != nil {
		t.Fatal(err)
	}
	writeRecords(t, cfg, 2)
	files, _ := ChainFiles(cfg.File)
	if len(files) != 2 {
		t.Fatalf("files: got %v", files)
	}
	if _, err := VerifyFiles(VerifyOptions{PublicKey: pub}, files...); err != nil {
		t.Fatalf("verify: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"no file", func(c *Config) { c.File = "" }, "file is required"},
		{"bad overflow", func(c *Config) { c.Overflow = "drop" }, `overflow "drop"`},
		{"negative queue", func(c *Config) { c.QueueSize = -1 }, "queue_size -1"},
		{"negative sync", func(c *Config) { c.SyncInterval = -time.Second }, "sync_interval"},
		{"tiny max size", func(c *Config) { c.MaxSize = 100 }, "max_size 100"},
		{"negative checkpoint every", func(c *Config) { c.CheckpointEvery = -5 }, "checkpoint_every -5"},
		{"negative checkpoint interval", func(c *Config) { c.CheckpointInterval = -1 }, "checkpoint_interval"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(t)
			tt.mod(&cfg)
			_, err := New(cfg, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestSigningKeyFiles(t *testing.T) {
	dir := t.TempDir()
	t.Run("refuses group-readable key", func(t *testing.T) {
		p := filepath.Join(dir, "k1")
		if _, err := LoadOrCreateSigningKey(p); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o640)
		if _, err := LoadOrCreateSigningKey(p); err == nil || !strings.Contains(err.Error(), "want 0600") {
			t.Fatalf("got %v, want a mode refusal", err)
		}
	})
	t.Run("raw seed", func(t *testing.T) {
		p := filepath.Join(dir, "k2")
		seed := bytes.Repeat([]byte{7}, ed25519.SeedSize)
		os.WriteFile(p, seed, 0o600)
		k, err := LoadOrCreateSigningKey(p)
		if err != nil || !k.Equal(ed25519.NewKeyFromSeed(seed)) {
			t.Fatalf("got %v, %v; want the key from the seed", k, err)
		}
	})
	t.Run("garbage", func(t *testing.T) {
		p := filepath.Join(dir, "k3")
		os.WriteFile(p, []byte("hello"), 0o600)
		if _, err := LoadOrCreateSigningKey(p); err == nil || !strings.Contains(err.Error(), "not an Ed25519 key") {
			t.Fatalf("got %v, want a parse error", err)
		}
	})
	t.Run("public key forms", func(t *testing.T) {
		pub, _, _ := ed25519.GenerateKey(nil)
		for name, in := range map[string][]byte{
			"pem": MarshalPublicKey(pub),
			"raw": pub,
			"hex": []byte(fmt.Sprintf("%x\n", []byte(pub))),
		} {
			got, err := ParsePublicKey(in)
			if err != nil || !got.Equal(pub) {
				t.Errorf("%s: got %x, %v; want %x", name, got, err, pub)
			}
		}
		if _, err := ParsePublicKey([]byte("nope")); err == nil {
			t.Error("garbage public key: got nil error")
		}
	})
}

func TestWriterFailsClosedOnWriteError(t *testing.T) {
	// /dev/full fails every write with ENOSPC: a full disk.
	w, err := New(Config{File: "/dev/full"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Log(sampleRecord(1)); err != nil {
		t.Fatalf("first Log: %v (queued before the failure is known)", err)
	}
	if err := w.Sync(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Sync: got %v, want ErrFailed", err)
	}
	if err := w.Log(sampleRecord(2)); !errors.Is(err, ErrFailed) || !strings.Contains(err.Error(), "no space") {
		t.Fatalf("Log after failure: got %v, want ErrFailed naming the cause", err)
	}
	if err := w.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close: got %v, want ErrFailed", err)
	}
	if got := w.Stats().Dropped; got != 1 {
		t.Fatalf("dropped: got %d, want 1", got)
	}
}

// Regression: two writers on one file (two `airlock run`s sharing the default
// audit.file) interleaved two seq/prev sequences, and the chain no longer
// verified. The second writer is now refused and the first one's chain stays
// whole.
func TestWriterRefusesSecondWriter(t *testing.T) {
	cfg := testConfig(t)
	w1, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := w1.Log(sampleRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := w1.Sync(); err != nil {
		t.Fatal(err)
	}
	w2, err := New(cfg, nil)
	if err == nil {
		for i := range 3 {
			_ = w2.Log(sampleRecord(i))
		}
		w2.Close()
		t.Fatal("second writer on the same file: got nil error, want ErrInUse")
	}
	if !errors.Is(err, ErrInUse) || !strings.Contains(err.Error(), cfg.File) {
		t.Fatalf("second writer: got %v, want ErrInUse naming %s", err, cfg.File)
	}
	for i := range 5 {
		if err := w1.Log(sampleRecord(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w1.PublicKey()}, cfg.File)
	if err != nil || rep.Records != 6 {
		t.Fatalf("verify: got %+v, %v; want 6 records", rep, err)
	}
	// Once the first writer is closed the file is free again.
	w3, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	if err := w3.Close(); err != nil {
		t.Fatal(err)
	}
}

// The lock follows the live file across rotation: a writer started after a
// rotation is refused too.
func TestWriterLockSurvivesRotation(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for i := 0; w.Stats().Rotations == 0 && i < 1000; i++ {
		if err := w.Log(sampleRecord(i)); err != nil {
			t.Fatal(err)
		}
		if err := w.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if w.Stats().Rotations == 0 {
		t.Fatal("no rotation after 1000 records")
	}
	if w2, err := New(cfg, nil); !errors.Is(err, ErrInUse) {
		if err == nil {
			w2.Close()
		}
		t.Fatalf("writer after rotation: got %v, want ErrInUse", err)
	}
}

// Regression: a record made of hostile strings (a path of control bytes, each
// written as a 6-byte escape, thousands of query keys, a huge Extra) encoded to
// a line longer than MaxLineSize, which verify, query and tail refuse: one
// request from a sandbox could break the chain. The writer now writes it shrunk
// and the file verifies.
func TestWriterShrinksOversizedRecord(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 1 << 30
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 100000)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%06d", i)
	}
	huge := &Record{
		Sandbox: "sb-1", Owner: "1000", Kind: KindHTTP, Decision: DecisionDeny, Host: "evil.example",
		Path:  "/" + strings.Repeat("\x01\n\xff", MaxLineSize/12),
		Query: keys,
		Extra: map[string]json.RawMessage{"blob": json.RawMessage(`"` + strings.Repeat("a", MaxLineSize) + `"`)},
	}
	if err := w.Log(huge); err != nil {
		t.Fatal(err)
	}
	if err := w.Log(sampleRecord(1)); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File)
	if err != nil || rep.Records != 2 {
		t.Fatalf("verify: got %+v, %v; want 2 records", rep, err)
	}
	lines := readLines(t, cfg.File)
	if len(lines[0]) > MaxRecordSize {
		t.Fatalf("first line: got %d bytes, want at most %d", len(lines[0]), MaxRecordSize)
	}
	var got Record
	if err := json.Unmarshal(lines[0], &got); err != nil {
		t.Fatal(err)
	}
	if got.Sandbox != "sb-1" || got.Owner != "1000" || got.Host != "evil.example" || got.Decision != DecisionDeny || len(got.Query) != shrinkList {
		t.Fatalf("shrunk record: got sandbox %q owner %q host %q decision %q %d query keys; want sb-1 1000 evil.example deny %d",
			got.Sandbox, got.Owner, got.Host, got.Decision, len(got.Query), shrinkList)
	}
	if _, ok := got.Extra[TruncatedKey]; !ok || len(got.Extra) != 1 {
		t.Fatalf("extra: got %v, want only %s", got.Extra, TruncatedKey)
	}
}

// TestWriterBatchesABurst: a burst of records (faster than batchLinger, so
// the writer lingers between batches) lands whole and in order, in far fewer
// write(2)s than records. The linger's saving itself (wake-ups and writes per
// record at a steady rate) is measured, not asserted: see docs/BENCHMARKS.md.
func TestWriterBatchesABurst(t *testing.T) {
	cfg := testConfig(t)
	cfg.CheckpointEvery = 1 << 20
	var writes atomic.Int64
	w, err := newWriter(cfg, nil, writerHooks{write: func(f *os.File, b []byte) (int, error) {
		writes.Add(1)
		return f.Write(b)
	}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	before := writes.Load()
	for i := range n {
		r := sampleRecord(i)
		r.Path = fmt.Sprintf("/burst/%d", i)
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := writes.Load() - before; got > n/2 {
		t.Errorf("%d records in a burst took %d writes, want at most %d", n, got, n/2)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	lines := readLines(t, cfg.File)
	seen := 0
	for _, l := range lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(r.Path, "/burst/") {
			if want := fmt.Sprintf("/burst/%d", seen); r.Path != want {
				t.Fatalf("record %d: path %q, want %q", seen, r.Path, want)
			}
			seen++
		}
	}
	if seen != n {
		t.Fatalf("file holds %d of the %d records", seen, n)
	}
}
