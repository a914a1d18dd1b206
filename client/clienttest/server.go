package clienttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitest"
)

// Home is $HOME inside a fake sandbox.
const Home = "/home/sandbox"

// Server is the fake daemon. Its methods let a test see and steer what the
// routes do.
type Server struct {
	// Socket is the path clients dial.
	Socket string

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	seq       int
	requests  []string
	created   []api.CreateSandboxRequest
	updates   []api.UpdateSandboxRequest // PATCHes accepted (update.go)
	appr      approvalState              // approvals.go
	attached  map[string]api.AttachRequest
	problems  map[string]string // attached id -> what its check reports
	failing   []api.HealthPart  // parts health reports failing (SetFailing)
	wg        sync.WaitGroup    // execs' processes
}

// sandbox is one fake sandbox: its API view and its directories.
type sandbox struct {
	api.Sandbox
	root      string // host directory standing for the sandbox's /
	workspace string // host directory of its WorkDir
	env       []string
	execs     []*execState
	subs      map[chan event]struct{}
	done      chan struct{}    // closed when deleted
	history   []map[string]any // records the events stream sends with history=true
}

type event struct {
	typ string
	ev  api.Event
}

// Serve serves h on a unix socket in t.TempDir() until the test ends and
// returns the socket's path.
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	// Unix socket paths are short (108 bytes); t.TempDir() can be longer.
	dir, err := os.MkdirTemp("", "alk-sock-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "airlock.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			srv.Close()
		}
	})
	return sock
}

// New starts the fake daemon on a socket in a temporary directory; it stops,
// killing what still runs, when the test ends.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{sandboxes: map[string]*sandbox{}, attached: map[string]api.AttachRequest{}, problems: map[string]string{}}
	// Every response the fake writes must be one the real daemon documents.
	s.Socket = Serve(t, apitest.Check(t, s.handler()))
	t.Cleanup(s.stopAll)
	return s
}

// routes are the fake's routes, "METHOD /path" as in api/openapi.json.
func (s *Server) routes() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/openapi.json":                        s.openapi,
		"GET /v1/health":                              s.health,
		"POST /v1/sandboxes":                          s.create,
		"GET /v1/sandboxes":                           s.list,
		"GET /v1/sandboxes/{id}":                      s.get,
		"PATCH /v1/sandboxes/{id}":                    s.update,
		"DELETE /v1/sandboxes/{id}":                   s.delete,
		"POST /v1/sandboxes/{id}/exec":                s.exec,
		"GET /v1/sandboxes/{id}/execs":                s.execs,
		"PUT /v1/sandboxes/{id}/execs/{exec}/stdin":   s.stdin,
		"POST /v1/sandboxes/{id}/execs/{exec}/signal": s.signal,
		"PUT /v1/sandboxes/{id}/files":                s.putFiles,
		"GET /v1/sandboxes/{id}/files":                s.getFiles,
		"GET /v1/sandboxes/{id}/events":               s.events,
		"POST /v1/run":                                s.run,
		"POST /v1/attach":                             s.attach,
		"GET /v1/attach/{id}":                         s.checkAttach,
		"DELETE /v1/attach/{id}":                      s.detach,
		"POST /v1/policy/reload":                      s.reload,
		"GET /v1/summary":                             s.summary,
		"GET /v1/approvals":                           s.approvals,
		"POST /v1/approvals/{id}":                     s.answer,
	}
}

func (s *Server) handler() http.Handler {
	mux := http.NewServeMux()
	for pattern, h := range s.routes() {
		mux.HandleFunc(pattern, h)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeErr(w, &api.Error{Code: api.CodeNotFound, Message: "no route " + r.Method + " " + r.URL.Path})
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.requests = append(s.requests, r.Method+" "+r.URL.Path)
		s.mu.Unlock()
		mux.ServeHTTP(w, r)
	})
}

// Requests returns "METHOD /path" of every request so far.
func (s *Server) Requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.requests...)
}

// Created returns every sandbox request accepted so far (POST /v1/sandboxes,
// and the sandbox part of POST /v1/run).
func (s *Server) Created() []api.CreateSandboxRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]api.CreateSandboxRequest(nil), s.created...)
}

// Dir returns the host directory standing for sandbox id's workspace.
func (s *Server) Dir(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return sb.workspace
	}
	return ""
}

// Running returns how many execs of sandbox id have a process running.
func (s *Server) Running(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	if sb := s.sandboxes[id]; sb != nil {
		for _, x := range sb.execs {
			if x.running() {
				n++
			}
		}
	}
	return n
}

// Subscribers returns how many events streams of sandbox id are open.
func (s *Server) Subscribers(id string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		return len(sb.subs)
	}
	return 0
}

