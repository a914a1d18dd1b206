package gateway

import (
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// countWrites counts the writes that reach a connection, and fails them all
// once fail is set.
type countWrites struct {
	net.Conn
	mu     sync.Mutex
	writes int
	fail   error
}

func (c *countWrites) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.writes++
	err := c.fail
	c.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}

func (c *countWrites) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.writes
}

// interceptedPair is an intercepting TLS server over a recordBatch (as
// Gateway.intercept builds it) and its client, handshaken; cw counts the
// server's writes to the socket.
func interceptedPair(t *testing.T) (server *tls.Conn, client *tls.Conn, cw *countWrites) {
	t.Helper()
	pki := newTestPKI(t)
	cert := pki.leaf(t, "pypi.org")
	cc, sc := tcpPair(t)
	cw = &countWrites{Conn: sc}
	g := &Gateway{}
	server = tls.Server(g.batchWrites(cw), &tls.Config{Certificates: []tls.Certificate{cert}, DynamicRecordSizingDisabled: true})
	client = tls.Client(cc, &tls.Config{RootCAs: pki.upPool, ServerName: "pypi.org"})
	errc := make(chan error, 1)
	go func() { errc <- server.Handshake() }()
	if err := client.Handshake(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return server, client, cw
}

// TestRecordBatchOneWritePerRelayWrite: a 64 KiB write of the session's
// deadlineWriter (four TLS records) reaches the client socket in one
// write(2); the same bytes written to the TLS connection directly (outside a
// batch: the handshake, HTTP/2) take one per record. The client reads every
// byte, in order.
func TestRecordBatchOneWritePerRelayWrite(t *testing.T) {
	server, client, cw := interceptedPair(t)
	dw := deadlineWriter{c: server, timeout: 10 * time.Second, batch: batchOf(server)}
	if dw.batch == nil {
		t.Fatal("batchOf found no recordBatch under the intercepting TLS server")
	}
	payload := make([]byte, 64<<10)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	got := make(chan []byte, 1)
	go func() {
		b := make([]byte, 2*len(payload))
		io.ReadFull(client, b)
		got <- b
	}()
	for _, tc := range []struct {
		name   string
		write  func([]byte) (int, error)
		writes int
	}{
		{"session write, batched", dw.Write, 1},
		{"direct write, a record each", server.Write, 4},
	} {
		before := cw.count()
		n, err := tc.write(payload)
		if err != nil || n != len(payload) {
			t.Fatalf("%s: wrote %d (%v), want %d", tc.name, n, err, len(payload))
		}
		if w := cw.count() - before; w != tc.writes {
			t.Errorf("%s: got %d writes to the socket, want %d", tc.name, w, tc.writes)
		}
	}
	if b := <-got; !bytes.Equal(b, append(payload, payload...)) {
		t.Fatal("the client read other bytes than were written")
	}
}

// TestRecordBatchFailedFlushIsTheWritesError: crypto/tls hands its records to
// the batch without error; when the one write of the batch fails, the
// session's write returns that error (never a short success), and every
// later write fails too (the TLS stream was cut mid-record).
func TestRecordBatchFailedFlushIsTheWritesError(t *testing.T) {
	server, _, cw := interceptedPair(t)
	dw := deadlineWriter{c: server, timeout: 10 * time.Second, batch: batchOf(server)}
	boom := errors.New("connection reset by the test")
	cw.mu.Lock()
	cw.fail = boom
	cw.mu.Unlock()
	before := cw.count()
	n, err := dw.Write(make([]byte, 40<<10))
	if !errors.Is(err, boom) || n != 0 {
		t.Fatalf("got n=%d err=%v, want 0 and the socket's error", n, err)
	}
	if w := cw.count() - before; w != 1 {
		t.Errorf("got %d writes to the socket, want 1 (the batch)", w)
	}
	cw.mu.Lock()
	cw.fail = nil // the socket would take bytes again: the stream stays cut
	cw.mu.Unlock()
	if _, err := dw.Write([]byte("more")); err == nil {
		t.Fatal("a write after a failed batch succeeded")
	}
	if _, err := server.Write([]byte("more")); err == nil {
		t.Fatal("a direct write after a failed batch succeeded")
	}
}

// queued waits (bounded) until the socket under c holds n bytes to read.
func queued(t *testing.T, c net.Conn, n int) {
	t.Helper()
	raw, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5000; i++ {
		var q int
		raw.Control(func(fd uintptr) { q, _ = queuedBytes(int(fd)) })
		if q >= n {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("the socket never held %d bytes", n)
}

// TestReadAheadTakesWhatIsQueued: one fill takes every byte the socket holds
// (small reads are then served from the buffer), beforeWait runs only once
// the buffer is drained and the socket has nothing, the read then waits for
// the next bytes and returns them, and no buffer is held while drained.
func TestReadAheadTakesWhatIsQueued(t *testing.T) {
	c, peer := tcpPair(t)
	ra := newReadAhead(c, &tlsBufs{})
	if ra == nil {
		t.Fatal("no readAhead for a *net.TCPConn")
	}
	const size = 100 << 10
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	if _, err := peer.Write(data); err != nil {
		t.Fatal(err)
	}
	queued(t, c, size)
	waits := 0
	ra.beforeWait = func() {
		waits++
		peer.Write([]byte("late")) // what the upstream sends while the relay flushes
	}
	var got []byte
	p := make([]byte, 5<<10)
	for len(got) < size {
		n, err := ra.Read(p)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 && ra.Buffered() != size-n {
			t.Errorf("after the first read: %d bytes buffered, want %d (one read(2) for all queued)", ra.Buffered(), size-n)
		}
		got = append(got, p[:n]...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("read other bytes than were sent")
	}
	if waits != 0 || ra.buf != nil {
		t.Errorf("drained: beforeWait ran %d times, buffer held %v; want 0, false", waits, ra.buf != nil)
	}
	n, err := ra.Read(p)
	if err != nil || string(p[:n]) != "late" {
		t.Fatalf("after the wait: got %q (%v), want %q", p[:n], err, "late")
	}
	if waits != 1 {
		t.Errorf("beforeWait ran %d times, want 1", waits)
	}
}

// TestReadAheadErrors: a passed deadline, a close and the peer's end read as
// they do on the connection itself, with no buffer left held.
func TestReadAheadErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(c, peer net.Conn)
		check func(error) bool
	}{
		{"deadline", func(c, _ net.Conn) { c.SetReadDeadline(time.Now().Add(-time.Second)) },
			func(err error) bool { return isTimeout(err) && errors.Is(err, os.ErrDeadlineExceeded) }},
		{"closed", func(c, _ net.Conn) { c.Close() }, func(err error) bool { return errors.Is(err, net.ErrClosed) }},
		{"peer closed", func(_, peer net.Conn) { peer.Close() }, func(err error) bool { return err == io.EOF }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, peer := tcpPair(t)
			ra := newReadAhead(c, &tlsBufs{})
			tc.setup(c, peer)
			n, err := ra.Read(make([]byte, 10))
			if n != 0 || !tc.check(err) {
				t.Fatalf("got n=%d err=%v", n, err)
			}
			if ra.buf != nil {
				t.Error("a buffer is held after the failed read")
			}
		})
	}
	if ra := newReadAhead(&prefixConn{}, &tlsBufs{}); ra != nil {
		t.Error("a readAhead under a wrapper that reads on its own")
	}
}

// TestPoolDropsReadAheadLeftovers: an upstream connection whose read-ahead
// holds bytes nobody asked for is closed, never pooled: the next exchange on
// it would read them as its response.
func TestPoolDropsReadAheadLeftovers(t *testing.T) {
	c, peer := tcpPair(t)
	ra := newReadAhead(c, &tlsBufs{})
	peer.Write([]byte("HTTP/1.1 200 OK\r\n\r\nsmuggled"))
	queued(t, c, 27)
	if _, err := ra.Read(make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	u := newUpstreamConn(upstreamKey{host: "pypi.org", port: 443, tls: true}, ra, lo[0])
	u.rd.ahead = ra
	p := newUpstreamPool(4, 16, time.Minute)
	p.put(u)
	if p.n != 0 {
		t.Fatalf("got %d pooled connections, want 0", p.n)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after put: %v, want the connection closed", err)
	}
}
