package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
)

// The API's connection caps. Every API connection is a descriptor of the
// daemon's, and so is every sandbox connection the gateway relays (two: the
// sandbox's and the upstream's), every DNS TCP query and every executor
// pipe: a caller holding connections open must not take the descriptors the
// other sandboxes need. So the API gets at most an eighth of RLIMIT_NOFILE
// (at most maxDerivedConns); the other seven eighths are the gateway's, the
// DNS filter's and the executor's headroom. One caller other than root holds
// at most perUID of the API's connections, and all of them together at most
// total minus rootReserve: root can always reach the API.
const (
	// apiShare is the fraction (1/apiShare) of RLIMIT_NOFILE the derived
	// api.max_conns takes; a configured one may take up to 1/apiMaxShare.
	apiShare    = 8
	apiMaxShare = 4
	// minDerivedConns and maxDerivedConns bound the derived api.max_conns,
	// maxDerivedPerUID the derived api.max_conns_per_uid.
	minDerivedConns  = 8
	maxDerivedConns  = 4096
	maxDerivedPerUID = 64
	// APIIdleTimeout closes an API connection idle between requests, and
	// APIReadHeaderTimeout one whose request headers do not come: neither
	// bounds a request being served (a stream lasts as long as it runs).
	APIIdleTimeout       = 30 * time.Second
	APIReadHeaderTimeout = 10 * time.Second
	// refuseWriteTimeout bounds writing the 429 to a connection past a cap.
	refuseWriteTimeout = 100 * time.Millisecond
	// refusalLogEvery is the most often a refused connection is logged; the
	// ones in between are counted in the next line (and every one in the
	// metrics).
	refusalLogEvery = 10 * time.Second
)

// Why a connection was refused (the reason label of
// airlock_api_conns_refused_total).
const (
	refusedPerUID = "per_uid"
	refusedTotal  = "total"
)

// connCaps are the API's connection and stream caps in force.
type connCaps struct {
	total, perUID, rootReserve, streamsPerUID int
}

// deriveConnCaps resolves the api caps against nofile, the process's soft
// RLIMIT_NOFILE: zero ones are derived, and a configured api.max_conns that
// would leave the rest of the daemon less than three quarters of the
// descriptors is an error naming it.
func deriveConnCaps(a config.API, nofile uint64) (connCaps, error) {
	var c connCaps
	c.total = a.MaxConns
	switch {
	case c.total == 0:
		c.total = int(min(max(nofile/apiShare, minDerivedConns), maxDerivedConns))
	case uint64(c.total) > nofile/apiMaxShare:
		return c, fmt.Errorf("api.max_conns: %d is more than a quarter of the process's RLIMIT_NOFILE (%d): the gateway, DNS filter and executor need the rest; lower it or raise the limit (LimitNOFILE=)", c.total, nofile)
	}
	c.rootReserve = max(1, c.total/8)
	c.perUID = a.MaxConnsPerUID
	if c.perUID == 0 {
		c.perUID = min(max(c.total/8, 2), maxDerivedPerUID, c.total)
	}
	if c.perUID > c.total {
		return c, fmt.Errorf("api.max_conns_per_uid: %d is more than api.max_conns (%d)", c.perUID, c.total)
	}
	c.streamsPerUID = a.MaxStreamsPerUID
	if c.streamsPerUID == 0 {
		c.streamsPerUID = max(1, c.perUID/2)
	}
	if c.streamsPerUID > c.perUID {
		return c, fmt.Errorf("api.max_streams_per_uid: %d is more than api.max_conns_per_uid (%d): each stream holds a connection", c.streamsPerUID, c.perUID)
	}
	return c, nil
}

// nofileLimit is the process's soft RLIMIT_NOFILE (1024 if it cannot be
// read, the kernel's default).
func nofileLimit() uint64 {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
		return 1024
	}
	return rl.Cur
}

// wantNOFILE is the descriptor limit RaiseNOFILE asks for when the hard
// limit is lower and the process may raise it (root: CAP_SYS_RESOURCE), at
// most fs.nr_open: systemd's default hard limit. Every open tunnel is two
// descriptors of the daemon's (the sandbox's connection and the
// upstream's): 20 sandboxes of 512 tunnels each need more than 20,000.
const wantNOFILE = 1 << 19

// RaiseNOFILE raises RLIMIT_NOFILE and returns the limit in force: soft and
// hard to wantNOFILE (at most fs.nr_open) where the hard limit is lower and
// the process may raise it, else the soft limit to the hard one. The API's
// derived caps (api.max_conns) are fractions of it, so serve and run call it
// before New.
func RaiseNOFILE() (uint64, error) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
		return 1024, fmt.Errorf("getrlimit RLIMIT_NOFILE: %w", err)
	}
	if want := min(wantNOFILE, nrOpen()); rl.Max < want {
		up := unix.Rlimit{Cur: want, Max: want}
		if unix.Setrlimit(unix.RLIMIT_NOFILE, &up) == nil {
			return want, nil
		}
		// Not allowed (no CAP_SYS_RESOURCE): the soft limit up to the hard.
	}
	if rl.Cur < rl.Max {
		rl.Cur = rl.Max
		if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &rl); err != nil {
			return nofileLimit(), fmt.Errorf("setrlimit RLIMIT_NOFILE %d: %w", rl.Max, err)
		}
	}
	return rl.Cur, nil
}

// nrOpen is fs.nr_open, the most RLIMIT_NOFILE may be (the kernel's
// default, 1<<20, when it cannot be read).
func nrOpen() uint64 {
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return 1 << 20
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n == 0 {
		return 1 << 20
	}
	return n
}

