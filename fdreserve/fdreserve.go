package fdreserve

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Back-off between accepts while descriptors are exhausted, and how long the
// shedding accept waits for a connection that is not there.
const (
	minBackoff  = 5 * time.Millisecond
	maxBackoff  = time.Second
	shedWait    = 10 * time.Millisecond
	logInterval = 10 * time.Second
)

// Reserve is one spare descriptor shared by the listeners it wraps.
type Reserve struct {
	log     *slog.Logger
	refused atomic.Uint64

	mu      sync.Mutex
	spare   *os.File
	lastLog time.Time
	quiet   int
}

// New takes the spare descriptor; logger receives the refusals (at most
// one line every 10 s, with the count in between).
func New(logger *slog.Logger) *Reserve {
	r := &Reserve{log: logger}
	r.spare, _ = os.Open(os.DevNull)
	return r
}

// Refused counts the connections refused at the descriptor limit.
func (r *Reserve) Refused() uint64 { return r.refused.Load() }

// Close gives the spare descriptor back.
func (r *Reserve) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.spare == nil {
		return nil
	}
	err := r.spare.Close()
	r.spare = nil
	return err
}

// Listener wraps l: its Accept never returns EMFILE or ENFILE; it refuses
// the connection waiting instead and tries again after a back-off. name
// says in the log which listener it was.
func (r *Reserve) Listener(l net.Listener, name string) net.Listener {
	return &listener{Listener: l, r: r, name: name}
}

type listener struct {
	net.Listener
	r    *Reserve
	name string
}

func (l *listener) Accept() (net.Conn, error) {
	backoff := minBackoff
	for {
		c, err := l.Listener.Accept()
		if err == nil || !exhausted(err) {
			return c, err
		}
		l.r.shed(l.Listener, l.name, err)
		time.Sleep(backoff)
		backoff = min(backoff*2, maxBackoff)
	}
}

// exhausted reports whether err is the process or the system out of
// descriptors.
func exhausted(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// deadliner is a listener whose Accept can be bounded.
type deadliner interface{ SetDeadline(time.Time) error }

// shed refuses the connection waiting on l, if any, with the spare
// descriptor's room.
func (r *Reserve) shed(l net.Listener, name string, cause error) {
	dl, ok := l.(deadliner)
	r.mu.Lock()
	if r.spare == nil {
		r.spare, _ = os.Open(os.DevNull) // descriptors may have come free
	}
	if !ok || r.spare == nil {
		r.mu.Unlock()
		return
	}
	r.spare.Close()
	r.spare = nil
	_ = dl.SetDeadline(time.Now().Add(shedWait))
	c, err := l.Accept()
	_ = dl.SetDeadline(time.Time{})
	if err == nil {
		r.refused.Add(1) // before the client can see its connection end
		c.Close()
	}
	r.spare, _ = os.Open(os.DevNull)
	if err != nil {
		r.mu.Unlock()
		return
	}
	now := time.Now()
	if now.Sub(r.lastLog) < logInterval {
		r.quiet++
		r.mu.Unlock()
		return
	}
	quiet := r.quiet
	r.lastLog, r.quiet = now, 0
	r.mu.Unlock()
	r.log.Error("connection refused: out of file descriptors", "listener", name, "error", cause, "refused_unlogged", quiet)
}
