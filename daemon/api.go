package daemon

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
)

// route is one entry of the API: the mux serves exactly these, and the
// OpenAPI document's test compares its paths with them.
type route struct {
	method, path string
	handle       http.HandlerFunc
	rootOnly     bool
	// stream: the request lasts as long as what it serves (an exec, an
	// events stream, a transfer); counted in api.max_streams_per_uid.
	stream bool
}

func (d *Daemon) routes() []route {
	return []route{
		{method: "GET", path: "/v1/openapi.json", handle: d.apiOpenAPI},
		{method: "GET", path: "/v1/health", handle: d.apiHealth},
		{method: "POST", path: "/v1/sandboxes", handle: d.apiCreate},
		{method: "GET", path: "/v1/sandboxes", handle: d.apiList},
		{method: "GET", path: "/v1/sandboxes/{id}", handle: d.apiGet},
		{method: "PATCH", path: "/v1/sandboxes/{id}", handle: d.apiUpdate},
		{method: "DELETE", path: "/v1/sandboxes/{id}", handle: d.apiDelete},
		{method: "POST", path: "/v1/sandboxes/{id}/exec", handle: d.apiExec, stream: true},
		{method: "GET", path: "/v1/sandboxes/{id}/execs", handle: d.apiExecs},
		{method: "PUT", path: "/v1/sandboxes/{id}/execs/{exec_id}/stdin", handle: d.apiStdin, stream: true},
		{method: "POST", path: "/v1/sandboxes/{id}/execs/{exec_id}/signal", handle: d.apiSignal},
		{method: "PUT", path: "/v1/sandboxes/{id}/files", handle: d.apiPutFiles, stream: true},
		{method: "GET", path: "/v1/sandboxes/{id}/files", handle: d.apiGetFiles, stream: true},
		{method: "GET", path: "/v1/sandboxes/{id}/events", handle: d.apiEvents, stream: true},
		{method: "POST", path: "/v1/run", handle: d.apiRun, stream: true},
		{method: "POST", path: "/v1/attach", handle: d.apiAttach, rootOnly: true},
		{method: "GET", path: "/v1/attach/{id}", handle: d.apiCheckAttach, rootOnly: true},
		{method: "DELETE", path: "/v1/attach/{id}", handle: d.apiDetach, rootOnly: true},
		{method: "POST", path: "/v1/policy/reload", handle: d.apiReload, rootOnly: true},
		{method: "GET", path: "/v1/summary", handle: d.apiSummary},
		{method: "GET", path: "/v1/approvals", handle: d.apiApprovals, stream: true},
		{method: "POST", path: "/v1/approvals/{id}", handle: d.apiAnswer},
	}
}

// Handler is the control API (HTTP+JSON; the routes, their bodies and
// errors are api/openapi.json). Serve it only on the unix socket ListenAPI
// makes, with ConnContext: every request acts as the uid of its
// connection's peer, and a request without one is refused.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	rs := d.routes()
	for _, rt := range rs {
		mux.HandleFunc(rt.method+" "+rt.path, d.guard(rt))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, pattern := mux.Handler(r); pattern == "" {
			noRoute(w, r, mux, rs)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// guard refuses a request whose caller is unknown, one to a root-only
// route from anyone else, and a stream past the caller's cap.
func (d *Daemon) guard(rt route) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		c, ok := callerFrom(r.Context())
		if ok {
			var ctx context.Context
			if ctx, c, ok = d.ownerCaller(r.Context(), c); !ok {
				writeError(w, apiErr(api.CodeForbidden, "", "this is uid %d's own daemon (airlock serve --user): uid %d may not use it", d.owner, c.uid))
				return
			}
			r = r.WithContext(ctx)
		}
		switch {
		case !ok:
			writeError(w, apiErr(api.CodeForbidden, "", "the caller could not be identified: use the API's unix socket"))
		case rt.rootOnly && !c.root():
			writeError(w, apiErr(api.CodeForbidden, "", "%s %s: root only", rt.method, rt.path))
		case rt.stream:
			end, e := d.conns.beginStream(c)
			if e != nil {
				writeError(w, e)
				return
			}
			defer end()
			rt.handle(w, r)
		default:
			rt.handle(w, r)
		}
	}
}

// noRoute answers a request no route takes: 405 naming the methods the path
// has, or 404.
func noRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux, rs []route) {
	var allow []string
	for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
		if slices.ContainsFunc(rs, func(rt route) bool { return rt.method == m }) {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := mux.Handler(probe); p != "" {
				allow = append(allow, m)
			}
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeJSON(w, http.StatusMethodNotAllowed, apiErr(api.CodeBadRequest, "", "%s %s: method not allowed (%s)", r.Method, r.URL.Path, strings.Join(allow, ", ")))
		return
	}
	writeError(w, apiErr(api.CodeNotFound, "", "no route %s %s", r.Method, r.URL.Path))
}

