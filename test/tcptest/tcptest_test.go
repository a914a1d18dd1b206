package tcptest

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

func TestListenServesEveryConnection(t *testing.T) {
	l := Listen(t, func(c net.Conn) { io.Copy(c, io.LimitReader(c, 4)) })
	for i := range 3 {
		c, err := net.DialTimeout("tcp", l.Addr().String(), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		io.WriteString(c, "ping")
		b, err := io.ReadAll(c) // the handler returned: Serve closed the connection
		c.Close()
		if err != nil || string(b) != "ping" {
			t.Fatalf("connection %d: got %q, %v; want ping and EOF", i, b, err)
		}
	}
}

// flakyListener fails its first accepts as a process out of descriptors does.
type flakyListener struct {
	net.Listener
	fails int
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails > 0 {
		l.fails--
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestServeOutlivesAcceptErrors: an accept that fails (EMFILE) does not end
// Serve; the connection waiting behind it is served (it used to sit in the
// backlog, unanswered, its client timing out).
func TestServeOutlivesAcceptErrors(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go Serve(&flakyListener{Listener: ln, fails: 3}, func(c net.Conn) { io.Copy(c, io.LimitReader(c, 4)) })
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	io.WriteString(c, "ping")
	if b, err := io.ReadAll(c); err != nil || string(b) != "ping" {
		t.Fatalf("got %q, %v; want ping and EOF", b, err)
	}
}
