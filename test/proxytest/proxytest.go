package proxytest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Parent is one counting CONNECT proxy.
type Parent struct {
	// Conns counts the connections accepted.
	Conns atomic.Int64
	// Status, when not 0, is the answer to every request (with a
	// Proxy-Authenticate challenge), and nothing is dialed.
	Status atomic.Int64

	dial    func(target string) (net.Conn, error)
	mu      sync.Mutex
	targets []string
	auths   []string
}

// Serve serves ln until the test ends. dial opens the connection a CONNECT
// to target ("host:port", as the client sent it) is relayed to; an error
// is answered 502.
func Serve(t testing.TB, ln net.Listener, dial func(target string) (net.Conn, error)) *Parent {
	t.Helper()
	p := &Parent{dial: dial}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.Conns.Add(1)
			go p.serve(c)
		}
	}()
	return p
}

// Seen returns the request targets ("CONNECT host:port") and the
// Proxy-Authorization of each, in order.
func (p *Parent) Seen() (targets, auths []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...), append([]string(nil), p.auths...)
}

func (p *Parent) serve(c net.Conn) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	br := bufio.NewReader(c)
	req, err := http.ReadRequest(br)
	if err != nil {
		return
	}
	p.mu.Lock()
	p.targets = append(p.targets, req.Method+" "+req.RequestURI)
	p.auths = append(p.auths, req.Header.Get("Proxy-Authorization"))
	p.mu.Unlock()
	if st := int(p.Status.Load()); st != 0 {
		fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nProxy-Authenticate: Basic realm=\"corp\"\r\nContent-Length: 0\r\n\r\n", st, http.StatusText(st))
		return
	}
	if req.Method != http.MethodConnect {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	up, err := p.dial(req.RequestURI)
	if err != nil {
		_, _ = io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
		return
	}
	defer up.Close()
	_ = c.SetDeadline(time.Time{})
	_, _ = io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n")
	go func() {
		_, _ = io.Copy(up, br)
		if cw, ok := up.(interface{ CloseWrite() error }); ok {
			_ = cw.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
}
