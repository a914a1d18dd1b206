package daemon

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/policy"
)

// Changing a running sandbox's own rules: PATCH /v1/sandboxes/{id}. The
// labels, mode and allow list a sandbox was created with are fields of the
// sandbox resource (GET shows them), so the change is a PATCH of that
// resource, answered with the resource as it is after it; a /policy
// sub-resource would be a second name for the same three fields.
//
// One update of a sandbox runs at a time (sandbox.updating): it reads the
// rules in force, checks the new ones as create checks them (parseAllow,
// validateLabels), writes the audit record naming the caller with the old
// and new rules (refused: nothing changes), hands them to what serves the
// sandbox (network.Update: the gateway and the DNS filter swap them and the
// gateway re-decides the sandbox's open tunnels and websockets), then shows
// them. No other sandbox is touched.

// ReasonUpdated is the reason of the audit record of a PATCH (kind
// sandbox, decision allow; extra by_uid, old, new).
const ReasonUpdated = "updated"

// sandboxRules is the part of a sandbox a PATCH changes.
type sandboxRules struct {
	labels    map[string]string
	mode      string // as asked: "" is the daemon's
	shownMode string // the mode in force
	allow     []string
	allowList *policy.AllowList
}

// rulesNow is the sandbox's rules in force.
func (s *sandbox) rulesNow() sandboxRules {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.params
	return sandboxRules{labels: s.labels, mode: p.mode, shownMode: p.shownMode, allow: p.allow, allowList: p.allowList}
}

// labelsNow is the sandbox's labels in force (never modified in place: an
// update replaces the map).
func (s *sandbox) labelsNow() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.labels
}

// setRules shows r as the sandbox's rules.
func (s *sandbox) setRules(r sandboxRules) {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.params // its rule fields are read under mu once the sandbox is listed
	p.labels, p.mode, p.shownMode, p.allow, p.allowList = r.labels, r.mode, r.shownMode, r.allow, r.allowList
	s.labels = r.labels
	s.updates++
}

// policySandbox is r as the gateway and the DNS filter decide by it.
func (r sandboxRules) policySandbox(id string) policy.Sandbox {
	return policy.Sandbox{ID: id, Labels: r.labels, Mode: policy.Mode(r.mode), Allow: r.allowList}
}

// view is r as the audit record shows it.
func (r sandboxRules) view() map[string]any {
	allow := r.allow
	if allow == nil {
		allow = []string{}
	}
	return map[string]any{"labels": r.labels, "mode": r.shownMode, "allow": allow}
}

// apiUpdate is PATCH /v1/sandboxes/{id}.
func (d *Daemon) apiUpdate(w http.ResponseWriter, r *http.Request) {
	c, _ := callerFrom(r.Context())
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	var req api.UpdateSandboxRequest
	if e := decodeBody(r, &req, false); e != nil {
		writeError(w, e)
		return
	}
	if e := d.updateSandbox(c, sb, &req); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, d.sandboxView(sb))
}

// updateSandbox applies req to sb for caller c.
func (d *Daemon) updateSandbox(c caller, sb *sandbox, req *api.UpdateSandboxRequest) *api.Error {
	if req.Empty() {
		return apiErr(api.CodeInvalidField, "", "nothing to change: give allow, allow_add, allow_remove, labels or mode")
	}
	sb.updating.Lock()
	defer sb.updating.Unlock()
	old := sb.rulesNow()
	next, e := d.nextRules(c, old, req)
	if e != nil {
		return e
	}
	sb.mu.Lock()
	state, n := sb.state, sb.updates+1
	sb.mu.Unlock()
	if state != api.StateRunning {
		return apiErr(api.CodeConflict, "", "sandbox %s is %s", sb.id, state)
	}
	if err := d.audit.Log(updateRecord(sb.id, n, c, old, next)); err != nil {
		d.log.Error("audit sandbox update", oplog.SandboxKey, sb.id, oplog.ErrorKey, err)
		return apiErr(api.CodeUnavailable, "", "the audit log refused the update's record, nothing changed: %v", err)
	}
	closed, err := d.net.Update(next.policySandbox(sb.id))
	if err != nil {
		d.log.Error("sandbox update", oplog.SandboxKey, sb.id, oplog.ErrorKey, err)
		return apiErr(api.CodeConflict, "", "sandbox %s is no longer served: %v", sb.id, err)
	}
	sb.setRules(next)
	sb.touch()
	d.log.Info("sandbox rules changed", oplog.SandboxKey, sb.id, "by_uid", c.uid, "closed", closed)
	return nil
}