// visible is the request's {id} sandbox when the caller may see it; any
// other is not found, whether it exists or not.
func (d *Daemon) visible(r *http.Request) (*sandbox, *api.Error) {
	c, _ := callerFrom(r.Context())
	id := r.PathValue("id")
	sb, ok := d.reg.get(id)
	if !ok || !c.may(sb.owner) {
		return nil, apiErr(api.CodeNotFound, "id", "no sandbox %.80q", id)
	}
	return sb, nil
}

func (d *Daemon) apiOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(api.OpenAPI())
}

// apiHealth is GET /v1/health: 200 when every part is ok, 503 with the same
// body when any is failing (health.go).
func (d *Daemon) apiHealth(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	h := d.health()
	for _, sb := range d.reg.all() {
		if c.may(sb.owner) {
			h.Sandboxes = append(h.Sandboxes, sb.id)
		}
	}
	if c.root() && d.netns != nil {
		for _, id := range d.netns.IDs() {
			if !slices.Contains(h.Sandboxes, id) {
				h.Sandboxes = append(h.Sandboxes, id)
			}
		}
	}
	status := http.StatusOK
	if !h.OK {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, h)
}

// apiCreate is POST /v1/sandboxes.
func (d *Daemon) apiCreate(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	var req api.CreateSandboxRequest
	if e := decodeBody(r, &req, true); e != nil {
		writeError(w, e)
		return
	}
	p, e := d.validateCreate(c, &req)
	if e != nil {
		writeError(w, e)
		return
	}
	sb, e := d.createSandbox(r.Context(), c, p)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusCreated, d.sandboxView(sb))
}

// apiList is GET /v1/sandboxes[?label=k=v ...]: the caller's sandboxes
// (root: all) that carry every label asked for.
func (d *Daemon) apiList(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	want := map[string]string{}
	for _, kv := range r.URL.Query()["label"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			writeError(w, apiErr(api.CodeInvalidField, "label", "label: %.80q is not KEY=VALUE", kv))
			return
		}
		want[k] = v
	}
	out := []api.Sandbox{}
	for _, sb := range d.reg.all() {
		if !c.may(sb.owner) || !hasLabels(sb.labelsNow(), want) {
			continue
		}
		out = append(out, *d.sandboxView(sb))
	}
	writeJSON(w, http.StatusOK, out)
}

func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func (d *Daemon) apiGet(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, d.sandboxView(sb))
}

// apiDelete is DELETE /v1/sandboxes/{id}: every process killed, namespace,
// cgroup and tmpfs removed; the sandbox as it ended, with its final usage.
func (d *Daemon) apiDelete(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, d.endSandbox(sb, ReasonDeleted))
}

