package exporttest

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	collogspb "go.opentelemetry.io/proto/otlp/collector/logs/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// Received collects what a test collector took, as the record lines it
// carried.
type Received struct {
	mu    sync.Mutex
	lines [][]byte
	down  atomic.Bool
	// refused counts requests refused while down.
	refused atomic.Int64
}

// Refused counts requests refused while down.
func (r *Received) Refused() int64 { return r.refused.Load() }

// Add keeps one record line.
func (r *Received) Add(line []byte) {
	r.mu.Lock()
	r.lines = append(r.lines, append([]byte(nil), line...))
	r.mu.Unlock()
}

func (r *Received) Lines() [][]byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]byte(nil), r.lines...)
}

// receiver is a collector the test can take down and bring back.
type Receiver interface {
	Endpoint() string
	SetDown(bool)
	Got() *Received
	// CAFile trusts a TLS collector's certificate for TLSName ("" without TLS).
	CAFile() string
	TLSName() string
}

// otlpHTTPReceiver decodes OTLP/HTTP protobuf requests; down, it answers 503.
type OTLPHTTP struct {
	caFile string
	rec    Received
	Hang   atomic.Bool // hold every request until the client gives up or the test ends
	held   atomic.Int64
	done   chan struct{}
	srv    *httptest.Server
}

func NewOTLPHTTP(t testing.TB) *OTLPHTTP {
	r := newOTLPHTTP(t)
	r.srv.Start()
	return r
}

