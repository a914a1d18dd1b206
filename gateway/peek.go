package gateway

import (
	"bufio"
	"bytes"
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/policy"
)

// Errors from the peekers. They never consume input: a caller that gets one still
// has every byte the client sent in its bufio.Reader.
var (
	errNotTLS         = errors.New("not a TLS handshake")
	errBadClientHello = errors.New("malformed TLS ClientHello")
	errNotHTTP        = errors.New("not an HTTP/1.x request")
	errBadHTTP        = errors.New("malformed HTTP/1.x request header")
	errPeekTooLarge   = errors.New("peeked header exceeds limit")
)

const (
	recordHeaderLen = 5
	maxRecordLen    = 16384 + 2048
)

// peekClientHello returns the server_name of the TLS ClientHello at the head of
// br without consuming it ("" when the hello has no SNI). It reads at most max
// bytes. errNotTLS means the first byte is not a handshake record.
func peekClientHello(br *bufio.Reader, max int) (string, error) {
	hdr, err := br.Peek(1)
	if err != nil {
		return "", err
	}
	if hdr[0] != 0x16 {
		return "", errNotTLS
	}
	// Gather the handshake message, which may span several records.
	var msg []byte
	off := 0
	need := -1 // handshake message length incl. its 4-byte header, once known
	for need < 0 || len(msg) < need {
		h, err := br.Peek(off + recordHeaderLen)
		if err != nil {
			return "", peekErr(err)
		}
		rec := h[off:]
		if rec[0] != 0x16 || rec[1] != 3 {
			return "", errBadClientHello
		}
		n := int(rec[3])<<8 | int(rec[4])
		if n == 0 || n > maxRecordLen {
			return "", errBadClientHello
		}
		if off+recordHeaderLen+n > max {
			return "", errPeekTooLarge
		}
		b, err := br.Peek(off + recordHeaderLen + n)
		if err != nil {
			return "", peekErr(err)
		}
		msg = append(msg, b[off+recordHeaderLen:]...)
		off += recordHeaderLen + n
		if need < 0 && len(msg) >= 4 {
			if msg[0] != 1 { // client_hello
				return "", errBadClientHello
			}
			need = 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
			if need > max {
				return "", errPeekTooLarge
			}
		}
	}
	return parseClientHelloSNI(msg[4:need])
}

func peekErr(err error) error {
	if errors.Is(err, bufio.ErrBufferFull) {
		return errPeekTooLarge
	}
	return err
}

// parseClientHelloSNI walks a ClientHello body (after the 4-byte handshake
// header) and returns the first host_name of the server_name extension.
func parseClientHelloSNI(b []byte) (string, error) {
	s := cursor{b: b}
	s.skip(2 + 32) // legacy_version, random
	s.skip(int(s.u8()))
	s.skip(int(s.u16())) // cipher_suites
	s.skip(int(s.u8()))  // compression_methods
	if s.bad {
		return "", errBadClientHello
	}
	if len(s.b) == 0 {
		return "", nil // no extensions
	}
	exts := cursor{b: s.bytes(int(s.u16()))}
	if s.bad || len(s.b) != 0 {
		return "", errBadClientHello
	}
	sni := ""
	seen := false
	for len(exts.b) > 0 && !exts.bad {
		typ := exts.u16()
		data := cursor{b: exts.bytes(int(exts.u16()))}
		if exts.bad {
			break
		}
		if typ != 0 {
			continue
		}
		if seen {
			return "", errBadClientHello // duplicate server_name
		}
		seen = true
		list := cursor{b: data.bytes(int(data.u16()))}
		if data.bad || len(data.b) != 0 || len(list.b) == 0 {
			return "", errBadClientHello
		}
		for len(list.b) > 0 && !list.bad {
			nameType := list.u8()
			name := list.bytes(int(list.u16()))
			if list.bad {
				break
			}
			if nameType == 0 && sni == "" {
				if len(name) == 0 {
					return "", errBadClientHello
				}
				sni = string(name)
			}
		}
		if list.bad {
			return "", errBadClientHello
		}
	}
	if exts.bad {
		return "", errBadClientHello
	}
	return sni, nil
}

