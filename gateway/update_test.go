package gateway

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/bundletest"
	"github.com/airlock-dev/airlock/test/poll"
)

// rulesWorld is a gateway on the real policy engine with every kind of
// long-lived connection a sandbox can hold open: a keep-alive HTTP/1.1
// session, an h2c connection (each stream a request), a CONNECT tunnel
// carrying raw TCP and a websocket.
type rulesWorld struct {
	h     *harness
	eng   *policy.Engine
	plain *upstream
	ws    *upstream
	echo  *rawUpstream

	ka    net.Conn
	kaBR  *bufio.Reader
	h2    *http.Client
	tun   net.Conn
	tunBR *bufio.Reader
	wsc   *websocket.Conn
}

func newRulesWorld(t *testing.T, eng *policy.Engine) *rulesWorld {
	w := &rulesWorld{eng: eng, echo: newRawUpstream(t, "")}
	w.plain = newUpstream(t, nil, nil)
	w.ws = newUpstream(t, websocket.Handler(func(c *websocket.Conn) { io.Copy(c, c) }), nil)
	w.h = newHarness(t, eng, names("pypi.org", "raw.example"), nil)
	w.h.allowUpstreams(w.plain, w.ws)
	w.h.dialer.allow(w.echo.addr)
	w.redial(t)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true) // h2c with prior knowledge
	tr := &http.Transport{Protocols: &protos, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", w.h.explicit)
	}}
	t.Cleanup(tr.CloseIdleConnections)
	w.h2 = &http.Client{Transport: tr, Timeout: 10 * time.Second}
	return w
}

