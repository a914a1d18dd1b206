package gateway

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"errors"
	"io"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/zstd"
)

// Bounds of a compressed response read as it streams.
const (
	// respBombRatio and respBombMin: a body that decodes to more than
	// respBombRatio times its compressed size, past respBombMin decoded
	// bytes, is a decompression bomb: reported, and no longer decoded.
	respBombRatio = 200
	respBombMin   = 1 << 20
	// respHoldMax bounds the compressed bytes held back because their
	// decoded text is not out of the decoder yet (a deflate window is 32
	// KiB, a zstd block 128 KiB): more is refused (content_response_undecodable).
	respHoldMax = 1 << 20
	// respZstdWindow bounds a zstd stream's window (its decoder's memory).
	respZstdWindow = 8 << 20
)

// flateWindow is deflate's window: its decoder returns text when it fills.
const flateWindow = 32 << 10

// errDecodeStopped ends a decoder the gateway stopped reading.
var errDecodeStopped = errors.New("decoding stopped")

// encodings the gateway reads: Content-Encoding values.
var respEncodings = map[string]struct {
	decode func(io.Reader) (io.Reader, error)
	encode func(io.Writer) (flushWriter, error)
	// flushed: what the decoder took when it returned a piece is all
	// decoded (deflate, but for a back-reference its full window cut: see
	// pump); else only once it asks for more (a zstd block, brotli's
	// input buffer).
	flushed bool
}{
	"gzip": {decode: func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
		encode: func(w io.Writer) (flushWriter, error) { return gzip.NewWriter(w), nil }, flushed: true},
	"x-gzip": {decode: func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) },
		encode: func(w io.Writer) (flushWriter, error) { return gzip.NewWriter(w), nil }, flushed: true},
	// deflate is zlib-wrapped, as RFC 9110 says.
	"deflate": {decode: func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) },
		encode: func(w io.Writer) (flushWriter, error) { return zlib.NewWriter(w), nil }, flushed: true},
	"br": {decode: func(r io.Reader) (io.Reader, error) { return brotli.NewReader(r), nil },
		encode: func(w io.Writer) (flushWriter, error) { return brotli.NewWriter(w), nil }},
	"zstd": {decode: func(r io.Reader) (io.Reader, error) {
		d, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
			zstd.WithDecoderMaxWindow(respZstdWindow), zstd.WithDecoderMaxMemory(respZstdWindow))
		if err != nil {
			return nil, err
		}
		return zstdReader{d}, nil
	}, encode: func(w io.Writer) (flushWriter, error) {
		return zstd.NewWriter(w, zstd.WithEncoderConcurrency(1), zstd.WithWindowSize(1<<20))
	}},
}

// flushWriter is an encoder the gateway re-encodes a stripped stream with.
type flushWriter interface {
	io.WriteCloser
	Flush() error
}

// zstdReader frees the decoder's buffers at the end of its stream.
type zstdReader struct{ d *zstd.Decoder }

func (z zstdReader) Read(p []byte) (int, error) {
	n, err := z.d.Read(p)
	if err != nil {
		z.d.Close()
	}
	return n, err
}

// decoderOf returns the reader of a Content-Encoding the gateway reads
// (gzip, deflate, br, zstd), or nil.
func decoderOf(enc string) func(io.Reader) (io.Reader, error) {
	if e, ok := respEncodings[enc]; ok {
		return e.decode
	}
	return nil
}

// decodeBody decodes a compressed body, at most respScanMax bytes of it
// (whole: all of it); ok is false when it does not decode; bomb is true
// when it decodes to more than respBombRatio times its size.
func decodeBody(enc string, raw []byte) (out []byte, whole, ok, bomb bool) {
	r, err := decoderOf(enc)(bytes.NewReader(raw))
	if err != nil {
		return nil, false, false, false
	}
	limit := min(respScanMax, max(respBombMin, respBombRatio*len(raw)))
	out, err = io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, false, false, false
	}
	if len(out) > limit {
		return out[:limit], false, true, limit < respScanMax
	}
	return out, true, true, false
}

// respDecoder decodes a compressed response body in step with its raw
// bytes, so the relay hands on only raw bytes whose text was scanned and
// decided. The decoders are pull readers, so one runs in a goroutine of its
// own, fed one upstream read at a time (push) and handing each piece it
// decodes back before it decodes more: memory is one read, one decoded
// piece and the decoder's window. safe is the raw prefix every decodable
// byte of which the decoder has handed back: the relay holds back the rest.
type respDecoder struct {
	feed    chan []byte // raw bytes; nil: the body ended
	events  chan decEvent
	ack     chan struct{}
	done    chan struct{}
	flushed bool

	fed      int64 // raw bytes pushed
	safe     int64
	lastOut  int64 // what the decoder had taken at its last piece
	out      int64 // text bytes it returned
	finished bool
	err      error // how decoding ended: io.EOF when whole
}

