package dnsfilter

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/netutil"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/budget"
	"github.com/airlock-dev/airlock/ipguard"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// Filter is the DNS filter: per sandbox, a set of UDP workers (udp.go) and a
// miekg/dns TCP server; one shared Resolver. It is safe for concurrent use.
type Filter struct {
	cfg     *compiled
	dec     policy.Decider
	alog    audit.Logger
	log     *slog.Logger
	res     *Resolver
	metrics *metrics      // the filter's own Prometheus registry and series
	memo    *nameMemo     // address -> name answered, per sandbox (NameFor)
	revOf   func() string // current policy revision, nil if the decider cannot say

	idPrefix string
	idSeq    atomic.Uint64

	// auditFailing is set while the audit logger refuses records, so a query
	// counted into a summary (whose record is written later) fails closed too.
	auditFailing atomic.Bool

	mu        sync.RWMutex
	sandboxes map[string]*sandboxServer
	closed    bool
}

// Revisioner is implemented by deciders that can name their current policy
// revision cheaply. With it, the filter caches decisions for repeated questions
// (without flags) per revision instead of evaluating policy for each; without it,
// every query is evaluated.
type Revisioner interface {
	Rev() string
}

// New builds a Filter. dec and log are required; logger may be nil (discard).
func New(cfg Config, dec policy.Decider, log audit.Logger, logger *slog.Logger) (*Filter, error) {
	if dec == nil {
		return nil, errors.New("dnsfilter: a policy decider is required")
	}
	if log == nil {
		return nil, errors.New("dnsfilter: an audit logger is required")
	}
	logger = oplog.For(logger, "dnsfilter")
	c, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	guard := ipguard.New(c.allow, c.GatewayAddrs)
	m := newMetrics()
	res, err := newResolver(c, guard, logger, m)
	if err != nil {
		return nil, err
	}
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, fmt.Errorf("dnsfilter: id prefix: %w", err)
	}
	f := &Filter{
		cfg: c, dec: dec, alog: log, log: logger, res: res, metrics: m,
		idPrefix:  "dns-" + hex.EncodeToString(b[:]) + "-",
		sandboxes: make(map[string]*sandboxServer),
		memo:      newNameMemo(c.NameMemoPerSandbox, c.NameMemoTotal),
	}
	res.owner = f
	if r, ok := dec.(Revisioner); ok && c.DecisionCacheSize > 0 {
		f.revOf = r.Rev
	}
	return f, nil
}

// auditErr reports a broken audit log (an audit.Health, such as audit.Writer,
// that has failed or closed); a logger that is not one is taken as healthy and
// its Log errors still turn allows into SERVFAIL.
func (f *Filter) auditErr() error {
	if h, ok := f.alog.(audit.Health); ok {
		return h.Err()
	}
	return nil
}

// Resolver returns the resolver the gateway's dialer shares with the sandboxes.
// Its LookupForSandbox charges a lookup to a sandbox this Filter serves.
func (f *Filter) Resolver() *Resolver { return f.res }

// sandbox returns the state of the sandbox the Filter serves as id, or nil.
func (f *Filter) sandbox(id string) *sandboxServer {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.sandboxes[id]
}

// ServeSandbox starts answering sb's queries on udp and tcp (either may be nil,
// not both) and returns once both servers run. own are the sandbox's own addresses,
// the only ones PTR questions are answered for. The Filter owns the sockets from
// here on and closes them in StopSandbox or Shutdown.
func (f *Filter) ServeSandbox(sb policy.Sandbox, own []netip.Addr, udp net.PacketConn, tcp net.Listener) error {
	if sb.ID == "" {
		return errors.New("dnsfilter: serve sandbox: empty sandbox id")
	}
	if udp == nil && tcp == nil {
		return fmt.Errorf("dnsfilter: serve sandbox %q: no udp or tcp listener", sb.ID)
	}
	s := newSandboxServer(f, sb, own)
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return fmt.Errorf("dnsfilter: serve sandbox %q: filter is shut down", sb.ID)
	}
	if _, dup := f.sandboxes[sb.ID]; dup {
		f.mu.Unlock()
		return fmt.Errorf("dnsfilter: serve sandbox %q: already served", sb.ID)
	}
	f.sandboxes[sb.ID] = s
	f.mu.Unlock()

	if err := s.start(udp, tcp); err != nil {
		s.meter.Close()
		f.mu.Lock()
		delete(f.sandboxes, sb.ID)
		f.mu.Unlock()
		return fmt.Errorf("dnsfilter: serve sandbox %q: %w", sb.ID, err)
	}
	f.log.Info("serving sandbox", oplog.SandboxKey, sb.ID)
	return nil
}

