package gateway

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// Resolver is the gateway's own name resolution. *net.Resolver and dnsfilter's
// resolver satisfy it. The sandbox's answers are never used for dialing.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

var _ Resolver = (*net.Resolver)(nil)

// Gateway serves the explicit and transparent listeners of every sandbox.
type Gateway struct {
	// splicedBodies counts response bodies sent by splice (splice.go).
	splicedBodies atomic.Int64

	cfg       Config
	dec       policy.Decider
	log       audit.Logger
	logger    *slog.Logger
	metrics   *metrics
	dialer    *dialer
	pool      *upstreamPool
	leaves    *leafCache // nil without a CA
	rootsUp   *upstreamRoots
	h2tr      *http.Transport // HTTP/2 upstreams (h2.go)
	h2bufs    sync.Pool       // *[]byte relay buffers of HTTP/2 streams (copyBody)
	relayBufs *sync.Pool      // *relayBufs of HTTP/1.1 response relays (relay.go)
	tlsBufs   tlsBufs         // buffers under intercepted TLS (tlsio.go)
	sessBufs  sync.Pool       // *sessionBufs: sessions' reader and writer (tunnel.go)

	idPrefix string
	idSeq    atomic.Uint64

	lastMediaType atomic.Pointer[mediaType] // the last response Content-Type parsed (response.go)

	auditBlockedUntil atomic.Int64 // unix nanos; requests refused while in the future

	live     liveSet       // long-lived connections, re-decided on a policy change (redecide.go)
	quit     chan struct{} // closed by Shutdown: stops watchChanges
	quitOnce sync.Once

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	draining  bool           // under mu: ServeSandbox refuses from here on
	drain     atomic.Bool    // draining, read on every request without mu
	wg        sync.WaitGroup // accept loops and connection handlers
}

// sandbox is one sandbox's listeners and live connections.
type sandbox struct {
	info      policy.Sandbox                 // as served; its ID never changes
	rules     atomic.Pointer[policy.Sandbox] // its rules as changed since (update.go)
	listeners []net.Listener
	conns     atomic.Int64
	tunnels   atomic.Int64
	streams   atomic.Int64 // HTTP/2 streams being served
	mu        sync.Mutex
	live      map[*clientConn]struct{}
	stopped   bool
}

// New builds a Gateway and loads the interception CA when one is configured.
// Upstream TLS is always verified; nothing can turn that off.
func New(cfg Config, dec policy.Decider, log audit.Logger, res Resolver, logger *slog.Logger) (*Gateway, error) {
	if dec == nil || log == nil || res == nil {
		return nil, errors.New("gateway: decider, audit logger and resolver are required")
	}
	cfg.applyDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var upstreamCA []byte
	if cfg.UpstreamCAFile != "" {
		b, err := os.ReadFile(cfg.UpstreamCAFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: upstream ca_file: %w", err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("gateway: upstream ca_file %s: no PEM certificates", cfg.UpstreamCAFile)
		}
		upstreamCA = b
	}
	var prefix [6]byte
	if _, err := rand.Read(prefix[:]); err != nil {
		return nil, fmt.Errorf("gateway: id prefix: %w", err)
	}
	g := &Gateway{
		cfg:       cfg,
		dec:       dec,
		log:       log,
		logger:    oplog.For(logger, "gateway"),
		metrics:   newMetrics(),
		rootsUp:   &upstreamRoots{extra: upstreamCA, done: make(chan struct{})},
		idPrefix:  hex.EncodeToString(prefix[:]) + "-",
		sandboxes: make(map[string]*sandbox),
		quit:      make(chan struct{}),
	}
	guard := ipguard.New(cfg.AllowCIDRs, cfg.OwnAddrs)
	g.dialer = newDialer(res, guard, cfg.DialFunc, cfg.DialTimeout)
	if cfg.ParentProxy != "" {
		p, err := newParentProxy(&cfg, res)
		if err != nil {
			return nil, err
		}
		g.dialer.parent, g.dialer.parentTLS = p, g.parentTLS
	}
	g.h2tr = g.h2Transport()
	g.h2bufs.New = func() any { b := make([]byte, 32<<10); return &b }
	g.relayBufs = newRelayPool()
	g.pool = newUpstreamPool(cfg.MaxIdleConnsPerHost, cfg.MaxIdleConns, cfg.IdleConnTimeout)
	if cfg.CACertFile != "" {
		ca, err := LoadCA(cfg.CACertFile, cfg.CAKeyFile)
		if err != nil {
			return nil, fmt.Errorf("gateway: %w", err)
		}
		if g.leaves, err = newLeafCache(ca, cfg.LeafTTL, cfg.LeafCacheSize); err != nil {
			return nil, err
		}
	}
	if n, ok := dec.(ChangeNotifier); ok {
		go g.watchChanges(n, g.quit)
	}
	return g, nil
}