// NewOTLPHTTPS is NewOTLPHTTP over TLS, its certificate trusted by CAFile.
func NewOTLPHTTPS(t testing.TB) *OTLPHTTP {
	r := newOTLPHTTP(t)
	r.srv.StartTLS()
	r.caFile = filepath.Join(t.TempDir(), "otlp-ca.pem")
	if err := os.WriteFile(r.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: r.srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	return r
}

func newOTLPHTTP(t testing.TB) *OTLPHTTP {
	r := &OTLPHTTP{done: make(chan struct{})}
	r.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if r.Hang.Load() {
			r.held.Add(1)
			select {
			case <-req.Context().Done():
			case <-r.done:
			}
			return
		}
		if r.rec.down.Load() {
			r.rec.refused.Add(1)
			http.Error(w, "collector down", http.StatusServiceUnavailable)
			return
		}
		body, err := io.ReadAll(req.Body)
		var msg collogspb.ExportLogsServiceRequest
		if err != nil || req.URL.Path != "/v1/logs" || req.Header.Get("Content-Type") != "application/x-protobuf" || proto.Unmarshal(body, &msg) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		r.rec.addOTLP(&msg)
		out, _ := proto.Marshal(&collogspb.ExportLogsServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	t.Cleanup(func() { close(r.done) })
	return r
}

func (r *Received) addOTLP(msg *collogspb.ExportLogsServiceRequest) {
	for _, rl := range msg.ResourceLogs {
		for _, sl := range rl.ScopeLogs {
			for _, lr := range sl.LogRecords {
				r.Add([]byte(lr.Body.GetStringValue()))
			}
		}
	}
}

func (r *OTLPHTTP) Endpoint() string { return r.srv.URL }
func (r *OTLPHTTP) SetDown(d bool)   { r.rec.down.Store(d) }
func (r *OTLPHTTP) Got() *Received   { return &r.rec }
func (r *OTLPHTTP) CAFile() string   { return r.caFile }

// TLSName is the name httptest's certificate is for.
func (r *OTLPHTTP) TLSName() string { return "example.com" }

// Held counts requests held while Hang is set.
func (r *OTLPHTTP) Held() int64 { return r.held.Load() }

// otlpGRPCReceiver is an OTLP/gRPC logs service; down, it answers
// Unavailable.
type OTLPGRPC struct {
	collogspb.UnimplementedLogsServiceServer
	rec  Received
	addr string
}

func NewOTLPGRPC(t testing.TB) *OTLPGRPC {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &OTLPGRPC{addr: ln.Addr().String()}
	s := grpc.NewServer()
	collogspb.RegisterLogsServiceServer(s, r)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return r
}

func (r *OTLPGRPC) Export(_ context.Context, msg *collogspb.ExportLogsServiceRequest) (*collogspb.ExportLogsServiceResponse, error) {
	if r.rec.down.Load() {
		r.rec.refused.Add(1)
		return nil, status.Error(codes.Unavailable, "collector down")
	}
	r.rec.addOTLP(msg)
	return &collogspb.ExportLogsServiceResponse{}, nil
}

func (r *OTLPGRPC) Endpoint() string { return "grpc://" + r.addr }
func (r *OTLPGRPC) SetDown(d bool)   { r.rec.down.Store(d) }
func (r *OTLPGRPC) Got() *Received   { return &r.rec }
func (r *OTLPGRPC) CAFile() string   { return "" }

// TLSName is "": the gRPC receiver is plaintext.
func (r *OTLPGRPC) TLSName() string { return "" }

// syslogReceiver accepts octet-counted RFC 5424 messages over TCP (or TLS);
// down, it closes its listener and every connection, and up listens again on
// the same port.
type Syslog struct {
	t       testing.TB
	rec     Received
	addr    string
	tlsCfg  *tls.Config
	caFile  string
	mu      sync.Mutex
	ln      net.Listener
	conns   []net.Conn
	wg      sync.WaitGroup
	invalid atomic.Int64
}

func NewSyslog(t testing.TB, useTLS bool) *Syslog {
	r := &Syslog{t: t}
	if useTLS {
		r.tlsCfg, r.caFile = testCert(t)
	}
	r.listen("127.0.0.1:0")
	t.Cleanup(func() { r.SetDown(true); r.wg.Wait() })
	return r
}

func (r *Syslog) listen(addr string) {
	var ln net.Listener
	var err error
	for i := 0; i < 50; i++ { // the port may linger a moment after close
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil {
		r.t.Fatalf("listen %s: %v", addr, err)
	}
	if r.tlsCfg != nil {
		ln = tls.NewListener(ln, r.tlsCfg)
	}
	r.mu.Lock()
	r.ln, r.addr = ln, ln.Addr().String()
	r.mu.Unlock()
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			r.mu.Lock()
			r.conns = append(r.conns, c)
			r.mu.Unlock()
			r.wg.Add(1)
			go func() { defer r.wg.Done(); r.read(c) }()
		}
	}()
}

// read parses "LEN SP MSG" frames and keeps each MSG's record line.
func (r *Syslog) read(c net.Conn) {
	br := bufio.NewReader(c)
	for {
		lenStr, err := br.ReadString(' ')
		if err != nil {
			return
		}
		n, err := strconv.Atoi(lenStr[:len(lenStr)-1])
		if err != nil || n <= 0 {
			r.invalid.Add(1)
			return
		}
		msg := make([]byte, n)
		if _, err := io.ReadFull(br, msg); err != nil {
			r.invalid.Add(1) // a frame cut short would be a lost record
			return
		}
		_, line, ok := bytes.Cut(msg, []byte("] \xef\xbb\xbf"))
		if !ok || !bytes.HasPrefix(msg, []byte("<")) {
			r.invalid.Add(1)
			continue
		}
		r.rec.Add(line)
	}
}

func (r *Syslog) SetDown(d bool) {
	r.mu.Lock()
	if d {
		if r.ln != nil {
			r.ln.Close()
			r.ln = nil
		}
		for _, c := range r.conns {
			c.Close()
		}
		r.conns = nil
		r.mu.Unlock()
		r.rec.down.Store(true)
		return
	}
	addr := r.addr
	r.mu.Unlock()
	r.rec.down.Store(false)
	r.listen(addr)
}

func (r *Syslog) Endpoint() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tlsCfg != nil {
		return "tls://" + r.addr
	}
	return "tcp://" + r.addr
}

// Got is what the listener received.
func (r *Syslog) Got() *Received { return &r.rec }

// CAFile is the PEM file that trusts a TLS listener's certificate (for
// ServerName); "" for TCP.
func (r *Syslog) CAFile() string { return r.caFile }

// TLSName is the name in a TLS listener's certificate.
func (r *Syslog) TLSName() string { return ServerName }

// ServerName is the name in a TLS listener's certificate.
const ServerName = "airlock-test-collector"

// testCert makes a self-signed server certificate for
// airlock-test-collector and writes it as a CA file.
func testCert(t testing.TB) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: ServerName},
		DNSNames: []string{ServerName}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "collector-ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, caFile
}
