package fakenet

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/vishvananda/netns"

	"github.com/airlock-dev/airlock/test/tcptest"
)

// Net is one fake internet.
type Net struct {
	Name     string       // namespace name, alk-inet-N
	Subnet   netip.Prefix // 198.19.N.0/24
	HostAddr netip.Addr   // the host's end of the veth, 198.19.N.1
	DNSAddr  netip.AddrPort
	// Unused is an address inside the fake internet where nothing listens.
	Unused netip.Addr

	caCert *x509.Certificate
	caKey  *ecdsa.PrivateKey
	caPEM  []byte

	hostLink string
	index    int

	mu        sync.Mutex
	nextIP    int
	hosts     map[string]*Host
	records   map[string]netip.Addr
	closers   []io.Closer
	dnsServer []*dns.Server
	queries   map[string]*atomic.Int64
	allQ      atomic.Int64
	closed    bool
}

// Host is one fake server: an address with HTTP on 80, HTTPS (h2 and
// http/1.1, as real registries offer) on 443, a TCP
// echo on 7 and a UDP counter on 7 and 53.
type Host struct {
	Names []string
	IP    netip.Addr

	conns    atomic.Int64
	requests atomic.Int64
	udp      atomic.Int64
	mu       sync.Mutex
	seen     []*http.Request
	ports    map[int]*atomic.Int64 // extra TCP ports (AddTCPPort)
}

// PortConns is the number of TCP connections an extra port of the host
// (AddTCPPort) accepted; they count in Conns too.
func (h *Host) PortConns(port int) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c := h.ports[port]; c != nil {
		return c.Load()
	}
	return 0
}

// Conns is the number of TCP connections any port of the host accepted.
func (h *Host) Conns() int64 { return h.conns.Load() }

// Requests is the number of HTTP requests served.
func (h *Host) Requests() int64 { return h.requests.Load() }

// UDP is the number of datagrams received.
func (h *Host) UDP() int64 { return h.udp.Load() }

// Seen returns copies of the requests served (headers, URL and the
// client's address only).
func (h *Host) Seen() []*http.Request {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*http.Request(nil), h.seen...)
}

// New creates a fake internet. Its /24 is chosen so concurrent test processes do
// not collide: the first 198.19.N.0/24 with no address on the host.
func New() (*Net, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("fakenet: requires root")
	}
	n := &Net{hosts: map[string]*Host{}, records: map[string]netip.Addr{}, queries: map[string]*atomic.Int64{}, nextIP: 10}
	if err := n.makeCA(); err != nil {
		return nil, err
	}
	var lastErr error
	start := int(time.Now().UnixNano()%200) + 20
	for try := 0; try < 30; try++ {
		idx := (start+try*7)%230 + 20
		if err := n.create(idx); err != nil {
			lastErr = err
			continue
		}
		if err := n.startDNS(); err != nil {
			n.Close()
			return nil, err
		}
		n.writeOwner()
		return n, nil
	}
	return nil, fmt.Errorf("fakenet: no free subnet: %w", lastErr)
}

func run(args ...string) error {
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n *Net) create(idx int) error {
	name := fmt.Sprintf("alk-inet-%d", idx)
	if _, err := os.Stat("/run/netns/" + name); err == nil {
		return fmt.Errorf("%s exists", name)
	}
	n.Name = name
	n.index = idx
	n.Subnet = netip.MustParsePrefix(fmt.Sprintf("198.19.%d.0/24", idx))
	n.HostAddr = netip.MustParseAddr(fmt.Sprintf("198.19.%d.1", idx))
	n.DNSAddr = netip.MustParseAddrPort(fmt.Sprintf("198.19.%d.2:53", idx))
	n.Unused = netip.MustParseAddr(fmt.Sprintf("198.19.%d.250", idx))
	n.hostLink = fmt.Sprintf("alk-i%d-h", idx)
	peer := fmt.Sprintf("alk-i%d-p", idx)
	// Another process may pick idx at the same moment: making the namespace
	// (O_EXCL) and then the host link decides who owns idx, and a loser
	// removes only what it made itself.
	if err := run("ip", "netns", "add", name); err != nil {
		return err
	}
	if err := run("ip", "link", "add", n.hostLink, "type", "veth", "peer", "name", peer, "netns", name); err != nil {
		_ = run("ip", "netns", "delete", name)
		return err
	}
	steps := [][]string{
		{"ip", "addr", "add", n.HostAddr.String() + "/24", "dev", n.hostLink},
		{"ip", "link", "set", n.hostLink, "up"},
		{"ip", "-n", name, "link", "set", "lo", "up"},
		{"ip", "-n", name, "addr", "add", n.DNSAddr.Addr().String() + "/24", "dev", peer},
		{"ip", "-n", name, "link", "set", peer, "up"},
		{"ip", "-n", name, "route", "add", "default", "via", n.HostAddr.String()},
		{"ip", "netns", "exec", name, "iptables", "-w", "-A", "INPUT", "-p", "icmp", "--icmp-type", "echo-request", "-j", "ACCEPT"},
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			n.destroy()
			return err
		}
	}
	return nil
}

