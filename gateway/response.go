package gateway

import (
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

// inspectResponse wraps resp's body with the response scanner when
// inspection is on and the body is text the agent reads.
func (g *Gateway) inspectResponse(rc *reqCtx, resp *http.Response) {
	sc := g.cfg.Inspector
	if sc == nil || resp.Body == nil || resp.Body == http.NoBody {
		return
	}
	ct := resp.Header.Get("Content-Type")
	if !readableResponse(ct) || resp.Header.Get("Content-Encoding") != "" && resp.Header.Get("Content-Encoding") != "identity" {
		return
	}
	if rc.late == nil {
		rc.late = &lateFindings{}
	}
	mt, _, _ := mime.ParseMediaType(ct)
	resp.Body = &respScan{r: resp.Body, sc: sc, ct: ct, sse: mt == "text/event-stream", late: rc.late}
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