// redial opens a new keep-alive session when the last one was closed (a
// refusal ends its session).
func (w *rulesWorld) redial(t testing.TB) {
	if w.ka != nil {
		return
	}
	c, err := net.Dial("tcp", w.h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	w.ka, w.kaBR = c, bufio.NewReader(c)
}

// get sends one request on the keep-alive session and returns its status
// (0 when the session is gone). A response that ends the session drops it.
func (w *rulesWorld) get() int {
	w.ka.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(w.ka, "GET http://pypi.org:%d/ka HTTP/1.1\r\nHost: pypi.org:%d\r\n\r\n", w.plain.port, w.plain.port)
	resp, err := http.ReadResponse(w.kaBR, nil)
	if err != nil {
		w.ka.Close()
		w.ka = nil
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.Close {
		w.ka.Close()
		w.ka = nil
	}
	return resp.StatusCode
}

// h2get sends one stream on the h2c connection and returns its status.
func (w *rulesWorld) h2get() int {
	resp, err := w.h2.Get(fmt.Sprintf("http://pypi.org:%d/h2", w.plain.port))
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.ProtoMajor != 2 {
		return -resp.ProtoMajor // not the h2c connection this measures
	}
	return resp.StatusCode
}

// open opens the tunnel and the websocket (both must be admitted).
func (w *rulesWorld) open(t testing.TB) {
	t.Helper()
	c, err := net.Dial("tcp", w.h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT raw.example:%d HTTP/1.1\r\n\r\n", w.echo.port)
	br := bufio.NewReader(c)
	if resp, err := http.ReadResponse(br, nil); err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v, want 200", resp, err)
	}
	w.tun, w.tunBR = c, br
	wc, err := net.Dial("tcp", w.h.explicit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { wc.Close() })
	wc.SetDeadline(time.Now().Add(10 * time.Second))
	cfg, _ := websocket.NewConfig("ws://pypi.org:"+strconv.Itoa(w.ws.port)+"/ws", "http://pypi.org/")
	if w.wsc, err = websocket.NewClient(cfg, &absConn{Conn: wc, host: "pypi.org:" + strconv.Itoa(w.ws.port)}); err != nil {
		t.Fatal(err)
	}
	if err := w.useTunnel(); err != nil {
		t.Fatalf("tunnel: %v", err)
	}
	if err := w.useWS(); err != nil {
		t.Fatalf("websocket: %v", err)
	}
}

func (w *rulesWorld) useTunnel() error {
	if _, err := io.WriteString(w.tun, "ping"); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(w.tunBR, buf)
	return err
}

func (w *rulesWorld) useWS() error {
	if err := websocket.Message.Send(w.wsc, "hi"); err != nil {
		return err
	}
	var got string
	return websocket.Message.Receive(w.wsc, &got)
}

// closedSoon waits (bounded) for the tunnel and the websocket to be closed
// by the gateway: a read returns an error.
func (w *rulesWorld) closedSoon() bool {
	for _, c := range []net.Conn{w.tun, w.wsc} {
		c.SetReadDeadline(time.Now().Add(audittest.WaitLimit))
		if _, err := c.Read(make([]byte, 1)); err == nil {
			return false
		} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
			return false
		}
	}
	return true
}

func sandboxAllowing(t testing.TB, entries ...string) policy.Sandbox {
	t.Helper()
	sb := policy.Sandbox{ID: "sb-test", Labels: map[string]string{"agent": "coder"}}
	if len(entries) > 0 {
		l, err := policy.NewAllowList(entries)
		if err != nil {
			t.Fatal(err)
		}
		sb.Allow = l
	}
	return sb
}

func noPresetEngine(t testing.TB, dir string) *policy.Engine {
	t.Helper()
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return eng
}

// TestUpdateSandboxRules: UpdateSandbox widens a served sandbox's rules for
// the next request on an open keep-alive session and h2c connection, and
// narrowing them refuses the next request on each and closes the open
// tunnel and websocket (their records say policy_changed), with the upstreams
// receiving nothing more.
func TestUpdateSandboxRules(t *testing.T) {
	w := newRulesWorld(t, noPresetEngine(t, ""))
	if got := w.get(); got != 403 {
		t.Fatalf("before the allow list: keep-alive got %d, want 403", got)
	}
	w.redial(t)
	if _, err := w.h.g.UpdateSandbox(sandboxAllowing(t, "pypi.org:*", "raw.example:*")); err != nil {
		t.Fatal(err)
	}
	if got, got2 := w.get(), w.h2get(); got != 200 || got2 != 200 {
		t.Fatalf("widened: keep-alive got %d, h2c got %d, want 200 both", got, got2)
	}
	w.open(t)
	n := len(w.h.log.Records())
	plainReqs, echoIn, wsIn := w.plain.reqs.Load(), w.echo.bytesIn.Load(), w.ws.bytesIn.Load()
	closed, err := w.h.g.UpdateSandbox(sandboxAllowing(t))
	if err != nil {
		t.Fatal(err)
	}
	if closed != 2 {
		t.Errorf("narrowed: closed %d connections, want 2 (the tunnel and the websocket)", closed)
	}
	if got, got2 := w.get(), w.h2get(); got != 403 || got2 != 403 {
		t.Errorf("narrowed: keep-alive got %d, h2c got %d, want 403 both", got, got2)
	}
	if !w.closedSoon() {
		t.Error("narrowed: the tunnel or the websocket is still open")
	}
	if w.useTunnel() == nil || w.useWS() == nil {
		t.Error("narrowed: the tunnel or the websocket still carries bytes")
	}
	recs := settledMatch(w.h.log, 2, func(r audit.Record) bool { return audittest.HasReason(r, ReasonPolicyChanged) })
	if len(recs) != 2 {
		t.Errorf("records with %s: got %d, want 2 (the tunnel's close, the websocket's) (%+v)", ReasonPolicyChanged, len(recs), w.h.log.Records()[n:])
	}
	time.Sleep(50 * time.Millisecond) // a byte relayed late would have arrived
	if w.plain.reqs.Load() != plainReqs || w.echo.bytesIn.Load() != echoIn || w.ws.bytesIn.Load() != wsIn {
		t.Errorf("upstreams received after narrowing: requests +%d, tunnel bytes +%d, websocket bytes +%d; want 0",
			w.plain.reqs.Load()-plainReqs, w.echo.bytesIn.Load()-echoIn, w.ws.bytesIn.Load()-wsIn)
	}
	if _, err := w.h.g.UpdateSandbox(policy.Sandbox{ID: "sb-unknown"}); err == nil {
		t.Error("an unknown sandbox: got no error")
	}
}

// latencyIterations bounds each change-to-effect measurement.
const latencyIterations = 100

// TestChangeToEffectLatency prints how long a change takes to reach the
// sandbox: from the change's start (UpdateSandbox; Reload of a policy
// directory; PollBundle of a new bundle) to the first request answered
// under the new rules on an open keep-alive session, with an h2c connection,
// a CONNECT tunnel and a websocket open; and, when the change narrows, to
// the tunnel and websocket seen closed by the client. p50/p99 over a
// bounded number of changes; no assertion on the numbers.
func TestChangeToEffectLatency(t *testing.T) {
	if testing.Short() {
		t.Skip("a measurement (go test -run TestChangeToEffectLatency -v)")
	}
	allowAll := "package airlock.egress\n\nallow if input.destination.host in {\"pypi.org\", \"raw.example\"}\n"
	denyAll := "package airlock.egress\n\nallow if false\n"
	t.Run("sandbox_update", func(t *testing.T) {
		w := newRulesWorld(t, noPresetEngine(t, ""))
		wide, narrow := sandboxAllowing(t, "pypi.org:*", "raw.example:*"), sandboxAllowing(t)
		measureChanges(t, w, latencyIterations, func(widen bool) {
			sb := narrow
			if widen {
				sb = wide
			}
			if _, err := w.h.g.UpdateSandbox(sb); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("global_reload", func(t *testing.T) {
		dir := t.TempDir()
		file := filepath.Join(dir, "policy.rego")
		if err := os.WriteFile(file, []byte(denyAll), 0o644); err != nil {
			t.Fatal(err)
		}
		eng := noPresetEngine(t, dir)
		w := newRulesWorld(t, eng)
		measureChanges(t, w, latencyIterations/2, func(widen bool) {
			src := denyAll
			if widen {
				src = allowAll
			}
			if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := eng.Reload(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	})
	t.Run("bundle_update", func(t *testing.T) {
		srv := bundletest.NewServer(t)
		build := func(rev, src string) []byte {
			return bundletest.Build(t, bundletest.Bundle{Revision: rev, Files: map[string]string{"policy.rego": src}}, nil)
		}
		srv.Publish(build("r0", denyAll))
		eng, err := policy.New(policy.Config{Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second,
			Bundle: &policy.BundleConfig{URL: srv.URL, Manual: true}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eng.Close() })
		if err := eng.PollBundle(context.Background()); err != nil {
			t.Fatal(err)
		}
		w := newRulesWorld(t, eng)
		n := latencyIterations / 2
		tarballs := make([][]byte, n)
		for i := range tarballs {
			src := denyAll
			if i%2 == 0 {
				src = allowAll
			}
			tarballs[i] = build("r"+strconv.Itoa(i+1), src)
		}
		i := 0
		measureChanges(t, w, n, func(bool) {
			srv.Publish(tarballs[i])
			i++
			if err := eng.PollBundle(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	})
}

// measureChanges makes n changes, alternately widening (even) and
// narrowing (odd), and prints the latencies. change(widen) makes one.
func measureChanges(t *testing.T, w *rulesWorld, n int, change func(widen bool)) {
	t.Helper()
	var toRequest, toClosed []time.Duration
	for i := range n {
		widen := i%2 == 0
		want := 403
		if widen {
			want = 200
		} else {
			w.open(t) // what the narrowing must close
			if w.h2get() != 200 {
				t.Fatal("h2c: the stream before narrowing was not allowed")
			}
		}
		w.redial(t)
		start := time.Now()
		change(widen)
		got := w.get()
		toRequest = append(toRequest, time.Since(start))
		if got != want {
			t.Fatalf("change %d: the first keep-alive request got %d, want %d", i, got, want)
		}
		if got := w.h2get(); got != want {
			t.Fatalf("change %d: the first h2c stream got %d, want %d", i, got, want)
		}
		if !widen {
			ok := poll.Within(audittest.WaitLimit, func() bool { return w.closedSoon() })
			toClosed = append(toClosed, time.Since(start))
			if !ok {
				t.Fatalf("change %d: the tunnel or the websocket stayed open", i)
			}
		}
	}
	t.Logf("%s: %d changes; change -> first request decided under the new rules: p50 %s p99 %s max %s; narrowing -> tunnel and websocket closed: p50 %s p99 %s",
		t.Name(), n, rankPct(toRequest, 50), rankPct(toRequest, 99), rankPct(toRequest, 100), rankPct(toClosed, 50), rankPct(toClosed, 99))
}

// rankPct is the p-th percentile of d (nearest rank).
func rankPct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s)*p + 99) / 100
	return s[max(min(i, len(s))-1, 0)].Round(time.Microsecond)
}
