package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/tcptest"
)

// benchHarness is a gateway with the real policy engine and the real audit
// writer, serving on loopback.
func benchHarness(b *testing.B, pki *testPKI, mitmHosts ...string) *harness {
	b.Helper()
	return benchHarnessWith(b, pki, nil, mitmHosts...)
}

// benchHarnessWith is benchHarness with options on the gateway's config.
func benchHarnessWith(b *testing.B, pki *testPKI, opts []harnessOpt, mitmHosts ...string) *harness {
	b.Helper()
	eng, err := policy.New(policy.Config{AllowHosts: []string{"pypi.org:*", "files.pythonhosted.org:*", "**.bench.example:*"}}, nil)
	if err != nil {
		b.Fatalf("policy engine: %v", err)
	}
	var dec policy.Decider = eng
	if len(mitmHosts) > 0 {
		dec = mitmDecider{eng, mitmHosts}
	}
	w, err := audit.New(audit.Config{File: filepath.Join(b.TempDir(), "audit.jsonl")}, nil)
	if err != nil {
		b.Fatalf("audit writer: %v", err)
	}
	b.Cleanup(func() { w.Close() })
	h := newHarness(b, dec, nil, pki)
	res := &fakeResolver{names: map[string][]netip.Addr{"pypi.org": lo, "files.pythonhosted.org": lo}}
	for i := 0; i < 64; i++ {
		res.names[fmt.Sprintf("h%d.bench.example", i)] = lo
	}
	cfg := h.g.cfg
	for _, o := range opts {
		o(&cfg)
	}
	g, err := New(cfg, dec, w, res, nil)
	if err != nil {
		b.Fatal(err)
	}
	el, _ := net.Listen("tcp", "127.0.0.1:0")
	g.ServeSandbox(policy.Sandbox{ID: "sb-bench"}, el, nil)
	b.Cleanup(func() { g.StopSandbox("sb-bench") })
	h.g, h.explicit = g, el.Addr().String()
	return h
}

// mitmDecider asks the real engine and adds interception for some hosts.
type mitmDecider struct {
	policy.Decider
	hosts []string
}

func (m mitmDecider) Decide(ctx context.Context, in *policy.Input) policy.Decision {
	d := m.Decider.Decide(ctx, in)
	for _, h := range m.hosts {
		if in.Destination.Host == h {
			d.MITM = true
		}
	}
	return d
}

func percentile(d []time.Duration, p float64) time.Duration {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[int(float64(len(d)-1)*p)]
}

// BenchmarkHTTPKeepAlive: small responses on one kept-alive connection, direct
// vs through the explicit proxy (every request decided by the real engine and
// appended by the real audit writer).
func BenchmarkHTTPKeepAlive(b *testing.B) {
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }), nil)
	h := benchHarness(b, nil)
	h.allowUpstreams(up)
	run := func(c *http.Client, url string, n int) (float64, []time.Duration) {
		lat := make([]time.Duration, n)
		start := time.Now()
		for i := 0; i < n; i++ {
			t0 := time.Now()
			resp, err := c.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(t0)
		}
		return float64(n) / time.Since(start).Seconds(), lat
	}
	direct := &http.Client{Transport: &http.Transport{Proxy: nil}}
	proxied := h.proxyClient(nil)
	url := fmt.Sprintf("http://pypi.org:%d/simple/x/", up.port)
	directURL := fmt.Sprintf("http://%s/simple/x/", up.addr)
	run(direct, directURL, 200)
	run(proxied, url, 200)
	b.ResetTimer()
	dRate, dLat := run(direct, directURL, b.N)
	pRate, pLat := run(proxied, url, b.N)
	b.ReportMetric(dRate, "direct-req/s")
	b.ReportMetric(pRate, "proxy-req/s")
	b.ReportMetric(pRate/dRate, "ratio")
	b.ReportMetric(float64((percentile(pLat, 0.5) - percentile(dLat, 0.5)).Microseconds()), "p50-added-µs")
	b.ReportMetric(float64((percentile(pLat, 0.99) - percentile(dLat, 0.99)).Microseconds()), "p99-added-µs")
}

