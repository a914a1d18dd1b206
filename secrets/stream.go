package secrets

import (
	"bytes"

	"github.com/airlock-dev/airlock/wsframe"
)

// StreamGuard watches what a sandbox that holds placeholders sends on a
// stream the gateway relays without parsing it as HTTP (a raw TCP tunnel, a
// websocket after its upgrade). The gateway passes every chunk to Check before
// forwarding it; Check fails with a *Denial (secret_placeholder_misuse,
// flagged) when the chunk completes the placeholder prefix, so the part of a
// placeholder that identifies it (its random tail) never leaves. It holds no
// bytes back, so interactive protocols are not delayed: the last
// len(PlaceholderPrefix)-1 bytes already checked are kept to find a prefix
// split across chunks. A StreamGuard is used by one goroutine.
type StreamGuard struct {
	in    *Injector
	sb    Sandbox
	where string
	ws    *wsframe.Reader // nil: check the bytes as they are
	tail  []byte          // last checked bytes, lower-cased, < len(PlaceholderPrefix)
	buf   []byte
	err   error
}

// NewStreamGuard returns a guard for a raw stream, or for the client side of a
// websocket (RFC 6455) when websocket is set: client frames are masked, so
// each frame's payload is unmasked before it is checked. Compressed frames
// (permessage-deflate) cannot be checked; the gateway removes the extension
// offer from the upgrade request of a sandbox that holds placeholders.
func (in *Injector) NewStreamGuard(sb Sandbox, websocket bool) *StreamGuard {
	g := &StreamGuard{in: in, sb: sb, where: "stream"}
	if websocket {
		g.where, g.ws = "websocket", &wsframe.Reader{}
	}
	return g
}

// Check looks at the next chunk of the stream, as sent. Once it has failed it
// keeps failing.
func (g *StreamGuard) Check(p []byte) error {
	if g.err != nil || len(p) == 0 {
		return g.err
	}
	data := p
	if g.ws != nil {
		data = g.buf[:0]
		g.ws.Feed(p, nil, func(_ *wsframe.Header, b []byte) { data = append(data, b...) }) // the header callback is nil: Feed cannot fail
		g.buf = data[:0]
	}
	if g.found(data) {
		g.err = g.in.logDeny(g.sb, &Denial{Code: CodePlaceholderMisuse, Flag: FlagPlaceholderLeak,
			Where: g.where, Msg: "a placeholder in a " + g.where})
	}
	return g.err
}

// Err returns the denial Check failed with, if any.
func (g *StreamGuard) Err() error { return g.err }

// found reports whether tail+data holds the prefix and keeps the new tail.
func (g *StreamGuard) found(data []byte) bool {
	const keep = len(PlaceholderPrefix) - 1
	buf := make([]byte, 0, len(g.tail)+len(data))
	buf = append(buf, g.tail...)
	for _, c := range data {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		buf = append(buf, c)
	}
	if bytes.Contains(buf, []byte(PlaceholderPrefix)) {
		return true
	}
	if len(buf) > keep {
		buf = buf[len(buf)-keep:]
	}
	g.tail = append(g.tail[:0], buf...)
	return false
}
