package fdreserve

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// countingListener counts Accept calls.
type countingListener struct {
	*net.TCPListener
	calls atomic.Int64
}

func (l *countingListener) Accept() (net.Conn, error) {
	l.calls.Add(1)
	return l.TCPListener.Accept()
}

// TestRefusedAtDescriptorLimit: with every descriptor of the process taken,
// a new connection is accepted with the spare's room and closed at once
// (the client reads EOF, the server never sees it), the listener backs off
// instead of spinning on EMFILE, and once descriptors are free again the
// next connection is served.
func TestRefusedAtDescriptorLimit(t *testing.T) {
	tl, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	cl := &countingListener{TCPListener: tl}
	r := New(slog.New(slog.DiscardHandler))
	defer r.Close()
	ln := r.Listener(cl, "test")
	served := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(served)
				return
			}
			served <- c
		}
	}()

	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	low := rl
	low.Cur = uint64(len(fds)) + 32
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl) })
	var fillers []*os.File
	closeFillers := func() {
		for _, f := range fillers {
			f.Close()
		}
		fillers = nil
	}
	defer closeFillers()
	for range 64 {
		f, err := os.Open(os.DevNull)
		if err != nil {
			if !errors.Is(err, syscall.EMFILE) {
				t.Fatal(err)
			}
			break
		}
		fillers = append(fillers, f)
	}
	// One descriptor for the client's socket; then none is left.
	fillers[len(fillers)-1].Close()
	fillers = fillers[:len(fillers)-1]
	c, err := net.DialTimeout("tcp", tl.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatalf("dial at the limit: %v", err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client at the limit read %d bytes, %v; want its connection closed", n, err)
	}
	if got := r.Refused(); got != 1 {
		t.Fatalf("refused: got %d, want 1", got)
	}
	select {
	case sc := <-served:
		t.Fatalf("the server was handed %v at the limit", sc.RemoteAddr())
	default:
	}
	// Still at the limit, no connection waiting: the accepts back off.
	before := cl.calls.Load()
	time.Sleep(300 * time.Millisecond)
	if n := cl.calls.Load() - before; n > 50 {
		t.Fatalf("%d accepts in the window at the limit, want a back-off (under 50), not a spin", n)
	}
	c.Close()
	closeFillers()
	c2, err := net.DialTimeout("tcp", tl.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	select {
	case sc := <-served:
		sc.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the connection after the limit was not served")
	}
}
