package gateway

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/policy"
)

// The explicit proxy's connection framing: what http.Server (explicit.go)
// reads from. explicitListener caps and wraps each accepted connection;
// explicitConn reads each request's header block itself (limits, refusal and
// audit of an unreadable request, the raw Host header) and hands http.Server
// exactly one request's bytes at a time.

// explicitListener applies the per-sandbox connection cap at accept and wraps
// each connection.
type explicitListener struct {
	net.Listener
	g *Gateway
	s *sandbox
}

func (l *explicitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		cc := l.g.newClientConn(l.s, c, modeExplicit)
		if cc == nil {
			continue // refused (and audited) by the cap, or the sandbox stopped
		}
		l.g.wg.Add(1)
		ec := &explicitConn{Conn: c, cc: cc, wake: make(chan struct{}, 1)}
		ec.sess = l.g.newSession(cc, c, nil)
		ec.wantHead = true
		return ec, nil
	}
}

// explicitConn is what http.Server reads from. Before each request it reads
// the header block into the session's buffer (limits, refusal, raw Host), and
// it hands http.Server no byte past a CONNECT's header block, so the bytes a
// client sends right behind a CONNECT stay in the session for the tunnel.
type explicitConn struct {
	net.Conn
	cc   *clientConn
	sess *httpSession

	mu       sync.Mutex
	wantHead bool          // the next read starts a request
	headLeft int           // bytes of the current header block not yet handed out
	head     peekedRequest // the current request's header block as sent
	headOK   bool          // head was read and not yet claimed by a request
	bodyLeft int64         // request body bytes not yet handed out; -1: chunked, unknown
	held     bool          // the request's bytes are all out: hand out nothing more
	hijacked bool          // http.Server handed the connection over
	started  bool          // the first byte was read (SOCKS5 or HTTP); read by http.Server's goroutine only
	cur      *explicitReq  // the request being served
	// wake (capacity 1, one per connection) carries the one wake-up of a
	// held read; woken: it was sent since the last hold, so a held read
	// returns at once. holdTimer bounds a held read (IdleTimeout); only the
	// reading goroutine uses it.
	wake      chan struct{}
	woken     bool
	holdTimer *time.Timer
	closed    sync.Once
	// ownAnswer: http.Server answered a request by itself (a request its
	// parser rejects, OPTIONS *): that answer is replaced by a refusal.
	ownAnswer bool
}

// Write passes on what http.Server writes, except an answer it gives by
// itself to a request no handler saw: a header block this wrapper read
// (headOK) but no handler claimed. net/http's parser rejects some blocks the
// peeker accepts (conflicting Content-Length, unsupported Transfer-Encoding,
// a URL it cannot parse, an Expect it does not know) and answers OPTIONS *
// itself; each such request is refused and audited like any other, once, and
// net/http's own bytes never reach the client.
func (c *explicitConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	first := c.headOK && !c.hijacked && !c.ownAnswer
	if first {
		c.ownAnswer, c.headOK = true, false
	}
	own, head := c.ownAnswer, c.head
	c.mu.Unlock()
	if !own {
		return c.Conn.Write(p)
	}
	if first {
		c.refuseOwnAnswer(head, p)
	}
	return len(p), nil
}

// refuseOwnAnswer refuses and audits the request http.Server answered by
// itself with the response that starts in p.
func (c *explicitConn) refuseOwnAnswer(head peekedRequest, p []byte) {
	g, s := c.cc.g, c.sess
	rc := g.newReqCtx(c.cc, s)
	rc.kind = policy.KindHTTP
	if head.Method == http.MethodConnect {
		rc.kind = policy.KindConnect
	}
	if h, port, err := hostname.SplitHostPort(head.Host, 80); err == nil {
		rc.host, rc.port = h, port
	}
	status, msg := http.StatusBadRequest, "request answered by the HTTP server itself"
	line, rest, _ := bytes.Cut(p, []byte("\r\n"))
	if f := bytes.Fields(line); len(f) >= 2 {
		if n, err := strconv.Atoi(string(f[1])); err == nil && n >= 400 && n <= 599 {
			status = n
			msg = "rejected by the HTTP parser"
			if _, body, ok := bytes.Cut(rest, []byte("\r\n\r\n")); ok && len(body) > 0 {
				msg += ": " + strings.TrimSpace(string(body[:min(len(body), 200)]))
			}
		}
	}
	var err error = &denial{reason: ReasonBadRequest, msg: msg, status: status}
	if inj := g.cfg.Injector; inj != nil {
		if perr := inj.CheckName(sandboxOf(rc), head.Target+" "+head.Host); perr != nil {
			err = secretsErr(perr)
		}
	}
	g.serveRefused(rc, err)
	c.Conn.Close() // http.Server would go on serving the connection
}