// cursor reads big-endian fields and remembers whether it ran off the end.
type cursor struct {
	b   []byte
	bad bool
}

func (c *cursor) u8() uint8 {
	if len(c.b) < 1 {
		c.bad = true
		return 0
	}
	v := c.b[0]
	c.b = c.b[1:]
	return v
}

func (c *cursor) u16() uint16 {
	if len(c.b) < 2 {
		c.bad = true
		c.b = nil
		return 0
	}
	v := uint16(c.b[0])<<8 | uint16(c.b[1])
	c.b = c.b[2:]
	return v
}

func (c *cursor) bytes(n int) []byte {
	if n > len(c.b) {
		c.bad = true
		c.b = nil
		return nil
	}
	v := c.b[:n]
	c.b = c.b[n:]
	return v
}

func (c *cursor) skip(n int) { c.bytes(n) }

// peekedRequest is what peekHTTPRequest saw of the request at the head of a
// connection.
type peekedRequest struct {
	Method string
	Target string
	Host   string // the Host header value, raw; "" if absent
}

// httpMethods are the request methods the transparent listener recognises.
var httpMethods = [...]string{"GET", "HEAD", "POST", "PUT", "DELETE", "OPTIONS", "PATCH", "TRACE", "CONNECT", "PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH", "PURGE"}

// looksLikeHTTP reports whether b could be the start of an HTTP/1.x request:
// a known method followed by a space (or a prefix of that).
func looksLikeHTTP(b []byte) bool {
	for _, m := range httpMethods {
		if len(b) <= len(m) {
			if bytes.HasPrefix([]byte(m), b) {
				return true
			}
			continue
		}
		if bytes.HasPrefix(b, []byte(m)) && b[len(m)] == ' ' {
			return true
		}
	}
	return false
}

// peekHTTPRequest peeks the request line and headers at the head of br (at most
// max bytes) without consuming them and returns the method, target and Host.
//
// It is stricter than net/http, so that no header block it accepts is read
// differently behind it (request smuggling): a line ending that is not CRLF
// (a bare LF, which net/http's reader accepts, or a bare CR), a NUL or other
// control byte, an obs-fold continuation line, a header name that is not a
// token and a second Host header are all errBadHTTP, as soon as they arrive.
// errNotHTTP means the bytes do not start like an HTTP/1.x request at all.
func peekHTTPRequest(br *bufio.Reader, max int) (peekedRequest, error) {
	var pr peekedRequest
	n := 1
	checked := 0 // bytes of the block whose line endings and bytes were checked
	var buf []byte
	for {
		b, err := br.Peek(n)
		if err != nil && len(b) < n {
			if errors.Is(err, bufio.ErrBufferFull) {
				return pr, errPeekTooLarge
			}
			return pr, err
		}
		if !looksLikeHTTP(b) {
			return pr, errNotHTTP
		}
		end := len(b)
		i := bytes.Index(b, []byte("\r\n\r\n"))
		if i >= 0 {
			end = i + 4 // what follows is a body: any byte goes
		}
		for ; checked < end; checked++ {
			switch c := b[checked]; {
			case c == '\n':
				if checked == 0 || b[checked-1] != '\r' {
					return pr, errBadHTTP
				}
			case c == '\r':
				if checked+1 < len(b) && b[checked+1] != '\n' {
					return pr, errBadHTTP
				}
			case c < 0x20 && c != '\t', c == 0x7f:
				return pr, errBadHTTP
			}
		}
		if checked > 0 && b[checked-1] == '\r' {
			checked-- // its LF is not here yet
		}
		if i >= 0 {
			buf = b[:i+2]
			break
		}
		if n >= max {
			return pr, errPeekTooLarge
		}
		// Ask for what is already buffered plus one more byte.
		next := br.Buffered()
		if next < n+1 {
			next = n + 1
		}
		if next > max {
			next = max
		}
		n = next
	}
	line, rest, _ := bytes.Cut(buf, []byte("\r\n"))
	method, r, ok1 := bytes.Cut(line, []byte(" "))
	target, proto, ok2 := bytes.Cut(r, []byte(" "))
	if !ok1 || !ok2 || len(target) == 0 || !(bytes.Equal(proto, []byte("HTTP/1.1")) || bytes.Equal(proto, []byte("HTTP/1.0"))) {
		return pr, errNotHTTP
	}
	pr.Method, pr.Target = methodString(method), string(target)
	hosts := 0
	for len(rest) > 0 {
		var h []byte
		h, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		if len(h) == 0 {
			break
		}
		name, val, ok := bytes.Cut(h, []byte(":"))
		if !ok || !isToken(name) {
			return pr, errBadHTTP // obs-fold lines start with a space and fail here
		}
		if bytes.EqualFold(name, []byte("host")) {
			hosts++
			pr.Host = string(bytes.TrimSpace(val))
		}
	}
	if hosts > 1 {
		return pr, errBadHTTP
	}
	return pr, nil
}

