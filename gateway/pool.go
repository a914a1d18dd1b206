package gateway

import (
	"bufio"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// upstreamKey names what an upstream connection may be reused for: one
// sandbox's requests to one destination. A connection that carried one
// sandbox's exchange never carries another's.
type upstreamKey struct {
	sb   *sandbox // the serving of the sandbox (a new ServeSandbox is a new one)
	host string
	port int
	tls  bool
}

// upstreamConn is one kept-alive HTTP/1.1 connection to an upstream. It is used
// by one client connection at a time, so requests on a kept-alive client
// connection go out on one upstream connection with no handoff.
type upstreamConn struct {
	key    upstreamKey
	nc     net.Conn
	rd     upstreamReader
	br     *bufio.Reader
	bw     *bufio.Writer
	ip     netip.Addr
	ipText string // ip.String(), made once for the records of every request on it
	parent string // the parent proxy's host:port, when the connection goes through it
	used   bool
	idleAt time.Time
	proto  string           // the protocol TLS negotiated ("h2", "http/1.1" or "")
	h2     *http.ClientConn // an HTTP/2 upstream: shared by one client connection's streams, never pooled
	body   io.ReadCloser    // the last response's body as read (splice.go: untouched by a scrubber or inspection)
}

// upstreamReader enforces the response header limit like connReader does for
// requests.
type upstreamReader struct {
	c       net.Conn
	limited bool
	limit   int
	// beforeRead, when set, runs before every read from the connection: a
	// response relay flushes what it holds before the gateway may wait here.
	// Under a TLS connection with a readAhead it runs only when the socket
	// has nothing more for now.
	beforeRead func()
	ahead      *readAhead // under c's TLS, or nil (tlsio.go)
}

var errRespHeaderTooLarge = errors.New("response header exceeds max_header_bytes")

func (r *upstreamReader) Read(p []byte) (int, error) {
	if r.limited {
		if r.limit <= 0 {
			return 0, errRespHeaderTooLarge
		}
		if len(p) > r.limit {
			p = p[:r.limit]
		}
	}
	if r.ahead != nil {
		// Only for this read: what else reads c (a websocket relay after
		// a 101) never runs the hook of a relay that ended.
		r.ahead.beforeWait = r.beforeRead
		defer func() { r.ahead.beforeWait = nil }()
	} else if r.beforeRead != nil {
		r.beforeRead()
	}
	n, err := r.c.Read(p)
	r.limit -= n
	return n, err
}

func newUpstreamConn(key upstreamKey, c net.Conn, ip netip.Addr) *upstreamConn {
	u := &upstreamConn{key: key, nc: c, ip: ip}
	if ip.IsValid() {
		u.ipText = ip.String()
	}
	u.rd.c = c
	u.br = bufio.NewReaderSize(&u.rd, 32<<10)
	u.bw = bufio.NewWriterSize(c, 4096)
	return u
}

// roundTrip writes req and reads the response header, skipping interim 1xx
// responses other than 101.
// Writing the request and reading the response header each get
// headerTimeout; without a body one deadline covers both (nothing is written
// once the header is awaited): two deadline updates per exchange, not four.
func (u *upstreamConn) roundTrip(req *http.Request, headerTimeout time.Duration, maxHeader int) (*http.Response, error) {
	u.nc.SetDeadline(time.Now().Add(headerTimeout))
	defer u.nc.SetDeadline(time.Time{})
	if !writeRequestHead(u.bw, req) {
		if err := req.Write(u.bw); err != nil {
			return nil, err
		}
	}
	if err := u.bw.Flush(); err != nil {
		return nil, err
	}
	if req.Body != nil && req.Body != http.NoBody {
		u.nc.SetReadDeadline(time.Now().Add(headerTimeout)) // the header's own time after the body
	}
	for {
		u.rd.limited, u.rd.limit = true, maxHeader-u.br.Buffered()
		resp, err := http.ReadResponse(u.br, req)
		u.rd.limited = false
		if err != nil {
			return nil, err
		}
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			io.Copy(io.Discard, resp.Body)
			continue
		}
		u.body = resp.Body
		return resp, nil
	}
}

// upstreamPool keeps idle upstream connections between client connections.
type upstreamPool struct {
	mu      sync.Mutex
	idle    map[upstreamKey][]*upstreamConn
	n       int
	perHost int
	max     int
	timeout time.Duration
	closed  bool
}

func newUpstreamPool(perHost, max int, timeout time.Duration) *upstreamPool {
	return &upstreamPool{idle: make(map[upstreamKey][]*upstreamConn), perHost: perHost, max: max, timeout: timeout}
}

// get returns the most recently used idle connection for k, or nil.
func (p *upstreamPool) get(k upstreamKey) *upstreamConn {
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[k]
	for len(list) > 0 {
		u := list[len(list)-1]
		list = list[:len(list)-1]
		p.n--
		if now.Sub(u.idleAt) < p.timeout {
			p.idle[k] = list
			return u
		}
		u.nc.Close()
	}
	delete(p.idle, k)
	return nil
}

// put keeps u for reuse if there is room; otherwise closes it.
func (p *upstreamPool) put(u *upstreamConn) {
	if u.br.Buffered() > 0 || u.rd.ahead != nil && u.rd.ahead.Buffered() > 0 {
		u.nc.Close() // unsolicited bytes: not reusable
		return
	}
	u.idleAt = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if u.key.sb.isStopped() {
		// StopSandbox set this before dropping the sandbox's idle connections
		// (under p.mu): a connection released afterwards is closed here.
		u.nc.Close()
		return
	}
	list := p.idle[u.key]
	// Drop the stale ones at the front first.
	for len(list) > 0 && u.idleAt.Sub(list[0].idleAt) >= p.timeout {
		list[0].nc.Close()
		list = list[1:]
		p.n--
	}
	if p.closed || len(list) >= p.perHost || p.n >= p.max {
		p.idle[u.key] = list
		u.nc.Close()
		return
	}
	p.idle[u.key] = append(list, u)
	p.n++
}

func (p *upstreamPool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for k, list := range p.idle {
		for _, u := range list {
			u.nc.Close()
		}
		delete(p.idle, k)
	}
	p.n = 0
}

// dropSandbox closes the idle connections that served sb.
func (p *upstreamPool) dropSandbox(sb *sandbox) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		if k.sb != sb {
			continue
		}
		for _, u := range list {
			u.nc.Close()
		}
		p.n -= len(list)
		delete(p.idle, k)
	}
}
