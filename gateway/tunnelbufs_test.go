package gateway

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestConnectPooledBuffersCarryOnlyTheirOwn: the sessions' readers and
// writers go back to the gateway's pool once a tunnel owns the connection
// (before the wait for an idle client's first byte, or once the sniffed
// head was copied), and the next CONNECTs take them again. Tunnels opened
// one after another, held open together, each carry exactly their own
// client's bytes: one that sends at once (sniffed through a reader another
// tunnel gave back), one idle past PeekTimeout, and one whose bytes came in
// the CONNECT's own write.
func TestConnectPooledBuffersCarryOnlyTheirOwn(t *testing.T) {
	raw := newRawUpstream(t, "")
	h := newHarness(t, tunnelPolicy(), names("raw.example"), nil)
	h.dialer.allow(raw.addr)
	const n = 12
	var sent int64
	for i := range n {
		msg := fmt.Sprintf("tunnel-%02d:%s\n", i, strings.Repeat(string(rune('a'+i)), 700*(n-i)))
		sent += int64(len(msg))
		var c net.Conn
		var br *bufio.Reader
		switch i % 3 {
		case 0: // sends at once
			c, br = connectRaw(t, h, "raw.example", raw.port)
			io.WriteString(c, msg)
		case 1: // idle past PeekTimeout (300 ms): raw TCP by default
			c, br = connectRaw(t, h, "raw.example", raw.port)
			time.Sleep(400 * time.Millisecond)
			io.WriteString(c, msg)
		case 2: // the bytes right behind the CONNECT
			var err error
			if c, err = net.Dial("tcp", h.explicit); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			io.WriteString(c, fmt.Sprintf("CONNECT raw.example:%d HTTP/1.1\r\nHost: raw.example:%d\r\n\r\n", raw.port, raw.port)+msg)
			br = bufio.NewReader(c)
			if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("tunnel %d: CONNECT: %v %v", i, resp, err)
			}
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(br, got); err != nil || string(got) != msg {
			t.Fatalf("tunnel %d: got %.40q... (%v), want its own %.40q...", i, got, err, msg)
		}
		if br.Buffered() > 0 {
			extra, _ := br.Peek(br.Buffered())
			t.Fatalf("tunnel %d: got %q more than it sent", i, extra)
		}
	}
	if got := raw.bytesIn.Load(); got != sent {
		t.Fatalf("upstream got %d bytes, want %d (each tunnel's own)", got, sent)
	}
	if raw.conns.Load() != n {
		t.Fatalf("upstream got %d connections, want %d", raw.conns.Load(), n)
	}
}