// StopSandbox stops answering the sandbox, closes its sockets and forgets the
// addresses it was answered (NameFor). Unknown ids are ignored.
func (f *Filter) StopSandbox(id string) {
	f.mu.Lock()
	s := f.sandboxes[id]
	delete(f.sandboxes, id)
	f.mu.Unlock()
	if s != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := s.stop(ctx); err != nil {
			f.log.Error("stop sandbox", oplog.SandboxKey, id, oplog.ErrorKey, err)
		}
		s.meter.Close()
		f.memo.forget(s)
	}
}

// Shutdown stops every sandbox's servers, waiting for in-flight queries until ctx
// ends. ServeSandbox fails afterwards.
func (f *Filter) Shutdown(ctx context.Context) error {
	f.mu.Lock()
	f.closed = true
	all := f.sandboxes
	f.sandboxes = make(map[string]*sandboxServer)
	f.mu.Unlock()
	var errs []error
	for _, s := range all {
		if err := s.stop(ctx); err != nil {
			errs = append(errs, err)
		}
		s.meter.Close()
		f.memo.forget(s)
	}
	return errors.Join(errs...)
}

func (f *Filter) nextID() string {
	var buf [40]byte
	b := append(buf[:0], f.idPrefix...)
	b = strconv.AppendUint(b, f.idSeq.Add(1), 10)
	return string(b)
}

// sandboxServer is one sandbox's servers and per-sandbox state.
type sandboxServer struct {
	f       *Filter
	sb      policy.Sandbox
	ptr     map[string]string // reverse name (normalized) -> PTR target
	sig     *signals
	names   *nameCache
	dcache  *decisionCache
	meter   *budget.Meter // the sandbox's audit budget
	udp     *udpServer    // nil without a UDP listener
	servers []*dns.Server // the TCP server, once started
	upd     updates       // its rules as changed at run time (update.go)
}

func newSandboxServer(f *Filter, sb policy.Sandbox, own []netip.Addr) *sandboxServer {
	s := &sandboxServer{
		f: f, sb: sb, ptr: make(map[string]string), sig: newSignals(f.cfg), names: newNameCache(maxNames),
	}
	s.meter = s.newMeter()
	if f.revOf != nil {
		s.dcache = newDecisionCache(f.cfg.DecisionCacheSize)
	}
	target := dns.Fqdn(ptrLabel(sb.ID) + "." + f.cfg.PTRDomain)
	for _, a := range own {
		if arpa, err := dns.ReverseAddr(a.Unmap().String()); err == nil {
			s.ptr[strings.TrimSuffix(arpa, ".")] = target
		}
	}
	return s
}

// maxNames bounds each sandbox's memo of normalized names.
const maxNames = 4096

// ptrLabel turns a sandbox id into one LDH label.
func ptrLabel(id string) string {
	b := []byte(strings.ToLower(id))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			b[i] = '-'
		}
	}
	s := strings.Trim(string(b), "-")
	if len(s) > 63 {
		s = s[:63]
	}
	if s == "" {
		s = "sandbox"
	}
	return s
}

