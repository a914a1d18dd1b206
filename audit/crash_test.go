package audit

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// crashHelperEnv names the audit file a re-executed test binary writes to
// until it is killed (see TestWriterCrashRecoveredAfterKill).
const crashHelperEnv = "AIRLOCK_AUDIT_CRASH_HELPER"

// crashHelper is the child: a writer that checkpoints rarely, logs records as
// fast as it can, says "ready" once some are on disk, and never closes. It
// stops by itself after 100,000 records or 30 s, so a parent that dies does not
// leave it running.
func crashHelper(file string) {
	cfg := Config{File: file, SigningKeyFile: file + ".key", CheckpointEvery: 1 << 30, CheckpointInterval: time.Hour}
	w, err := New(cfg, nil)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(2)
	}
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; i < 100_000 && time.Now().Before(deadline); i++ {
		r := sampleRecord(i)
		r.Path = "/simple/" + strings.Repeat("x", i%512) + "/"
		if err := w.Log(r); err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		if i == 200 {
			if err := w.Sync(); err != nil {
				fmt.Println("error:", err)
				os.Exit(2)
			}
			fmt.Println("ready")
		}
	}
	os.Exit(3) // not killed in time: the parent reports it
}

func TestMain(m *testing.M) {
	if f := os.Getenv(crashHelperEnv); f != "" {
		crashHelper(f)
	}
	os.Exit(m.Run())
}

// crashedLog runs a writer in a child process on a fresh log and SIGKILLs it
// mid-stream, after its first 200 records are on disk. It returns the config.
func crashedLog(t *testing.T) Config {
	t.Helper()
	cfg := testConfig(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), crashHelperEnv+"="+cfg.File)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("helper: got %q, %v, want ready", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("helper ended with %v, want killed by SIGKILL", err)
	}
	return cfg
}

