package gateway

import (
	"context"
	"net"
	"net/http"
	"sync"

	"github.com/elazarl/goproxy"
)

// explicitListener applies the per-sandbox connection cap at accept and wraps
// each connection.
type explicitListener struct {
	net.Listener
	g     *Gateway
	s     *sandbox
	proxy *goproxy.ProxyHttpServer // the goproxy front every connection shares (explicit.go)
}

// Accept returns the next connection within the sandbox's cap (one past it
// is refused and audited by newClientConn).
func (l *explicitListener) Accept() (*explicitConn, error) {
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
		ec := &explicitConn{cc: cc, sess: l.g.newSession(cc, c, nil)}
		ec.d.proxy, ec.d.w = l.proxy, explicitWriter{c: ec, header: http.Header{}}
		ec.d.ctx = context.WithValue(context.Background(), explicitConnKey, ec)
		return ec, nil
	}
}

// explicitConn is one connection of the explicit proxy and its session
// (pinned upstream, buffers).
type explicitConn struct {
	cc     *clientConn
	sess   *httpSession
	d      explicitDispatch
	closed sync.Once
}

// done is the connection's final cleanup.
func (c *explicitConn) done() {
	c.closed.Do(func() {
		c.sess.release()
		c.cc.close()
		c.cc.g.wg.Done()
	})
}
