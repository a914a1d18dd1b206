package secrets

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"io"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
)

func TestCanaryFormsCoverEncodings(t *testing.T) {
	forms := CanaryForms(canary)
	b := []byte(canary)
	want := []string{
		canary,
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
		url.QueryEscape(canary), url.PathEscape(canary),
	}
	for _, w := range want {
		found := false
		for _, f := range forms {
			if f == w {
				found = true
			}
		}
		if !found {
			t.Errorf("CanaryForms lacks %q", w)
		}
	}
	for i := 1; i < len(forms); i++ {
		if len(forms[i]) > len(forms[i-1]) {
			t.Fatalf("forms not longest first at %d", i)
		}
	}
	if CanaryForms("") != nil {
		t.Error("CanaryForms(\"\"): got forms, want nil")
	}
}

// The value base64-encoded at any offset inside a larger blob (an echoed
// header block, a JSON document) still contains one of its forms.
func TestBase64AtAnyOffsetIsCaught(t *testing.T) {
	s := newScrubber(CanaryForms(canary))
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		for off := 0; off < 6; off++ {
			blob := strings.Repeat("x", off) + canary + "tail"
			out, n := s.scrubString(enc.EncodeToString([]byte(blob)))
			if n == 0 {
				t.Errorf("offset %d: base64 of blob not scrubbed: %q", off, out)
			}
		}
	}
}

// chunker returns reads of the given sizes in turn.
type chunker struct {
	data  []byte
	sizes []int
	i     int
}

func (c *chunker) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := c.sizes[c.i%len(c.sizes)]
	c.i++
	if n > len(p) {
		n = len(p)
	}
	if n > len(c.data) {
		n = len(c.data)
	}
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

func TestScrubReaderSplitAcrossReads(t *testing.T) {
	s := newScrubber(CanaryForms(canary))
	hexv := hex.EncodeToString([]byte(canary))
	body := "start " + canary + " mid " + base64.StdEncoding.EncodeToString([]byte(canary)) +
		" " + hexv + " " + url.QueryEscape(canary) + " end" + canary
	for _, sizes := range [][]int{{1}, {2}, {3}, {7}, {1, 5, 13}, {len(canary) - 1}, {len(canary)}, {4096}} {
		var count atomic.Int64
		r := newScrubReader(s, io.NopCloser(&chunker{data: []byte(body), sizes: sizes}), &count, nil)
		got, err := io.ReadAll(iotest.OneByteReader(r))
		if err != nil {
			t.Fatalf("sizes %v: %v", sizes, err)
		}
		for _, f := range CanaryForms(canary) {
			if bytes.Contains(got, []byte(f)) {
				t.Errorf("sizes %v: output contains form %q", sizes, f)
			}
		}
		if count.Load() != 5 {
			t.Errorf("sizes %v: got %d scrubs, want 5", sizes, count.Load())
		}
		want := "start [REDACTED] mid [REDACTED] [REDACTED] [REDACTED] end[REDACTED]"
		if string(got) != want {
			t.Errorf("sizes %v: got %q, want %q", sizes, got, want)
		}
	}
}

func TestScrubReaderPassesCleanDataUnchanged(t *testing.T) {
	s := newScrubber(CanaryForms(canary))
	data := bytes.Repeat([]byte("harmless data, canary-S3cr3t but not the whole value\n"), 1000)
	var count atomic.Int64
	r := newScrubReader(s, io.NopCloser(&chunker{data: data, sizes: []int{1, 100, 7000}}), &count, nil)
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) || count.Load() != 0 {
		t.Errorf("got %d bytes and %d scrubs, want %d bytes unchanged and 0", len(got), count.Load(), len(data))
	}
}
