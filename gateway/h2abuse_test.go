package gateway

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/policytest"
	"github.com/airlock-dev/airlock/test/poll"
)

// rawH2 is a hand-driven HTTP/2 client (h2c with prior knowledge) for the
// abuse cases: frames are written as given, and every frame the gateway
// sends is read by a goroutine into frames until the connection ends.
type rawH2 struct {
	t       testing.TB
	c       net.Conn
	fr      *http2.Framer
	hbuf    bytes.Buffer
	enc     *hpack.Encoder
	frames  chan gotFrame
	pending []gotFrame    // read, not yet asked for
	done    chan struct{} // closed when the gateway ended the connection
	err     error         // why reading ended (after done)
}

// dialRawH2 opens an h2c connection to the explicit proxy and sends the
// preface and settings. read false leaves the gateway's frames unread.
func dialRawH2(t testing.TB, addr string, read bool, settings ...http2.Setting) *rawH2 {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return rawH2On(t, c, read, settings...)
}

func (r *rawH2) readLoop() {
	defer close(r.done)
	for {
		f, err := r.fr.ReadFrame()
		if err != nil {
			r.err = err
			return
		}
		if _, ok := f.(*http2.GoAwayFrame); ok {
			r.err = errors.New("goaway")
			return
		}
		select {
		case r.frames <- copyFrame(f):
		default: // a test that does not look at frames
		}
	}
}

// gotFrame is what the tests look at of a frame the gateway sent (a Framer
// reuses its frames).
type gotFrame struct {
	typ      http2.FrameType
	stream   uint32
	status   string // HEADERS: :status
	code     http2.ErrCode
	ack      bool
	settings map[http2.SettingID]uint32
}

func copyFrame(f http2.Frame) gotFrame {
	g := gotFrame{typ: f.Header().Type, stream: f.Header().StreamID}
	switch f := f.(type) {
	case *http2.MetaHeadersFrame:
		g.status = f.PseudoValue("status")
	case *http2.RSTStreamFrame:
		g.code = f.ErrCode
	case *http2.SettingsFrame:
		g.ack = f.IsAck()
		g.settings = map[http2.SettingID]uint32{}
		f.ForeachSetting(func(s http2.Setting) error { g.settings[s.ID] = s.Val; return nil })
	}
	return g
}

// block encodes a request header block for authority and path.
func (r *rawH2) block(method, authority, path string, extra ...string) []byte {
	r.hbuf.Reset()
	r.enc.WriteField(hpack.HeaderField{Name: ":method", Value: method})
	r.enc.WriteField(hpack.HeaderField{Name: ":scheme", Value: "http"})
	r.enc.WriteField(hpack.HeaderField{Name: ":authority", Value: authority})
	r.enc.WriteField(hpack.HeaderField{Name: ":path", Value: path})
	for i := 0; i+1 < len(extra); i += 2 {
		r.enc.WriteField(hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
	}
	return append([]byte(nil), r.hbuf.Bytes()...)
}

// get opens stream id with a GET (END_STREAM).
func (r *rawH2) get(id uint32, authority, path string) error {
	return r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: r.block("GET", authority, path), EndStream: true, EndHeaders: true})
}

// waitFor returns the first frame on stream id that match accepts, or fails
// after 10 s. Frames it passes over are kept for later calls.
func (r *rawH2) waitFor(id uint32, what string, match func(gotFrame) bool) gotFrame {
	r.t.Helper()
	take := func(f gotFrame) bool {
		if f.stream == id && match(f) {
			return true
		}
		r.pending = append(r.pending, f)
		return false
	}
	for i, f := range r.pending {
		if f.stream == id && match(f) {
			r.pending = append(r.pending[:i], r.pending[i+1:]...)
			return f
		}
	}
	deadline := time.After(10 * time.Second)
	for {
		select {
		case f := <-r.frames:
			if take(f) {
				return f
			}
		case <-r.done:
			for {
				select {
				case f := <-r.frames:
					if take(f) {
						return f
					}
					continue
				default:
				}
				r.t.Fatalf("stream %d: connection ended (%v) before %s", id, r.err, what)
			}
		case <-deadline:
			r.t.Fatalf("stream %d: no %s within 10s", id, what)
		}
	}
}

func isHeaders(f gotFrame) bool { return f.typ == http2.FrameHeaders }
func isRST(f gotFrame) bool     { return f.typ == http2.FrameRSTStream }