// TestWriterCrashRecoveredAfterKill is the regression test for a log left by
// a killed writer: its records after the last checkpoint stayed unsigned, and
// a writer that opened it and was closed without logging anything wrote no
// checkpoint, so `verify --complete` failed for good. Now the next writer
// appends a crash_recovered record and a checkpoint at open.
func TestWriterCrashRecoveredAfterKill(t *testing.T) {
	cfg := crashedLog(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New after the crash: %v", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey(), Complete: true, MaxUnsigned: 0}, cfg.File)
	if err != nil {
		t.Fatalf("verify --complete after the next clean stop: %v", err)
	}
	crash := onlyCrashRecord(t, cfg.File)
	var count int
	var from, through uint64
	json.Unmarshal(crash.Extra[CrashUnsignedRecords], &count)
	json.Unmarshal(crash.Extra[CrashUnsignedFrom], &from)
	json.Unmarshal(crash.Extra[CrashUnsignedThrough], &through)
	// The helper never checkpointed: every record it left is unsigned.
	if count < 201 || from != 1 || through != uint64(count) || crash.Seq != through+1 {
		t.Fatalf("got %d unsigned records, seq %d..%d, record at seq %d; want at least 201 from seq 1 to the record's own seq - 1", count, from, through, crash.Seq)
	}
	if torn, _ := crash.Extra[CrashTornBytes]; torn != nil {
		t.Logf("the kill cut a line: %s bytes", torn)
	}
	// The checkpoint after the crash record is the last line: Close had
	// nothing left to sign.
	if rep.Records != count+1 || rep.Checkpoints != 1 || rep.SignedThrough != crash.Seq {
		t.Fatalf("report: got %+v, want %d records signed through the crash record", rep, count+1)
	}
}

// onlyCrashRecord returns the one crash_recovered record of path.
func onlyCrashRecord(t *testing.T, path string) Record {
	t.Helper()
	var found []Record
	for _, l := range readLines(t, path) {
		if r := decodeLine(t, l); r.Kind == KindCrashRecovered {
			found = append(found, r)
		}
	}
	if len(found) != 1 {
		t.Fatalf("got %d crash_recovered records, want 1", len(found))
	}
	r := found[0]
	if r.Decision != "" || len(r.Reasons) != 1 || r.Reasons[0].ID != ReasonCrashRecovered {
		t.Fatalf("got %+v, want reason %s", r, ReasonCrashRecovered)
	}
	return r
}

// crashLog leaves path as a writer that died would: with cut, the closing
// checkpoint line removed (the writer died just before Close), and torn (a
// line cut short) appended when given. It returns the whole lines kept.
func crashLog(t *testing.T, path string, cut bool, torn []byte) [][]byte {
	t.Helper()
	lines := readLines(t, path)
	if cut {
		if r := decodeLine(t, lines[len(lines)-1]); r.Kind != KindCheckpoint {
			t.Fatalf("got last line %+v, want the closing checkpoint", r)
		}
		lines = lines[:len(lines)-1]
	}
	data := append(bytes.Join(lines, nil), torn...)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return lines
}

func TestWriterCrashRecovered(t *testing.T) {
	tests := []struct {
		name      string
		records   int    // logged before the "crash"
		every     int    // CheckpointEvery of that writer
		cut       bool   // the closing checkpoint removed
		torn      []byte // a line cut short after the whole ones
		unsigned  int    // want: records after the last checkpoint
		wantCrash bool
	}{
		// Checkpoints after records 4 and 8, then Close's after 10.
		{"unsigned tail", 10, 4, true, nil, 2, true},
		{"unsigned tail and torn line", 10, 4, true, []byte(`{"seq":14,"ts":"2025`), 2, true},
		{"only a torn line", 10, 4, false, []byte(`{"seq":14`), 0, true},
		// Checkpoints after 4 and 8; Close has nothing left to sign.
		{"unsigned tail after a full checkpoint", 8, 4, true, nil, 4, true},
		{"clean stop", 5, 1000, false, nil, 0, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig(t)
			cfg.CheckpointEvery = tc.every
			_, pub := writeRecords(t, cfg, tc.records)
			kept := crashLog(t, cfg.File, tc.cut, tc.torn)
			if _, err := VerifyFiles(VerifyOptions{PublicKey: pub, Complete: true}, cfg.File); (err == nil) == tc.wantCrash {
				t.Fatalf("verify --complete of the log as left: got %v, want an error only for a crashed log", err)
			}
			w2, err := New(cfg, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := w2.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := VerifyFiles(VerifyOptions{PublicKey: pub, Complete: true, MaxUnsigned: 0}, cfg.File); err != nil {
				t.Fatalf("verify --complete after the next clean stop: %v", err)
			}
			after := readLines(t, cfg.File)
			for i := range kept {
				if !bytes.Equal(after[i], kept[i]) {
					t.Fatalf("line %d changed by recovery", i+1)
				}
			}
			if !tc.wantCrash {
				if len(after) != len(kept) {
					t.Fatalf("got %d lines after a clean stop and reopen, want %d (nothing appended)", len(after), len(kept))
				}
				return
			}
			crash := onlyCrashRecord(t, cfg.File)
			if crash.Seq != uint64(len(kept)+1) {
				t.Fatalf("got the crash record at seq %d, want %d (right after the whole lines)", crash.Seq, len(kept)+1)
			}
			var n int
			json.Unmarshal(crash.Extra[CrashUnsignedRecords], &n)
			if n != tc.unsigned {
				t.Fatalf("got %d unsigned records, want %d", n, tc.unsigned)
			}
			if ck := decodeLine(t, after[len(kept)+1]); ck.Kind != KindCheckpoint || ck.Checkpoint.Seq != crash.Seq {
				t.Fatalf("got %+v after the crash record, want a checkpoint covering it", ck)
			}
			if (crash.Extra[CrashTornBytes] != nil) != (tc.torn != nil) {
				t.Fatalf("got torn bytes %s, want them named only when a line was torn", crash.Extra[CrashTornBytes])
			}
		})
	}
}

// TestWriterCrashWithoutKey: with no signing key there are no checkpoints,
// so only a torn line shows a crash; a clean log gets nothing appended.
func TestWriterCrashWithoutKey(t *testing.T) {
	cfg := testConfig(t)
	cfg.SigningKeyFile = ""
	writeRecords(t, cfg, 3)
	writeRecords(t, cfg, 0)
	if n := len(readLines(t, cfg.File)); n != 3 {
		t.Fatalf("got %d lines, want 3: nothing is known of a crash without a key", n)
	}
	f, _ := os.OpenFile(cfg.File, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"seq":4,`)
	f.Close()
	writeRecords(t, cfg, 0)
	lines := readLines(t, cfg.File)
	if r := decodeLine(t, lines[len(lines)-1]); len(lines) != 4 || r.Kind != KindCrashRecovered {
		t.Fatalf("got %d lines ending %+v, want a crash_recovered record after the 3", len(lines), r)
	}
	if _, err := VerifyFiles(VerifyOptions{}, cfg.File); err != nil {
		t.Fatal(err)
	}
}

func TestWriterRefusesCrashRecoveredFromCallers(t *testing.T) {
	cfg := testConfig(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if err := w.Log(&Record{Kind: KindCrashRecovered}); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Fatalf("got %v, want the kind refused", err)
	}
}

// TestLinesAfterCheckpointLongLines: the backward scan finds line boundaries
// across its read chunks (lines longer than a chunk, and a checkpoint in the
// middle of one chunk).
func TestLinesAfterCheckpointLongLines(t *testing.T) {
	cfg := testConfig(t)
	cfg.CheckpointEvery = 3
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 7 {
		r := sampleRecord(i)
		r.Path = "/" + strings.Repeat("p", 1+(i*70_000)%200_000)
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	// Checkpoints after 3 and 6 records, and Close's after the 7th.
	lines := crashLog(t, cfg.File, true, nil)
	st, _ := os.Stat(cfg.File)
	n, err := linesAfterCheckpoint(cfg.File, st.Size())
	if err != nil || n != 1 {
		t.Fatalf("got %d, %v, want 1 record after the last checkpoint", n, err)
	}
	// Without any checkpoint, every line counts.
	var noCkpt [][]byte
	for _, l := range lines {
		if decodeLine(t, l).Kind != KindCheckpoint {
			noCkpt = append(noCkpt, l)
		}
	}
	if err := os.WriteFile(cfg.File, bytes.Join(noCkpt, nil), 0o600); err != nil {
		t.Fatal(err)
	}
	st, _ = os.Stat(cfg.File)
	if n, err := linesAfterCheckpoint(cfg.File, st.Size()); err != nil || n != 7 {
		t.Fatalf("got %d, %v, want all 7 lines", n, err)
	}
	if n, err := linesAfterCheckpoint(cfg.File, 0); err != nil || n != 0 {
		t.Fatalf("empty: got %d, %v, want 0", n, err)
	}
}