func (n *Net) destroy() {
	_ = run("ip", "netns", "delete", n.Name)
	_ = run("ip", "link", "delete", n.hostLink)
	_ = os.Remove(filepath.Join(OwnerDir, n.Name))
}

// OwnerDir holds one file per live fake internet, named after its namespace and
// holding the pid of the process that made it, so CleanStale can tell a crashed
// run's leftovers from a fake internet another test process is using.
const OwnerDir = "/run/alk-fakenet"

func (n *Net) writeOwner() {
	if err := os.MkdirAll(OwnerDir, 0o700); err != nil {
		return
	}
	_ = os.WriteFile(filepath.Join(OwnerDir, n.Name), []byte(strconv.Itoa(os.Getpid())), 0o600)
}

// inNS runs fn on a thread that has entered the namespace. The thread is never
// unlocked, so the runtime retires it when the goroutine ends.
func (n *Net) inNS(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		h, err := netns.GetFromName(n.Name)
		if err != nil {
			errc <- err
			return
		}
		defer h.Close()
		if err := netns.Set(h); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}

func (n *Net) startDNS() error {
	var udp net.PacketConn
	var tcp net.Listener
	err := n.inNS(func() error {
		var err error
		if udp, err = net.ListenPacket("udp4", n.DNSAddr.String()); err != nil {
			return err
		}
		tcp, err = net.Listen("tcp4", n.DNSAddr.String())
		return err
	})
	if err != nil {
		return fmt.Errorf("fakenet: dns listen: %w", err)
	}
	h := dns.HandlerFunc(n.serveDNS)
	us := &dns.Server{PacketConn: udp, Handler: h}
	ts := &dns.Server{Listener: tcp, Handler: h}
	go func() { _ = us.ActivateAndServe() }()
	go func() { _ = ts.ActivateAndServe() }()
	n.mu.Lock()
	n.dnsServer = append(n.dnsServer, us, ts)
	n.mu.Unlock()
	return nil
}

func (n *Net) serveDNS(w dns.ResponseWriter, r *dns.Msg) {
	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	n.allQ.Add(1)
	if len(r.Question) == 1 {
		q := r.Question[0]
		name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
		n.mu.Lock()
		c := n.queries[name]
		if c == nil {
			c = new(atomic.Int64)
			n.queries[name] = c
		}
		ip, ok := n.records[name]
		n.mu.Unlock()
		c.Add(1)
		switch {
		case !ok:
			m.Rcode = dns.RcodeNameError
		case q.Qtype == dns.TypeA:
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: ip.AsSlice()})
		}
	}
	_ = w.WriteMsg(m)
}

// Queries returns how many DNS queries for name the fake resolver received.
func (n *Net) Queries(name string) int64 {
	n.mu.Lock()
	defer n.mu.Unlock()
	if c := n.queries[name]; c != nil {
		return c.Load()
	}
	return 0
}

// AllQueries returns how many DNS queries the fake resolver received in all.
func (n *Net) AllQueries() int64 { return n.allQ.Load() }

// SetRecord points name at ip in the fake DNS without starting a server (for
// rebinding tests: a name that resolves to 127.0.0.1 or 169.254.169.254).
func (n *Net) SetRecord(name string, ip netip.Addr) {
	n.mu.Lock()
	n.records[name] = ip
	n.mu.Unlock()
}

