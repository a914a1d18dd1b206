package daemon

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
)

// policyBundle maps policy.bundle onto the engine's BundleConfig: the
// signing key read from its file, the bearer token from the secrets file
// (buildSecrets runs first). nil without a bundle.
func (d *Daemon) policyBundle(cfg config.Config) (*policy.BundleConfig, error) {
	b := cfg.Policy.Bundle
	if b == nil {
		return nil, nil
	}
	bc := &policy.BundleConfig{
		URL:                b.URL,
		MinDelay:           time.Duration(b.MinDelay),
		MaxDelay:           time.Duration(b.MaxDelay),
		LongPollingTimeout: time.Duration(b.LongPollingTimeout),
		StartTimeout:       time.Duration(b.StartTimeout),
		PersistDir:         b.PersistDir,
		CAFile:             b.CAFile,
	}
	d.bundleAudit = &bundleAudit{url: policy.RedactBundleURL(b.URL)}
	bc.Notify = d.bundleAudit.event
	if id := b.TokenSecret; id != "" {
		if d.secrets == nil {
			return nil, fmt.Errorf("policy.bundle.token_secret: %q needs secrets.file", id)
		}
		authz, err := d.secrets.BearerAuthorization(id)
		if err != nil {
			return nil, fmt.Errorf("policy.bundle.token_secret: %w", err)
		}
		bc.Authorization = authz
	}
	if s := b.Signing; s != nil {
		key := s.PublicKey
		if s.PublicKeyFile != "" {
			pem, err := os.ReadFile(s.PublicKeyFile)
			if err != nil {
				return nil, fmt.Errorf("policy.bundle.signing.public_key_file: %w", err)
			}
			key = string(pem)
		}
		bc.Signing = &policy.BundleSigning{PublicKey: key, KeyID: s.KeyID, Scope: s.Scope, Algorithm: s.Algorithm}
	}
	return bc, nil
}

// bundleHealth is GET /v1/health's policy_bundle: nil without a bundle.
func (d *Daemon) bundleHealth() *api.PolicyBundle {
	if d.engine == nil {
		return nil
	}
	st, ok := d.engine.BundleStatus()
	if !ok {
		return nil
	}
	at := func(t time.Time) *time.Time {
		if t.IsZero() {
			return nil
		}
		t = t.UTC()
		return &t
	}
	return &api.PolicyBundle{
		URL: st.URL, Active: st.Active, Revision: st.Revision, ETag: st.ETag, FromDisk: st.FromDisk,
		LastRequest: at(st.LastRequest), LastDownload: at(st.LastDownload), LastActivation: at(st.LastActivation),
		Error: st.LastError, ErrorStage: st.LastErrorStage, ErrorAt: at(st.LastErrorAt),
	}
}

// startBundleReports starts what reports on the bundle source once New has
// built everything: its metrics, and its audit records (the events of the
// start written first).
func (d *Daemon) startBundleReports() {
	d.registerBundleMetrics()
	if d.bundleAudit != nil {
		d.bundleAudit.start(d.audit)
	}
}

// bundleAudit writes the bundle source's events as audit records (kind
// policy_bundle, no decision). Events before the audit chain exists (the
// policy compiles beside New's other steps) wait until start.
type bundleAudit struct {
	url     string
	mu      sync.Mutex // held while logging, so records keep their order
	log     audit.Logger
	pending []*audit.Record
}

// Reasons of policy_bundle records.
const (
	ReasonBundleActivated = "bundle_activated"
	ReasonBundleRefused   = "bundle_refused"
)

