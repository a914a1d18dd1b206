package secrets

import (
	"bytes"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/airlock-dev/airlock/audit"
)

// scrubber holds the byte patterns of one or more values and replaces each
// occurrence with [REDACTED]. It is immutable and shared by all requests that
// used the same version of a secret.
//
// The patterns live in a closure, like Value's bytes, so that no printing of a
// struct that holds a scrubber can reach them.
type scrubber struct {
	patterns func() [][]byte // longest first
	// folded are the patterns with A-Z lowered, for header names, which
	// arrive canonicalized (HTTP/1) or lower-cased (HTTP/2).
	folded func() [][]byte
	maxLen int
}

func newScrubber(forms []string) *scrubber {
	s := &scrubber{}
	seen := map[string]bool{}
	var pats, folded [][]byte
	for _, f := range forms {
		if f == "" || seen[f] {
			continue
		}
		seen[f] = true
		pats = append(pats, []byte(f))
		folded = append(folded, asciiLower([]byte(f)))
		if len(f) > s.maxLen {
			s.maxLen = len(f)
		}
	}
	s.patterns = func() [][]byte { return pats }
	s.folded = func() [][]byte { return folded }
	return s
}

// asciiLower returns a copy of b with A-Z lowered; every other byte, and so
// every offset, stays as it was.
func asciiLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}

// merge returns a scrubber with the patterns of all given scrubbers.
func mergeScrubbers(ss ...*scrubber) *scrubber {
	var forms []string
	for _, s := range ss {
		for _, p := range s.patterns() {
			forms = append(forms, string(p))
		}
	}
	// keep longest first so that a longer form wins over its own substring
	sortLongestFirst(forms)
	return newScrubber(forms)
}

func sortLongestFirst(forms []string) {
	for i := 1; i < len(forms); i++ {
		for j := i; j > 0 && len(forms[j]) > len(forms[j-1]); j-- {
			forms[j], forms[j-1] = forms[j-1], forms[j]
		}
	}
}

// next finds the leftmost complete match in b (longest on a tie).
func (s *scrubber) next(b []byte) (idx, n int) { return nextIn(s.patterns(), b) }

func nextIn(patterns [][]byte, b []byte) (idx, n int) {
	idx = -1
	for _, p := range patterns {
		i := bytes.Index(b, p)
		if i < 0 {
			continue
		}
		if idx < 0 || i < idx || (i == idx && len(p) > n) {
			idx, n = i, len(p)
		}
	}
	return idx, n
}

// scrubString replaces every complete match in s and returns the count.
func (s *scrubber) scrubString(in string) (string, int) {
	return replaceAll(in, []byte(in), s.patterns(), audit.Redacted)
}

// redactedName replaces a form in a header name: a valid token, so the
// response stays well-formed.
const redactedName = "REDACTED"

// scrubName replaces every match in a header name regardless of ASCII case:
// a name arrives canonicalized ("X-Sk-Abcdef") or lower-cased (HTTP/2), so a
// value reflected in a name would otherwise pass with only its case changed.
func (s *scrubber) scrubName(in string) (string, int) {
	return replaceAll(in, asciiLower([]byte(in)), s.folded(), redactedName)
}

// replaceAll replaces in in every match of patterns found in key (in itself,
// or a same-length folding of it) with repl, and returns the count.
func replaceAll(in string, key []byte, patterns [][]byte, repl string) (string, int) {
	var out []byte
	count, off := 0, 0
	for {
		i, n := nextIn(patterns, key[off:])
		if i < 0 {
			break
		}
		out = append(out, in[off:off+i]...)
		out = append(out, repl...)
		off += i + n
		count++
	}
	if count == 0 {
		return in, 0
	}
	out = append(out, in[off:]...)
	return string(out), count
}

// scrubReader streams src through the scrubber. It holds back maxLen-1 bytes so a
// match split across reads is still found: a match that starts in the emitted
// part must end inside the buffer, so it was already replaced.
type scrubReader struct {
	s       *scrubber
	src     io.ReadCloser
	pending []byte // scanned-for-complete-matches input not yet safe to emit
	out     []byte // ready to return
	err     error  // sticky error from src
	count   *atomic.Int64
	onEOF   func() // runs once after src's EOF and the last emit (scrubs trailers)
	buf     []byte
}

func newScrubReader(s *scrubber, src io.ReadCloser, count *atomic.Int64, onEOF func()) *scrubReader {
	return &scrubReader{s: s, src: src, count: count, onEOF: onEOF, buf: make([]byte, 32*1024)}
}