// nextRules is old with req applied, checked as create checks: labels by
// validateLabels, allow entries by parseAllow (a caller other than root is
// held to one registrable domain for the entries it writes), mode root
// only.
func (d *Daemon) nextRules(c caller, old sandboxRules, req *api.UpdateSandboxRequest) (sandboxRules, *api.Error) {
	next := old
	if req.Mode != "" {
		if !c.root() {
			return next, apiErr(api.CodeForbidden, "mode", "mode: only root may change a running sandbox's mode")
		}
		switch policy.Mode(req.Mode) {
		case policy.ModeEnforce, policy.ModeReport:
			next.mode, next.shownMode = req.Mode, req.Mode
		default:
			return next, apiErr(api.CodeInvalidField, "mode", "mode: %q is not one of enforce, report", req.Mode)
		}
	}
	if len(req.Labels) > 0 {
		labels := maps.Clone(old.labels)
		if labels == nil {
			labels = map[string]string{}
		}
		for k, v := range req.Labels {
			if v == nil {
				delete(labels, k)
				continue
			}
			labels[k] = *v
		}
		if e := validateLabels(labels); e != nil {
			return next, e
		}
		next.labels = labels
	}
	allow, e := nextAllow(c, old.allow, req)
	if e != nil {
		return next, e
	}
	if allow != nil {
		l, e := parseAllow(allow, true) // each new entry was checked for c above
		if e != nil {
			return next, e
		}
		next.allow, next.allowList = allow, l
	}
	return next, nil
}

// nextAllow is the allow list req asks for, or nil when it leaves it.
func nextAllow(c caller, old []string, req *api.UpdateSandboxRequest) ([]string, *api.Error) {
	if req.Allow == nil && len(req.AllowAdd) == 0 && len(req.AllowRemove) == 0 {
		return nil, nil
	}
	list := slices.Clone(old)
	if req.Allow != nil {
		if _, e := parseAllow(*req.Allow, c.root()); e != nil {
			return nil, e
		}
		list = slices.Clone(*req.Allow)
	}
	norm := func(a string) string { n, _ := policy.NormalizeAllow(a); return n }
	for i, a := range req.AllowRemove {
		n, err := policy.NormalizeAllow(a)
		j := slices.IndexFunc(list, func(x string) bool { return norm(x) == n })
		if err != nil || j < 0 {
			return nil, apiErr(api.CodeInvalidField, fmt.Sprintf("allow_remove[%d]", i), "allow_remove[%d]: %+.80q is not in the sandbox's allow list", i, a)
		}
		list = slices.Delete(list, j, j+1)
	}
	if len(req.AllowAdd) > 0 {
		if _, e := parseAllow(req.AllowAdd, c.root()); e != nil {
			e.Field = "allow_add" + e.Field[len("allow"):]
			e.Message = "allow_add" + e.Message[len("allow"):]
			return nil, e
		}
		for _, a := range req.AllowAdd {
			n := norm(a)
			if !slices.ContainsFunc(list, func(x string) bool { return norm(x) == n }) {
				list = append(list, a)
			}
		}
	}
	if list == nil {
		list = []string{}
	}
	return list, nil
}

// updateRecord is the audit record of the nth update of sandbox id by c.
// Beside old and new it carries the new rules as a creation record does
// (labels, mode as asked, allow), so what rebuilds inputs from the log
// (policy/learn: replay, suggest) follows the sandbox's rules as they change.
func updateRecord(id string, n int64, c caller, old, next sandboxRules) *audit.Record {
	extra := map[string]json.RawMessage{}
	put := func(k string, v any) { extra[k], _ = json.Marshal(v) }
	put("by_uid", c.uid)
	put("labels", next.labels)
	put("mode", next.mode)
	put("allow", next.allow)
	put("old", old.view())
	put("new", next.view())
	return &audit.Record{ID: id + "/update/" + strconv.FormatInt(n, 10), Sandbox: id, Kind: audit.KindSandbox, Decision: audit.DecisionAllow,
		Reasons: []audit.Reason{{ID: ReasonUpdated, Msg: fmt.Sprintf("sandbox rules changed by uid %d", c.uid)}}, Extra: extra}
}
