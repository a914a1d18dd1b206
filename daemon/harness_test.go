package daemon

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/sandboxd"
	"github.com/airlock-dev/airlock/test/poll"
)

// fakeWorld is a daemon whose executor and namespaces are fakes, served on a
// loopback listener whose test clients each act as a uid of their choosing.
type fakeWorld struct {
	t     testing.TB
	d     *Daemon
	exe   *fakeExecutor
	net   *fakeNetwork
	audit *audittest.Log
	srv   *httptest.Server

	handler http.Handler

	mu      sync.Mutex
	clients []*httptest.Server
}

// newFakeWorld builds the daemon (edit changes its config first) with a pool
// of cfg.Sandbox.PoolSize.
func newFakeWorld(t *testing.T, edit ...func(*config.Config)) *fakeWorld {
	t.Helper()
	cfg := config.Default()
	cfg.Audit.File = filepath.Join(t.TempDir(), "audit.jsonl")
	cfg.Audit.MinFree = config.FreeSpace{}
	cfg.Sandbox.PoolSize = -1
	for _, e := range edit {
		e(&cfg)
	}
	w := &fakeWorld{t: t, exe: &fakeExecutor{t: t}, net: newFakeNetwork(), audit: &audittest.Log{}}
	d := &Daemon{log: slog.New(slog.DiscardHandler), cfg: cfg, proxyURL: "http://127.0.0.1:3128"}
	d.tap, d.acct, d.tally = audit.NewTap(), newAccounts(), audit.NewTally()
	d.audit = audit.Observe(w.audit, d.acct, d.tally, d.tap)
	d.reg, d.home, d.heartbeat = newRegistry(), sandboxd.DefaultHome, DefaultHeartbeat
	d.host = hostBounds{memory: 8 << 30, cpus: 4}
	d.exe, d.net = w.exe, w.net
	d.pool = newWarmPool(max(cfg.Sandbox.PoolSize, 0), cfg.Pool.Max, d.net, d.exe, d.poolSpec, d.log)
	d.metrics = newMetrics(func() float64 { return float64(d.reg.len()) }, func() float64 { return float64(d.pool.depth()) })
	d.metrics.reg.MustRegister(poolBrokenMetric(d.pool.broken.Load))
	caps, err := deriveConnCaps(cfg.API, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	d.conns = newAPIConns(caps, d.log, d.metrics.reg)
	w.d = d
	w.handler = d.Handler()
	// A server without ConnContext: its callers are unknown.
	w.srv = httptest.NewServer(w.handler)
	t.Cleanup(func() {
		w.mu.Lock()
		srvs := append([]*httptest.Server{w.srv}, w.clients...)
		w.mu.Unlock()
		for _, s := range srvs {
			s.CloseClientConnections()
			s.Close()
		}
		d.stopping.Store(true)
		d.endAll(ReasonDaemonStopped)
		d.pool.close()
	})
	return w
}

// client returns an HTTP client whose requests act as uid: it talks to a
// listener of its own whose connections carry that caller.
func (w *fakeWorld) client(uid int) *apiClient { return w.clientAs(caller{uid: uid}) }

// clientAs is client for a caller with a pid too.
func (w *fakeWorld) clientAs(c caller) *apiClient {
	srv := httptest.NewUnstartedServer(w.handler)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context {
		return withCaller(ctx, c)
	}
	srv.Start()
	w.mu.Lock()
	w.clients = append(w.clients, srv)
	w.mu.Unlock()
	return &apiClient{base: srv.URL, c: validatingClient(w.t, srv.Client())}
}

// apiClient is the tests' raw client of the API (the Go client package is
// another engineer's; these tests pin the wire).
type apiClient struct {
	base string
	c    *http.Client
}

type apiResp struct {
	status int
	header http.Header
	body   []byte
}

func (r apiResp) decode(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("status %d body %q: %v", r.status, r.body, err)
	}
}

func (r apiResp) apiError(t testing.TB) api.Error {
	t.Helper()
	var e api.Error
	r.decode(t, &e)
	return e
}

