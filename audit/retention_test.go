package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// retainedChain writes n records through a writer with 4 KiB files and the
// given retention, closes it, and returns the chain's files and public key.
func retainedChain(t *testing.T, maxFiles int, maxBytes int64, n int) (Config, []string, *Writer) {
	t.Helper()
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	cfg.CheckpointEvery = 7
	cfg.MaxFiles = maxFiles
	cfg.MaxBytes = maxBytes
	w, _ := writeRecords(t, cfg, n)
	files, err := ChainFiles(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, files, w
}

func TestRetentionBoundsRotatedFiles(t *testing.T) {
	tests := []struct {
		name     string
		maxFiles int
		maxBytes int64
		check    func(t *testing.T, rotated []string)
	}{
		{name: "max_files", maxFiles: 2, check: func(t *testing.T, rotated []string) {
			if len(rotated) != 2 {
				t.Fatalf("got %d rotated files, want 2", len(rotated))
			}
		}},
		{name: "max_bytes", maxBytes: 9000, check: func(t *testing.T, rotated []string) {
			var total int64
			for _, p := range rotated {
				st, _ := os.Stat(p)
				total += st.Size()
			}
			if total > 9000 || len(rotated) == 0 {
				t.Fatalf("got %d rotated files of %d bytes, want at most 9000 bytes", len(rotated), total)
			}
		}},
		{name: "max_bytes below one file keeps the newest", maxBytes: 100, check: func(t *testing.T, rotated []string) {
			if len(rotated) != 1 {
				t.Fatalf("got %d rotated files, want the newest kept", len(rotated))
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, files, w := retainedChain(t, tt.maxFiles, tt.maxBytes, 400)
			st := w.Stats()
			if st.Rotations < 5 || st.Pruned == 0 {
				t.Fatalf("stats: got %+v, want several rotations and files pruned", st)
			}
			rotated, _ := RotatedFiles(cfg.File)
			tt.check(t, rotated)
			// The kept chain verifies from its oldest file, with no option: the
			// retention record explains the missing start.
			rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, files...)
			if err != nil {
				t.Fatalf("verify kept files: %v", err)
			}
			if rep.FirstSeq != rep.PrunedThrough+1 || rep.AnchorSeq < rep.FirstSeq || rep.PrunedFiles == 0 {
				t.Fatalf("report: got %+v, want first seq one past pruned_through, a signed anchor at or after it, pruned files named", rep)
			}
			// Each rotated file kept still ends with a signed checkpoint.
			for _, p := range rotated {
				lines := readLines(t, p)
				if r := decodeLine(t, lines[len(lines)-1]); r.Kind != KindCheckpoint {
					t.Fatalf("%s ends with a %q record, want a checkpoint", p, r.Kind)
				}
			}
		})
	}
}

// An attacker with write access to the log tries to hide history behind
// retention; each attempt must fail verification.
func TestRetentionTamperCaught(t *testing.T) {
	_, files, w := retainedChain(t, 3, 0, 400)
	pub := w.PublicKey()
	if len(files) < 4 {
		t.Fatalf("got %d files, want 3 rotated and the live one", len(files))
	}
	oldest := readLines(t, files[0])
	firstCkpt := -1
	for i, l := range oldest {
		if decodeLine(t, l).Kind == KindCheckpoint {
			firstCkpt = i
			break
		}
	}
	// The oldest kept file starts with the retention record of an earlier
	// pruning and the checkpoint over it.
	if firstCkpt < 1 || firstCkpt > len(oldest)-3 {
		t.Fatalf("first checkpoint of the oldest kept file at line %d of %d, want lines on both sides", firstCkpt+1, len(oldest))
	}
	edit := func(lines [][]byte, i int) [][]byte {
		out := cloneLines(lines)
		out[i] = bytes.Replace(out[i], []byte(`"host":"`), []byte(`"host":"x`), 1)
		if bytes.Equal(out[i], lines[i]) {
			out[i] = bytes.Replace(out[i], []byte(`"id":"`), []byte(`"id":"x`), 1)
		}
		return out
	}
	// forgeRetention appends, to the live file's lines, a retention record
	// chained correctly but unsigned, claiming everything before seq from was
	// deleted.
	forgeRetention := func(live [][]byte, from uint64, prevOfFirst string) [][]byte {
		last := live[len(live)-1]
		r := decodeLine(t, last)
		sum := sha256.Sum256(bytes.TrimSuffix(last, []byte("\n")))
		line := fmt.Sprintf(`{"seq":%d,"ts":"2030-01-01T00:00:00Z","prev":"%s","id":"x","kind":"retention","extra":{"pruned_through_seq":%d,"pruned_head":"%s"}}`+"\n",
			r.Seq+1, hex.EncodeToString(sum[:]), from-1, prevOfFirst)
		return append(cloneLines(live), []byte(line))
	}
	type file struct {
		name  string
		lines [][]byte
	}
	var chain []file
	for _, p := range files {
		chain = append(chain, file{p, readLines(t, p)})
	}
	second := chain[1].lines
	n := len(chain)
	with := func(i int, lines [][]byte) []file {
		out := append([]file(nil), chain...)
		out[i].lines = lines
		return out
	}
	without := func(i int, c []file) []file {
		return append(append([]file(nil), c[:i]...), c[i+1:]...)
	}
	tests := []struct {
		name   string
		chain  []file
		reason string
	}{
		{name: "edit in the oldest kept file before its first checkpoint", reason: ReasonPrevMismatch,
			chain: with(0, edit(oldest, firstCkpt-1))},
		{name: "edit of the oldest kept file's first line", reason: ReasonPrevMismatch,
			chain: with(0, edit(oldest, 0))},
		{name: "edit of a record right after the first checkpoint, re-chained to the next", reason: ReasonBadCheckpoint,
			chain: with(0, rechainFrom(t, oldest, firstCkpt+1))},
		{name: "edit in the oldest kept file after its first checkpoint", reason: ReasonPrevMismatch,
			chain: with(0, edit(oldest, firstCkpt+1))},
		{name: "lines cut from the front of the oldest kept file", reason: ReasonSeqGap,
			chain: with(0, oldest[2:])},
		{name: "oldest kept file deleted", reason: ReasonSeqGap,
			chain: without(0, chain)},
		{name: "middle file deleted", reason: ReasonSeqGap,
			chain: without(1, chain)},
		{name: "oldest kept file deleted behind a forged unsigned retention record", reason: ReasonUnsigned,
			chain: without(0, with(n-1, forgeRetention(chain[n-1].lines, decodeLine(t, second[0]).Seq, decodeLine(t, second[0]).Prev)))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var inputs []Input
			for _, f := range tt.chain {
				inputs = append(inputs, Input{Name: f.name, R: bytes.NewReader(join(f.lines))})
			}
			_, err := Verify(VerifyOptions{PublicKey: pub, MaxUnsigned: -1}, inputs...)
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Reason != tt.reason {
				t.Fatalf("got %v, want a %q error", err, tt.reason)
			}
		})
	}
	// Control: the untouched files verify with the same options.
	if _, err := VerifyFiles(VerifyOptions{PublicKey: pub, MaxUnsigned: -1}, files...); err != nil {
		t.Fatalf("untouched chain: %v", err)
	}
}

