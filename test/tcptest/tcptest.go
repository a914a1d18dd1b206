package tcptest

import (
	"net"
	"testing"
)

// Serve accepts connections on l until l is closed and runs handle on each in
// its own goroutine, closing the connection when handle returns.
func Serve(l net.Listener, handle func(c net.Conn)) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
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