// closedByGateway reports whether the gateway ended the connection.
func (r *rawH2) closedByGateway() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// abuseSetup is a gateway whose sandbox may reach slow.example (plain HTTP;
// the handler holds each request until the client goes away or release
// closes) and ok.example (answers at once).
type abuseSetup struct {
	h       *harness
	slow    *upstream
	ok      *upstream
	release chan struct{}
	gone    atomic.Int64 // slow.example requests whose client went away
	slowA   string       // authority of slow.example
	okA     string
}

func newAbuseSetup(t *testing.T, opts ...harnessOpt) *abuseSetup {
	t.Helper()
	a := &abuseSetup{release: make(chan struct{})}
	a.slow = newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-a.release:
		case <-r.Context().Done():
			a.gone.Add(1)
		case <-time.After(20 * time.Second):
		}
		io.WriteString(w, "slow done")
	}), nil)
	a.ok = newUpstream(t, nil, nil)
	a.h = newHarness(t, policytest.Allow("slow.example", "ok.example"), names("slow.example", "ok.example"), nil, opts...)
	a.h.allowUpstreams(a.slow, a.ok)
	a.slowA = fmt.Sprintf("slow.example:%d", a.slow.port)
	a.okA = fmt.Sprintf("ok.example:%d", a.ok.port)
	t.Cleanup(func() {
		select {
		case <-a.release:
		default:
			close(a.release)
		}
	})
	return a
}

// stillServes proves the gateway serves another connection: an h2c stream
// and an HTTP/1.1 request to ok.example both succeed.
func (a *abuseSetup) stillServes(t *testing.T) {
	t.Helper()
	r := dialRawH2(t, a.h.explicit, true)
	if err := r.get(1, a.okA, "/other"); err != nil {
		t.Fatal(err)
	}
	f := r.waitFor(1, "response headers", isHeaders)
	if st := f.status; st != "200" {
		t.Fatalf("second client over h2c: got status %s, want 200", st)
	}
	resp, body := rawRequest(t, a.h.explicit, fmt.Sprintf("GET http://%s/h1 HTTP/1.1\r\nHost: %s\r\n\r\n", a.okA, a.okA))
	if resp.StatusCode != 200 {
		t.Fatalf("second client over HTTP/1.1: got %d %q", resp.StatusCode, body)
	}
}

// goroutinesSettle waits (bounded) for the goroutine count to come back
// within slack of base.
func goroutinesSettle(t *testing.T, base, slack int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	n := runtime.NumGoroutine()
	for n > base+slack && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	if n > base+slack {
		t.Fatalf("goroutines: %d, started at %d (leak?)", n, base)
	}
}

// h2c with prior knowledge on the explicit listener: each stream is a plain
// HTTP request to its :authority, decided and audited on its own; a stream
// to a host policy denies is refused with the upstream seeing nothing, while
// the connection goes on.
func TestH2CExplicitProxy(t *testing.T) {
	a := newAbuseSetup(t)
	evil := newUpstream(t, nil, nil)
	a.h.dialer.allow(evil.addr)
	r := dialRawH2(t, a.h.explicit, true)
	if err := r.get(1, fmt.Sprintf("evil.example:%d", evil.port), "/steal"); err != nil {
		t.Fatal(err)
	}
	f := r.waitFor(1, "refusal", isHeaders)
	if st := f.status; st != "403" {
		t.Fatalf("denied stream: got status %s, want 403", st)
	}
	if err := r.get(3, a.okA, "/fine"); err != nil {
		t.Fatal(err)
	}
	f = r.waitFor(3, "response", isHeaders)
	if st := f.status; st != "200" {
		t.Fatalf("allowed stream after a denied one: got status %s, want 200", st)
	}
	if evil.reqs.Load() != 0 || evil.conns.Load() != 0 {
		t.Fatalf("denied host saw %d requests, %d connections; want 0", evil.reqs.Load(), evil.conns.Load())
	}
	// A stream's record is written once its response is done, which can be
	// after the client saw the headers.
	for _, p := range []string{"/steal", "/fine"} {
		if n := len(settledMatch(a.h.log, 1, func(r audit.Record) bool { return r.Kind == "http" && r.Path == p })); n != 1 {
			t.Fatalf("%s: got %d records, want 1", p, n)
		}
	}
}

