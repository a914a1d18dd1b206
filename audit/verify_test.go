package audit

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
)

// chainFixture is a closed, signed log of 30 records with checkpoints every 10
// (lines 11, 22, 33 are checkpoints; 33 lines in all).
func chainFixture(t *testing.T) ([][]byte, ed25519.PublicKey) {
	t.Helper()
	cfg := testConfig(t)
	cfg.CheckpointEvery = 10
	_, pub := writeRecords(t, cfg, 30)
	lines := readLines(t, cfg.File)
	if len(lines) != 33 {
		t.Fatalf("fixture: got %d lines, want 33", len(lines))
	}
	return lines, pub
}

func join(lines [][]byte) []byte { return bytes.Join(lines, nil) }

func cloneLines(lines [][]byte) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = bytes.Clone(l)
	}
	return out
}

// rechain rewrites every line's prev to match the (edited) previous line, the
// way someone without the key would rewrite the whole file; checkpoints keep
// their old signature unless resign is set (then they are signed with forger).
func rechain(t *testing.T, lines [][]byte, forger ed25519.PrivateKey) [][]byte {
	t.Helper()
	out := make([][]byte, 0, len(lines))
	prev := GenesisPrev
	for i, l := range lines {
		var r Record
		if err := json.Unmarshal(l, &r); err != nil {
			t.Fatal(err)
		}
		r.Seq = uint64(i + 1)
		r.Prev = prev
		if r.Checkpoint != nil {
			r.Checkpoint.Head = prev
			r.Checkpoint.Seq = r.Seq - 1
			if forger != nil {
				r.Checkpoint.KeyID = KeyID(forger.Public().(ed25519.PublicKey))
				r.Checkpoint.Signature = base64.StdEncoding.EncodeToString(ed25519.Sign(forger, CheckpointMessage(r.Checkpoint.Seq, prev)))
			}
		}
		line := AppendJSON(nil, &r)
		sum := sha256.Sum256(line)
		prev = hex.EncodeToString(sum[:])
		out = append(out, append(line, '\n'))
	}
	return out
}

