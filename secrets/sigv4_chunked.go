package secrets

import (
	"bufio"
	"bytes"
	"crypto/hmac"
	"errors"
	"io"
	"strconv"
	"strings"
)

// MaxAWSChunk is the largest chunk of an aws-chunked body (payload mode
// STREAMING-AWS4-HMAC-SHA256-PAYLOAD) the gateway re-signs: a chunk's
// signature precedes its data, so one chunk is held while it is verified.
// SDKs send 64 KiB to 128 KiB chunks.
const MaxAWSChunk = 1 << 20

// chunkResigner reads an aws-chunked body signed with the placeholder secret
// and yields the same framing with every chunk signature made with the real
// secret. Each chunk is verified against the placeholder chain before any of
// it is passed on; a chunk that does not verify ends the body with a *Denial.
type chunkResigner struct {
	src       *bufio.Reader
	closer    io.Closer
	amzDate   string
	scope     sigv4Scope
	phKey     []byte
	realKey   []byte
	prevPH    string // the previous signature in the placeholder chain
	prevReal  string // the previous signature in the real chain
	out       []byte
	done      bool
	err       error
	onDeny    func(*Denial)
	maxChunk  int
	maxHeader int
}

func newChunkResigner(body io.ReadCloser, amzDate string, s sigv4Scope, phKey, realKey []byte,
	seedPH, seedReal string, onDeny func(*Denial)) *chunkResigner {
	return &chunkResigner{
		src: bufio.NewReaderSize(body, 64<<10), closer: body, amzDate: amzDate, scope: s,
		phKey: phKey, realKey: realKey, prevPH: seedPH, prevReal: seedReal, onDeny: onDeny,
		maxChunk: MaxAWSChunk, maxHeader: 256,
	}
}

func (c *chunkResigner) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.done {
			c.err = io.EOF
			if _, err := c.src.ReadByte(); err != io.EOF {
				c.err = c.deny("data after the final chunk")
			}
			continue
		}
		if err := c.next(); err != nil {
			c.err = err
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

func (c *chunkResigner) Close() error { return c.closer.Close() }

func (c *chunkResigner) deny(msg string) error {
	d := &Denial{Code: CodeAWSSignature, Where: "body", Msg: "aws-chunked body: " + msg}
	if c.onDeny != nil {
		c.onDeny(d)
	}
	return d
}

// next reads, verifies and re-signs one chunk into c.out.
func (c *chunkResigner) next() error {
	line, err := c.readLine()
	if err != nil {
		return err
	}
	sizeHex, ext, ok := strings.Cut(line, ";")
	sig, ok2 := strings.CutPrefix(ext, "chunk-signature=")
	if !ok || !ok2 || len(sig) != 64 || sizeHex == "" || len(sizeHex) > 8 {
		return c.deny("malformed chunk header")
	}
	size, err := strconv.ParseUint(sizeHex, 16, 32)
	if err != nil {
		return c.deny("malformed chunk size")
	}
	if size > uint64(c.maxChunk) {
		return c.deny("chunk larger than " + strconv.Itoa(c.maxChunk) + " bytes")
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(c.src, data); err != nil {
		return c.deny("truncated chunk")
	}
	if !bytes.HasSuffix(data, []byte("\r\n")) {
		return c.deny("chunk not followed by CRLF")
	}
	data = data[:size]
	want := sigv4Sign(c.phKey, sigv4ChunkStringToSign(c.amzDate, c.scope, c.prevPH, data))
	if !hmac.Equal([]byte(want), []byte(sig)) {
		return c.deny("a chunk signature does not verify with the sandbox's placeholder secret")
	}
	real := sigv4Sign(c.realKey, sigv4ChunkStringToSign(c.amzDate, c.scope, c.prevReal, data))
	c.prevPH, c.prevReal = sig, real
	c.out = append(c.out[:0], sizeHex...)
	c.out = append(c.out, ";chunk-signature="...)
	c.out = append(c.out, real...)
	c.out = append(c.out, "\r\n"...)
	c.out = append(c.out, data...)
	c.out = append(c.out, "\r\n"...)
	if size == 0 {
		c.done = true
	}
	return nil
}

func (c *chunkResigner) readLine() (string, error) {
	var b []byte
	for len(b) <= c.maxHeader {
		ch, err := c.src.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return "", c.deny("body ends before the final chunk")
			}
			return "", err
		}
		b = append(b, ch)
		if bytes.HasSuffix(b, []byte("\r\n")) {
			return string(b[:len(b)-2]), nil
		}
	}
	return "", c.deny("chunk header too long")
}