// apiRun is POST /v1/run: a sandbox created for one exec, which is waited
// for, and deleted.
func (d *Daemon) apiRun(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	var req api.RunRequest
	if e := decodeBody(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	if e := validateArgv(req.Argv); e != nil {
		writeError(w, e)
		return
	}
	p, e := d.validateCreate(c, &api.CreateSandboxRequest{Labels: req.Labels, Limits: req.Limits, Workspace: req.Workspace,
		Env: req.Env, Mode: req.Mode, Allow: req.Allow, SecretBindings: req.SecretBindings})
	if e != nil {
		writeError(w, e)
		return
	}
	sb, e := d.createSandbox(r.Context(), c, p)
	if e != nil {
		writeError(w, e)
		return
	}
	resp, e := d.runOnce(r.Context(), sb, req)
	final := d.endSandbox(sb, ReasonDeleted)
	if e != nil {
		writeError(w, e)
		return
	}
	resp.Egress = final.Egress
	resp.SecretBindings = sb.params.bindings
	sb.mu.Lock()
	resp.PidsLimitHit = sb.finalRaw.PidsLimitHits > 0
	sb.mu.Unlock()
	writeJSON(w, http.StatusOK, resp)
}

// runOnce runs POST /v1/run's command in sb and waits for it.
func (d *Daemon) runOnce(ctx context.Context, sb *sandbox, req api.RunRequest) (*api.RunResponse, *api.Error) {
	if e := sb.beginExec(); e != nil {
		return nil, e
	}
	defer sb.endExec()
	x := newExecEntry(req.Argv, false)
	spec := execSpec{Argv: req.Argv, Stdin: strings.NewReader(req.Stdin)}
	proc, err := sb.box.Exec(ctx, spec)
	var ee *execError
	if errors.As(err, &ee) {
		return &api.RunResponse{ID: sb.id, ExecResult: api.ExecResult{ExitStatus: ee.Code, ExitCode: ee.Code, Error: ee.Msg}}, nil
	}
	if err != nil {
		return nil, execStartError(sb.id, err)
	}
	x.id = proc.ID()
	sb.addExec(x)
	res, err := proc.Wait()
	if err != nil && res == nil {
		return nil, execStartError(sb.id, err)
	}
	ar := apiResult(res)
	sb.execDone(x, ar)
	d.metrics.execDone(ar)
	if err != nil {
		return nil, apiErr(api.CodeUnavailable, "", "run: %v", err)
	}
	return &api.RunResponse{ID: sb.id, ExecResult: *ar, Stdout: string(res.Stdout), Stderr: string(res.Stderr), Truncated: res.Truncated}, nil
}

func (d *Daemon) apiAttach(w http.ResponseWriter, r *http.Request) {
	var req api.AttachRequest
	if e := decodeBody(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	if req.NetNS == "" {
		writeError(w, apiErr(api.CodeInvalidField, "netns", "netns: required (/var/run/netns/NAME or /proc/PID/ns/net)"))
		return
	}
	if err := netns.ValidateID(req.ID); err != nil {
		writeError(w, apiErr(api.CodeInvalidField, "id", "id: %v", err))
		return
	}
	if e := validateLabels(req.Labels); e != nil {
		writeError(w, e)
		return
	}
	if e := validatePod(req.Pod); e != nil {
		writeError(w, e)
		return
	}
	inbound, e := netnsInbound(req.Inbound)
	if e != nil {
		writeError(w, e)
		return
	}
	// An id's uniqueness among namespaces is netns's to check, once, when
	// it reserves the id (ErrIDInUse); the registry also knows the
	// sandboxes still being torn down.
	inUse := func() { writeError(w, apiErr(api.CodeConflict, "id", "id: sandbox %s already exists", req.ID)) }
	if d.reg.taken(req.ID) {
		inUse()
		return
	}
	sb, err := d.Attach(r.Context(), policy.Sandbox{ID: req.ID, Labels: req.Labels, Pod: clonePod(req.Pod)}, req.NetNS, inbound)
	switch {
	case errors.Is(err, netns.ErrIDInUse):
		inUse()
		return
	case errors.Is(err, ErrLowDiskSpace):
		writeError(w, apiErr(api.CodeUnavailable, "", "%v", err))
		return
	case err != nil:
		writeError(w, apiErr(api.CodeUnprocessable, "", "%v", err))
		return
	}
	writeJSON(w, http.StatusCreated, api.Attached{ID: sb.ID, Path: sb.Path})
}

// apiCheckAttach is the CNI CHECK's question: are the attached namespace's
// rules still as Attach left them? A namespace whose rules were changed is
// a 200 with in_force false and what was found, not an error of the API.
func (d *Daemon) apiCheckAttach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, ok := d.netns.Get(id)
	if !ok || !sb.Attached {
		writeError(w, apiErr(api.CodeNotFound, "id", "no attached sandbox %.80q", id))
		return
	}
	st := api.AttachStatus{ID: sb.ID, Path: sb.Path, Pod: clonePod(sb.Pod), Inbound: apiInbound(sb.Inbound), InboundAccepted: sb.InboundAccepted(), InForce: true}
	if err := d.CheckAttached(r.Context(), id); err != nil {
		if errors.Is(err, netns.ErrNotAttached) {
			writeError(w, apiErr(api.CodeNotFound, "id", "no attached sandbox %.80q", id))
			return
		}
		st.InForce, st.Problem = false, err.Error()
	}
	writeJSON(w, http.StatusOK, st)
}

func (d *Daemon) apiDetach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, ok := d.netns.Get(id)
	if !ok || !sb.Attached {
		writeError(w, apiErr(api.CodeNotFound, "id", "no attached sandbox %.80q", id))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Detach(ctx, id); err != nil {
		writeError(w, apiErr(api.CodeInternal, "", "%v", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) apiReload(w http.ResponseWriter, r *http.Request) {
	if err := d.engine.Reload(r.Context()); err != nil {
		writeError(w, apiErr(api.CodeUnprocessable, "", "policy reload failed, revision %s stays in force: %v", d.engine.Rev(), err))
		return
	}
	writeJSON(w, http.StatusOK, api.PolicyRev{PolicyRev: d.engine.Rev()})
}

// apiSummary is GET /v1/summary: decisions by destination since the daemon
// started; a caller other than root sees its own sandboxes' only.
func (d *Daemon) apiSummary(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	var rows []audit.TallyRow
	if c.root() {
		rows = d.tally.Rows()
	} else {
		rows = d.acct.ownerRows(c.uid)
	}
	out := make([]api.SummaryRow, 0, len(rows))
	for _, r := range rows {
		out = append(out, summaryRow(r))
	}
	writeJSON(w, http.StatusOK, out)
}
