package secrets

import "bytes"

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
	ws    *wsFrames // nil: check the bytes as they are
	tail  []byte    // last checked bytes, lower-cased, < len(PlaceholderPrefix)
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
		g.where, g.ws = "websocket", &wsFrames{}
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
		data = g.ws.payload(p, g.buf[:0])
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

// wsFrames follows websocket frame boundaries across reads and returns the
// unmasked payload bytes of what it is fed.
type wsFrames struct {
	hdr     []byte // a frame header being gathered
	left    uint64 // payload bytes left in the current frame
	mask    [4]byte
	masked  bool
	maskPos int
}

func (f *wsFrames) payload(b, out []byte) []byte {
	for len(b) > 0 {
		if f.left == 0 {
			f.hdr = append(f.hdr, b[0])
			b = b[1:]
			need, ok := wsHeaderLen(f.hdr)
			if !ok || len(f.hdr) < need {
				continue
			}
			f.start()
			continue
		}
		n := uint64(len(b))
		if n > f.left {
			n = f.left
		}
		for _, c := range b[:n] {
			if f.masked {
				c ^= f.mask[f.maskPos&3]
				f.maskPos++
			}
			out = append(out, c)
		}
		b = b[n:]
		f.left -= n
	}
	return out
}

// wsHeaderLen returns the length of the frame header in h once its first two
// bytes are known.
func wsHeaderLen(h []byte) (int, bool) {
	if len(h) < 2 {
		return 0, false
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n, true
}

// start reads the gathered header and begins its payload.
func (f *wsFrames) start() {
	h := f.hdr
	f.masked = h[1]&0x80 != 0
	l := uint64(h[1] & 0x7f)
	i := 2
	switch l {
	case 126:
		l = uint64(h[2])<<8 | uint64(h[3])
		i = 4
	case 127:
		l = 0
		for _, c := range h[2:10] {
			l = l<<8 | uint64(c)
		}
		i = 10
	}
	if f.masked {
		copy(f.mask[:], h[i:i+4])
	}
	f.maskPos = 0
	f.left = l
	f.hdr = f.hdr[:0]
}
