package tcptest

import (
	"io"
	"net"
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
