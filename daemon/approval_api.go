package daemon

import (
	"encoding/json"
	"net/http"
	"strconv"

	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
)

// apiApprovals is GET /v1/approvals[?follow=true]: the pending approvals
// the caller may answer (root: all; others: their sandboxes'), as a JSON
// array; with follow, as NDJSON, one Approval a line, then each new
// question and each answer or time-out as it happens.
func (d *Daemon) apiApprovals(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	if d.approvals == nil {
		writeError(w, apiErr(api.CodeUnavailable, "", "approvals are not served by this daemon"))
		return
	}
	follow := false
	switch v := r.URL.Query().Get("follow"); v {
	case "", "false", "0":
	case "true", "1":
		follow = true
	default:
		writeError(w, apiErr(api.CodeInvalidField, "follow", "follow: %.20q is not true or false", v))
		return
	}
	if !follow {
		writeJSON(w, http.StatusOK, d.approvals.list(c))
		return
	}
	sub, now, stop := d.approvals.subscribe(c)
	defer stop()
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for _, a := range now {
		if enc.Encode(a) != nil {
			return
		}
	}
	if rc.Flush() != nil {
		return
	}
	tick := time.NewTicker(d.heartbeatOrDefault())
	defer tick.Stop()
	for {
		select {
		case a, ok := <-sub.ch:
			if !ok {
				return // fell too far behind: the client reconnects and lists again
			}
			if enc.Encode(a) != nil || rc.Flush() != nil {
				return
			}
		case <-tick.C:
			// A blank line keeps proxies and idle timeouts from closing a quiet stream.
			if _, err := w.Write([]byte("\n")); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		}
	}
}

// apiAnswer is POST /v1/approvals/{id}.
func (d *Daemon) apiAnswer(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	if d.approvals == nil {
		writeError(w, apiErr(api.CodeNotFound, "id", "no pending approval %.80q", r.PathValue("id")))
		return
	}
	var req api.ApprovalAnswer
	if e := decodeBody(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	a, e := d.approvals.answer(c, r.PathValue("id"), req.Answer)
	if e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, a)
}

func (d *Daemon) heartbeatOrDefault() time.Duration {
	if d.heartbeat > 0 {
		return d.heartbeat
	}
	return DefaultHeartbeat
}

// callerInNetns reports whether caller c's process runs in the network
// namespace at path (a sandbox's): the same device and inode.
func callerInNetns(c caller, path string) bool {
	if c.pid <= 0 || path == "" {
		return false
	}
	var mine, theirs syscall.Stat_t
	if syscall.Stat("/proc/"+strconv.Itoa(c.pid)+"/ns/net", &mine) != nil || syscall.Stat(path, &theirs) != nil {
		return false
	}
	return mine.Dev == theirs.Dev && mine.Ino == theirs.Ino
}