// newID returns a decision id unique within this process and unlikely to repeat
// across restarts.
func (g *Gateway) newID() string {
	var b [64]byte // one allocation, the string
	return string(strconv.AppendUint(append(b[:0], g.idPrefix...), g.idSeq.Add(1), 36))
}

// ServeSandbox starts serving a sandbox's explicit and transparent listeners
// (either may be nil) and returns at once. Connections accepted on them belong to
// sb, whatever they send.
func (g *Gateway) ServeSandbox(sb policy.Sandbox, explicit, transparent net.Listener) error {
	if sb.ID == "" {
		return errors.New("gateway: serve sandbox: empty sandbox id")
	}
	if explicit == nil && transparent == nil {
		return fmt.Errorf("gateway: serve sandbox %s: no listener given", sb.ID)
	}
	s := &sandbox{info: sb, live: make(map[*clientConn]struct{})}
	g.mu.Lock()
	if g.draining {
		g.mu.Unlock()
		return fmt.Errorf("gateway: serve sandbox %s: gateway is shutting down", sb.ID)
	}
	if _, ok := g.sandboxes[sb.ID]; ok {
		g.mu.Unlock()
		return fmt.Errorf("gateway: serve sandbox %s: already served", sb.ID)
	}
	g.sandboxes[sb.ID] = s
	for _, l := range []struct {
		l    net.Listener
		mode listenerMode
	}{{explicit, modeExplicit}, {transparent, modeTransparent}} {
		if l.l == nil {
			continue
		}
		s.listeners = append(s.listeners, l.l)
		g.wg.Add(1)
		if l.mode == modeExplicit {
			go g.serveExplicitListener(s, l.l)
			continue
		}
		go g.acceptLoop(s, l.l, l.mode)
	}
	g.mu.Unlock()
	g.logger.Info("serving sandbox", oplog.SandboxKey, sb.ID)
	return nil
}

type listenerMode uint8

const (
	modeExplicit listenerMode = iota
	modeTransparent
)

func (m listenerMode) String() string {
	if m == modeExplicit {
		return "explicit"
	}
	return "transparent"
}

func (g *Gateway) acceptLoop(s *sandbox, l net.Listener, mode listenerMode) {
	defer g.wg.Done()
	backoff := 5 * time.Millisecond
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded) || isTemporary(err) {
				time.Sleep(backoff)
				backoff = min(backoff*2, time.Second)
				continue
			}
			g.logger.Error("accept failed; listener stopped", oplog.SandboxKey, s.info.ID, "listener", mode.String(), oplog.ErrorKey, err)
			return
		}
		backoff = 5 * time.Millisecond
		cc := g.newClientConn(s, c, mode)
		if cc == nil {
			continue
		}
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			defer cc.close()
			g.serveTransparent(cc)
		}()
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

// StopSandbox closes a sandbox's listeners and its live connections.
func (g *Gateway) StopSandbox(id string) {
	g.mu.Lock()
	s := g.sandboxes[id]
	delete(g.sandboxes, id)
	g.mu.Unlock()
	if s == nil {
		return
	}
	s.stop()
	g.pool.dropSandbox(s)
	g.forgetContent(id)
	g.logger.Info("stopped sandbox", oplog.SandboxKey, id)
}

func (s *sandbox) isStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *sandbox) stop() {
	for _, l := range s.listeners {
		l.Close()
	}
	s.mu.Lock()
	s.stopped = true
	live := make([]*clientConn, 0, len(s.live))
	for c := range s.live {
		live = append(live, c)
	}
	s.mu.Unlock()
	for _, c := range live {
		c.forceClose()
	}
}

