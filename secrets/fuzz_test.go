package secrets

import (
	"bytes"
	"io"
	"path"
	"strings"
	"sync/atomic"
	"testing"
)

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/a/../b", "/%2e%2e/", "/a%2fb", "//x", "/a\\b", "/%252e", "/a;b", "/%c0%ae%c0%ae/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		got, err := cleanPath(in)
		if err != nil {
			return
		}
		if strings.Contains(got, "//") || strings.Contains(got, "\\") || strings.ContainsRune(got, 0) {
			t.Fatalf("cleanPath(%q) = %q: unsafe result", in, got)
		}
		trimmed := strings.TrimSuffix(got, "/")
		if trimmed != "" && path.Clean(trimmed) != trimmed {
			t.Fatalf("cleanPath(%q) = %q: not clean (%q)", in, got, path.Clean(trimmed))
		}
	})
}

// Whatever surrounds the value and however the stream is cut, the value never
// comes out of the scrubber.
func FuzzScrubReader(f *testing.F) {
	f.Add([]byte("before"), []byte("after"), uint8(1), uint8(3))
	f.Add([]byte(""), []byte(canary[:10]), uint8(7), uint8(1))
	f.Add([]byte(canary[:20]), []byte(canary[20:]), uint8(13), uint8(2))
	s := newScrubber(CanaryForms(canary))
	f.Fuzz(func(t *testing.T, pre, post []byte, size, copies uint8) {
		var data []byte
		for i := 0; i <= int(copies%4); i++ {
			data = append(data, pre...)
			data = append(data, canary...)
			data = append(data, post...)
		}
		var n atomic.Int64
		r := newScrubReader(s, io.NopCloser(&chunker{data: data, sizes: []int{int(size%64) + 1}}), &n, nil)
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(out, []byte(canary)) {
			t.Fatalf("value survived scrubbing: %q", out)
		}
		if n.Load() == 0 {
			t.Fatal("no scrub counted")
		}
	})
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("secrets:\n  - id: a\n    env: A\nbindings:\n  - secret: a\n    sandboxes: {ids: [x]}\n    host: a.example\n    template: 'Bearer {{value}}'\n"))
	f.Add([]byte("secrets: [{id: a, command: [x], ttl: 1s}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data)
		if err != nil {
			return
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("Parse accepted a config Validate rejects: %v", err)
		}
	})
}
