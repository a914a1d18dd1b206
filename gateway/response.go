package gateway

import (
	"bytes"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
)

// Response inspection: what an intercepted or plain HTTP response carries
// back to the agent (instructions injected into a page, an API answer, an
// MCP tool description, an SSE event) is scanned as it streams, in pieces of
// at most respScanPiece bytes (an SSE stream: event by event), and its
// findings go on the request's audit record. The default flags and audits;
// nothing is held back or changed.
const (
	respScanPiece = 64 << 10
	respScanMax   = 8 << 20 // bytes of one response scanned
)

// inspectResponse scans resp's body when inspection is on and the body is
// text the agent reads. A body of declared length up to respDecideMax is
// read first and, when it has findings, policy is asked again with them
// (input.content.findings, where "response.*"): a deny refuses the response
// before a byte of it reaches the agent (a team's per-host "block"); the
// default policy only records them. A longer or unsized body is scanned as
// it streams and its findings are recorded (flag and audit).
func (g *Gateway) inspectResponse(rc *reqCtx, resp *http.Response) error {
	sc := g.cfg.Inspector
	if sc == nil || resp.Body == nil || resp.Body == http.NoBody {
		return nil
	}
	ct := resp.Header.Get("Content-Type")
	if !readableResponse(ct) || resp.Header.Get("Content-Encoding") != "" && resp.Header.Get("Content-Encoding") != "identity" {
		return nil
	}
	if rc.late == nil {
		rc.late = &lateFindings{}
	}
	mt, _, _ := mime.ParseMediaType(ct)
	if n := resp.ContentLength; n > 0 && n <= respDecideMax && mt != "text/event-stream" {
		return g.decideResponse(rc, resp, sc, ct)
	}
	resp.Body = &respScan{r: resp.Body, sc: sc, ct: ct, sse: mt == "text/event-stream", late: rc.late}
	return nil
}

// respDecideMax bounds the response bodies read whole to be decided on.
const respDecideMax = 1 << 20

// decideResponse reads a sized response body, scans it, and asks policy
// about its findings; it puts the body back for relay when allowed.
func (g *Gateway) decideResponse(rc *reqCtx, resp *http.Response, sc Inspector, ct string) error {
	body := make([]byte, resp.ContentLength)
	if _, err := io.ReadFull(resp.Body, body); err != nil {
		return fail(ReasonUpstream, http.StatusBadGateway, fmt.Errorf("reading response: %w", err))
	}
	resp.Body = replayBody{bytes.NewReader(body), resp.Body}
	fs := sc.ScanResponse(ct, body)
	if len(fs) == 0 || !rc.late.add(fs) {
		return nil
	}
	return g.reaskLate(rc, rc.late, false, "in the response")
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

// respScan scans a response body as it is read, never holding more than
// respScanPiece bytes of it beyond what was passed on.
type respScan struct {
	r       io.ReadCloser
	sc      Inspector
	ct      string
	sse     bool
	late    *lateFindings
	pending []byte
	scanned int
}

func (b *respScan) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	if n > 0 && b.scanned < respScanMax {
		b.pending = append(b.pending, p[:n]...)
		b.flush(false)
	}
	if err != nil {
		b.flush(true)
	}
	return n, err
}

// flush scans what is pending: whole SSE events, or pieces of
// respScanPiece; everything at the end.
func (b *respScan) flush(end bool) {
	for len(b.pending) > 0 {
		cut := len(b.pending)
		switch {
		case end:
		case b.sse:
			i := strings.LastIndex(string(b.pending), "\n\n")
			if i < 0 {
				if len(b.pending) < respScanPiece {
					return
				}
			} else {
				cut = i + 2
			}
		case len(b.pending) < respScanPiece:
			return
		}
		piece := b.pending[:cut]
		fs := b.sc.ScanResponse(b.ct, piece)
		if b.sse {
			for i := range fs {
				if fs[i].Where == "response.body" {
					fs[i].Where = "sse.event"
				}
			}
		}
		b.late.add(fs)
		b.scanned += cut
		b.pending = append(b.pending[:0], b.pending[cut:]...)
	}
}

func (b *respScan) Close() error { return b.r.Close() }