// Shutdown stops accepting, lets requests in flight finish (closing kept-alive
// connections as they go idle), and when ctx ends closes whatever is left.
func (g *Gateway) Shutdown(ctx context.Context) error {
	g.quitOnce.Do(func() { close(g.quit) })
	g.mu.Lock()
	g.draining = true
	g.drain.Store(true)
	sbs := make([]*sandbox, 0, len(g.sandboxes))
	for _, s := range g.sandboxes {
		sbs = append(sbs, s)
	}
	g.mu.Unlock()
	for _, s := range sbs {
		for _, l := range s.listeners {
			l.Close()
		}
	}
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		open := 0
		for _, s := range sbs {
			s.mu.Lock()
			for c := range s.live {
				if c.idle.Load() {
					c.forceClose()
				}
				open++
			}
			s.mu.Unlock()
		}
		if open == 0 {
			g.pool.closeAll()
			g.wg.Wait()
			return nil
		}
		select {
		case <-ctx.Done():
			for _, s := range sbs {
				s.stop()
			}
			g.pool.closeAll()
			g.wg.Wait()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func (g *Gateway) isDraining() bool { return g.drain.Load() }

// upstreamRoots is the pool upstream TLS is verified against: the system roots
// plus upstream.ca_file. Parsing the system roots costs more than the rest of a
// gateway's start (~15 ms for ~150 certificates on a small machine) and a run
// that never dials HTTPS upstream does not need them, so they load once, when
// the first upstream TLS dial starts, in parallel with its resolve and connect.
type upstreamRoots struct {
	extra []byte // upstream.ca_file, validated by New
	once  sync.Once
	done  chan struct{}
	pool  *x509.CertPool
}

// load starts loading the pool unless that has begun already.
func (r *upstreamRoots) load() {
	r.once.Do(func() {
		go func() {
			defer close(r.done)
			pool, err := x509.SystemCertPool()
			if err != nil {
				pool = x509.NewCertPool() // no system roots: only upstream.ca_file is trusted
			}
			if r.extra != nil {
				pool.AppendCertsFromPEM(r.extra)
			}
			r.pool = pool
		}()
	})
}

// get returns the pool, loading it first if needed.
func (r *upstreamRoots) get() *x509.CertPool {
	r.load()
	<-r.done
	return r.pool
}

// upstreamTLS returns the client config for a verified upstream TLS
// connection; h2 is offered before http/1.1 when offerH2 (the sandbox's
// client spoke HTTP/2).
func (g *Gateway) upstreamTLS(host string, offerH2 bool) *tls.Config {
	protos := []string{"http/1.1"}
	if offerH2 {
		protos = []string{h2ALPN, "http/1.1"}
	}
	return &tls.Config{
		ServerName: host,
		RootCAs:    g.rootsUp.get(),
		NextProtos: protos,
		MinVersion: tls.VersionTLS12,
	}
}

// parentTLS returns the client config for an https parent proxy: verified
// against the same roots as upstreams.
func (g *Gateway) parentTLS(host string) *tls.Config {
	return &tls.Config{ServerName: host, RootCAs: g.rootsUp.get(), MinVersion: tls.VersionTLS12}
}

// SandboxResolver is a Resolver that charges each lookup to the sandbox it is
// made for, against the same per-sandbox limits (rate, unique names) as that
// sandbox's own DNS queries, so the gateway never resolves a name for a
// sandbox the DNS filter has started refusing. The gateway uses
// LookupForSandbox whenever its Resolver implements this interface.
//
// An error that has a method Reason() string is a refusal by those limits
// (or an unknown sandbox): the gateway denies the request with that reason
// id. Any other error is a resolution failure.
type SandboxResolver interface {
	Resolver
	LookupForSandbox(ctx context.Context, sandboxID, host string) ([]netip.Addr, error)
}

// SandboxNamer is a Resolver that also remembers, per sandbox, which name it
// answered that sandbox's DNS question with which address, for the answer's
// TTL. The gateway decides a transparently captured raw TCP connection (kind
// tcp: neither TLS nor HTTP) to such an address by that name and its port, and
// dials an address it resolves for the name itself (LookupForSandbox, ipguard),
// never the original destination as it is. An address the sandbox was never
// answered (ok false) is decided as the bare address. The gateway uses it
// whenever its Resolver implements this interface; dnsfilter's Resolver does.
type SandboxNamer interface {
	Resolver
	NameFor(sandboxID string, addr netip.Addr) (name string, ok bool)
}