func (c *apiClient) do(t testing.TB, method, path string, body io.Reader, hdr ...string) apiResp {
	t.Helper()
	req, err := http.NewRequest(method, c.base+path, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := c.c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return apiResp{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c *apiClient) json(t testing.TB, method, path, body string) apiResp {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	return c.do(t, method, path, r, "Content-Type", "application/json")
}

// create makes a sandbox and fails the test unless it is 201.
func (c *apiClient) create(t testing.TB, body string) api.Sandbox {
	t.Helper()
	r := c.json(t, "POST", "/v1/sandboxes", body)
	if r.status != http.StatusCreated {
		t.Fatalf("create %s: got %d %s, want 201", body, r.status, r.body)
	}
	var sb api.Sandbox
	r.decode(t, &sb)
	return sb
}

// execStream is an exec's response read frame by frame.
type execStream struct {
	status int
	resp   *http.Response
	sc     *bufio.Scanner
	frames []api.Frame
}

// startExec posts an exec and returns its stream once the response header
// is in.
func (c *apiClient) startExec(t testing.TB, ctx context.Context, id string, req api.ExecRequest) *execStream {
	t.Helper()
	b, _ := json.Marshal(req)
	hr, err := http.NewRequestWithContext(ctx, "POST", c.base+"/v1/sandboxes/"+id+"/exec", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.c.Do(hr)
	if err != nil {
		t.Fatalf("exec: %v", err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	return &execStream{status: resp.StatusCode, resp: resp, sc: sc}
}

// next reads one frame (nil at the end of the stream).
func (s *execStream) next(t testing.TB) *api.Frame {
	t.Helper()
	if !s.sc.Scan() {
		return nil
	}
	var f api.Frame
	if err := json.Unmarshal(s.sc.Bytes(), &f); err != nil {
		t.Fatalf("frame %q: %v", s.sc.Bytes(), err)
	}
	s.frames = append(s.frames, f)
	return &f
}

// rest reads every frame left and closes the stream.
func (s *execStream) rest(t testing.TB) []api.Frame {
	t.Helper()
	for s.next(t) != nil {
	}
	s.resp.Body.Close()
	return s.frames
}

// output joins the data of the frames of one type.
func output(frames []api.Frame, typ string) string {
	var b strings.Builder
	for _, f := range frames {
		if f.Type == typ {
			d, _ := base64.StdEncoding.DecodeString(f.Data)
			b.Write(d)
		}
	}
	return b.String()
}

// exec runs a command to its end and returns its frames.
func (c *apiClient) exec(t testing.TB, id string, req api.ExecRequest) []api.Frame {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := c.startExec(t, ctx, id, req)
	if s.status != http.StatusOK {
		b, _ := io.ReadAll(s.resp.Body)
		s.resp.Body.Close()
		t.Fatalf("exec %v: got %d %s, want 200", req.Argv, s.status, b)
	}
	return s.rest(t)
}

// lastResult is the result of a stream's exit frame.
func lastResult(t testing.TB, frames []api.Frame) *api.ExecResult {
	t.Helper()
	if len(frames) == 0 || frames[len(frames)-1].Type != api.FrameExit || frames[len(frames)-1].Result == nil {
		t.Fatalf("frames %+v: want an exit frame last", frames)
	}
	return frames[len(frames)-1].Result
}

func readPid(t testing.TB, path string) int {
	t.Helper()
	var pid int
	poll.Until(t, 10*time.Second, "the pid file "+path, func() bool {
		b, err := os.ReadFile(path)
		if err != nil {
			return false
		}
		pid, err = strconv.Atoi(strings.TrimSpace(string(b)))
		return err == nil
	})
	return pid
}

// pidAlive: the process exists and is not a zombie.
func pidAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// uniqueID is prefix with a random suffix: a root test's sandbox id, so the
// same test run from two checkouts at once (or a stale namespace left by a
// killed run) never collides on /run/netns/airlock-<id>.
func uniqueID(prefix string) string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}