// apiConns counts the API's connections and streams by uid.
type apiConns struct {
	caps    connCaps
	log     *slog.Logger
	refused *prometheus.CounterVec

	mu      sync.Mutex
	open    int         // every connection
	others  int         // connections of callers other than root
	byUID   map[int]int // connections by uid
	streams map[int]int // streams by uid
	lastLog time.Time
	quiet   int // refusals since the last logged one
}

func newAPIConns(caps connCaps, log *slog.Logger, reg *prometheus.Registry) *apiConns {
	a := &apiConns{caps: caps, log: log, byUID: map[int]int{}, streams: map[int]int{},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "airlock_api_conns_refused_total",
			Help: "API connections refused at accept (answered 429 and closed), by the cap they were over: per_uid (api.max_conns_per_uid) or total (api.max_conns)."}, []string{"reason"})}
	a.refused.WithLabelValues(refusedPerUID)
	a.refused.WithLabelValues(refusedTotal)
	reg.MustRegister(a.refused, prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "airlock_api_conns_open",
		Help: "API connections open now."}, func() float64 {
		a.mu.Lock()
		defer a.mu.Unlock()
		return float64(a.open)
	}))
	return a
}

// admit counts a new connection of uid, or names the cap it is over. Root
// is bounded by the total alone; any other uid (-1: unidentified) by its
// own cap and by the total less root's reserve.
func (a *apiConns) admit(uid int) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case a.open >= a.caps.total:
		return refusedTotal
	case uid != 0 && a.byUID[uid] >= a.caps.perUID:
		return refusedPerUID
	case uid != 0 && a.others >= a.caps.total-a.caps.rootReserve:
		return refusedTotal
	}
	a.open++
	a.byUID[uid]++
	if uid != 0 {
		a.others++
	}
	return ""
}

func (a *apiConns) release(uid int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.open--
	if uid != 0 {
		a.others--
	}
	if a.byUID[uid]--; a.byUID[uid] <= 0 {
		delete(a.byUID, uid)
	}
}

// refuse answers a connection past a cap 429 and closes it, counted, and
// logged at most every refusalLogEvery.
func (a *apiConns) refuse(c net.Conn, uid int, reason string) {
	a.refused.WithLabelValues(reason).Inc()
	limit := a.caps.total
	if reason == refusedPerUID {
		limit = a.caps.perUID
	}
	msg := fmt.Sprintf(`{"code":%q,"message":"uid %d: too many API connections open (%s cap %d); close idle ones"}`+"\n", api.CodeLimit, uid, reason, limit)
	_ = c.SetWriteDeadline(time.Now().Add(refuseWriteTimeout))
	_, _ = c.Write([]byte("HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
		strconv.Itoa(len(msg)) + "\r\n\r\n" + msg))
	c.Close()
	a.mu.Lock()
	now := time.Now()
	if now.Sub(a.lastLog) < refusalLogEvery {
		a.quiet++
		a.mu.Unlock()
		return
	}
	quiet := a.quiet
	a.lastLog, a.quiet = now, 0
	a.mu.Unlock()
	a.log.Warn("API connection refused: over its cap", "uid", uid, "cap", reason, "limit", limit, "refused_unlogged", quiet)
}

// beginStream counts a long-lived request (an exec's output, its stdin, an
// events stream, a run, a file transfer) of c, or refuses one past
// api.max_streams_per_uid; root's are bounded by the connection caps alone.
func (a *apiConns) beginStream(c caller) (end func(), e *api.Error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !c.root() && a.streams[c.uid] >= a.caps.streamsPerUID {
		return nil, apiErr(api.CodeLimit, "", "uid %d has %d long-lived requests open (exec, stdin, events, run, files), api.max_streams_per_uid is %d", c.uid, a.streams[c.uid], a.caps.streamsPerUID)
	}
	a.streams[c.uid]++
	return func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.streams[c.uid]--; a.streams[c.uid] <= 0 {
			delete(a.streams, c.uid)
		}
	}, nil
}

// capListener admits each accepted connection against the caps; one past
// them is refused there and never reaches the HTTP server.
type capListener struct {
	net.Listener
	conns *apiConns
}

func (l capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		who, known := peerCaller(c)
		uid := who.uid
		if !known {
			uid = -1
		}
		if reason := l.conns.admit(uid); reason != "" {
			l.conns.refuse(c, uid, reason)
			continue
		}
		return &apiConn{Conn: c, who: who, known: known, conns: l.conns, uid: uid}, nil
	}
}

// apiConn is an admitted API connection: its caller, read once at accept,
// and its place under the caps, given back when it closes.
type apiConn struct {
	net.Conn
	who   caller
	known bool
	uid   int
	conns *apiConns
	once  sync.Once
}

func (c *apiConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.conns.release(c.uid) })
	return err
}

// APIServer serves Handler on ListenAPI's socket: each connection's caller
// from ConnContext, the connection caps at accept, APIIdleTimeout between
// requests and APIReadHeaderTimeout for headers.
type APIServer struct {
	srv   *http.Server
	conns *apiConns
}

// APIServer builds the API's server; requests' contexts derive from base.
func (d *Daemon) APIServer(base context.Context) *APIServer {
	return &APIServer{conns: d.conns, srv: &http.Server{Handler: d.Handler(), ConnContext: ConnContext,
		ReadHeaderTimeout: APIReadHeaderTimeout, IdleTimeout: APIIdleTimeout,
		BaseContext: func(net.Listener) context.Context { return base }}}
}

// Serve serves ln until Shutdown or Close (http.Server.Serve's error).
func (s *APIServer) Serve(ln net.Listener) error {
	return s.srv.Serve(capListener{Listener: ln, conns: s.conns})
}

// Shutdown stops accepting and waits for requests in flight (ctx bounds it).
func (s *APIServer) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection at once.
func (s *APIServer) Close() error { return s.srv.Close() }