// bulkServer sends size bytes to every connection (optionally over TLS).
func bulkServer(b *testing.B, size int64, cert *tls.Certificate) string {
	buf := make([]byte, 256<<10)
	l := tcptest.Listen(b, func(c net.Conn) {
		var w net.Conn = c
		if cert != nil {
			tc := tls.Server(c, &tls.Config{Certificates: []tls.Certificate{*cert}})
			if tc.Handshake() != nil {
				return
			}
			w = tc
		} else if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
			// Plain: the client speaks first (a server-first protocol waits
			// peek_timeout in a tunnel before it is decided as tcp).
			return
		}
		for sent := int64(0); sent < size; {
			n, err := w.Write(buf[:min(int64(len(buf)), size-sent)])
			if err != nil {
				return
			}
			sent += int64(n)
		}
	})
	return l.Addr().String()
}

func readAll(c net.Conn, size int64) error {
	n, err := io.Copy(io.Discard, c)
	if err == nil && n != size {
		err = fmt.Errorf("read %d bytes, want %d", n, size)
	}
	return err
}

// BenchmarkConnectBulk: 1 GiB per iteration through CONNECT, plain and TLS
// upstream, against a direct connection in the same run.
func BenchmarkConnectBulk(b *testing.B) {
	const size = 1 << 30
	pki := newTestPKI(b)
	cert := pki.leaf(b, "pypi.org")
	h := benchHarness(b, pki)
	for _, mode := range []string{"plain", "tls"} {
		b.Run(mode, func(b *testing.B) {
			var c *tls.Certificate
			if mode == "tls" {
				c = &cert
			}
			addr := bulkServer(b, size, c)
			h.dialer.allow(addr)
			port := netip.MustParseAddrPort(addr).Port()
			dial := func(proxied bool) net.Conn {
				var conn net.Conn
				var err error
				if proxied {
					conn, err = net.Dial("tcp", h.explicit)
					if err != nil {
						b.Fatal(err)
					}
					fmt.Fprintf(conn, "CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", port)
					br := bufio.NewReader(conn)
					if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
						b.Fatalf("connect: %v %v", r, err)
					}
					conn = &bufConn{Conn: conn, r: br}
				} else if conn, err = net.Dial("tcp", addr); err != nil {
					b.Fatal(err)
				}
				if mode == "tls" {
					tc := tls.Client(conn, &tls.Config{ServerName: "pypi.org", RootCAs: pki.upPool})
					if err := tc.Handshake(); err != nil {
						b.Fatal(err)
					}
					conn = tc
				} else if _, err := conn.Write([]byte{'B'}); err != nil { // opaque, client first
					b.Fatal(err)
				}
				return conn
			}
			var dT, pT, dCPU, pCPU time.Duration
			b.SetBytes(size)
			for i := 0; i < b.N; i++ {
				for _, proxied := range []bool{false, true} {
					t0, c0 := time.Now(), processCPU()
					c := dial(proxied)
					if err := readAll(c, size); err != nil {
						b.Fatal(err)
					}
					c.Close()
					if proxied {
						pT += time.Since(t0)
						pCPU += processCPU() - c0
					} else {
						dT += time.Since(t0)
						dCPU += processCPU() - c0
					}
				}
			}
			mb := float64(size) * float64(b.N) / 1e6
			b.ReportMetric(mb/dT.Seconds(), "direct-MB/s")
			b.ReportMetric(mb/pT.Seconds(), "proxy-MB/s")
			b.ReportMetric(dT.Seconds()/pT.Seconds(), "ratio")
			b.ReportMetric(float64(pCPU-dCPU)/float64(time.Millisecond)/(mb/1e3), "gateway-CPU-ms/GB")
		})
	}
}