// The concurrent-stream limit is announced and enforced: with
// H2MaxConcurrentStreams 2, a third open stream is refused and never
// reaches the upstream; the two others complete.
func TestH2ConcurrentStreamLimit(t *testing.T) {
	a := newAbuseSetup(t, func(c *Config) { c.H2MaxConcurrentStreams = 2 })
	r := dialRawH2(t, a.h.explicit, true)
	sf := r.waitFor(0, "server settings", func(f gotFrame) bool { return f.typ == http2.FrameSettings && !f.ack })
	if v, ok := sf.settings[http2.SettingMaxConcurrentStreams]; !ok || v != 2 {
		t.Fatalf("SETTINGS_MAX_CONCURRENT_STREAMS: got %d (%v), want 2", v, ok)
	}
	r.fr.WriteSettingsAck()
	for _, id := range []uint32{1, 3} {
		if err := r.get(id, a.slowA, "/held"); err != nil {
			t.Fatal(err)
		}
	}
	waitCount(t, "the upstream to hold two requests", &a.slow.reqs, 2)
	if err := r.get(5, a.slowA, "/third"); err != nil {
		t.Fatal(err)
	}
	f := r.waitFor(5, "RST_STREAM", isRST)
	if code := f.code; code != http2.ErrCodeRefusedStream && code != http2.ErrCodeProtocol {
		t.Fatalf("third stream: got RST_STREAM %v, want REFUSED_STREAM or PROTOCOL_ERROR", code)
	}
	if n := a.slow.reqs.Load(); n != 2 {
		t.Fatalf("upstream saw %d requests, want 2 (the refused stream reached it)", n)
	}
	close(a.release)
	for _, id := range []uint32{1, 3} {
		f := r.waitFor(id, "response", isHeaders)
		if st := f.status; st != "200" {
			t.Fatalf("stream %d: got %s, want 200", id, st)
		}
	}
}

// waitCount waits (bounded) for n to reach want.
func waitCount(t *testing.T, what string, n *atomic.Int64, want int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for n.Load() < want {
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: got %d, want %d", what, n.Load(), want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Rapid reset (CVE-2023-44487): streams opened and cancelled at once, as
// fast as the client can write. The gateway closes the connection after a
// bounded number, and serves other connections meanwhile and afterwards;
// its goroutines come back down. One cancelled stream a second past a burst
// of 50: however slowly a loaded machine lets the client send, the limit is
// reached long before maxStreams (the default 50 a second could be outpaced
// by nothing on a slow enough run, and the test then failed by its timer).
func TestH2RapidReset(t *testing.T) {
	const burst = 50
	a := newAbuseSetup(t, func(c *Config) { c.H2MaxResetsPerSecond, c.H2MaxResetBurst = 1, burst })
	base := runtime.NumGoroutine()
	r := dialRawH2(t, a.h.explicit, true)
	const maxStreams = 20000
	sent := 0
	stop := time.Now().Add(10 * time.Second)
	for id := uint32(1); sent < maxStreams && time.Now().Before(stop) && !r.closedByGateway(); id += 2 {
		if err := r.get(id, a.slowA, "/r"); err != nil {
			break
		}
		if err := r.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		sent++
		if sent == burst/2 {
			a.stillServes(t) // during the attack
		}
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("connection still open after %d reset streams", sent)
	}
	a.stillServes(t)
	goroutinesSettle(t, base, 30)
	// The bound is on what the gateway served, not on what the client wrote
	// before it saw the close (a fast client on a loaded machine writes
	// thousands): the burst, what the limit refills while the test runs, and
	// the streams in flight when the connection closed (the concurrency limit,
	// twice over for those net/http had started as others finished).
	served := len(a.h.log.Match(func(r audit.Record) bool { return r.Kind == "http" && r.Path == "/r" }))
	t.Logf("connection closed by the gateway after it served %d of %d reset streams (%v); upstream saw %d", served, sent, r.err, a.slow.reqs.Load())
	if limit := burst + 2*DefaultH2MaxConcurrentStreams + 20; served > limit {
		t.Fatalf("the gateway served %d cancelled streams before it closed the connection; want at most %d", served, limit)
	}
	if served > sent {
		t.Fatalf("%d records for %d streams", served, sent)
	}
}

// CONTINUATION flood (CVE-2024-27316 class): a header block that never ends.
// The gateway closes the connection once the block passes MaxHeaderBytes,
// long before the client runs out of frames; nothing reaches the upstream.
func TestH2ContinuationFlood(t *testing.T) {
	a := newAbuseSetup(t)
	base := runtime.NumGoroutine()
	r := dialRawH2(t, a.h.explicit, true)
	if err := r.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: r.block("GET", a.slowA, "/c"), EndStream: true}); err != nil {
		t.Fatal(err)
	}
	// Each CONTINUATION carries one more literal header of ~16 KB.
	r.hbuf.Reset()
	r.enc.WriteField(hpack.HeaderField{Name: "x-flood", Value: strings.Repeat("a", 16000)})
	frag := append([]byte(nil), r.hbuf.Bytes()...)
	const maxFrames = 2000 // 32 MB
	sent := 0
	for ; sent < maxFrames && !r.closedByGateway(); sent++ {
		if err := r.fr.WriteContinuation(1, false, frag); err != nil {
			break
		}
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("connection still open after %d CONTINUATION frames", sent)
	}
	if sent >= maxFrames {
		t.Fatalf("all %d CONTINUATION frames were taken: no header list limit", sent)
	}
	t.Logf("connection closed after %d CONTINUATION frames (%v)", sent, r.err)
	if a.slow.reqs.Load() != 0 || a.slow.conns.Load() != 0 {
		t.Fatalf("upstream saw %d requests, %d connections; want 0", a.slow.reqs.Load(), a.slow.conns.Load())
	}
	a.stillServes(t)
	goroutinesSettle(t, base, 30)
}

