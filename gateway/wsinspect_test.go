package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// rawWSUpstream accepts a websocket upgrade and records every byte the
// client side sends after it.
type rawWSUpstream struct {
	*upstream
	mu  sync.Mutex
	got bytes.Buffer
}

func newRawWSUpstream(t *testing.T) *rawWSUpstream {
	u := &rawWSUpstream{}
	u.upstream = newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer c.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n")
		brw.Flush()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 4096)
		for {
			n, err := brw.Read(buf)
			u.mu.Lock()
			u.got.Write(buf[:n])
			u.mu.Unlock()
			if err != nil {
				return
			}
		}
	}), nil)
	return u
}

func (u *rawWSUpstream) received() []byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return bytes.Clone(u.got.Bytes())
}

// wsFrame is a client frame masked with a zero key (valid, and its payload
// reads as sent on the wire).
func wsFrame(fin bool, rsv1 bool, op byte, payload string) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	if rsv1 {
		b0 |= 0x40
	}
	return append([]byte{b0, 0x80 | byte(len(payload)), 0, 0, 0, 0}, payload...)
}

// A secret split across two websocket continuation frames, and a compressed
// frame on a websocket that negotiated no extension, through the transparent
// listener and through the explicit proxy: the frame that completes the
// secret (and the compressed frame) never reaches the origin, the websocket is
// closed, and its record is a deny with the message finding.
func TestInspectWebSocketFrames(t *testing.T) {
	frames := map[string][][]byte{
		"split across continuation frames": {wsFrame(false, false, 1, "id=AKIAQWERTY"), wsFrame(true, false, 0, "UIOPASDFGH done")},
		"compressed frame, no extension":   {wsFrame(true, false, 1, "hello"), wsFrame(true, true, 1, "zzzzUIOPASDFGH")},
	}
	for _, via := range []string{"transparent", "explicit"} {
		for name, fs := range frames {
			t.Run(via+"/"+name, func(t *testing.T) {
				eng := allowAllEngine(t, nil)
				up := newRawWSUpstream(t)
				h := newHarness(t, eng, names("api.example"), nil, withInspector(patternInspector{}, 0))
				h.allowUpstreams(up.upstream)
				host := fmt.Sprintf("api.example:%d", up.port)
				addr, target := h.explicit, "http://"+host+"/ws"
				if via == "transparent" {
					h.origDst.Store(netip.MustParseAddrPort(up.addr))
					addr, target = h.transp, "/ws"
				}
				c, br := wsUpgrade(t, addr, target, host, "Sec-WebSocket-Extensions: permessage-deflate\r\n")
				defer c.Close()
				c.Write(fs[0])
				time.Sleep(100 * time.Millisecond) // the first frame goes on its own
				c.Write(fs[1])
				io.Copy(io.Discard, br) // the gateway closes the websocket
				r := h.log.Wait(t, "websocket record", func(r audit.Record) bool { return r.Path == "/ws" })
				if r.Decision != audit.DecisionDeny {
					t.Fatalf("record: got %s %+v, want a deny", r.Decision, r.Reasons)
				}
				got := up.received()
				if !bytes.Contains(got, fs[0][6:]) {
					t.Fatalf("the origin did not receive the first frame: %q", got)
				}
				if bytes.Contains(got, []byte("UIOPASDFGH")) {
					t.Fatalf("the origin received the refused frame: %q", got)
				}
				if strings.Contains(name, "split") && (len(r.Findings) == 0 || r.Findings[0].Where != "ws.message") {
					t.Fatalf("record findings: got %+v, want a ws.message finding", r.Findings)
				}
				if strings.Contains(name, "compressed") && (len(r.Reasons) == 0 || r.Reasons[len(r.Reasons)-1].ID != ReasonWSCompressed) {
					t.Fatalf("record reasons: got %+v, want %s", r.Reasons, ReasonWSCompressed)
				}
			})
		}
	}
}