// decEvent is what the decoding goroutine reports: a decoded piece (out,
// to be acknowledged before the next), that it took every byte pushed and
// waits for more (hungry), or that it ended (err).
type decEvent struct {
	out      []byte
	consumed int64
	hungry   bool
	err      error
}

// newRespDecoder starts decoding enc; it returns once the decoder waits for
// its first bytes.
func newRespDecoder(enc string) *respDecoder {
	e := respEncodings[enc]
	d := &respDecoder{feed: make(chan []byte), events: make(chan decEvent), ack: make(chan struct{}),
		done: make(chan struct{}), flushed: e.flushed}
	go d.run(e.decode)
	d.pump(nil)
	return d
}

func (d *respDecoder) run(decode func(io.Reader) (io.Reader, error)) {
	f := &decFeeder{d: d}
	r, err := decode(f)
	if err != nil {
		d.send(decEvent{err: err})
		return
	}
	buf := make([]byte, 64<<10) // more than a deflate window: one return is all it flushed
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if !d.send(decEvent{out: buf[:n], consumed: f.taken}) {
				return
			}
			select {
			case <-d.ack:
			case <-d.done:
				return
			}
		}
		if err != nil {
			d.send(decEvent{err: err})
			return
		}
	}
}

func (d *respDecoder) send(ev decEvent) bool {
	select {
	case d.events <- ev:
		return true
	case <-d.done:
		return false
	}
}

// push hands raw (nil: the body ended) to the decoder and each piece it
// decodes to out, until it has taken all of raw or ended. out returning
// false stops decoding (stop).
func (d *respDecoder) push(raw []byte, out func([]byte) bool) {
	if d.finished {
		return
	}
	select {
	case d.feed <- raw:
	case <-d.done:
		return
	}
	d.fed += int64(len(raw))
	d.pump(out)
}

// pump takes the decoder's reports until it waits for more or ends.
func (d *respDecoder) pump(out func([]byte) bool) {
	for {
		ev := <-d.events
		switch {
		case ev.err != nil:
			d.finished, d.err = true, ev.err
			if ev.err == io.EOF {
				d.safe = d.fed
			}
			return
		case ev.hungry:
			if !d.flushed {
				d.safe = ev.consumed
			}
			return
		}
		if d.flushed {
			// Deflate returns text at a block's end (a server's flush
			// included), when all it took is out, or when its 32 KiB
			// window fills (the text so far a multiple of it), when a
			// back-reference may be cut (up to 258 bytes more of what it
			// took): what it had taken at the piece before is out then.
			d.out += int64(len(ev.out))
			d.safe = ev.consumed
			if d.out%flateWindow == 0 {
				d.safe = d.lastOut
			}
			d.lastOut = ev.consumed
		}
		if out != nil && !out(ev.out) {
			d.stop()
			return
		}
		d.ack <- struct{}{}
	}
}

// stop ends decoding; the goroutine returns.
func (d *respDecoder) stop() {
	if !d.finished {
		d.finished, d.err = true, errDecodeStopped
		close(d.done)
	}
}

// decFeeder is the decoder's source: the bytes pushed, one push at a time.
// It is an io.ByteReader, so gzip and flate read it without a buffer of
// their own and what they took is what they decoded.
type decFeeder struct {
	d     *respDecoder
	buf   []byte
	taken int64
	eof   bool
}

func (f *decFeeder) more() error {
	for len(f.buf) == 0 {
		if f.eof {
			return io.EOF
		}
		if !f.d.send(decEvent{hungry: true, consumed: f.taken}) {
			return errDecodeStopped
		}
		select {
		case b := <-f.d.feed:
			if b == nil {
				f.eof = true
			}
			f.buf = b
		case <-f.d.done:
			return errDecodeStopped
		}
	}
	return nil
}

func (f *decFeeder) Read(p []byte) (int, error) {
	if err := f.more(); err != nil {
		return 0, err
	}
	n := copy(p, f.buf)
	f.buf = f.buf[n:]
	f.taken += int64(n)
	return n, nil
}

func (f *decFeeder) ReadByte() (byte, error) {
	if err := f.more(); err != nil {
		return 0, err
	}
	c := f.buf[0]
	f.buf = f.buf[1:]
	f.taken++
	return c, nil
}