// Start is New for a test: it fails t on an error and closes the fake
// internet when t ends.
func Start(t testing.TB) *Net {
	t.Helper()
	n, err := New()
	if err != nil {
		t.Fatalf("fakenet: %v", err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// Host is AddHost with the default handler for a test: it fails t on an
// error.
func (n *Net) Host(t testing.TB, names ...string) *Host {
	t.Helper()
	h, err := n.AddHost(names, nil)
	if err != nil {
		t.Fatalf("fakenet: host %v: %v", names, err)
	}
	return h
}

// Get sends one raw HTTP/1.1 GET for path to addr (IP:PORT, dialed from the
// calling thread's network namespace) naming host, and returns what came back
// until the server closed (at most 5 s), or the dial's error.
func Get(addr, host, path string) (string, error) {
	c, err := net.DialTimeout("tcp4", addr, 3*time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	b, _ := io.ReadAll(c)
	return string(b), nil
}

// AddHost starts a server answering for names on a new address. handler may be
// nil for a default that answers "hello from <host>".
func (n *Net) AddHost(names []string, handler http.Handler) (*Host, error) {
	n.mu.Lock()
	if n.nextIP > 240 {
		n.mu.Unlock()
		return nil, errors.New("fakenet: out of addresses")
	}
	ip := netip.MustParseAddr(fmt.Sprintf("198.19.%d.%d", n.index, n.nextIP))
	n.nextIP++
	n.mu.Unlock()
	if err := run("ip", "-n", n.Name, "addr", "add", ip.String()+"/32", "dev", fmt.Sprintf("alk-i%d-p", n.index)); err != nil {
		return nil, err
	}
	h := &Host{Names: names, IP: ip}
	if handler == nil {
		handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s %s\n", r.Host, r.URL.Path)
		})
	}
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.requests.Add(1)
		h.mu.Lock()
		h.seen = append(h.seen, &http.Request{Method: r.Method, Host: r.Host, URL: r.URL, Header: r.Header.Clone(), RemoteAddr: r.RemoteAddr})
		h.mu.Unlock()
		handler.ServeHTTP(w, r)
	})
	leaf, err := n.leaf(names, ip)
	if err != nil {
		return nil, err
	}
	var l80, l443, l7 net.Listener
	var u7, u53 net.PacketConn
	err = n.inNS(func() error {
		var err error
		if l80, err = net.Listen("tcp4", ip.String()+":80"); err != nil {
			return err
		}
		if l443, err = net.Listen("tcp4", ip.String()+":443"); err != nil {
			return err
		}
		if l7, err = net.Listen("tcp4", ip.String()+":7"); err != nil {
			return err
		}
		if u7, err = net.ListenPacket("udp4", ip.String()+":7"); err != nil {
			return err
		}
		u53, err = net.ListenPacket("udp4", ip.String()+":53")
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("fakenet: listen on %s: %w", ip, err)
	}
	s80 := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second}
	s443 := &http.Server{Handler: counted, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{leaf}, NextProtos: []string{"h2", "http/1.1"}}}
	go func() { _ = s80.Serve(&countingListener{Listener: l80, n: &h.conns}) }()
	go func() { _ = s443.ServeTLS(&countingListener{Listener: l443, n: &h.conns}, "", "") }()
	go echoTCP(&countingListener{Listener: l7, n: &h.conns})
	go countUDP(u7, &h.udp)
	go countUDP(u53, &h.udp)
	n.mu.Lock()
	for _, name := range names {
		n.records[name] = ip
	}
	n.hosts[names[0]] = h
	n.closers = append(n.closers, s80, s443, l7, u7, u53)
	n.mu.Unlock()
	return h, nil
}