// Emit sends an event of type typ to every events stream of sandbox id.
func (s *Server) Emit(id, typ string, ev api.Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.emit(typ, ev)
	}
}

// CountEgress adds to sandbox id's egress counters (what a decision would).
func (s *Server) CountEgress(id string, allowed bool, kind string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return
	}
	if allowed {
		sb.Egress.Allowed++
		return
	}
	sb.Egress.Denied++
	sb.Egress.DeniedByKind[kind]++
}

// AddDestination adds a row to sandbox id's egress destinations and counts
// it (allow, deny or would_deny) as the daemon does.
func (s *Server) AddDestination(id string, row api.SummaryRow) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb := s.sandboxes[id]
	if sb == nil {
		return
	}
	e := &sb.Egress
	e.Destinations = append(e.Destinations, row)
	switch row.Decision {
	case "allow":
		e.Allowed += int64(row.Count)
	case "would_deny":
		e.WouldDeny += int64(row.Count)
	default:
		e.Denied += int64(row.Count)
		e.DeniedByKind[row.Kind] += int64(row.Count)
	}
}

// Remember adds a record to the past records sandbox id's events stream
// sends with history=true (the daemon's kept records).
func (s *Server) Remember(id string, record map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil {
		sb.history = append(sb.history, record)
	}
}

// emit is Emit with s.mu held; a full subscriber loses the event.
func (sb *sandbox) emit(typ string, ev api.Event) {
	for ch := range sb.subs {
		select {
		case ch <- event{typ: typ, ev: ev}:
		default:
		}
	}
}

// stopAll kills every exec and waits for their processes.
func (s *Server) stopAll() {
	s.mu.Lock()
	for _, sb := range s.sandboxes {
		for _, x := range sb.execs {
			x.kill()
		}
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// statusOf is the HTTP status of each code (api's Code* comments).
var statusOf = map[string]int{
	api.CodeBadRequest: 400, api.CodeInvalidField: 400, api.CodeInvalidPath: 400,
	api.CodeNotFound: 404, api.CodeForbidden: 403, api.CodeConflict: 409,
	api.CodeTooLarge: 413, api.CodeLimit: 429, api.CodeUnavailable: 503, api.CodeInternal: 500,
}

func writeErr(w http.ResponseWriter, e *api.Error) {
	writeJSON(w, statusOf[e.Code], e)
}

func invalid(field, format string, args ...any) *api.Error {
	return &api.Error{Code: api.CodeInvalidField, Field: field, Message: field + ": " + fmt.Sprintf(format, args...)}
}

// decode reads one JSON value strictly, as the daemon does.
func decode(r *http.Request, v any) *api.Error {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return &api.Error{Code: api.CodeBadRequest, Message: "request body: " + err.Error()}
	}
	if dec.More() {
		return &api.Error{Code: api.CodeBadRequest, Message: "request body: more than one JSON value"}
	}
	return nil
}

// lookup returns sandbox {id} or writes 404.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request) *sandbox {
	id := r.PathValue("id")
	s.mu.Lock()
	sb := s.sandboxes[id]
	s.mu.Unlock()
	if sb == nil {
		writeErr(w, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no sandbox %q", id)})
	}
	return sb
}

func (s *Server) openapi(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]any{"openapi": "3.0.3", "info": map[string]string{"title": "airlock (fake)"}})
}

func (s *Server) health(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	ids := []string{}
	for id := range s.sandboxes {
		ids = append(ids, id)
	}
	s.mu.Unlock()
	sort.Strings(ids)
	s.mu.Lock()
	failing := s.failing
	s.mu.Unlock()
	h := api.Health{OK: len(failing) == 0, PolicyRev: "fake", Sandboxes: ids, Audit: "ok",
		Parts: []api.HealthPart{{Name: api.HealthPartStateDir, Status: api.HealthOK}}}
	h.Parts = append(h.Parts, failing...)
	status := 200
	if !h.OK {
		status = 503
	}
	writeJSON(w, status, h)
}

// SetFailing makes health report the part name failing with problem (ok
// false, 503), as a daemon whose part broke does.
func (s *Server) SetFailing(name, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failing = append(s.failing, api.HealthPart{Name: name, Status: api.HealthFailing, Problem: problem})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSandboxRequest
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	sb, e := s.newSandbox(req)
	if e != nil {
		writeErr(w, e)
		return
	}
	writeJSON(w, 201, sb.view())
}