func TestVerifyCatchesTampering(t *testing.T) {
	orig, pub := chainFixture(t)
	_, otherKey, _ := ed25519.GenerateKey(nil)
	otherPub := otherKey.Public().(ed25519.PublicKey)

	tests := []struct {
		name       string
		edit       func([][]byte) [][]byte
		pub        ed25519.PublicKey
		maxUnsign  int
		unchanged  bool // the file is intact; only the key differs
		wantLine   int
		wantReason string
	}{
		{
			name: "edited line", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[4] = bytes.Replace(l[4], []byte(`"host":"`), []byte(`"host":"x`), 1)
				return l
			},
			wantLine: 6, wantReason: ReasonPrevMismatch, // line 5 altered: line 6's prev no longer matches
		},
		{
			name: "edited line without key", pub: nil,
			edit: func(l [][]byte) [][]byte {
				l[4] = bytes.Replace(l[4], []byte(`"decision":"allow"`), []byte(`"decision":"deny"`), 1)
				return l
			},
			wantLine: 6, wantReason: ReasonPrevMismatch,
		},
		{
			name: "deleted line", pub: pub,
			edit:     func(l [][]byte) [][]byte { return append(l[:6:6], l[7:]...) },
			wantLine: 7, wantReason: ReasonSeqGap,
		},
		{
			name: "inserted line", pub: pub,
			edit: func(l [][]byte) [][]byte {
				ins := bytes.Clone(l[3])
				return append(l[:4:4], append([][]byte{ins}, l[4:]...)...)
			},
			wantLine: 5, wantReason: ReasonSeqGap,
		},
		{
			name: "inserted line with forged seq", pub: pub,
			edit: func(l [][]byte) [][]byte {
				// A copy of line 4 renumbered as seq 5: its prev is line 3's hash.
				ins := bytes.Replace(bytes.Clone(l[3]), []byte(`{"seq":4,`), []byte(`{"seq":5,`), 1)
				return append(l[:4:4], append([][]byte{ins}, l[4:]...)...)
			},
			wantLine: 5, wantReason: ReasonPrevMismatch,
		},
		{
			name: "swapped pair", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[7], l[8] = l[8], l[7]
				return l
			},
			wantLine: 8, wantReason: ReasonSeqGap,
		},
		{
			name: "truncated mid-line", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[19] = l[19][:len(l[19])/2]
				return l[:20]
			},
			wantLine: 20, wantReason: ReasonTornTail,
		},
		{
			name: "truncated at a line boundary past the last checkpoint", pub: pub, maxUnsign: 5,
			edit:     func(l [][]byte) [][]byte { return l[:30] },
			wantLine: 23, wantReason: ReasonUnsigned,
		},
		{
			name: "bad json", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[2] = []byte("{\"seq\":3,\n")
				return l
			},
			wantLine: 3, wantReason: ReasonBadJSON,
		},
		{
			name: "blank line", pub: pub,
			edit: func(l [][]byte) [][]byte {
				return append(l[:2:2], append([][]byte{[]byte("\n")}, l[2:]...)...)
			},
			wantLine: 3, wantReason: ReasonBadJSON,
		},
		{
			name: "missing prev", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[0] = []byte(`{"seq":1,"ts":"2025-01-01T00:00:00Z","id":"x","kind":"http"}` + "\n")
				return l
			},
			wantLine: 1, wantReason: ReasonBadRecord,
		},
		{
			name: "deleted first line", pub: pub,
			edit:     func(l [][]byte) [][]byte { return l[1:] },
			wantLine: 1, wantReason: ReasonSeqGap,
		},
		{
			name: "forged checkpoint signature", pub: pub,
			edit: func(l [][]byte) [][]byte {
				var r Record
				json.Unmarshal(l[10], &r)
				sig := ed25519.Sign(otherKey, CheckpointMessage(r.Checkpoint.Seq, r.Checkpoint.Head))
				l[10] = bytes.Replace(l[10], []byte(r.Checkpoint.Signature), []byte(base64.StdEncoding.EncodeToString(sig)), 1)
				return rechain(t, l, nil)
			},
			wantLine: 11, wantReason: ReasonBadSignature,
		},
		{
			name: "checkpoint head altered", pub: pub,
			edit: func(l [][]byte) [][]byte {
				var r Record
				json.Unmarshal(l[10], &r)
				l[10] = bytes.Replace(l[10], []byte(`"head":"`+r.Checkpoint.Head[:4]), []byte(`"head":"ffff`), 1)
				return l
			},
			wantLine: 11, wantReason: ReasonBadCheckpoint,
		},
		{
			name: "checkpoint kind without checkpoint", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[3] = bytes.Replace(l[3], []byte(`"kind":"http"`), []byte(`"kind":"checkpoint"`), 1)
				return rechain(t, l, nil)
			},
			wantLine: 4, wantReason: ReasonBadRecord,
		},
		{
			name: "whole chain rewritten, old checkpoints kept", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[1] = bytes.Replace(l[1], []byte(`"decision":"deny"`), []byte(`"decision":"allow"`), 1)
				return rechain(t, l, nil)
			},
			wantLine: 11, wantReason: ReasonBadSignature,
		},
		{
			name: "whole chain rewritten and re-signed with another key", pub: pub,
			edit: func(l [][]byte) [][]byte {
				l[1] = bytes.Replace(l[1], []byte(`"decision":"deny"`), []byte(`"decision":"allow"`), 1)
				return rechain(t, l, otherKey)
			},
			wantLine: 11, wantReason: ReasonBadSignature,
		},
		{
			name: "whole chain rewritten without checkpoints", pub: pub, maxUnsign: 100,
			edit: func(l [][]byte) [][]byte {
				var kept [][]byte
				for _, x := range l {
					if !bytes.Contains(x, []byte(`"kind":"checkpoint"`)) {
						kept = append(kept, x)
					}
				}
				kept[1] = bytes.Replace(kept[1], []byte(`"decision":"deny"`), []byte(`"decision":"allow"`), 1)
				// Pad past the unsigned limit so the rewrite is the only thing wrong.
				for len(kept) < 120 {
					kept = append(kept, bytes.Clone(kept[len(kept)-1]))
				}
				return rechain(t, kept, nil)
			},
			wantLine: 1, wantReason: ReasonUnsigned,
		},
		{
			name: "signed by another key entirely", pub: otherPub, unchanged: true,
			edit:     func(l [][]byte) [][]byte { return l },
			wantLine: 11, wantReason: ReasonBadSignature,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := join(tt.edit(cloneLines(orig)))
			if bytes.Equal(data, join(orig)) != tt.unchanged {
				t.Fatalf("edit changed the file: %v, want %v", !bytes.Equal(data, join(orig)), !tt.unchanged)
			}
			max := tt.maxUnsign
			if max == 0 {
				max = 10
			}
			_, err := Verify(VerifyOptions{PublicKey: tt.pub, MaxUnsigned: max}, Input{Name: "audit.jsonl", R: bytes.NewReader(data)})
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("got %v, want a *VerifyError", err)
			}
			if ve.Line != tt.wantLine || ve.Reason != tt.wantReason {
				t.Fatalf("got line %d %q (%v), want line %d %q", ve.Line, ve.Reason, err, tt.wantLine, tt.wantReason)
			}
			if !strings.HasPrefix(err.Error(), "audit.jsonl:") {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}

