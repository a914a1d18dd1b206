package gateway

import (
	"bufio"
	"io"
	"net"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// waitFor polls cond (bounded: 10 s) and fails with what when it never holds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		if cond() {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %s", what)
}

func testPoller(t *testing.T) *idlePoller {
	t.Helper()
	p, err := newIdlePoller()
	if err != nil {
		t.Skipf("no epoll: %v", err)
	}
	p.grace = 10 * time.Millisecond
	t.Cleanup(p.close)
	return p
}

// TestParkedDirectionMovesEveryByte: a parked direction resumes on data,
// parks again once quiet, resumes again, and at the source's EOF ends,
// half-closes through onEnd and counts every byte.
func TestParkedDirectionMovesEveryByte(t *testing.T) {
	p := testPoller(t)
	srcPeer, src := tcpPair(t) // srcPeer writes what the direction reads from src
	dst, dstPeer := tcpPair(t) // the direction writes dst; dstPeer reads it
	ended := make(chan struct{})
	d := p.parkDirection(dst, src, func() { closeWrite(dst); close(ended) })
	if d == nil {
		t.Fatal("parkDirection: nil, want the direction parked")
	}
	if got := p.parkedNow(); got != 1 {
		t.Fatalf("parked: got %d, want 1", got)
	}
	dstPeer.SetDeadline(time.Now().Add(10 * time.Second))
	for _, msg := range []string{"one", "two after parking again"} {
		io.WriteString(srcPeer, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(dstPeer, got); err != nil || string(got) != msg {
			t.Fatalf("relayed: got %q (%v), want %q", got, err, msg)
		}
		waitFor(t, "the direction to park again", func() bool { return p.parkedNow() == 1 })
	}
	big := make([]byte, 4<<20)
	go func() {
		srcPeer.Write(big)
		srcPeer.CloseWrite()
	}()
	n, err := io.Copy(io.Discard, dstPeer) // to the EOF onEnd sends
	if err != nil || n != int64(len(big)) {
		t.Fatalf("bulk: got %d bytes (%v), want %d", n, err, len(big))
	}
	<-ended
	total, err := d.wait()
	if want := int64(len("one") + len("two after parking again") + len(big)); total != want || err != nil {
		t.Fatalf("wait: got %d (%v), want %d", total, err, want)
	}
	if got := p.parkedNow(); got != 0 {
		t.Fatalf("parked after the end: got %d, want 0", got)
	}
}

// TestParkedDirectionTakenBack: the owner's wait on a parked direction runs
// it itself and returns at the source's end, also when the source was closed
// under the poller (its registration gone without an event): no hang.
func TestParkedDirectionTakenBack(t *testing.T) {
	p := testPoller(t)
	t.Run("eof", func(t *testing.T) {
		srcPeer, src := tcpPair(t)
		dst, _ := tcpPair(t)
		d := p.parkDirection(dst, src, nil)
		go func() {
			time.Sleep(20 * time.Millisecond)
			srcPeer.Close()
		}()
		if n, _ := d.wait(); n != 0 {
			t.Fatalf("wait: got %d bytes, want 0", n)
		}
	})
	t.Run("closed source", func(t *testing.T) {
		_, src := tcpPair(t)
		dst, _ := tcpPair(t)
		d := p.parkDirection(dst, src, nil)
		src.Close() // what forceClose does to a tunnel's upstream
		if _, err := d.wait(); err == nil {
			t.Fatal("wait on a closed source: got nil error, want the read's")
		}
	})
	if got := p.parkedNow(); got != 0 {
		t.Fatalf("parked after both: got %d, want 0", got)
	}
}

// TestIdleTunnelParksDownstream: through the gateway, an idle CONNECT
// tunnel's upstream-to-client direction waits on the poller (no goroutine),
// still echoes once woken, and its close record counts both ways.
func TestIdleTunnelParksDownstream(t *testing.T) {
	const n = 16
	raw := newRawUpstream(t, "")
	h := newHarness(t, tunnelPolicy(), names("raw.example"), nil)
	h.dialer.allow(raw.addr)
	p := h.g.idle()
	if p == nil {
		t.Skip("no epoll")
	}
	p.grace = 10 * time.Millisecond
	type tun struct {
		c  net.Conn
		br *bufio.Reader
	}
	echo := func(tn tun, msg string) {
		t.Helper()
		tn.c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(tn.c, msg)
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(tn.br, got); err != nil || string(got) != msg {
			t.Fatalf("echo: got %q (%v), want %q", got, err, msg)
		}
	}
	tuns := make([]tun, n)
	for i := range tuns {
		c, br := connectRaw(t, h, "raw.example", raw.port)
		tuns[i] = tun{c, br}
		echo(tuns[i], "first")
	}
	waitFor(t, "every idle tunnel's down direction parked", func() bool { return p.parkedNow() == n })
	for _, tn := range tuns {
		echo(tn, "second")
	}
	for _, tn := range tuns {
		tn.c.Close()
	}
	closes := 0
	h.log.Wait(t, "close records", func(r audit.Record) bool {
		if r.Kind == audit.KindClose && r.Host == "raw.example" {
			if r.BytesUp != int64(len("firstsecond")) || r.BytesDown != int64(len("firstsecond")) {
				t.Errorf("close record bytes: got up %d down %d, want %d each", r.BytesUp, r.BytesDown, len("firstsecond"))
			}
			closes++
		}
		return closes == n
	})
	waitFor(t, "nothing parked once closed", func() bool { return p.parkedNow() == 0 })
}

// TestParkedDirectionBlockedClient: bytes the poller read but a client that
// stopped reading could not take are handed to a goroutine and arrive, in
// order, once it reads again.
func TestParkedDirectionBlockedClient(t *testing.T) {
	p := testPoller(t)
	srcPeer, src := tcpPair(t)
	dst, dstPeer := tcpPair(t)
	// Fill dst's send buffer (and dstPeer's receive buffer).
	var filled int64
	chunk := make([]byte, 64<<10)
	for {
		dst.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
		n, err := dst.Write(chunk)
		filled += int64(n)
		if err != nil {
			break
		}
	}
	dst.SetWriteDeadline(time.Time{})
	d := p.parkDirection(dst, src, func() { closeWrite(dst) })
	io.WriteString(srcPeer, "tail")
	srcPeer.CloseWrite()
	dstPeer.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(dstPeer)
	if err != nil || int64(len(got)) != filled+4 || string(got[len(got)-4:]) != "tail" {
		t.Fatalf("read %d bytes (%v), want %d ending in %q", len(got), err, filled+4, "tail")
	}
	if n, err := d.wait(); n != 4 || err != nil {
		t.Fatalf("wait: got %d (%v), want 4", n, err)
	}
}