// BenchmarkConnectHTTPBulk: 256 MiB downloads of plain HTTP inside a CONNECT
// (every request parsed and decided: connectHTTP), with a Content-Length
// (sized) and chunked, two requests per connection, against the same GETs
// on a direct connection in the same run.
func BenchmarkConnectHTTPBulk(b *testing.B) {
	const size = 256 << 20
	h := benchHarness(b, newTestPKI(b))
	buf := make([]byte, 256<<10)
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/sized" {
			w.Header().Set("Content-Length", strconv.Itoa(size))
		}
		for sent := 0; sent < size; sent += len(buf) {
			if _, err := w.Write(buf); err != nil {
				return
			}
		}
	}), nil)
	h.allowUpstreams(up)
	for _, path := range []string{"/sized", "/chunked"} {
		b.Run(path[1:], func(b *testing.B) {
			dial := func(proxied bool) (net.Conn, *bufio.Reader) {
				addr := up.addr
				if proxied {
					addr = h.explicit
				}
				c, err := net.Dial("tcp", addr)
				if err != nil {
					b.Fatal(err)
				}
				br := bufio.NewReaderSize(c, 64<<10)
				if proxied {
					fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\n\r\n", up.port)
					if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
						b.Fatalf("connect: %v %v", r, err)
					}
				}
				return c, br
			}
			get := func(c net.Conn, br *bufio.Reader) {
				fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", path, up.port)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != size || resp.StatusCode != 200 {
					b.Fatalf("status %d, read %d bytes (%v), want %d", resp.StatusCode, n, err, size)
				}
			}
			var dT, pT, dCPU, pCPU time.Duration
			b.SetBytes(2 * size)
			for i := 0; i < b.N; i++ {
				for _, proxied := range []bool{i%2 == 1, i%2 == 0} {
					t0, c0 := time.Now(), processCPU()
					c, br := dial(proxied)
					get(c, br)
					get(c, br)
					c.Close()
					if proxied {
						pT += time.Since(t0)
						pCPU += processCPU() - c0
					} else {
						dT += time.Since(t0)
						dCPU += processCPU() - c0
					}
				}
			}
			mb := 2 * float64(size) * float64(b.N) / 1e6
			b.ReportMetric(mb/dT.Seconds(), "direct-MB/s")
			b.ReportMetric(mb/pT.Seconds(), "proxy-MB/s")
			b.ReportMetric(dT.Seconds()/pT.Seconds(), "ratio")
			// The process's CPU with the gateway in the path minus without it:
			// the gateway's share, steadier than wall time on a loaded machine.
			b.ReportMetric(float64(pCPU-dCPU)/float64(time.Millisecond)/(mb/1e3), "gateway-CPU-ms/GB")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkTunnelsHeld: what one open CONNECT tunnel holds in the gateway
// (1,000 tunnels without errors, RSS bounded). Each iteration opens
// tunnels (the per-sandbox cap's worth) to a TCP echo upstream, echoes a byte
// on each, and reports the heap and goroutine stacks the gateway process
// holds per open tunnel (runtime.MemStats after a GC, so what the client side
// of the benchmark holds is in it too: the same in every run).
// AIRLOCK_TUNNEL_HEAP=file writes a heap profile while the tunnels are open
// (-memprofile is taken after they closed).
func BenchmarkTunnelsHeld(b *testing.B) {
	const n = DefaultMaxTunnelsPerSandbox - 12
	heapFile := os.Getenv("AIRLOCK_TUNNEL_HEAP")
	if heapFile != "" {
		runtime.MemProfileRate = 512
	}
	h := benchHarness(b, newTestPKI(b))
	echo := tcptest.Listen(b, func(c net.Conn) { io.Copy(c, c) })
	h.dialer.allow(echo.Addr().String())
	port := netip.MustParseAddrPort(echo.Addr().String()).Port()
	stats := func() (heap, stack uint64, gs int) {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapInuse, m.StackInuse, runtime.NumGoroutine()
	}
	var heapPer, stackPer, gPer float64
	for i := 0; i < b.N; i++ {
		h0, s0, g0 := stats()
		conns := make([]net.Conn, 0, n)
		for j := 0; j < n; j++ {
			c, err := net.Dial("tcp", h.explicit)
			if err != nil {
				b.Fatal(err)
			}
			conns = append(conns, c)
			fmt.Fprintf(c, "CONNECT pypi.org:%d HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", port, port)
			br := bufio.NewReader(c)
			if r, err := http.ReadResponse(br, nil); err != nil || r.StatusCode != 200 {
				b.Fatalf("connect %d: %v %v", j, r, err)
			}
			if _, err := c.Write([]byte{'x'}); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(br, make([]byte, 1)); err != nil {
				b.Fatalf("echo %d: %v", j, err)
			}
		}
		h1, s1, g1 := stats()
		if heapFile != "" {
			f, err := os.Create(heapFile)
			if err != nil {
				b.Fatal(err)
			}
			pprof.WriteHeapProfile(f)
			f.Close()
		}
		heapPer += float64(h1-h0) / n / 1024
		stackPer += float64(s1-s0) / n / 1024
		gPer += float64(g1-g0) / n
		for _, c := range conns {
			c.Close()
		}
		for k := 0; k < 500 && runtime.NumGoroutine() > g0+8; k++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	b.ReportMetric(heapPer/float64(b.N), "heap-KiB/tunnel")
	b.ReportMetric(stackPer/float64(b.N), "stack-KiB/tunnel")
	b.ReportMetric(gPer/float64(b.N), "goroutines/tunnel")
}

// BenchmarkMITM: the first request to a new host (leaf minted, two handshakes),
// then new connections to a cached host (one request each), and bulk
// throughput of an intercepted download, all against direct TLS.
func BenchmarkMITM(b *testing.B) {
	pki := newTestPKI(b)
	names := []string{"pypi.org"}
	for i := 0; i < 64; i++ {
		names = append(names, fmt.Sprintf("h%d.bench.example", i))
	}
	cert := pki.leaf(b, names...)
	mitmHosts := append([]string(nil), names...)
	h := benchHarness(b, pki, mitmHosts...)
	up := newUpstream(b, http.HandlerFunc(bigHandler), &cert)
	h.allowUpstreams(up)
	roots := pki.upPool.Clone()
	ca, _ := LoadCACert(pki.mitmCert)
	roots.AddCert(ca)
	newClient := func(proxied bool) *http.Client {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, DisableKeepAlives: true}
		if proxied {
			c := h.proxyClient(roots)
			c.Transport.(*http.Transport).DisableKeepAlives = true
			return c
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.addr)
		}
		return &http.Client{Transport: tr}
	}
	get := func(c *http.Client, url string) int64 {
		resp, err := c.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return n
	}
	direct, proxied := newClient(false), newClient(true)
	// First request to a new host: mint + client handshake + upstream handshake.
	var first []time.Duration
	for i := 1; i < 33; i++ {
		t0 := time.Now()
		get(proxied, fmt.Sprintf("https://h%d.bench.example:%d/x", i, up.port))
		first = append(first, time.Since(t0))
	}
	b.ResetTimer()
	var dT, pT time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		get(direct, fmt.Sprintf("https://pypi.org:%d/x", up.port))
		dT += time.Since(t0)
		t0 = time.Now()
		get(proxied, fmt.Sprintf("https://pypi.org:%d/x", up.port))
		pT += time.Since(t0)
	}
	b.StopTimer()
	b.ReportMetric(float64(percentile(first, 0.5).Microseconds()), "first-request-p50-µs")
	b.ReportMetric(float64(b.N)/dT.Seconds(), "direct-conn/s")
	b.ReportMetric(float64(b.N)/pT.Seconds(), "mitm-conn/s")
	b.ReportMetric(dT.Seconds()/pT.Seconds(), "handshake-ratio")
	// Bulk: 64 MiB intercepted download vs direct.
	t0 := time.Now()
	get(direct, fmt.Sprintf("https://pypi.org:%d/big", up.port))
	d := time.Since(t0)
	t0 = time.Now()
	if n := get(proxied, fmt.Sprintf("https://pypi.org:%d/big", up.port)); n != bigSize {
		b.Fatalf("mitm bulk: %d bytes", n)
	}
	p := time.Since(t0)
	b.ReportMetric(d.Seconds()/p.Seconds(), "bulk-ratio")
}

