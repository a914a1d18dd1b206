package secrets

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
)

// Placeholder scanning: finding placeholder-shaped tokens anywhere in a
// request (URL, Host, header names and values, Basic credentials, trailers,
// body), and the body reader that replays a buffered body or guards a long
// one as it streams.

// hit is one placeholder-shaped token and where it was seen.
type hit struct {
	token string // lower-cased; may be shorter than a real placeholder
	where string
}

// findTokens appends every placeholder-shaped token in s, matching the prefix
// without regard to case. It looks for the case variants of "-ph-" (a few
// vectorized searches) and only then compares the rest, so clean input costs
// no copy.
func findTokens(s, where string, hits *[]hit) {
	const head = len("airlock")
	var found []int
	for _, mid := range [...]string{"-ph-", "-pH-", "-Ph-", "-PH-"} {
		for off := 0; ; {
			i := strings.Index(s[off:], mid)
			if i < 0 {
				break
			}
			found = append(found, off+i)
			off += i + 1
		}
	}
	if len(found) == 0 {
		return
	}
	sort.Ints(found)
	for _, i := range found {
		if i < head || !strings.EqualFold(s[i-head:i], "airlock") {
			continue
		}
		j := i + len("-ph-")
		k := j
		for k < len(s) && k-j < placeholderRandLen && isPHChar(s[k]|0x20) {
			k++
		}
		*hits = append(*hits, hit{token: strings.ToLower(s[i-head : k]), where: where})
	}
}

func isPHChar(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '2' && c <= '7') }

// scanRequest finds placeholder tokens anywhere in the request: URL, Host,
// header names and values (Basic credentials decoded), trailers and body.
func (in *Injector) scanRequest(sb Sandbox, req *http.Request) ([]hit, error) {
	var hits []hit
	u := req.URL
	findTokens(req.Host, "host", &hits)
	findTokens(u.Host, "host", &hits)
	findTokens(u.Opaque, "path", &hits)
	if u.User != nil {
		findTokens(u.User.String(), "userinfo", &hits)
	}
	findTokens(u.EscapedPath(), "path", &hits)
	if p, err := url.PathUnescape(u.EscapedPath()); err == nil {
		findTokens(p, "path", &hits)
	}
	findTokens(u.RawQuery, "query", &hits)
	if q, err := url.QueryUnescape(u.RawQuery); err == nil {
		findTokens(q, "query", &hits)
	}
	findTokens(u.Fragment, "fragment", &hits)
	scanHeaders := func(hdr http.Header, kind string) {
		for name, vals := range hdr {
			where := kind + ":" + http.CanonicalHeaderKey(name)
			findTokens(name, where, &hits)
			for _, v := range vals {
				findTokens(v, where, &hits)
				if len(v) > 6 && strings.EqualFold(v[:6], "basic ") {
					if dec, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v[6:])); err == nil {
						findTokens(string(dec), where, &hits)
					}
				}
			}
		}
	}
	scanHeaders(req.Header, "header")
	if err := in.scanBody(sb, req, &hits); err != nil {
		return nil, err
	}
	scanHeaders(req.Trailer, "trailer") // filled once a buffered body was read
	return hits, nil
}

// scanBody buffers up to maxBody bytes and scans them; the request gets an
// equivalent body. A longer body is scanned as it streams: the reader fails
// with a *Denial before any byte of a placeholder is passed on. What is
// buffered counts against the sandbox's body-scan budget until the body is
// read to its end or closed; past the budget the request is refused with a
// *BusyError.
func (in *Injector) scanBody(sb Sandbox, req *http.Request, hits *[]hit) error {
	if req.Body == nil || req.Body == http.NoBody {
		return nil
	}
	if g, ok := req.Body.(*bodyGuard); ok && g.buffered != nil {
		findTokens(string(g.buffered), "body", hits)
		return nil
	}
	buf, res, err := in.readForScan(sb, req.Body, req.ContentLength, in.maxBody+1)
	if err != nil {
		req.Body.Close()
		var busy *BusyError
		if errors.As(err, &busy) {
			return err
		}
		return &Denial{Code: CodeBodyUnreadable, Where: "body", Msg: "request body could not be read"}
	}
	findTokens(string(buf), "body", hits)
	if int64(len(buf)) <= in.maxBody {
		req.Body.Close()
		g := &bodyGuard{buffered: buf, r: bytes.NewReader(buf)}
		holdUntilDone(g, res)
		req.Body = g
		req.GetBody = func() (io.ReadCloser, error) {
			return &bodyGuard{buffered: buf, r: bytes.NewReader(buf)}, nil
		}
		return nil
	}
	orig := req.Body
	g := &bodyGuard{
		r:      io.MultiReader(bytes.NewReader(buf), orig),
		closer: orig,
		stream: true,
		onDeny: func(d *Denial) { _ = in.logDeny(sb, d) },
	}
	holdUntilDone(g, res)
	req.Body = g
	req.GetBody = nil
	return nil
}

// bodyGuard replays a scanned body or streams a long one, holding back
// len(PlaceholderPrefix)-1 bytes so that a prefix split across reads is seen
// before any of it leaves.
type bodyGuard struct {
	buffered []byte // whole body, already scanned (nil when streaming)
	r        io.Reader
	closer   io.Closer
	stream   bool
	onDeny   func(*Denial)
	pending  []byte
	out      []byte
	err      error
	res      *reservation // the scan budget the buffer holds; nil for a GetBody copy
}

func (g *bodyGuard) Read(p []byte) (int, error) {
	if !g.stream {
		n, err := g.r.Read(p)
		if err != nil {
			g.res.release()
		}
		return n, err
	}
	for len(g.out) == 0 {
		if g.err != nil {
			g.res.release()
			return 0, g.err
		}
		var chunk [32 * 1024]byte
		n, err := g.r.Read(chunk[:])
		g.pending = append(g.pending, chunk[:n]...)
		if bytes.Contains(bytes.ToLower(g.pending), []byte(PlaceholderPrefix)) {
			d := &Denial{Code: CodePlaceholderMisuse, Flag: FlagPlaceholderLeak, Where: "body",
				Msg: "a placeholder in a request body"}
			g.err, g.pending = d, nil
			if g.onDeny != nil {
				g.onDeny(d)
			}
			return 0, d
		}
		keep := len(PlaceholderPrefix) - 1
		if err != nil {
			g.err, keep = err, 0
		}
		if len(g.pending) > keep {
			cut := len(g.pending) - keep
			g.out = append(g.out, g.pending[:cut]...)
			g.pending = append([]byte(nil), g.pending[cut:]...)
		}
	}
	n := copy(p, g.out)
	g.out = g.out[n:]
	return n, nil
}

func (g *bodyGuard) Close() error {
	g.res.release()
	if g.closer != nil {
		return g.closer.Close()
	}
	return nil
}
