package tcptest

import (
	"errors"
	"net"
	"testing"
	"time"
)

// Serve accepts connections on l until l is closed and runs handle on each in
// its own goroutine, closing the connection when handle returns. Any other
// accept error (EMFILE when the process is out of descriptors, a connection
// aborted before it was accepted) is waited out, as net/http's Server does:
// returning would leave every later connection unaccepted in the backlog,
// its client waiting for an answer that never comes.
func Serve(l net.Listener, handle func(c net.Conn)) {
	var wait time.Duration
	for {
		c, err := l.Accept()
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil {
			wait = min(max(2*wait, 5*time.Millisecond), time.Second)
			time.Sleep(wait)
			continue
		}
		wait = 0
		go func() {
			defer c.Close()
			handle(c)
		}()
	}
}

// Listen serves handle on a new 127.0.0.1 listener, closed when t ends.
func Listen(t testing.TB, handle func(c net.Conn)) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go Serve(l, handle)
	return l
}
