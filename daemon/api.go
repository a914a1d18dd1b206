package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
)

// maxAPIBody bounds a request body on the control API.
const maxAPIBody = 1 << 20

// RunRequest is the body of POST /v1/run. Sizes and durations use the config
// file's spellings ("512M", "30s").
type RunRequest struct {
	ID        string            `json:"id,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	Argv      []string          `json:"argv"`
	Env       []string          `json:"env,omitempty"`
	Workspace string            `json:"workspace,omitempty"`
	Stdin     string            `json:"stdin,omitempty"`
	Limits    struct {
		Memory  config.Size     `json:"memory,omitempty"`
		CPUs    float64         `json:"cpus,omitempty"`
		Pids    int64           `json:"pids,omitempty"`
		Timeout config.Duration `json:"timeout,omitempty"`
		TmpSize config.Size     `json:"tmp_size,omitempty"`
	} `json:"limits"`
}

// RunResponse is the result of POST /v1/run.
type RunResponse struct {
	ID           string  `json:"id"`
	ExitStatus   int     `json:"exit_status"` // 124 timeout, 137 OOM, 128+n signal, else the exit code
	ExitCode     int     `json:"exit_code"`
	Signal       int     `json:"signal,omitempty"`
	TimedOut     bool    `json:"timed_out"`
	OOMKilled    bool    `json:"oom_killed"`
	PidsLimitHit bool    `json:"pids_limit_hit"`
	WallMS       float64 `json:"wall_ms"`
	CPUMS        float64 `json:"cpu_ms"`
	PeakMemory   int64   `json:"peak_memory"`
	Stdout       string  `json:"stdout"`
	Stderr       string  `json:"stderr"`
	Truncated    bool    `json:"truncated"`
}

// AttachRequest is the body of POST /v1/attach.
type AttachRequest struct {
	ID     string            `json:"id"`
	NetNS  string            `json:"netns"`
	Labels map[string]string `json:"labels,omitempty"`
}

type apiError struct {
	Error string `json:"error"`
}

// Handler is the control API (HTTP+JSON). Serve it only on a unix socket that
// no sandbox can reach:
//
//	GET    /v1/health          policy revision and managed sandboxes
//	POST   /v1/run             run a command in a new sandbox, wait, return its result
//	POST   /v1/attach          serve an existing namespace (a container's, a VM's)
//	DELETE /v1/attach/{id}     restore it as it was
//	POST   /v1/policy/reload   reload the policy (a failing reload keeps the old one)
//	GET    /v1/summary         decisions by destination since start
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/health", d.apiHealth)
	mux.HandleFunc("POST /v1/run", d.apiRun)
	mux.HandleFunc("POST /v1/attach", d.apiAttach)
	mux.HandleFunc("DELETE /v1/attach/{id}", d.apiDetach)
	mux.HandleFunc("POST /v1/policy/reload", d.apiReload)
	mux.HandleFunc("GET /v1/summary", d.apiSummary)
	return mux
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, err error) {
	writeJSON(w, status, apiError{Error: err.Error()})
}

// decode reads one JSON object strictly: unknown fields and trailing data are
// errors that name the problem.
func decode(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxAPIBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	if dec.More() {
		return errors.New("request body: more than one JSON value")
	}
	return nil
}

func (d *Daemon) apiHealth(w http.ResponseWriter, _ *http.Request) {
	ids := d.netns.IDs()
	if ids == nil {
		ids = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"policy_rev": d.engine.Rev(), "sandboxes": ids})
}

func (d *Daemon) apiRun(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if len(req.Argv) == 0 {
		writeErr(w, http.StatusBadRequest, errors.New("argv: missing command"))
		return
	}
	if req.ID != "" {
		if err := netns.ValidateID(req.ID); err != nil {
			writeErr(w, http.StatusBadRequest, fmt.Errorf("id: %w", err))
			return
		}
	}
	res, err := d.Run(r.Context(), Task{
		ID:        req.ID,
		Labels:    req.Labels,
		Argv:      req.Argv,
		Env:       req.Env,
		Workspace: req.Workspace,
		Stdin:     strings.NewReader(req.Stdin),
		Limits: sandboxd.Limits{
			Memory:  int64(req.Limits.Memory),
			CPUs:    req.Limits.CPUs,
			Pids:    req.Limits.Pids,
			Timeout: time.Duration(req.Limits.Timeout),
			TmpSize: int64(req.Limits.TmpSize),
		},
	})
	if err != nil {
		status := http.StatusInternalServerError
		var ee *sandboxd.ExecError
		switch {
		case errors.As(err, &ee):
			status = http.StatusUnprocessableEntity
		case errors.Is(err, ErrLowDiskSpace):
			status = http.StatusServiceUnavailable
		}
		writeErr(w, status, err)
		return
	}
	writeJSON(w, http.StatusOK, RunResponse{
		ID: res.ID, ExitStatus: res.ExitStatus(), ExitCode: res.ExitCode, Signal: res.Signal,
		TimedOut: res.TimedOut, OOMKilled: res.OOMKilled, PidsLimitHit: res.PidsLimitHit,
		WallMS: float64(res.Wall) / 1e6, CPUMS: float64(res.CPU) / 1e6, PeakMemory: res.PeakMemory,
		Stdout: string(res.Stdout), Stderr: string(res.Stderr), Truncated: res.Truncated,
	})
}

func (d *Daemon) apiAttach(w http.ResponseWriter, r *http.Request) {
	var req AttachRequest
	if err := decode(r, &req); err != nil {
		writeErr(w, http.StatusBadRequest, err)
		return
	}
	if req.NetNS == "" {
		writeErr(w, http.StatusBadRequest, errors.New("netns: required (/var/run/netns/NAME or /proc/PID/ns/net)"))
		return
	}
	if err := netns.ValidateID(req.ID); err != nil {
		writeErr(w, http.StatusBadRequest, fmt.Errorf("id: %w", err))
		return
	}
	if _, ok := d.netns.Get(req.ID); ok {
		writeErr(w, http.StatusConflict, fmt.Errorf("id: sandbox %s already exists", req.ID))
		return
	}
	sb, err := d.Attach(r.Context(), policy.Sandbox{ID: req.ID, Labels: req.Labels}, req.NetNS)
	if err != nil {
		status := http.StatusUnprocessableEntity
		if errors.Is(err, ErrLowDiskSpace) {
			status = http.StatusServiceUnavailable
		}
		writeErr(w, status, err)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]string{"id": sb.ID, "path": sb.Path})
}

func (d *Daemon) apiDetach(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	sb, ok := d.netns.Get(id)
	if !ok || !sb.Attached {
		writeErr(w, http.StatusNotFound, fmt.Errorf("no attached sandbox %q", id))
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := d.Detach(ctx, id); err != nil {
		writeErr(w, http.StatusInternalServerError, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (d *Daemon) apiReload(w http.ResponseWriter, r *http.Request) {
	if err := d.engine.Reload(r.Context()); err != nil {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"error": err.Error(), "policy_rev": d.engine.Rev()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"policy_rev": d.engine.Rev()})
}

func (d *Daemon) apiSummary(w http.ResponseWriter, _ *http.Request) {
	rows := d.tally.Rows()
	if rows == nil {
		rows = []audit.TallyRow{}
	}
	writeJSON(w, http.StatusOK, rows)
}