// BenchmarkMITMBulk: 64 MiB downloads on a kept-alive intercepted connection
// (the gateway's own HTTP/1.1 loop relays each body), chunked and with a
// Content-Length, against the same downloads direct in the same run. Run it
// with -cpuprofile/-memprofile: what it measures is the relay's cost per byte.
func BenchmarkMITMBulk(b *testing.B) {
	pki := newTestPKI(b)
	cert := pki.leaf(b, "pypi.org")
	h := benchHarness(b, pki, "pypi.org")
	sized := bytes.Repeat([]byte("airlock!"), 8192)
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/sized" {
			bigHandler(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(bigSize))
		for sent := 0; sent < bigSize; sent += len(sized) {
			if _, err := w.Write(sized); err != nil {
				return
			}
		}
	}), &cert)
	h.allowUpstreams(up)
	roots := pki.upPool.Clone()
	ca, _ := LoadCACert(pki.mitmCert)
	roots.AddCert(ca)
	direct := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", up.addr)
		}}}
	proxied := h.proxyClient(roots)
	for _, path := range []string{"big", "sized"} {
		b.Run(path, func(b *testing.B) {
			url := fmt.Sprintf("https://pypi.org:%d/%s", up.port, path)
			get := func(c *http.Client) time.Duration {
				t0 := time.Now()
				resp, err := c.Get(url)
				if err != nil {
					b.Fatal(err)
				}
				n, _ := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if n != bigSize {
					b.Fatalf("%s: %d bytes, want %d", url, n, bigSize)
				}
				return time.Since(t0)
			}
			get(proxied) // the leaf, the handshakes and the kept-alive connections
			get(direct)
			b.SetBytes(bigSize)
			b.ResetTimer()
			var dT, pT, dCPU, pCPU time.Duration
			for i := 0; i < b.N; i++ {
				c0 := processCPU()
				dT += get(direct)
				c1 := processCPU()
				pT += get(proxied)
				dCPU, pCPU = dCPU+c1-c0, pCPU+processCPU()-c1
			}
			b.StopTimer()
			mb := float64(bigSize) * float64(b.N) / 1e6
			b.ReportMetric(mb/dT.Seconds(), "direct-MB/s")
			b.ReportMetric(mb/pT.Seconds(), "proxy-MB/s")
			b.ReportMetric(dT.Seconds()/pT.Seconds(), "ratio")
			// CPU, steadier than wall time on a loaded machine: the
			// process's with the gateway in the path minus without (the
			// gateway's share per 64 MiB), and direct over proxied (the
			// ratio a CPU-bound machine would see).
			b.ReportMetric(float64(pCPU-dCPU)/float64(time.Millisecond)/float64(b.N), "gateway-CPU-ms/64MiB")
			b.ReportMetric(float64(dCPU)/float64(pCPU), "cpu-ratio")
		})
	}
}

