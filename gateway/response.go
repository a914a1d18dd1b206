package gateway

import (
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
// text the agent reads, compressed (gzip, deflate, br, zstd) or not. cut
// abandons the upstream the body comes from (a stream cut short must not be
// reused), made only for a body scanned as it streams.
func (g *Gateway) inspectResponse(rc *reqCtx, resp *http.Response, s *httpSession) error {
	sc := g.cfg.Inspector
	if sc == nil || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	mt, ok := g.parseMediaType(ct)
	if !ok || !readableMediaType(mt) {
		return nil
	}
	sse := mt == "text/event-stream"
	n := resp.ContentLength
	sized := n > 0 && n <= respDecideMax && !sse
	enc := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	if enc == "identity" {
		enc = ""
	}
	if enc != "" && decoderOf(enc) == nil {
		return nil // an encoding not read (compress, a list of several): passed unread
	}
	if rc.late == nil {
		rc.late = &lateFindings{}
	}
	if sized {
		return g.decideResponse(rc, resp, sc, ct, enc)
	}
	b := &respStream{g: g, rc: rc, r: resp.Body, sc: sc, ct: ct, sse: sse, sized: resp.ContentLength >= 0, cut: s.cutUpstream(rc), enc: enc}
	if enc != "" {
		b.dec = newRespDecoder(enc)
	}
	resp.Body = b
	return nil
}

// decideResponse reads a sized response body, scans it (a gzip, deflate, br
// or zstd body decoded, up to respScanMax bytes and respBombRatio times its
// size), and asks policy about its
// findings: a deny refuses the response, a strip rewrites it (sent
// uncompressed, Content-Length fixed; ETag, Content-MD5 and digests dropped,
// as they described the original); the body is put back for relay.
func (g *Gateway) decideResponse(rc *reqCtx, resp *http.Response, sc Inspector, ct, enc string) error {
	raw := make([]byte, resp.ContentLength)
	if _, err := io.ReadFull(resp.Body, raw); err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("reading response: %w", err))
	}
	resp.Body = newReplayBody(raw, resp.Body)
	body, whole, bomb := raw, true, false
	var fs []inspect.Finding
	if enc != "" {
		var ok bool
		if body, whole, ok, bomb = decodeBody(enc, raw); !ok {
			// Not what it says it is: the client's decoder rejects it too,
			// but policy hears of it.
			body, fs = nil, []inspect.Finding{malformedEncoding(enc)}
		}
	}
	if len(body) > 0 {
		fs = append(fs, sc.ScanResponse(ct, body)...)
	}
	if !whole {
		fs = append(fs, oversizeResponse(enc, bomb))
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
			msg: "the policy strips this response, but it decodes to more than was read: refused instead"}
	}
	rc.late.strip(spans, 0)
	resp.Header.Del("Content-Encoding")
	resp.Body = newReplayBody(out, resp.Body)
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

// mediaType is a Content-Type and what mime.ParseMediaType made of it.
type mediaType struct {
	ct, mt string
	ok     bool
}

// parseMediaType is mime.ParseMediaType's media type of ct (ok false when it
// fails), remembering the last one: the responses of a kept-alive origin
// repeat one Content-Type, and the parse allocates.
func (g *Gateway) parseMediaType(ct string) (mt string, ok bool) {
	if last := g.lastMediaType.Load(); last != nil && last.ct == ct {
		return last.mt, last.ok
	}
	mt, _, err := mime.ParseMediaType(ct)
	g.lastMediaType.Store(&mediaType{ct: ct, mt: mt, ok: err == nil})
	return mt, err == nil
}

// readableMediaType reports whether a parsed media type is text an agent
// reads.
func readableMediaType(mt string) bool {
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xhtml+xml" || mt == "application/xml"
}

// oversizeResponse is the finding of a response read only in part: past
// respScanMax decoded bytes, or (bomb) past respBombRatio times its
// compressed size.
func oversizeResponse(enc string, bomb bool) inspect.Finding {
	f := inspect.Finding{Detector: inspect.DetectorOversize, Class: inspect.ClassOversize, Where: inspect.WhereResponse,
		Encoding: enc, Confidence: inspect.High}
	if bomb {
		f.Score = respBombRatio // decoded past this many times its size
	}
	return f
}

// malformedEncoding is the finding of a response body that does not decode
// as its Content-Encoding says.
func malformedEncoding(enc string) inspect.Finding {
	return inspect.Finding{Detector: inspect.DetectorMalformed, Class: inspect.ClassMalformed, Where: inspect.WhereResponse,
		Encoding: enc, Confidence: inspect.High}
}