// AddTCPPort starts a TCP echo server on another port of h, so a test can
// prove the host is unreachable on a port it does not serve: connections count
// in h.Conns and h.PortConns(port). A port already added is left as it is.
func (n *Net) AddTCPPort(h *Host, port int) error {
	h.mu.Lock()
	if h.ports[port] != nil {
		h.mu.Unlock()
		return nil
	}
	if h.ports == nil {
		h.ports = map[int]*atomic.Int64{}
	}
	c := new(atomic.Int64)
	h.ports[port] = c
	h.mu.Unlock()
	var l net.Listener
	err := n.inNS(func() error {
		var err error
		l, err = net.Listen("tcp4", netip.AddrPortFrom(h.IP, uint16(port)).String())
		return err
	})
	if err != nil {
		h.mu.Lock()
		delete(h.ports, port)
		h.mu.Unlock()
		return fmt.Errorf("fakenet: listen on %s:%d: %w", h.IP, port, err)
	}
	go echoTCP(&countingListener{Listener: l, n: &h.conns, port: c})
	n.mu.Lock()
	n.closers = append(n.closers, l)
	n.mu.Unlock()
	return nil
}

type countingListener struct {
	net.Listener
	n    *atomic.Int64
	port *atomic.Int64 // optional second counter
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
		if l.port != nil {
			l.port.Add(1)
		}
	}
	return c, err
}

// echoTCP echoes each connection's first MiB for 60 s (long enough for
// bench-compare to open thousands of tunnels and still echo on the first).
// It copies through a small buffer, not io.Copy's splice: a spliced copy
// holds a pipe (two more descriptors) while it waits, and ten thousand held
// connections would take thirty thousand of the process's descriptors.
func echoTCP(l net.Listener) {
	tcptest.Serve(l, func(c net.Conn) {
		_ = c.SetDeadline(time.Now().Add(60 * time.Second))
		_, _ = io.CopyBuffer(struct{ io.Writer }{c}, io.LimitReader(c, 1<<20), make([]byte, 4<<10))
	})
}

func countUDP(c net.PacketConn, n *atomic.Int64) {
	buf := make([]byte, 2048)
	for {
		_, _, err := c.ReadFrom(buf)
		if err != nil {
			return
		}
		n.Add(1)
	}
}

// ICMPEchoRequests reads the namespace's iptables counter of echo requests.
func (n *Net) ICMPEchoRequests() (int64, error) {
	out, err := exec.Command("ip", "netns", "exec", n.Name, "iptables", "-w", "-L", "INPUT", "-v", "-x", "-n").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("fakenet: read icmp counter: %v: %s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[2] == "ACCEPT" && (f[3] == "icmp" || f[3] == "1") {
			return strconv.ParseInt(f[0], 10, 64)
		}
	}
	return 0, errors.New("fakenet: icmp counter rule not found")
}

// CAPool returns a pool holding only the fake CA.
func (n *Net) CAPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(n.caCert)
	return p
}

// WriteCA writes the CA PEM to path.
func (n *Net) WriteCA(path string) error { return os.WriteFile(path, n.caPEM, 0o644) }

func (n *Net) makeCA() error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(time.Now().UnixNano()),
		Subject:               pkix.Name{CommonName: "airlock fakenet test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	n.caCert, _ = x509.ParseCertificate(der)
	n.caKey = key
	n.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return nil
}

func (n *Net) leaf(names []string, ip netip.Addr) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: names[0]},
		DNSNames:     names,
		IPAddresses:  []net.IP{ip.AsSlice()},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, n.caCert, &key.PublicKey, n.caKey)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// Close stops every server and removes the namespace and veth.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	closers, servers := n.closers, n.dnsServer
	n.mu.Unlock()
	for _, c := range closers {
		_ = c.Close()
	}
	for _, s := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_ = s.ShutdownContext(ctx)
		cancel()
	}
	n.destroy()
	return nil
}

// CleanStale removes the fake internets whose owning process (see OwnerDir) is
// dead. Unlike Clean it never touches a fake internet another live test process
// is using, nor one made by a process that recorded no owner.
func CleanStale() {
	entries, _ := os.ReadDir(OwnerDir)
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, "alk-inet-") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(OwnerDir, name))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			continue
		}
		_ = run("ip", "netns", "delete", name)
		if idx, ok := strings.CutPrefix(name, "alk-inet-"); ok {
			_ = run("ip", "link", "delete", "alk-i"+idx+"-h")
		}
		_ = os.Remove(filepath.Join(OwnerDir, name))
	}
}

// Clean removes fake internets a crashed run left behind: every alk-inet-*
// namespace, including ones other live processes use (see CleanStale).
func Clean() {
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "alk-inet-") {
			_ = run("ip", "netns", "delete", e.Name())
		}
	}
}