func (r *scrubReader) Read(p []byte) (int, error) {
	for len(r.out) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		n, err := r.src.Read(r.buf)
		r.pending = append(r.pending, r.buf[:n]...)
		if err != nil {
			r.err = err
			r.drain(true)
			if err == io.EOF && r.onEOF != nil {
				r.onEOF()
				r.onEOF = nil
			}
			continue
		}
		r.drain(false)
	}
	n := copy(p, r.out)
	r.out = r.out[n:]
	if len(r.out) == 0 {
		r.out = nil
	}
	return n, nil
}

// drain replaces complete matches in pending and moves what is safe to out.
func (r *scrubReader) drain(final bool) {
	for {
		i, n := r.s.next(r.pending)
		if i < 0 {
			break
		}
		r.out = append(r.out, r.pending[:i]...)
		r.out = append(r.out, audit.Redacted...)
		r.pending = r.pending[i+n:]
		r.count.Add(1)
	}
	keep := r.s.maxLen - 1
	if final || keep < 0 {
		keep = 0
	}
	if len(r.pending) > keep {
		cut := len(r.pending) - keep
		r.out = append(r.out, r.pending[:cut]...)
		r.pending = append(r.pending[:0:0], r.pending[cut:]...)
	}
}

func (r *scrubReader) Close() error { return r.src.Close() }

// ScrubResponse prepares the response to an injected request for the sandbox:
// it refuses what cannot be scrubbed (a Content-Encoding other than identity, a
// 101 upgrade, a 206 partial response) with a *ResponseError after closing the
// body; otherwise it scrubs the status line's reason phrase (resp.Status; the
// code stays), header names (in any case) and values (Location included) now,
// wraps the body in a streaming scrubber that also scrubs trailers at the end,
// and drops Content-Length. A nil Applied leaves resp alone. The gateway never
// follows redirects, so a Location is only ever shown, scrubbed.
func (in *Injector) ScrubResponse(a *Applied, resp *http.Response) error {
	if a == nil {
		return nil
	}
	refuse := func(reason string) error {
		if resp.Body != nil {
			resp.Body.Close()
		}
		in.log.Warn("secrets refused response", "secret", a.rec.ID, "reason", reason)
		return &ResponseError{Reason: reason}
	}
	if resp.StatusCode == http.StatusUnauthorized {
		in.unauthorized(a)
	}
	switch resp.StatusCode {
	case http.StatusSwitchingProtocols:
		return refuse("protocol upgrade cannot be scrubbed")
	case http.StatusPartialContent:
		if a.partial {
			break
		}
		return refuse("partial content could carry part of a secret")
	}
	for _, ce := range resp.Header.Values("Content-Encoding") {
		for _, e := range strings.Split(ce, ",") {
			if e = strings.TrimSpace(strings.ToLower(e)); e != "" && e != "identity" {
				return refuse("content-encoding " + e + " cannot be scrubbed")
			}
		}
	}
	a.scrubbed.Add(int64(scrubStatus(a.scrub, resp)))
	a.scrubbed.Add(int64(scrubHeader(a.scrub, resp.Header)))
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = newScrubReader(a.scrub, resp.Body, &a.scrubbed, func() {
			a.scrubbed.Add(int64(scrubHeader(a.scrub, resp.Trailer)))
		})
		resp.ContentLength = -1
		resp.Header.Del("Content-Length")
	}
	return nil
}

// scrubStatus scrubs resp.Status, which Response.Write sends as the reason
// phrase after the code ("401 bad key [REDACTED]"); StatusCode is untouched. A
// Status that does not start with its code is sent whole, and scrubbed whole.
func scrubStatus(s *scrubber, resp *http.Response) int {
	prefix := strconv.Itoa(resp.StatusCode) + " "
	reason, ok := strings.CutPrefix(resp.Status, prefix)
	if !ok {
		prefix, reason = "", resp.Status
	}
	out, n := s.scrubString(reason)
	if n > 0 {
		resp.Status = prefix + out
	}
	return n
}

func scrubHeader(s *scrubber, h http.Header) int {
	count := 0
	for name, vals := range h {
		newName := name
		if n, c := s.scrubName(name); c > 0 {
			newName, count = n, count+c
			delete(h, name)
		}
		out := make([]string, len(vals))
		for i, v := range vals {
			var c int
			out[i], c = s.scrubString(v)
			count += c
		}
		h[newName] = append(h[newName], out...)
		if newName == name {
			h[name] = out
		}
	}
	return count
}