func (c *explicitConn) expectHead() {
	c.mu.Lock()
	c.wantHead, c.headOK, c.held = true, false, false
	c.wakeLocked()
	c.mu.Unlock()
}

// hold stops handing out bytes: the request's head and body are all out, and
// what follows belongs to the next request, read only once http.Server asks
// for it (StateIdle). http.Server's background read parks here until it
// aborts it with a past deadline. Called with c.mu held.
func (c *explicitConn) hold() {
	c.held, c.woken = true, false
	select {
	case <-c.wake: // a wake-up of the previous request nobody waited for
	default:
	}
}

// wakeLocked ends the wait of a held read, or makes the next one return at
// once. Called with c.mu held.
func (c *explicitConn) wakeLocked() {
	if c.woken {
		return
	}
	c.woken = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *explicitConn) isHijacked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hijacked
}

// done is the connection's final cleanup (closed, or its CONNECT finished).
func (c *explicitConn) done() {
	c.closed.Do(func() {
		c.sess.release()
		c.cc.close()
		c.cc.g.wg.Done()
	})
}

func (c *explicitConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	if c.held && !t.IsZero() && time.Until(t) <= 0 {
		c.wakeLocked()
	}
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

func (c *explicitConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	want, held := c.wantHead, c.held
	c.mu.Unlock()
	s := c.sess
	if want {
		if err := c.readHead(); err != nil {
			return 0, err
		}
	}
	if held {
		c.mu.Lock()
		woken := c.woken
		c.mu.Unlock()
		if !woken {
			if c.holdTimer == nil {
				c.holdTimer = time.NewTimer(s.g.cfg.IdleTimeout)
			} else {
				c.holdTimer.Reset(s.g.cfg.IdleTimeout)
			}
			select {
			case <-c.wake:
			case <-c.holdTimer.C:
			}
			c.holdTimer.Stop()
		}
		return 0, os.ErrDeadlineExceeded
	}
	// http.Server never reads from two goroutines at once, so the counters
	// may be updated after the read; c.mu is never held across it
	// (SetReadDeadline takes it to wake a parked read).
	c.mu.Lock()
	headLeft, bodyLeft := c.headLeft, c.bodyLeft
	c.mu.Unlock()
	switch {
	case headLeft > 0:
		if len(p) > headLeft {
			p = p[:headLeft]
		}
		n, err := s.br.Read(p)
		c.mu.Lock()
		c.headLeft -= n
		if c.headLeft == 0 && c.bodyLeft == 0 {
			c.hold()
		}
		c.mu.Unlock()
		return n, err
	case bodyLeft > 0:
		if int64(len(p)) > bodyLeft {
			p = p[:bodyLeft]
		}
		n, err := s.br.Read(p)
		c.mu.Lock()
		c.bodyLeft -= int64(n)
		if c.bodyLeft == 0 {
			c.hold()
		}
		c.mu.Unlock()
		return n, err
	}
	return s.br.Read(p)
}

// readHead waits for a request's whole header block (IdleTimeout for its
// first byte, then ReadHeaderTimeout and MaxHeaderBytes) without consuming it.
// A block that cannot be read is refused and audited here; http.Server then
// sees the connection end.
func (c *explicitConn) readHead() error {
	s, g := c.sess, c.sess.g
	s.cc.idle.Store(true)
	s.rd.limited, s.rd.limit, s.rd.progress = true, g.cfg.MaxHeaderBytes-s.br.Buffered(), 0
	if _, err := s.br.Peek(1); err != nil {
		s.cc.idle.Store(false)
		return err
	}
	s.cc.idle.Store(false)
	if g.isDraining() {
		return io.EOF
	}
	if first := !c.started; first {
		c.started = true
		if b, _ := s.br.Peek(1); b[0] == socksVersion {
			// A SOCKS5 client (socks.go): served here, in place of the
			// connection's first request; http.Server then sees it end.
			c.serveSOCKS()
			return io.EOF
		}
		c.Conn.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
		h2, _ := isH2Preface(s.br)
		c.Conn.SetReadDeadline(time.Time{})
		if h2 {
			// h2c with prior knowledge (h2.go): each stream names its
			// origin by :authority and is decided as plain HTTP to it.
			s.rd.limited = false
			g.serveH2(c.cc, &prefixConn{Conn: c.Conn, r: s.br}, h2Target{scheme: "http", defaultPort: 80})
			return io.EOF
		}
	}
	// A kept-alive client's next request usually arrives whole in the first
	// read: then nothing more is read and no deadline is needed.
	buffered, _ := s.br.Peek(s.br.Buffered())
	wait := !bytes.Contains(buffered, []byte("\r\n\r\n"))
	if wait {
		c.Conn.SetReadDeadline(time.Now().Add(g.cfg.ReadHeaderTimeout))
	}
	pr, err := peekHTTPRequest(s.br, min(g.cfg.MaxHeaderBytes, s.br.Size()))
	s.rd.limited = false
	if wait {
		c.Conn.SetReadDeadline(time.Time{})
	}
	if err != nil {
		if errors.Is(err, io.EOF) || isTimeout(err) && s.br.Buffered() == 0 {
			return io.EOF
		}
		if errors.Is(err, errPeekTooLarge) {
			err = errHeaderTooLarge
		}
		rc := g.newReqCtx(s.cc, s)
		rc.kind = policy.KindHTTP
		g.serveRefused(rc, deny(ReasonBadRequest, "unreadable request: %v", err))
		return io.EOF
	}
	buf, _ := s.br.Peek(s.br.Buffered())
	n := bytes.Index(buf, []byte("\r\n\r\n")) + 4
	body := bodyLength(buf[:n])
	if pr.Method == http.MethodConnect {
		body = 0 // what follows a CONNECT is the tunnel's
	}
	if body < 0 {
		// A chunked (or unparsable) body: its end is http.Server's to find, so
		// this connection carries no further request.
		s.closeAfter = true
	}
	c.mu.Lock()
	c.headLeft, c.bodyLeft = n, body
	c.head, c.headOK, c.wantHead = pr, true, false
	c.mu.Unlock()
	return nil
}

// bodyLength returns the request body length a header block announces: its
// Content-Length, 0 without one, -1 with a Transfer-Encoding or a
// Content-Length that is not one plain number (http.Server decides those).
func bodyLength(head []byte) int64 {
	var cl int64
	seen := false
	_, rest, _ := bytes.Cut(head, []byte("\r\n")) // the request line
	for len(rest) > 0 {
		var line []byte
		line, rest, _ = bytes.Cut(rest, []byte("\r\n"))
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok {
			continue
		}
		switch {
		case bytes.EqualFold(name, []byte("transfer-encoding")):
			return -1
		case bytes.EqualFold(name, []byte("content-length")):
			v, err := strconv.ParseInt(string(bytes.TrimSpace(val)), 10, 64)
			if err != nil || v < 0 || seen && v != cl {
				return -1
			}
			cl, seen = v, true
		}
	}
	return cl
}

// claimHead gives the request r the header block read for it. A request whose
// block was not read here (a pipelined request) is refused: its Host header
// cannot be checked.
func (c *explicitConn) claimHead(r *http.Request) (peekedRequest, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.headOK || c.head.Method != r.Method || c.head.Target != r.RequestURI {
		return peekedRequest{}, errors.New("pipelined requests are not supported by the explicit proxy")
	}
	c.headOK = false
	return c.head, nil
}
