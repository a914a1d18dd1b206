package audit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// gapCopy builds what an exporter collects when retention deletes records it
// has not shipped: the log's first lines (shipped before the collector went
// down), then the lines retention kept. It returns every line the log ever
// held, the seq the kept chain starts at, and the public key.
func gapCopy(t *testing.T) (all [][]byte, keptFrom int, pubKey []byte) {
	t.Helper()
	cfg := testConfig(t)
	cfg.MaxSize = 4096
	cfg.CheckpointEvery = 7
	_, pub := writeRecords(t, cfg, 120)
	files, err := ChainFiles(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		all = append(all, fileLines(t, f)...)
	}
	// One record at a time until the next rotation, whose retention deletes
	// every rotated file but the newest (which, like the live file, holds
	// only lines already in all or written since).
	cfg.MaxFiles = 1
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("no rotation after 200 records")
		}
		_, _ = writeRecords(t, cfg, 1)
		if rotated, _ := RotatedFiles(cfg.File); len(rotated) == 1 {
			break
		}
	}
	files, err = ChainFiles(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	var kept [][]byte
	for _, f := range files {
		kept = append(kept, fileLines(t, f)...)
	}
	var first struct{ Seq int }
	if err := json.Unmarshal(kept[0], &first); err != nil {
		t.Fatal(err)
	}
	if first.Seq <= 10 || first.Seq > len(all)+1 {
		t.Fatalf("kept chain starts at seq %d: want retention to have deleted some of the first %d lines", first.Seq, len(all))
	}
	all = append(all[:first.Seq-1], kept...)
	return all, first.Seq, pub
}

func fileLines(t *testing.T, p string) [][]byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
}

func gapMarker(from, through int) []byte {
	return []byte(fmt.Sprintf(`{"kind":%q,"from_seq":%d,"through_seq":%d,"reason":"retention"}`, KindExportGap, from, through))
}

// TestVerifyExportGapMarkers: a copy with an export_gap marker verifies only
// where a signed retention record deleted exactly through the marker's last
// seq, with the head the next line continues from.
func TestVerifyExportGapMarkers(t *testing.T) {
	all, kept, pub := gapCopy(t)
	shipped := kept / 2
	tests := []struct {
		name    string
		lines   func() [][]byte
		noKey   bool
		wantErr string
	}{
		{name: "leading marker", lines: func() [][]byte {
			return append([][]byte{gapMarker(1, kept-1)}, all[kept-1:]...)
		}},
		{name: "marker mid-chain", lines: func() [][]byte {
			out := append(append([][]byte{}, all[:shipped]...), gapMarker(shipped+1, kept-1))
			return append(out, all[kept-1:]...)
		}},
		{name: "marker hides records retention kept", lines: func() [][]byte {
			out := append(append([][]byte{}, all[:shipped]...), gapMarker(shipped+1, kept+2))
			return append(out, all[kept+2:]...)
		}, wantErr: ReasonSeqGap},
		{name: "marker skips more than it says", lines: func() [][]byte {
			out := append(append([][]byte{}, all[:shipped]...), gapMarker(shipped+1, kept-2))
			return append(out, all[kept-1:]...)
		}, wantErr: ReasonSeqGap},
		{name: "marker not where the copy stopped", lines: func() [][]byte {
			out := append(append([][]byte{}, all[:shipped]...), gapMarker(shipped+3, kept-1))
			return append(out, all[kept-1:]...)
		}, wantErr: ReasonSeqGap},
		{name: "marker last", lines: func() [][]byte {
			return append(append([][]byte{}, all[:shipped]...), gapMarker(shipped+1, kept-1))
		}, wantErr: ReasonSeqGap},
		{name: "continuation forged after the marker (no key)", noKey: true, lines: func() [][]byte {
			out := append(append([][]byte{}, all[:shipped]...), gapMarker(shipped+1, kept-1))
			return append(out, forgeChain(t, all[kept-1:], strings.Repeat("0", 64))...)
		}, wantErr: ReasonPrevMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "copy.jsonl")
			if err := os.WriteFile(p, append(bytes.Join(tt.lines(), []byte("\n")), '\n'), 0o600); err != nil {
				t.Fatal(err)
			}
			opts := VerifyOptions{PublicKey: pub, Complete: true}
			if tt.noKey {
				opts = VerifyOptions{MaxUnsigned: -1}
			}
			rep, err := VerifyFiles(opts, p)
			if tt.wantErr == "" {
				if err != nil || rep.ExportGaps != 1 {
					t.Fatalf("got %v, %d export gaps; want the copy to verify with 1", err, rep.ExportGaps)
				}
				return
			}
			var ve *VerifyError
			if !errors.As(err, &ve) || ve.Reason != tt.wantErr {
				t.Fatalf("got %v, want a %q error", err, tt.wantErr)
			}
			if !strings.Contains(ve.Error(), "copy.jsonl") {
				t.Fatalf("got %v, want the file named", ve)
			}
		})
	}
}

// forgeChain gives lines[0] the prev first and rewrites every later prev (and
// checkpoint head) to chain on: a forgery only the retention record's head
// (or a signature) can catch.
func forgeChain(t *testing.T, lines [][]byte, first string) [][]byte {
	t.Helper()
	out := make([][]byte, len(lines))
	prev := first
	for i, l := range lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		r.Prev = prev
		if r.Checkpoint != nil {
			r.Checkpoint.Head = prev
		}
		b, err := json.Marshal(&r)
		if err != nil {
			t.Fatal(err)
		}
		out[i] = b
		sum := sha256.Sum256(b)
		prev = hex.EncodeToString(sum[:])
	}
	return out
}
