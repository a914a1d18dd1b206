package wsframe

// Header is one frame's header.
type Header struct {
	Fin    bool
	RSV1   bool // set on a compressed frame (permessage-deflate)
	Opcode byte
	Masked bool
	Len    uint64
	mask   [4]byte
}

// Control reports whether the frame is a control frame (close, ping, pong),
// not part of a data message.
func (h *Header) Control() bool { return h.Opcode >= 8 }

// Reader follows frames across Feed calls. The zero value is ready.
type Reader struct {
	hdr     []byte
	h       Header
	left    uint64
	maskPos int
	buf     []byte
}

// Left is how many payload bytes of the current frame are still to come.
func (r *Reader) Left() uint64 { return r.left }

// Feed consumes p. At each frame's start it calls header (an error stops
// Feed and is returned); each piece of payload, unmasked, goes to payload
// (the slice is reused after the call returns). Either callback may be nil.
func (r *Reader) Feed(p []byte, header func(*Header) error, payload func(*Header, []byte)) error {
	for len(p) > 0 {
		if r.left == 0 {
			r.hdr = append(r.hdr, p[0])
			p = p[1:]
			need, ok := HeaderLen(r.hdr)
			if !ok || len(r.hdr) < need {
				continue
			}
			r.start()
			if header != nil {
				if err := header(&r.h); err != nil {
					return err
				}
			}
			continue
		}
		n := min(uint64(len(p)), r.left)
		out := r.buf[:0]
		for _, c := range p[:n] {
			if r.h.Masked {
				c ^= r.h.mask[r.maskPos&3]
			}
			r.maskPos++
			out = append(out, c)
		}
		p = p[n:]
		r.left -= n
		if payload != nil {
			payload(&r.h, out)
		}
		r.buf = out[:0]
	}
	return nil
}

// HeaderLen returns the length of the frame header in h once its first two
// bytes are known.
func HeaderLen(h []byte) (int, bool) {
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

// start parses the gathered header and begins its payload.
func (r *Reader) start() {
	h := r.hdr
	r.h = Header{Fin: h[0]&0x80 != 0, RSV1: h[0]&0x40 != 0, Opcode: h[0] & 0x0f, Masked: h[1]&0x80 != 0}
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
	if r.h.Masked {
		copy(r.h.mask[:], h[i:i+4])
	}
	r.h.Len = l
	r.maskPos, r.left = 0, l
	r.hdr = r.hdr[:0]
}