// newSandbox validates req and registers the sandbox.
func (s *Server) newSandbox(req api.CreateSandboxRequest) (*sandbox, *api.Error) {
	if e := validateCreate(req); e != nil {
		return nil, e
	}
	root, err := os.MkdirTemp("", "alk-fake-sandbox-")
	if err != nil {
		return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
	}
	ws, workdir := filepath.Join(root, "workspace"), api.WorkspaceDir
	if req.Workspace != "" {
		ws, workdir = req.Workspace, req.Workspace
	}
	for _, d := range []string{filepath.Join(root, "workspace"), filepath.Join(root, "home")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, &api.Error{Code: api.CodeInternal, Message: err.Error()}
		}
	}
	mode := req.Mode
	if mode == "" {
		mode = "enforce"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	sb := &sandbox{root: root, workspace: ws, subs: map[chan event]struct{}{}, done: make(chan struct{})}
	sb.Sandbox = api.Sandbox{
		ID: "sb-" + strconv.Itoa(s.seq), State: api.StateRunning, Owner: os.Getuid(), Labels: req.Labels,
		Limits: api.ResolvedLimits{MemoryBytes: orDefault(int64(req.Limits.Memory), 512<<20), CPUs: 1, Pids: orDefault(req.Limits.Pids, 256),
			TmpSizeBytes: orDefault(int64(req.Limits.TmpSize), 256<<20), ExecTimeoutMS: orDefault(time.Duration(req.Limits.ExecTimeout).Milliseconds(), 600000)},
		Workspace: req.Workspace, WorkDir: workdir, Mode: mode, Allow: req.Allow,
		CreatedAt: time.Now().UTC(), IdleTimeoutMS: time.Duration(req.IdleTimeout).Milliseconds(),
		MaxLifetimeMS: time.Duration(req.MaxLifetime).Milliseconds(),
		Egress:        api.Egress{DeniedByKind: map[string]int64{}},
	}
	if req.Limits.CPUs > 0 {
		sb.Limits.CPUs = req.Limits.CPUs
	}
	for _, id := range req.SecretBindings {
		sb.SecretBindings = append(sb.SecretBindings, FakeBinding(id))
	}
	sb.Sandbox.Usage.Pids = 1
	sb.env = append([]string(nil), req.Env...)
	s.sandboxes[sb.ID] = sb
	s.created = append(s.created, req)
	return sb, nil
}

func orDefault(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}

func validateCreate(req api.CreateSandboxRequest) *api.Error {
	switch {
	case req.Limits.Memory != 0 && req.Limits.Memory < 1<<20:
		return invalid("limits.memory", "%d bytes is below the minimum 1M", req.Limits.Memory)
	case req.Limits.CPUs < 0:
		return invalid("limits.cpus", "must be positive")
	case req.Limits.Pids < 0:
		return invalid("limits.pids", "must be positive")
	case req.Mode != "" && req.Mode != "enforce" && req.Mode != "report":
		return invalid("mode", "%q: want enforce or report", req.Mode)
	}
	for i, e := range req.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return invalid(fmt.Sprintf("env[%d]", i), "%q: want KEY=VALUE", e)
		}
	}
	for _, id := range req.SecretBindings {
		switch id {
		case FakeBindingID:
		case FakeForbiddenBindingID:
			return &api.Error{Code: api.CodeForbidden, Field: "secret_bindings",
				Message: fmt.Sprintf("secret_bindings: secret binding %q is not granted to this caller", id)}
		default:
			return invalid("secret_bindings", "secret binding %q is not an attachable binding", id)
		}
	}
	if req.Workspace != "" {
		if st, err := os.Stat(req.Workspace); err != nil || !st.IsDir() || !filepath.IsAbs(req.Workspace) {
			return invalid("workspace", "%s: not an absolute path to a directory", req.Workspace)
		}
	}
	return nil
}

// The fake's secrets file: one binding the test's caller may attach, one
// it may not; any other id is not an attachable binding.
const (
	FakeBindingID          = "fake-api"
	FakeForbiddenBindingID = "fake-root-only"
)

// FakeBinding is how the fake shows an attached binding.
func FakeBinding(id string) api.SecretBinding {
	return api.SecretBinding{ID: id, Secret: "fake-token", Host: "api.example.com", Port: 443, Mode: "placeholder",
		Fingerprint: "hmac-sha256:0123456789abcdef0123456789abcdef", Version: "v1"}
}

