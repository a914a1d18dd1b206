package daemon

import (
	"fmt"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/policy"
)

// health is the state of each part the daemon depends on, in a fixed
// order, with OK false when any is failing; the sandboxes are left to the
// caller. A part this daemon does not have (no run directory of its own in
// tests, no bundle source, no warm pool) is left out.
func (d *Daemon) health() api.Health {
	h := api.Health{OK: true, Parts: []api.HealthPart{}, Sandboxes: []string{}, PoolDepth: d.pool.depth(), Audit: api.HealthOK}
	add := func(name, problem string) {
		p := api.HealthPart{Name: name, Status: api.HealthOK}
		if problem != "" {
			p.Status, p.Problem = api.HealthFailing, problem
			h.OK = false
		}
		h.Parts = append(h.Parts, p)
	}
	if d.runLock != nil {
		add(api.HealthPartStateDir, d.runDirProblem())
	}
	auditProblem := ""
	if err := d.audit.Err(); err != nil {
		auditProblem = err.Error()
		h.Audit = auditProblem
	}
	add(api.HealthPartAudit, auditProblem)
	if d.engine != nil {
		h.PolicyRev = d.engine.Rev()
		problem := ""
		if h.PolicyRev == policy.RevNoPolicy {
			problem = "no policy in force: every request is denied"
		} else if err := d.engine.ReloadErr(); err != nil {
			problem = "stale: " + err.Error()
		}
		add(api.HealthPartPolicy, problem)
	}
	if h.PolicyBundle = d.bundleHealth(); h.PolicyBundle != nil {
		add(api.HealthPartPolicyBundle, bundleProblem(h.PolicyBundle, h.PolicyRev))
	}
	if d.pool.size > 0 {
		add(api.HealthPartPool, d.pool.problem())
	}
	return h
}

// bundleProblem says what is wrong with a bundle source: no bundle in
// force, or its last download, verification or activation failed (the
// policy in force is then older than the server's).
func bundleProblem(b *api.PolicyBundle, rev string) string {
	switch {
	case !b.Active && b.Error != "":
		return fmt.Sprintf("no bundle in force (every request is denied): %s: %s", b.ErrorStage, b.Error)
	case !b.Active:
		return "no bundle in force yet (every request is denied)"
	case b.Error != "":
		return fmt.Sprintf("%s failed, policy %s stays in force: %s", b.ErrorStage, rev, b.Error)
	}
	return ""
}