// SETTINGS flood: SETTINGS frames as fast as the client can write, never
// reading the gateway's acknowledgements. The gateway stops the connection
// (queued control frames, or its write timeout) and keeps serving others.
func TestH2SettingsFlood(t *testing.T) {
	a := newAbuseSetup(t, func(c *Config) { c.IdleTimeout = 2 * time.Second })
	base := runtime.NumGoroutine()
	r := dialRawH2(t, a.h.explicit, false)
	if tc, ok := r.c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096) // acknowledgements back up at the gateway
	}
	const maxFrames = 1_000_000
	sent := 0
	var werr error
	stop := time.Now().Add(15 * time.Second)
	for ; sent < maxFrames && time.Now().Before(stop); sent++ {
		r.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if werr = r.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: uint32(65535 + sent%2)}); werr != nil {
			break
		}
		if sent == 1000 {
			a.stillServes(t) // during the flood
		}
	}
	if werr == nil {
		t.Fatalf("the gateway took all %d SETTINGS frames without reading its acknowledgements back (no bound)", sent)
	}
	t.Logf("writes failed after %d SETTINGS frames: %v", sent, werr)
	// The gateway ends the connection (queued control frames, write or idle
	// timeout) rather than holding it: reading what it sent reaches the end.
	r.c.SetReadDeadline(time.Now().Add(15 * time.Second))
	if _, err := io.Copy(io.Discard, r.c); isTimeout(err) {
		t.Fatalf("the gateway held the flooded connection open: %v", err)
	}
	r.c.Close()
	a.stillServes(t)
	goroutinesSettle(t, base, 30)
}

// A stream that never reads its response (flow-control window 0): the
// gateway gives up on it after IdleTimeout without progress and resets it,
// the upstream connection is let go, and other connections are served
// meanwhile.
func TestH2StalledStream(t *testing.T) {
	big := strings.Repeat("z", 4<<20)
	a := newAbuseSetup(t, func(c *Config) { c.IdleTimeout = time.Second })
	bigUp := newUpstream(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, big) }), nil)
	a.h.allowUpstreams(bigUp)
	base := runtime.NumGoroutine()
	r := dialRawH2(t, a.h.explicit, true, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 0})
	if err := r.get(1, fmt.Sprintf("ok.example:%d", bigUp.port), "/big"); err != nil {
		t.Fatal(err)
	}
	waitCount(t, "the upstream to get the request", &bigUp.reqs, 1)
	a.stillServes(t) // while the stream is stalled
	f := r.waitFor(1, "RST_STREAM", isRST)
	t.Logf("stalled stream reset with %v", f.code)
	rec := a.h.log.Wait(t, "the stalled stream's record", func(r audit.Record) bool { return r.Kind == "http" && r.Path == "/big" })
	if rec.Error == "" || rec.BytesDown >= int64(len(big)) {
		t.Fatalf("record %+v: want an error and a cut-short body", rec)
	}
	deadline := time.Now().Add(10 * time.Second)
	for bigUp.open.Load() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := bigUp.open.Load(); n != 0 {
		t.Fatalf("%d upstream connections still open after the stalled stream was reset", n)
	}
	goroutinesSettle(t, base, 30)
}

