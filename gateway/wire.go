package gateway

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// The HTTP/1.1 head of a request going upstream and of a response going to
// the client, written by the gateway itself in the common case: no body (a
// request) or a body of known length (a response), no trailers, every header
// name a token and every value free of line breaks and outer white space.
// Anything else goes through net/http's Request.Write and Response.Write,
// which handle every case; the fast path writes exactly what they would,
// minus the User-Agent net/http adds to a request that has none (the origin
// sees the sandbox's request as sent) and the sorting of header names.

// writeRequestHead writes req's request line and header block to bw when req
// has no body; ok false means it wrote nothing and Request.Write must.
func writeRequestHead(bw *bufio.Writer, req *http.Request) (ok bool) {
	if req.Body != nil && req.Body != http.NoBody || req.ContentLength != 0 ||
		len(req.TransferEncoding) > 0 || len(req.Trailer) > 0 || req.Close || req.Method == http.MethodConnect {
		return false
	}
	uri := req.URL.RequestURI()
	if req.Method == "" || !httpguts.ValidHostHeader(req.Host) || hasCTL(uri) || !headerClean(req.Header, "Host", "Content-Length", "Transfer-Encoding", "Trailer") {
		return false
	}
	bw.WriteString(req.Method)
	bw.WriteByte(' ')
	bw.WriteString(uri)
	bw.WriteString(" HTTP/1.1\r\nHost: ")
	bw.WriteString(req.Host)
	bw.WriteString("\r\n")
	writeHeader(bw, req.Header, "Host", "Content-Length", "Transfer-Encoding", "Trailer")
	bw.WriteString("\r\n")
	return true
}

// writeResponseHead writes resp's status line and header block to w for a
// response whose body has a known length and may have one (not to HEAD, not
// 1xx, 204 or 304); ok false means it wrote nothing and Response.Write must.
// The body (resp.ContentLength bytes) is the caller's to copy.
func writeResponseHead(w *bufio.Writer, resp *http.Response) (ok bool) {
	if resp.ContentLength < 0 || len(resp.TransferEncoding) > 0 || len(resp.Trailer) > 0 ||
		resp.Request == nil || resp.Request.Method == http.MethodHead || !bodyAllowed(resp.StatusCode) ||
		!headerClean(resp.Header, "Content-Length", "Transfer-Encoding", "Trailer", "Connection") {
		return false
	}
	// The status line without a string made for it (a code and a length
	// are formatted into stack and buffer bytes).
	var digits [20]byte
	code := strconv.AppendInt(digits[:0], int64(resp.StatusCode), 10)
	text := resp.Status
	if len(text) > len(code) && text[len(code)] == ' ' && text[:len(code)] == string(code) {
		text = text[len(code)+1:]
	}
	if resp.Status == "" {
		text = http.StatusText(resp.StatusCode)
	}
	if hasCTL(text) {
		return false
	}
	w.WriteString("HTTP/1.1 ")
	for _, c := range code {
		w.WriteByte(c)
	}
	w.WriteByte(' ')
	w.WriteString(text)
	w.WriteString("\r\n")
	writeHeader(w, resp.Header, "Content-Length", "Transfer-Encoding", "Trailer", "Connection")
	w.WriteString("Content-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), resp.ContentLength, 10))
	w.WriteString("\r\n")
	if resp.Close {
		w.WriteString("Connection: close\r\n")
	}
	w.WriteString("\r\n")
	return true
}

// bodyAllowed reports whether a response with this status may carry a body
// (RFC 9110 section 6.4.1).
func bodyAllowed(status int) bool {
	return status >= 200 && status != http.StatusNoContent && status != http.StatusNotModified
}

// headerClean reports whether h can be written as it is: every name (but the
// skipped ones) a token, every value without CR, LF or other control bytes
// and without leading or trailing white space.
func headerClean(h http.Header, skip ...string) bool {
	for k, vs := range h {
		if isSkipped(k, skip) {
			continue
		}
		if !httpguts.ValidHeaderFieldName(k) {
			return false
		}
		for _, v := range vs {
			if !httpguts.ValidHeaderFieldValue(v) || strings.ContainsAny(v, "\r\n") || v != strings.Trim(v, " \t") {
				return false
			}
		}
	}
	return true
}

func writeHeader(w *bufio.Writer, h http.Header, skip ...string) {
	for k, vs := range h {
		if isSkipped(k, skip) {
			continue
		}
		for _, v := range vs {
			w.WriteString(k)
			w.WriteString(": ")
			w.WriteString(v)
			w.WriteString("\r\n")
		}
	}
}

func isSkipped(k string, skip []string) bool {
	for _, s := range skip {
		if strings.EqualFold(k, s) {
			return true
		}
	}
	return false
}

// hasCTL reports whether s has an ASCII control byte (line breaks included).
func hasCTL(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' || c == 0x7f {
			return true
		}
	}
	return false
}