// manyParams is a query of n distinct keys (3 base-36 characters each, no
// values): 9,000 of them fit a 64 KiB request line.
func manyParams(n int) string {
	var sb strings.Builder
	for i := 0; i < n; i++ {
		if i > 0 {
			sb.WriteByte('&')
		}
		k := strconv.FormatInt(int64(i), 36)
		sb.WriteString(strings.Repeat("0", 3-len(k)) + k)
	}
	return sb.String()
}

// BenchmarkQueryKeys9000: the audit record's query keys of a 9,000-parameter
// query.
func BenchmarkQueryKeys9000(b *testing.B) {
	q := manyParams(9000)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		queryKeys(q)
	}
}

// BenchmarkManyQueryParams: a request with 9,000 query parameters on a
// transparent connection (fake policy that allows, in-memory audit log),
// against the same exchange sent directly in the same run. Each iteration is
// a new connection whose first request is small (the transparent peek takes
// 16 KiB of header; later requests, and intercepted ones, MaxHeaderBytes)
// and whose second is the big one, answered or refused.
func BenchmarkManyQueryParams(b *testing.B) {
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }), nil)
	h := newHarness(b, policytest.Allow("pypi.org"), names("pypi.org"), nil)
	h.allowUpstreams(up)
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	small := fmt.Sprintf("GET / HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", up.port)
	big := fmt.Sprintf("GET /q?%s HTTP/1.1\r\nHost: pypi.org:%d\r\nConnection: close\r\n\r\n", manyParams(9000), up.port)
	status := 0
	run := func(addr string, n int) time.Duration {
		start := time.Now()
		for i := 0; i < n; i++ {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				b.Fatal(err)
			}
			br := bufio.NewReader(c)
			for _, raw := range []string{small, big} {
				io.WriteString(c, raw)
				resp, err := http.ReadResponse(br, nil)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				status = resp.StatusCode
			}
			c.Close()
		}
		return time.Since(start)
	}
	run(up.addr, 3)
	run(h.transp, 3)
	b.ResetTimer()
	d := run(up.addr, b.N)
	p := run(h.transp, b.N)
	b.ReportMetric(float64(status), "status")
	b.ReportMetric(float64(d.Microseconds())/float64(b.N), "direct-µs/op")
	b.ReportMetric(float64(p.Microseconds())/float64(b.N), "proxy-µs/op")
	b.ReportMetric(p.Seconds()/d.Seconds(), "ratio")
}

