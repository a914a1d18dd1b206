package gateway

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
)

// Response inspection: what an intercepted or plain HTTP response carries
// back to the agent (instructions injected into a page, an API answer, an
// MCP tool description, an SSE event) is scanned and, when it has findings,
// decided on by policy again (input.content.findings, where "response.*" or
// "sse.event"), before the agent reads it. The decision flags (an allow: the
// default), strips (an allow with data.airlock.egress.strip: the hidden text
// and injected instructions are removed, inspect.StripResponse) or blocks (a
// deny). A body of declared length up to respDecideMax is read and decided
// whole: a block refuses it before a byte reaches the agent. An SSE stream
// is decided event by event (respstream.go): a block ends it at the event
// boundary, before that event, with a final error event. Any other longer
// or unsized body is decided piece by piece as it is read: a block cuts it
// there (the client sees a truncated response, never one passed off as
// complete).
const (
	respScanPiece = 64 << 10
	respScanMax   = 8 << 20 // bytes of one response scanned
)

// respDecideMax bounds the response bodies read whole to be decided on.
const respDecideMax = 1 << 20

// inspectResponse scans resp's body when inspection is on and the body is
// text the agent reads (not compressed). cut abandons the upstream the body
// comes from (a stream cut short must not be reused).
func (g *Gateway) inspectResponse(rc *reqCtx, resp *http.Response, cut func()) error {
	sc := g.cfg.Inspector
	if sc == nil || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if !readableResponse(ct) {
		return nil
	}
	mt, _, _ := mime.ParseMediaType(ct)
	sse := mt == "text/event-stream"
	n := resp.ContentLength
	sized := n > 0 && n <= respDecideMax && !sse
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	if enc == "identity" {
		enc = ""
	}
	if enc != "" && (!sized || decoderOf(enc) == nil) {
		return nil // a compressed stream, or an encoding not read: passed unread
	}
	if rc.late == nil {
		rc.late = &lateFindings{}
	}
	if sized {
		return g.decideResponse(rc, resp, sc, ct, enc)
	}
	resp.Body = &respStream{g: g, rc: rc, r: resp.Body, sc: sc, ct: ct, sse: sse, sized: resp.ContentLength >= 0, cut: cut}
	return nil
}

// decideResponse reads a sized response body, scans it (a gzip or deflate
// body decoded, up to respScanMax bytes), and asks policy about its
// findings: a deny refuses the response, a strip rewrites it (sent
// uncompressed, Content-Length fixed; ETag, Content-MD5 and digests dropped,
// as they described the original); the body is put back for relay.
func (g *Gateway) decideResponse(rc *reqCtx, resp *http.Response, sc Inspector, ct, enc string) error {
	raw := make([]byte, resp.ContentLength)
	if _, err := io.ReadFull(resp.Body, raw); err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("reading response: %w", err))
	}
	resp.Body = replayBody{bytes.NewReader(raw), resp.Body}
	body, whole := raw, true
	if enc != "" {
		var ok bool
		if body, whole, ok = decodeBody(enc, raw); !ok {
			return nil // not what it says it is: the client's to reject
		}
	}
	fs := sc.ScanResponse(ct, body)
	if !whole {
		fs = append(fs, inspect.Finding{Detector: inspect.DetectorOversize, Class: inspect.ClassOversize, Where: inspect.WhereResponse, Confidence: inspect.High})
	}
	if len(fs) == 0 || !rc.late.add(fs) {
		return nil
	}
	d, err := g.askLate(rc, rc.late, false, "in the response")
	if err != nil || !strips(d) {
		return err
	}
	out, spans := inspect.StripResponse(ct, body)
	if len(spans) == 0 {
		return nil
	}
	if !whole {
		return &denial{reason: ReasonStripFixedLength, status: http.StatusForbidden,
			msg: fmt.Sprintf("the policy strips this response, but it decodes to more than the %d bytes read: refused instead", respScanMax)}
	}
	rc.late.strip(spans, 0)
	resp.Header.Del("Content-Encoding")
	resp.Body = replayBody{bytes.NewReader(out), resp.Body}
	resp.ContentLength = int64(len(out))
	resp.Header.Set("Content-Length", strconv.Itoa(len(out)))
	dropValidators(resp.Header)
	return nil
}

// strips reports whether a decision that let a response through asks for it
// stripped (not in report mode: there it is only recorded as allowed).
func strips(d policy.Decision) bool {
	return d.Allowed && d.Strip && d.Mode != policy.ModeReport
}

// dropValidators removes the headers that describe the original bytes of a
// response the gateway rewrote.
func dropValidators(h http.Header) {
	for _, k := range []string{"Etag", "Content-Md5", "Digest", "Content-Digest", "Repr-Digest"} {
		h.Del(k)
	}
}

// decoderOf returns the reader of a Content-Encoding the gateway reads
// (gzip; deflate, zlib-wrapped as RFC 9110 says), or nil.
func decoderOf(enc string) func(io.Reader) (io.Reader, error) {
	switch enc {
	case "gzip", "x-gzip":
		return func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }
	case "deflate":
		return func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }
	}
	return nil
}

// decodeBody decodes a compressed body, at most respScanMax bytes of it
// (whole: all of it); ok is false when it does not decode.
func decodeBody(enc string, raw []byte) (out []byte, whole, ok bool) {
	r, err := decoderOf(enc)(bytes.NewReader(raw))
	if err != nil {
		return nil, false, false
	}
	out, err = io.ReadAll(io.LimitReader(r, respScanMax+1))
	if err != nil {
		return nil, false, false
	}
	if len(out) > respScanMax {
		return out[:respScanMax], false, true
	}
	return out, true, true
}

// readableResponse reports whether a content type is text an agent reads.
func readableResponse(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xhtml+xml" || mt == "application/xml"
}