func (b *bundleAudit) event(ev policy.BundleEvent) {
	var id [6]byte
	_, _ = rand.Read(id[:])
	r := &audit.Record{ID: "policy-bundle-" + hex.EncodeToString(id[:]), Kind: audit.KindPolicyBundle, PolicyRev: ev.PolicyRev,
		Extra: map[string]json.RawMessage{}}
	put := func(k string, v any) {
		if j, err := json.Marshal(v); err == nil {
			r.Extra[k] = j
		}
	}
	put("url", b.url)
	if ev.Revision != "" {
		put("revision", ev.Revision)
	}
	if ev.Activated {
		r.Reasons = []audit.Reason{{ID: ReasonBundleActivated, Msg: "policy bundle in force"}}
		put("from_disk", ev.FromDisk)
	} else {
		r.Reasons = []audit.Reason{{ID: ReasonBundleRefused, Msg: "policy bundle refused at " + ev.Stage + "; the policy in force stays"}}
		put("stage", ev.Stage)
		if ev.Err != nil {
			r.Error = ev.Err.Error()
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.log == nil {
		b.pending = append(b.pending, r)
		return
	}
	_ = b.log.Log(r) // a log that refuses records shows in /v1/health
}

// start logs the pending records, then every event as it comes.
func (b *bundleAudit) start(l audit.Logger) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.log = l
	for _, r := range b.pending {
		_ = l.Log(r)
	}
	b.pending = nil
}

// registerBundleMetrics adds the bundle source's metrics to the daemon's
// registry, read from its status at each scrape. Nothing without a bundle.
func (d *Daemon) registerBundleMetrics() {
	if d.engine == nil || d.metrics == nil {
		return
	}
	if _, ok := d.engine.BundleStatus(); !ok {
		return
	}
	e := d.engine
	st := func() policy.BundleStatus { s, _ := e.BundleStatus(); return s }
	counter := func(name, help string, labels prometheus.Labels, f func(policy.BundleStatus) uint64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help, ConstLabels: labels},
			func() float64 { return float64(f(st())) })
	}
	gauge := func(name, help string, f func(policy.BundleStatus) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(st()) })
	}
	unix := func(t time.Time) float64 {
		if t.IsZero() {
			return 0
		}
		return float64(t.UnixNano()) / 1e9
	}
	const requests = "airlock_policy_bundle_requests_total"
	const reqHelp = "Requests to the policy bundle server, by result: downloaded (a bundle read and verified), not_modified (304), failed (no answer, an HTTP error); a bundle refused by verification counts in airlock_policy_bundle_refused_total."
	const refused = "airlock_policy_bundle_refused_total"
	const refHelp = "Policy bundles refused, by stage: verify (signature, digest, format) or activate (compile, tests); the current policy stayed."
	d.metrics.reg.MustRegister(
		counter(requests, reqHelp, prometheus.Labels{"result": "downloaded"}, func(s policy.BundleStatus) uint64 { return s.Downloaded }),
		counter(requests, reqHelp, prometheus.Labels{"result": "not_modified"}, func(s policy.BundleStatus) uint64 { return s.NotModified }),
		counter(requests, reqHelp, prometheus.Labels{"result": "failed"}, func(s policy.BundleStatus) uint64 { return s.Failed }),
		counter(refused, refHelp, prometheus.Labels{"stage": policy.BundleStageVerify}, func(s policy.BundleStatus) uint64 { return s.RefusedVerify }),
		counter(refused, refHelp, prometheus.Labels{"stage": policy.BundleStageActivate}, func(s policy.BundleStatus) uint64 { return s.RefusedActivate }),
		counter("airlock_policy_bundle_activations_total", "Policy bundles put in force (the persisted one at start included).", nil,
			func(s policy.BundleStatus) uint64 { return s.Activations }),
		gauge("airlock_policy_bundle_active", "1 while a policy bundle is in force; 0: every request is denied.", func(s policy.BundleStatus) float64 {
			if s.Active {
				return 1
			}
			return 0
		}),
		gauge("airlock_policy_bundle_last_activation_timestamp_seconds", "When the last policy bundle was put in force (Unix time; 0: never).",
			func(s policy.BundleStatus) float64 { return unix(s.LastActivation) }),
		gauge("airlock_policy_bundle_last_request_timestamp_seconds", "When the bundle server last answered (200 or 304; Unix time; 0: never).",
			func(s policy.BundleStatus) float64 { return unix(s.LastRequest) }),
	)
}

// bundlePersistDir is where the last good bundle is kept ("" without a
// bundle): hidden from sandboxes like a policy directory.
func bundlePersistDir(cfg config.Config) string {
	if cfg.Policy.Bundle == nil {
		return ""
	}
	return cfg.Policy.Bundle.PersistDir
}
