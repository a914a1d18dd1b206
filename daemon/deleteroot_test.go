package daemon

import (
	"context"
	"errors"
	"net"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/test/poll"
)

// listenIn opens a UDP socket on 127.0.0.1 inside the network namespace at
// path, from a thread that is thrown away afterwards (never unlocked).
func listenIn(t *testing.T, path string) *net.UDPConn {
	t.Helper()
	h, err := vnetns.GetFromPath(path)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	type res struct {
		c   *net.UDPConn
		err error
	}
	rc := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the sandbox's namespace
		if err := vnetns.Set(h); err != nil {
			rc <- res{nil, err}
			return
		}
		c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		rc <- res{c, err}
	}()
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c
}

// drain reads every datagram waiting on c and returns how many there were.
func drain(t *testing.T, c *net.UDPConn, wait time.Duration) int {
	t.Helper()
	buf := make([]byte, 64)
	n := 0
	for {
		if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return n
			}
			t.Fatal(err)
		}
		n++
	}
}

// drainQueued reads the datagrams queued on c at this instant (a read
// deadline already passed would read nothing at all).
func drainQueued(t *testing.T, c *net.UDPConn) int {
	t.Helper()
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	var rerr error
	buf := make([]byte, 64)
	if err := rc.Read(func(fd uintptr) bool {
		for {
			_, _, err := unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			if err == unix.EAGAIN {
				return true
			}
			if err != nil {
				rerr = err
				return true
			}
			n++
		}
	}); err != nil {
		t.Fatal(err)
	}
	if rerr != nil {
		t.Fatal(rerr)
	}
	return n
}

// testRootDeleteSilences: the delete answers once nothing of the sandbox can
// send a packet, although its namespace, cgroup and init's exit are torn
// down after the answer. A sandbox sends datagrams in a tight loop to a
// socket the test holds inside its namespace (loopback, which the island
// accepts); once the delete has answered and what was already queued is
// read, nothing more arrives, before the teardown has finished or after.
func testRootDeleteSilences(t *testing.T, a *apiRoot) {
	ctx := context.Background()
	sb := a.create(t, api.CreateSandboxRequest{})
	ns, ok := a.d.netns.Get(sb.ID)
	if !ok {
		t.Fatalf("no namespace for %s", sb.ID)
	}
	sink := listenIn(t, ns.Path)
	port := strconv.Itoa(sink.LocalAddr().(*net.UDPAddr).Port)
	s, err := a.c.StartExec(ctx, sb.ID, api.ExecRequest{Argv: []string{"bash", "-c",
		"exec 3>/dev/udp/127.0.0.1/" + port + "; while :; do echo x >&3; done"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got := 0
	poll.Until(t, 10*time.Second, "the sandbox's datagrams", func() bool { got += drainQueued(t, sink); return got > 100 })
	if _, err := a.c.DeleteSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	// Everything sent before the kill is queued already (loopback delivers
	// within the sender's system call): read what is there now, without
	// waiting.
	queued := drainQueued(t, sink)
	if _, err := os.Stat(ns.Path); err != nil {
		t.Logf("the namespace was gone before the check (%v): the teardown was quick", err)
	}
	// Longer than a CFS period (100 ms): a survivor throttled by its CPU
	// limit at the kill would have run again.
	if late := drain(t, sink, 300*time.Millisecond); late != 0 {
		t.Fatalf("%d datagrams arrived after the delete answered (%d were queued before it)", late, queued)
	}
	a.d.reg.waitTeardowns()
	if late := drain(t, sink, 100*time.Millisecond); late != 0 {
		t.Fatalf("%d datagrams arrived during the teardown", late)
	}
	t.Logf("%d datagrams before the delete, %d queued at its answer, none after", got, queued)
}