// Regression: plaintext that starts with the HTTP/2 preface was not HTTP/1.x
// to the sniffer, so a transparently captured h2c connection (or one inside
// a CONNECT) was decided as raw TCP and relayed unparsed: a policy that
// allows TCP to the address, or the CONNECT's destination, let every h2c
// request through unseen by HTTP rules. Now each stream is decided as kind
// http on its own.
func TestH2CIsDecidedPerStream(t *testing.T) {
	for _, tc := range []struct {
		name string
		dial func(t *testing.T, h *harness, up *upstream) net.Conn
	}{
		{"transparent", func(t *testing.T, h *harness, up *upstream) net.Conn {
			h.origDst.Store(netip.MustParseAddrPort(up.addr))
			c, err := net.DialTimeout("tcp", h.transp, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
		{"inside CONNECT", func(t *testing.T, h *harness, up *upstream) net.Conn {
			c, err := connectVia(context.Background(), h.explicit, fmt.Sprintf("ok.example:%d", up.port))
			if err != nil {
				t.Fatal(err)
			}
			return c
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := newUpstream(t, nil, nil)
			// TCP to the upstream's address is allowed: raw relaying would pass.
			h := newHarness(t, policytest.Allow("ok.example", "127.0.0.1").DenyPaths("/secret"), names("ok.example"), nil)
			h.allowUpstreams(up)
			c := tc.dial(t, h, up)
			t.Cleanup(func() { c.Close() })
			r := rawH2On(t, c, true)
			auth := fmt.Sprintf("ok.example:%d", up.port)
			r.get(1, auth, "/secret")
			if f := r.waitFor(1, "refusal", isHeaders); f.status != "403" {
				t.Fatalf("denied path over h2c: got %s, want 403", f.status)
			}
			if up.reqs.Load() != 0 || up.bytesIn.Load() != 0 {
				t.Fatalf("upstream saw %d requests, %d bytes; want 0", up.reqs.Load(), up.bytesIn.Load())
			}
			r.get(3, auth, "/fine")
			if f := r.waitFor(3, "response", isHeaders); f.status != "200" {
				t.Fatalf("allowed path over h2c: got %s, want 200", f.status)
			}
			r.get(5, "ok.example:1", "/fine")
			if f := r.waitFor(5, "refusal", isHeaders); f.status != "403" {
				t.Fatalf("stream naming another port: got %s, want 403", f.status)
			}
			if up.reqs.Load() != 1 {
				t.Fatalf("upstream saw %d requests, want 1", up.reqs.Load())
			}
			for _, p := range []string{"/secret", "/fine"} {
				if n := len(settledMatch(h.log, 1, func(r audit.Record) bool { return r.Kind == "http" && r.Path == p })); n < 1 {
					t.Fatalf("%s: no kind http record", p)
				}
			}
			if n := len(h.log.Match(func(r audit.Record) bool { return r.Kind == "tcp" })); n != 0 {
				t.Fatalf("got %d kind tcp records, want 0 (decided as raw TCP)", n)
			}
		})
	}
}

// rawH2On starts the raw client on an open connection.
func rawH2On(t testing.TB, c net.Conn, read bool, settings ...http2.Setting) *rawH2 {
	t.Helper()
	r := &rawH2{t: t, c: c, frames: make(chan gotFrame, 1<<16), done: make(chan struct{})}
	r.fr = http2.NewFramer(c, c)
	r.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	r.enc = hpack.NewEncoder(&r.hbuf)
	io.WriteString(c, h2Preface)
	if err := r.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	if read {
		go r.readLoop()
	}
	return r
}

// The gateway's own reset accounting: streams cancelled one at a time, each
// only after its request reached the upstream (a policy decision, an audit
// record and an upstream exchange each), never trip x/net's queue-based
// rapid-reset guard; past H2MaxResetBurst the gateway closes the connection.
func TestH2SlowResetsCloseTheConnection(t *testing.T) {
	a := newAbuseSetup(t, func(c *Config) { c.H2MaxResetBurst, c.H2MaxResetsPerSecond = 5, 1 })
	r := dialRawH2(t, a.h.explicit, true)
	const maxStreams = 50
	sent := 0
	for id := uint32(1); sent < maxStreams && !r.closedByGateway(); id += 2 {
		if err := r.get(id, a.slowA, "/slow-reset"); err != nil {
			break
		}
		waitCount(t, "the request upstream", &a.slow.reqs, int64(sent+1))
		if err := r.fr.WriteRSTStream(id, http2.ErrCodeCancel); err != nil {
			break
		}
		waitCount(t, "the upstream to see the cancel", &a.gone, int64(sent+1))
		sent++
	}
	select {
	case <-r.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("connection still open after %d cancelled streams (burst 5)", sent)
	}
	if sent >= maxStreams {
		t.Fatalf("all %d cancelled streams were taken (no reset limit)", sent)
	}
	t.Logf("closed after %d cancelled streams", sent)
	a.stillServes(t)
}

// A stream the client cancels ends its upstream exchange at once, also on an
// HTTP/1.1 upstream (which has no stream to reset), while the client's
// connection stays open.
func TestH2ResetStreamCancelsUpstream(t *testing.T) {
	a := newAbuseSetup(t)
	r := dialRawH2(t, a.h.explicit, true)
	r.get(1, a.slowA, "/cancel-me")
	waitCount(t, "the request upstream", &a.slow.reqs, 1)
	r.fr.WriteRSTStream(1, http2.ErrCodeCancel)
	waitCount(t, "the upstream to see the client go", &a.gone, 1)
	if r.closedByGateway() {
		t.Fatal("one cancelled stream closed the connection")
	}
	r.get(3, a.okA, "/after")
	if f := r.waitFor(3, "response", isHeaders); f.status != "200" {
		t.Fatalf("next stream: got %s, want 200", f.status)
	}
}

// Streams count against their sandbox over all its connections: past
// H2MaxStreamsPerSandbox a stream is refused (429 stream_limit, audited,
// never sent upstream), and another sandbox is served.
func TestH2StreamsPerSandbox(t *testing.T) {
	a := newAbuseSetup(t, func(c *Config) { c.H2MaxConcurrentStreams, c.H2MaxStreamsPerSandbox = 2, 3 })
	r1 := dialRawH2(t, a.h.explicit, true)
	r2 := dialRawH2(t, a.h.explicit, true)
	r1.get(1, a.slowA, "/held")
	r1.get(3, a.slowA, "/held")
	r2.get(1, a.slowA, "/held")
	waitCount(t, "three held requests", &a.slow.reqs, 3)
	r2.get(3, a.slowA, "/past-cap")
	if f := r2.waitFor(3, "refusal", isHeaders); f.status != "429" {
		t.Fatalf("stream past the sandbox's cap: got %s, want 429", f.status)
	}
	if n := a.slow.reqs.Load(); n != 3 {
		t.Fatalf("upstream saw %d requests, want 3", n)
	}
	rec := a.h.log.Wait(t, "stream_limit record", func(r audit.Record) bool { return r.Path == "/past-cap" })
	if rec.Decision != audit.DecisionDeny || len(rec.Reasons) == 0 || rec.Reasons[0].ID != ReasonStreamLimit {
		t.Fatalf("record %+v: want a deny with reason %s", rec, ReasonStreamLimit)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := a.h.g.ServeSandbox(policy.Sandbox{ID: "sb-other"}, l, nil); err != nil {
		t.Fatal(err)
	}
	other := dialRawH2(t, l.Addr().String(), true)
	other.get(1, a.okA, "/other-sandbox")
	if f := other.waitFor(1, "response", isHeaders); f.status != "200" {
		t.Fatalf("another sandbox: got %s, want 200", f.status)
	}
	close(a.release)
	for _, id := range []uint32{1, 3} {
		if f := r1.waitFor(id, "response", isHeaders); f.status != "200" {
			t.Fatalf("held stream %d: got %s, want 200", id, f.status)
		}
	}
}

// Shutdown closes an idle HTTP/2 connection at once, as it does an idle
// HTTP/1.1 keep-alive connection, instead of waiting for its deadline.
func TestH2ShutdownClosesIdleConnection(t *testing.T) {
	a := newAbuseSetup(t)
	r := dialRawH2(t, a.h.explicit, true)
	r.get(1, a.okA, "/before")
	if f := r.waitFor(1, "response", isHeaders); f.status != "200" {
		t.Fatalf("got %s, want 200", f.status)
	}
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		done <- a.h.g.Shutdown(ctx)
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("shutdown: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("shutdown did not close an idle HTTP/2 connection")
	}
	select {
	case <-r.done:
	case <-time.After(5 * time.Second):
		t.Fatal("the idle HTTP/2 connection is still open after shutdown")
	}
}

// settledMatch waits until l holds at least n records fn matches (a stream's
// record is written once its exchange is done, which can be after the client
// saw the response) and returns the matches.
func settledMatch(l *audittest.Log, n int, fn func(audit.Record) bool) []audit.Record {
	poll.Within(audittest.WaitLimit, func() bool { return len(l.Match(fn)) >= n })
	return l.Match(fn)
}