func TestVerifyIntactVariants(t *testing.T) {
	orig, pub := chainFixture(t)
	tests := []struct {
		name string
		data []byte
		opts VerifyOptions
		want Report
	}{
		{"with key", join(orig), VerifyOptions{PublicKey: pub}, Report{Files: 1, Lines: 33, Records: 30, Checkpoints: 3, FirstSeq: 1, LastSeq: 33, SignedThrough: 32, SignaturesChecked: true}},
		{"without key", join(orig), VerifyOptions{}, Report{Files: 1, Lines: 33, Records: 30, Checkpoints: 3, FirstSeq: 1, LastSeq: 33, Unsigned: 30}},
		{"partial start", join(orig[12:]), VerifyOptions{PublicKey: pub, Partial: true}, Report{Files: 1, Lines: 21, Records: 19, Checkpoints: 2, FirstSeq: 13, LastSeq: 33, SignedThrough: 32, SignaturesChecked: true}},
		{"unsigned tail within limit", join(orig[:30]), VerifyOptions{PublicKey: pub, MaxUnsigned: 8}, Report{Files: 1, Lines: 30, Records: 28, Checkpoints: 2, FirstSeq: 1, LastSeq: 30, SignedThrough: 21, Unsigned: 8, SignaturesChecked: true}},
		{"empty", nil, VerifyOptions{PublicKey: pub}, Report{Files: 1, SignaturesChecked: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Verify(tt.opts, Input{Name: "f", R: bytes.NewReader(tt.data)})
			if err != nil {
				t.Fatalf("got %v, want nil", err)
			}
			got.Head = ""
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestVerifyAcrossInputs(t *testing.T) {
	orig, pub := chainFixture(t)
	a, b := join(orig[:11]), join(orig[11:])
	if _, err := Verify(VerifyOptions{PublicKey: pub}, Input{"a", bytes.NewReader(a)}, Input{"b", bytes.NewReader(b)}); err != nil {
		t.Fatalf("split chain: %v", err)
	}
	// Edit the last line of the first input: caught at the first line of the next.
	a2 := bytes.Replace(a, []byte(`"upto_seq":10`), []byte(`"upto_seq":10 `), 1)
	_, err := Verify(VerifyOptions{PublicKey: pub}, Input{"a", bytes.NewReader(a2)}, Input{"b", bytes.NewReader(b)})
	var ve *VerifyError
	if !errors.As(err, &ve) || ve.File != "b" || ve.Line != 1 || ve.Reason != ReasonPrevMismatch || !strings.Contains(ve.Detail, "last line of a") {
		t.Fatalf("got %v, want prev mismatch at b:1 naming a", err)
	}
}

// TestVerifyEach: Each sees every record but the checkpoints, in order, and
// nothing past the line whose prev breaks the chain.
func TestVerifyEach(t *testing.T) {
	cfg := testConfig(t)
	cfg.CheckpointEvery = 3
	_, pub := writeRecords(t, cfg, 7)
	var seqs []uint64
	each := func(r *Record) { seqs = append(seqs, r.Seq) }
	rep, err := VerifyFiles(VerifyOptions{PublicKey: pub, Each: each}, cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	// Checkpoints after records 3 and 6 (seq 4 and 8) and Close's (seq 10).
	if want := []uint64{1, 2, 3, 5, 6, 7, 9}; fmt.Sprint(seqs) != fmt.Sprint(want) || rep.Records != len(want) {
		t.Fatalf("got seqs %v (%d records), want %v", seqs, rep.Records, want)
	}
	b, _ := os.ReadFile(cfg.File)
	lines := strings.SplitAfter(string(b), "\n")
	lines[4] = strings.Replace(lines[4], `"seq":5`, `"seq":5 `, 1)
	if err := os.WriteFile(cfg.File, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	seqs = nil
	if _, err := VerifyFiles(VerifyOptions{PublicKey: pub, Each: each}, cfg.File); err == nil {
		t.Fatal("verify of an altered line: got nil, want an error")
	}
	if want := []uint64{1, 2, 3, 5}; fmt.Sprint(seqs) != fmt.Sprint(want) {
		t.Fatalf("after altering line 5: got seqs %v, want %v (the altered line passes its own checks; the next line's prev breaks)", seqs, want)
	}
}