// BenchmarkGRPCUnary: gRPC unary calls per second, direct to a TLS gRPC
// server vs through the explicit proxy with interception (HTTP/2 on both
// sides; every call one stream, decided by the real engine and appended by
// the real audit writer), one call at a time and 8 in flight on one
// connection.
func BenchmarkGRPCUnary(b *testing.B) {
	pki := newTestPKI(b)
	const host = "h0.bench.example"
	echo := newGRPCEcho(b, pki.leaf(b, host))
	h := benchHarness(b, pki, host)
	h.dialer.allow(echo.addr)
	direct, err := grpc.NewClient("passthrough:///"+echo.addr,
		grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pki.upPool, ServerName: host})))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { direct.Close() })
	proxied := grpcClientVia(b, h, host, echo.port)
	call := func(cc *grpc.ClientConn) {
		out := new(wrapperspb.StringValue)
		if err := cc.Invoke(context.Background(), echoSay, wrapperspb.String("x"), out); err != nil {
			b.Fatal(err)
		}
	}
	run := func(cc *grpc.ClientConn, n, par int) float64 {
		start := time.Now()
		var wg sync.WaitGroup
		for w := 0; w < par; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += par {
					call(cc)
				}
			}()
		}
		wg.Wait()
		return float64(n) / time.Since(start).Seconds()
	}
	run(direct, 200, 1)
	run(proxied, 200, 1)
	b.ResetTimer()
	for _, par := range []int{1, 8} {
		d := run(direct, b.N, par)
		p := run(proxied, b.N, par)
		sfx := "-seq"
		if par > 1 {
			sfx = "-par" + strconv.Itoa(par)
		}
		b.ReportMetric(d, "direct-calls/s"+sfx)
		b.ReportMetric(p, "proxy-calls/s"+sfx)
		b.ReportMetric(p/d, "ratio"+sfx)
	}
}