// view is the API view of sb now.
func (sb *sandbox) view() api.Sandbox {
	v := sb.Sandbox
	v.AgeMS = time.Since(sb.CreatedAt).Milliseconds()
	for _, x := range sb.execs {
		if x.running() {
			v.ExecsRunning++
		}
	}
	v.ExecsTotal = int64(len(sb.execs))
	v.Egress.DeniedByKind = map[string]int64{}
	for k, n := range sb.Egress.DeniedByKind {
		v.Egress.DeniedByKind[k] = n
	}
	return v
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	want := map[string]string{}
	for _, l := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			writeErr(w, invalid("label", "%q: want KEY=VALUE", l))
			return
		}
		want[k] = v
	}
	s.mu.Lock()
	out := []api.Sandbox{}
	for _, sb := range s.sandboxes {
		if hasLabels(sb.Labels, want) {
			out = append(out, sb.view())
		}
	}
	s.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) || out[i].ID < out[j].ID })
	writeJSON(w, 200, out)
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	if sb := s.lookup(w, r); sb != nil {
		s.mu.Lock()
		v := sb.view()
		s.mu.Unlock()
		writeJSON(w, 200, v)
	}
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	s.mu.Lock()
	delete(s.sandboxes, sb.ID)
	for _, x := range sb.execs {
		x.kill()
	}
	sb.State, sb.EndReason = api.StateStopped, "deleted"
	ended := sb.view() // the event holds it: a subscriber marshals it later
	sb.emit("sandbox", api.Event{Sandbox: &ended})
	close(sb.done)
	s.mu.Unlock()
	for _, x := range sb.execs {
		<-x.exited
	}
	_ = os.RemoveAll(sb.root)
	s.mu.Lock()
	v := sb.view()
	s.mu.Unlock()
	writeJSON(w, 200, v)
}

func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	ch := make(chan event, 64)
	s.mu.Lock()
	sb.subs[ch] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(sb.subs, ch)
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	fl := w.(http.Flusher)
	// As the daemon does: a comment, then the sandbox's state now.
	s.mu.Lock()
	now := sb.view()
	past := slices.Clone(sb.history)
	s.mu.Unlock()
	b, _ := json.Marshal(api.Event{Sandbox: &now})
	fmt.Fprintf(w, ": ping\n\nevent: sandbox\ndata: %s\n\n", b)
	q := r.URL.Query()
	if q.Get("history") == "true" || q.Get("since") != "" {
		for _, rec := range past {
			b, _ := json.Marshal(api.Event{Record: rec, History: true})
			fmt.Fprintf(w, "event: decision\ndata: %s\n\n", b)
		}
	}
	fl.Flush()
	if q.Get("follow") == "false" {
		return
	}
	for {
		select {
		case e := <-ch:
			b, _ := json.Marshal(e.ev)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.typ, b)
			fl.Flush()
		case <-sb.done:
			for {
				select {
				case e := <-ch:
					b, _ := json.Marshal(e.ev)
					fmt.Fprintf(w, "event: %s\ndata: %s\n\n", e.typ, b)
				default:
					return
				}
			}
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request) {
	var req api.AttachRequest
	if e := decode(r, &req); e != nil {
		writeErr(w, e)
		return
	}
	if req.NetNS == "" {
		writeErr(w, invalid("netns", "required"))
		return
	}
	s.mu.Lock()
	_, dup := s.attached[req.ID]
	if !dup {
		s.attached[req.ID] = req
	}
	s.mu.Unlock()
	if dup {
		writeErr(w, &api.Error{Code: api.CodeConflict, Field: "id", Message: fmt.Sprintf("id: sandbox %s already exists", req.ID)})
		return
	}
	writeJSON(w, 201, api.Attached{ID: req.ID, Path: "/run/airlock/airlock-" + req.ID})
}

// Attached returns the requests of the namespaces attached and not yet
// detached, by id.
func (s *Server) Attached() map[string]api.AttachRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.attached)
}

// SetAttachProblem makes GET /v1/attach/{id} report the rules of attached
// id as not in force, with problem; "" makes them in force again.
func (s *Server) SetAttachProblem(id, problem string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.problems[id] = problem
}

func (s *Server) checkAttach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	req, ok := s.attached[id]
	problem := s.problems[id]
	s.mu.Unlock()
	if !ok {
		writeErr(w, &api.Error{Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no attached sandbox %q", id)})
		return
	}
	inbound := api.Inbound{Mode: api.InboundCapture}
	if req.Inbound != nil {
		inbound = *req.Inbound
	}
	writeJSON(w, 200, api.AttachStatus{ID: id, Path: "/run/airlock/airlock-" + id, Pod: req.Pod, Inbound: inbound, InForce: problem == "", Problem: problem})
}

func (s *Server) detach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	_, ok := s.attached[id]
	delete(s.attached, id)
	delete(s.problems, id)
	s.mu.Unlock()
	if !ok {
		writeErr(w, &api.Error{Code: api.CodeNotFound, Field: "id", Message: fmt.Sprintf("no attached sandbox %q", id)})
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) reload(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, map[string]string{"policy_rev": "fake-2"})
}

func (s *Server) summary(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, 200, []api.SummaryRow{{Decision: "deny", Kind: "connect", Host: "evil.example", Port: 443, Count: 2}})
}
