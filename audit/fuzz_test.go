package audit

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"testing"
)

// fuzzKey is a fixed key so the checked-in corpus can hold validly signed lines.
var fuzzKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{0x42}, ed25519.SeedSize))

// FuzzVerify feeds arbitrary files to the verifier: it must never panic, must
// report a *VerifyError with a line inside the input on failure, and must never
// accept a file that is not whole, valid, chained JSON lines.
func FuzzVerify(f *testing.F) {
	f.Add([]byte(""), false)
	f.Add([]byte("\n"), false)
	f.Add([]byte(`{"seq":1,"ts":"2025-01-01T00:00:00Z","prev":"`+GenesisPrev+`","id":"a","kind":"http"}`+"\n"), false)
	f.Add([]byte(`{"seq":1,"ts":"2025-01-01T00:00:00Z","prev":"`+GenesisPrev+`","id":"a","kind":"checkpoint","checkpoint":{"head":"`+GenesisPrev+`","upto_seq":0,"key_id":"x","signature":"AA=="}}`+"\n"), true)
	f.Add([]byte(`{"seq":1`), true)
	f.Fuzz(func(t *testing.T, data []byte, withKey bool) {
		opts := VerifyOptions{MaxUnsigned: -1}
		if withKey {
			opts.PublicKey = fuzzKey.Public().(ed25519.PublicKey)
		}
		rep, err := Verify(opts, Input{Name: "f", R: bytes.NewReader(data)})
		lines := bytes.Count(data, []byte("\n"))
		if err != nil {
			var ve *VerifyError
			if !errors.As(err, &ve) {
				t.Fatalf("non-VerifyError %T: %v", err, err)
			}
			if ve.Line < 1 || ve.Line > lines+1 {
				t.Fatalf("line %d outside the input's %d lines", ve.Line, lines+1)
			}
			return
		}
		if len(data) > 0 && data[len(data)-1] != '\n' {
			t.Fatalf("accepted a file with a torn tail: %q", data)
		}
		if rep.Lines != lines {
			t.Fatalf("verified %d lines, file has %d", rep.Lines, lines)
		}
		// An accepted file is re-verifiable after one more byte anywhere
		// inside a line only if that byte changes nothing: flip one and expect
		// failure unless the line is the last (whose successor would catch it).
		if rep.Lines >= 2 {
			first := bytes.IndexByte(data, '\n')
			mut := bytes.Clone(data)
			mut[first/2] ^= 0x01
			if _, err := Verify(opts, Input{Name: "f", R: bytes.NewReader(mut)}); err == nil {
				t.Fatalf("accepted a file whose first line was altered: %q", mut)
			}
		}
	})
}