func (s *sandboxServer) start(udp net.PacketConn, tcp net.Listener) error {
	type started struct {
		srv *dns.Server
		err error
	}
	ch := make(chan started, 2)
	launch := func(srv *dns.Server) {
		srv.Handler = s
		srv.MsgAcceptFunc = s.accept
		srv.MsgInvalidFunc = s.invalid
		srv.UDPSize = DefaultEDNSSize
		var once sync.Once
		srv.NotifyStartedFunc = func() { once.Do(func() { ch <- started{srv: srv} }) }
		go func() {
			err := srv.ActivateAndServe()
			once.Do(func() {
				if err == nil {
					err = errors.New("server stopped before it started")
				}
				ch <- started{err: err}
			})
			if err != nil {
				s.f.log.Error("dns server stopped", oplog.SandboxKey, s.sb.ID, oplog.ErrorKey, err)
			}
		}()
	}
	n := 0
	if udp != nil {
		// The listener is bound to one address, so the reply's source needs no
		// correcting: plain reads and writes, no control messages.
		s.udp = s.startUDP(udp)
	}
	if tcp != nil {
		launch(&dns.Server{Listener: netutil.LimitListener(tcp, s.f.cfg.MaxTCPConns), ReadTimeout: 5 * time.Second, IdleTimeout: func() time.Duration { return 10 * time.Second }})
		n++
	}
	var errs []error
	for range n {
		r := <-ch
		if r.err != nil {
			errs = append(errs, r.err)
			continue
		}
		s.servers = append(s.servers, r.srv)
	}
	if len(errs) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.stop(ctx)
		if udp != nil {
			udp.Close()
		}
		if tcp != nil {
			tcp.Close()
		}
		return errors.Join(errs...)
	}
	return nil
}

func (s *sandboxServer) stop(ctx context.Context) error {
	var errs []error
	if s.udp != nil {
		if err := s.udp.stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	for _, srv := range s.servers {
		if err := srv.ShutdownContext(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("sandbox %q: %w", s.sb.ID, errors.Join(errs...))
	}
	return nil
}

// accept is the servers' header check (before the message is unpacked). Rejected
// packets get FORMERR or NOTIMP (from the UDP workers or miekg/dns's TCP server)
// and one audit record from here.
func (s *sandboxServer) accept(dh dns.Header) dns.MsgAcceptAction {
	const qr = 1 << 15
	if dh.Bits&qr != 0 {
		s.auditMalformed("", "response bit set: dropped")
		return dns.MsgIgnore
	}
	if op := int(dh.Bits>>11) & 0xF; op != dns.OpcodeQuery {
		s.auditMalformed(rcodeString(dns.RcodeNotImplemented), "opcode "+opcodeString(op)+": only QUERY is served")
		return dns.MsgRejectNotImplemented
	}
	if dh.Qdcount != 1 || dh.Ancount != 0 || dh.Nscount != 0 || dh.Arcount > 1 {
		s.auditMalformed(rcodeString(dns.RcodeFormatError), fmt.Sprintf(
			"sections qd=%d an=%d ns=%d ar=%d: want one question, no answer or authority records, at most one OPT",
			dh.Qdcount, dh.Ancount, dh.Nscount, dh.Arcount))
		return dns.MsgReject
	}
	return dns.MsgAccept
}

// invalid is called for a packet that could not be unpacked. It answers
// FORMERR when the header was readable and drops the packet otherwise.
func (s *sandboxServer) invalid(m []byte, err error) {
	rc := rcodeString(dns.RcodeFormatError)
	if len(m) < 12 {
		rc = ""
	}
	s.auditMalformed(rc, "unpack: "+err.Error())
}

func (s *sandboxServer) auditMalformed(rcode, msg string) {
	s.f.metrics.query(audit.DecisionDeny, qtypeNone)
	if now := time.Now(); !s.meter.Allow(now) && s.meter.Count((&summaryEntry{decision: audit.DecisionDeny, rcode: rcode}).count) {
		return
	}
	rec := &audit.Record{
		ID: s.f.nextID(), Sandbox: s.sb.ID, Kind: audit.KindDNS, Decision: audit.DecisionDeny,
		Reasons: []audit.Reason{{ID: ReasonMalformed, Msg: "malformed query"}},
		Port:    53, RCode: rcode, Error: msg,
	}
	if err := s.f.logAudit(rec); err != nil {
		s.f.log.Error("audit", oplog.SandboxKey, s.sb.ID, oplog.ErrorKey, err)
	}
}

// logAudit writes rec and tracks whether the audit logger refuses records.
func (f *Filter) logAudit(rec *audit.Record) error {
	err := f.alog.Log(rec)
	if err != nil {
		f.metrics.auditFailures.Inc()
	}
	if (err != nil) != f.auditFailing.Load() {
		f.auditFailing.Store(err != nil)
	}
	return err
}

func opcodeString(op int) string {
	if s, ok := dns.OpcodeToString[op]; ok {
		return s
	}
	return strconv.Itoa(op)
}
