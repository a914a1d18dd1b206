package gateway

import (
	"mime"
	"testing"
)

// TestResponseMediaTypeRemembered: parseMediaType remembers only the last
// Content-Type, and what it answers is mime.ParseMediaType's for each value
// in any order (a remembered answer is never another type's).
func TestResponseMediaTypeRemembered(t *testing.T) {
	g := &Gateway{}
	seq := []string{
		"text/plain; charset=utf-8", "text/plain; charset=utf-8", "application/json",
		"text/html; charset", // a bad parameter: not parsed, so not read
		"text/plain; charset=utf-8", "TEXT/HTML", "", "image/png", "image/png", "text/event-stream",
	}
	for i, ct := range seq {
		mt, ok := g.parseMediaType(ct)
		wantMT, _, err := mime.ParseMediaType(ct)
		if ok != (err == nil) || mt != wantMT {
			t.Errorf("%d: parseMediaType(%q) = %q, %v; want %q, %v", i, ct, mt, ok, wantMT, err == nil)
		}
	}
}