// rechainFrom edits line i and rewrites the prev of every later line of the
// file, as an attacker without the key would: the next checkpoint's head no
// longer matches.
func rechainFrom(t *testing.T, lines [][]byte, i int) [][]byte {
	t.Helper()
	out := cloneLines(lines)
	out[i] = bytes.Replace(out[i], []byte(`"host":"`), []byte(`"host":"x`), 1)
	for j := i + 1; j < len(out); j++ {
		sum := sha256.Sum256(bytes.TrimSuffix(out[j-1], []byte("\n")))
		r := decodeLine(t, out[j])
		out[j] = bytes.Replace(out[j], []byte(r.Prev), []byte(hex.EncodeToString(sum[:])), 1)
	}
	return out
}

// A crash between the retention record and the deletions leaves files the
// record calls deleted: the chain still verifies, from seq 1.
func TestRetentionCrashBeforeDelete(t *testing.T) {
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	cfg.CheckpointEvery = 7
	w, _ := writeRecords(t, cfg, 100)
	saved := map[string][]byte{}
	rotated, _ := RotatedFiles(cfg.File)
	for _, p := range rotated {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		saved[p] = b
	}
	// Reopen with retention and write until exactly one more rotation.
	cfg.MaxFiles = 1
	w2, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; w2.Stats().Rotations == 0 && i < 1000; i++ {
		if err := w2.Log(sampleRecord(i)); err != nil {
			t.Fatal(err)
		}
		if err := w2.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := w2.Close(); err != nil {
		t.Fatal(err)
	}
	if w2.Stats().Pruned == 0 {
		t.Fatal("retention deleted nothing")
	}
	restored := 0
	for p, b := range saved {
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
			restored++
		}
	}
	if restored == 0 {
		t.Fatal("no deleted file to restore")
	}
	files, _ := ChainFiles(cfg.File)
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true}, files...)
	if err != nil || rep.FirstSeq != 1 || rep.PrunedThrough == 0 {
		t.Fatalf("verify with the deleted files back: got %+v, %v; want seq 1 on, pruned_through set", rep, err)
	}
}

// Callers cannot write the records the writer writes itself.
func TestWriterRefusesReservedKinds(t *testing.T) {
	w, err := New(Config{File: filepath.Join(t.TempDir(), "a.jsonl")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, k := range []string{KindCheckpoint, KindRetention, KindOutage} {
		if err := w.Log(&Record{Kind: k}); err == nil {
			t.Errorf("Log of kind %q: got nil error", k)
		}
	}
}
