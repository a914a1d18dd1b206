package inspect_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/inspect/inspecttest"
)

// fastAndPlain are two scanners of one key, one forced to the plain walk.
func fastAndPlain(t testing.TB, cfg inspect.Config) (fast, plain *inspect.Scanner) {
	t.Helper()
	fast, err := inspect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	plain, err = inspect.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	inspect.PlainWalk(plain)
	return fast, plain
}

func findingKeys(fs []inspect.Finding) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = fmt.Sprintf("%+v", f)
	}
	slices.Sort(out)
	return out
}

// sameFindings compares the two scanners on data and returns how many
// findings they agreed on.
func sameFindings(t *testing.T, name, where string, fast, plain *inspect.Scanner, data []byte) int {
	t.Helper()
	got, want := findingKeys(fast.Scan(where, data)), findingKeys(plain.Scan(where, data))
	if !slices.Equal(got, want) {
		t.Errorf("%s (%d bytes at %s): fast path found %v, plain walk %v", name, len(data), where, got, want)
	}
	return len(want)
}

// TestFastPathSameFindings: Scan with the lanes and Scan with the plain
// walk give exactly the same findings on every body kind, on every corpus
// case's data (alone, and set at varying offsets in long bodies so its
// secrets straddle the lanes' edges, and written backwards), on the fuzz
// corpus, and on random
// text with secrets sown through it.
func TestFastPathSameFindings(t *testing.T) {
	fast, plain := fastAndPlain(t, inspect.Config{Key: testKey})
	bodies := inspect.BodyKinds(t)
	agreed := 0
	for _, name := range inspect.BodyKindNames(bodies) {
		agreed += sameFindings(t, name, "body", fast, plain, bodies[name])
	}
	var pieces [][]byte
	for _, c := range inspecttest.Cases(inspect.NewCanaries(testKey).For("sandbox-fast")) {
		for _, p := range append([][]byte{c.Body, []byte(c.Path), c.Response}, c.Pieces...) {
			if len(p) > 0 {
				pieces = append(pieces, p)
			}
		}
		for _, h := range c.Headers {
			pieces = append(pieces, []byte(h[1]))
		}
	}
	fuzz, _ := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzScan", "*"))
	for _, f := range fuzz {
		if b, err := os.ReadFile(f); err == nil {
			pieces = append(pieces, b)
		}
	}
	prose := bodies["prose"]
	rnd := rand.New(rand.NewPCG(13, 17))
	for i, p := range pieces {
		agreed += sameFindings(t, "piece "+strconv.Itoa(i), "body", fast, plain, p)
		// The piece inside prose, at an offset that moves it across the
		// lanes' edges of a body a little over 4 KiB.
		off := rnd.IntN(4096)
		body := slices.Concat(prose[:off], p, prose[off:off+4096-off%1024])
		agreed += sameFindings(t, "piece "+strconv.Itoa(i)+" in prose", "body", fast, plain, body)
		// Written backwards: the reversed keywords' checks.
		back := slices.Clone(p)
		slices.Reverse(back)
		agreed += sameFindings(t, "piece "+strconv.Itoa(i)+" reversed", "body", fast, plain, slices.Concat(prose[:off], back))
	}
	// Random text: separators, keywords and every piece's tokens cut
	// apart and sown at random.
	var words [][]byte
	for _, p := range pieces {
		words = append(words, bytes.FieldsFunc(p, func(r rune) bool { return strings.ContainsRune(" \n\t\",:{}[]", r) })...)
	}
	for iter := range 200 {
		var b []byte
		n := 1024 + rnd.IntN(8192)
		for len(b) < n {
			b = append(b, words[rnd.IntN(len(words))]...)
			b = append(b, " \n=:\"/._-"[rnd.IntN(9)])
		}
		agreed += sameFindings(t, "sown "+strconv.Itoa(iter), "body", fast, plain, b)
	}
	t.Logf("%d pieces, %d findings the same both ways", len(pieces), agreed)
	if agreed < len(pieces) {
		t.Errorf("only %d findings over %d pieces: the inputs do not exercise the rules", agreed, len(pieces))
	}
}

// FuzzFastPath: the lanes and the plain walk agree on any input, repeated
// to past the size the lanes start at.
func FuzzFastPath(f *testing.F) {
	f.Add([]byte("k=QUtJQVozTVRYUTdSTEs0UE5XQkU="), 3)
	f.Add([]byte(`{"token":"ghp_0123456789abcdefghijklmnopqrstuvwxyz"}`), 100)
	fast, plain := fastAndPlain(f, inspect.Config{Key: testKey, MaxBytes: 1 << 16, MaxDecoded: 1 << 16})
	f.Fuzz(func(t *testing.T, data []byte, pad int) {
		if len(data) == 0 {
			return
		}
		pad = min(max(pad, 0), 4096)
		body := bytes.Repeat([]byte{' '}, pad)
		for len(body) < 1200 {
			body = append(body, data...)
		}
		sameFindings(t, "fuzz", "body", fast, plain, body)
	})
}