// isToken reports whether b is a non-empty RFC 9110 token (a header name).
func isToken(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// sniffed is what the first bytes a client sends on a connection are.
type sniffed struct {
	// kind is tls (a complete ClientHello), http (a request header block that
	// peekHTTPRequest accepts) or tcp (opaque bytes, or nothing at all).
	kind policy.Kind
	h2   bool          // http: the HTTP/2 client preface (h2c with prior knowledge)
	sni  string        // tls: the ClientHello's server name, "" when it has none
	req  peekedRequest // http
}

// sniff waits for the first bytes on c, buffered in br and never consumed,
// and says what they are. The first byte must come within PeekTimeout, else
// the client waits for the server to speak (kind tcp). A ClientHello must be
// complete within HandshakeTimeout and maxPeekBytes: a slow, partial,
// oversized or malformed one is a bad_request denial, never relayed unparsed.
// A header block that does not come complete within ReadHeaderTimeout is
// opaque (kind tcp); a malformed one is a bad_request denial. An error that is
// not a denial means the client closed before sending anything.
func (g *Gateway) sniff(c net.Conn, br *bufio.Reader) (sniffed, error) {
	defer c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(time.Now().Add(g.cfg.PeekTimeout))
	first, err := br.Peek(1)
	switch {
	case err != nil && isTimeout(err):
		return sniffed{kind: policy.KindTCP}, nil
	case err != nil:
		return sniffed{}, err
	case first[0] == 0x16:
		c.SetReadDeadline(time.Now().Add(g.cfg.HandshakeTimeout))
		sni, err := peekClientHello(br, maxPeekBytes)
		if err != nil {
			return sniffed{kind: policy.KindTLS}, deny(ReasonBadRequest, "tls client hello: %v", err)
		}
		return sniffed{kind: policy.KindTLS, sni: sni}, nil
	}
	c.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
	if h2, _ := isH2Preface(br); h2 {
		// HTTP/2 (h2c): every stream is an HTTP request, never opaque TCP.
		// (An error here comes again from peekHTTPRequest.)
		return sniffed{kind: policy.KindHTTP, h2: true}, nil
	}
	pr, err := peekHTTPRequest(br, min(g.cfg.MaxHeaderBytes, maxPeekBytes))
	switch {
	case err == nil:
		return sniffed{kind: policy.KindHTTP, req: pr}, nil
	case errors.Is(err, errNotHTTP), isTimeout(err):
		return sniffed{kind: policy.KindTCP}, nil
	}
	return sniffed{kind: policy.KindTCP}, deny(ReasonBadRequest, "http request: %v", err)
}

// rfcMethods are the methods of RFC 9110 and PATCH.
var rfcMethods = [...]string{http.MethodGet, http.MethodPost, http.MethodHead, http.MethodPut,
	http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodPatch, http.MethodTrace}

// methodString is method as a string, without an allocation for the
// methods of RFC 9110.
func methodString(method []byte) string {
	for _, m := range rfcMethods {
		if string(method) == m { // no allocation: the compiler compares the bytes
			return m
		}
	}
	return string(method)
}
