package daemon

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/audittest"
	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/bundletest"
)

// bundleRego allows every kind but tcp to host.
func bundleRego(host string) string {
	return "package airlock.egress\n\nallow if {\n\tinput.kind != \"tcp\"\n\tinput.destination.host == \"" + host + "\"\n}\n"
}

// TestBundleHealthAndMetrics: /v1/health shows the bundle source's state
// (documented in api/openapi.json, checked by the validating client) and the
// metrics count what it did, a refused bad signature included.
func TestBundleHealthAndMetrics(t *testing.T) {
	key := bundletest.NewKey(t, "prod", "")
	srv := bundletest.NewServer(t)
	srv.Publish(bundletest.Build(t, bundletest.Bundle{Revision: "r1", Files: map[string]string{"p.rego": bundleRego("one.example")}}, key))
	w := newFakeWorld(t)
	ba := &bundleAudit{url: srv.URL}
	e, err := policy.New(policy.Config{Bundle: &policy.BundleConfig{URL: srv.URL, Manual: true, Notify: ba.event,
		Signing: &policy.BundleSigning{PublicKey: key.PublicPEM, KeyID: key.ID}}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	w.d.engine, w.d.bundleAudit = e, ba
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	health := func() api.Health {
		var h api.Health
		w.client(alice).json(t, "GET", "/v1/health", "").decode(t, &h)
		return h
	}
	h := health()
	if h.PolicyBundle == nil || h.PolicyBundle.Active || h.PolicyRev != policy.RevNoPolicy || h.PolicyBundle.URL != srv.URL {
		t.Fatalf("before a download: %+v %+v, want inactive, rev none", h, h.PolicyBundle)
	}
	if err := e.PollBundle(ctx); err != nil {
		t.Fatal(err)
	}
	// The activation's record waits for the audit chain (New's end).
	if got := w.audit.Kind(audit.KindPolicyBundle); len(got) != 0 {
		t.Fatalf("%d records before start, want them held", len(got))
	}
	w.d.startBundleReports()
	h = health()
	if b := h.PolicyBundle; !b.Active || b.Revision != "r1" || !strings.HasPrefix(h.PolicyRev, "r1@") || b.LastActivation == nil || b.Error != "" {
		t.Fatalf("after r1: %+v %+v", h, b)
	}
	// A bundle signed by another key: refused, r1 stays, health names it.
	srv.Publish(bundletest.Build(t, bundletest.Bundle{Revision: "evil", Files: map[string]string{"p.rego": bundleRego("evil.example")}},
		bundletest.NewKey(t, "prod", "")))
	_ = e.PollBundle(ctx)
	h = health()
	if b := h.PolicyBundle; !b.Active || b.Revision != "r1" || b.ErrorStage != policy.BundleStageVerify || !strings.Contains(b.Error, "verify") || b.ErrorAt == nil {
		t.Fatalf("after a bad signature: %+v %+v", h, b)
	}
	// OPA's downloader forgets the ETag of a bundle its reader refused: the
	// next poll fetches it again, and it is refused again.
	_ = e.PollBundle(ctx)
	for _, m := range []struct {
		name, labels string
		want         float64
	}{
		{"airlock_policy_bundle_requests_total", `result="downloaded"`, 1},
		{"airlock_policy_bundle_requests_total", `result="not_modified"`, 0},
		{"airlock_policy_bundle_requests_total", `result="failed"`, 0},
		{"airlock_policy_bundle_refused_total", `stage="verify"`, 2},
		{"airlock_policy_bundle_refused_total", `stage="activate"`, 0},
		{"airlock_policy_bundle_activations_total", "", 1},
		{"airlock_policy_bundle_active", "", 1},
	} {
		got := metricValue(t, w.d, m.name, m.labels)
		if got != m.want {
			t.Errorf("%s{%s} = %v, want %v", m.name, m.labels, got, m.want)
		}
	}
	if got := metricValue(t, w.d, "airlock_policy_bundle_last_activation_timestamp_seconds", ""); got < float64(time.Now().Add(-time.Hour).Unix()) {
		t.Errorf("last activation timestamp %v", got)
	}
	// The audit log: r1 in force, then the bad bundle refused twice, each
	// naming the revision still in force.
	recs := w.audit.Kind(audit.KindPolicyBundle)
	if len(recs) != 3 {
		t.Fatalf("%d policy_bundle records, want 3: %+v", len(recs), recs)
	}
	if r := recs[0]; r.Reasons[0].ID != ReasonBundleActivated || r.PolicyRev != h.PolicyRev || string(r.Extra["revision"]) != `"r1"` || r.Decision != "" {
		t.Errorf("activation record %+v", r)
	}
	for _, r := range recs[1:] {
		if r.Reasons[0].ID != ReasonBundleRefused || r.PolicyRev != h.PolicyRev || string(r.Extra["stage"]) != `"verify"` || !strings.Contains(r.Error, "verify") {
			t.Errorf("refusal record %+v", r)
		}
	}
}

// metricValue reads one sample of the daemon's registry.
func metricValue(t *testing.T, d *Daemon, name, labels string) float64 {
	t.Helper()
	mfs, err := d.metrics.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			if strings.Join(ls, ",") != labels {
				continue
			}
			if m.Counter != nil {
				return m.GetCounter().GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no sample %s{%s}", name, labels)
	return 0
}

// TestPolicyBundleConfig: policy.bundle maps onto the engine's config, the
// key read from its file and the token from the secrets file, never put in
// the config itself.
func TestPolicyBundleConfig(t *testing.T) {
	dir := t.TempDir()
	key := bundletest.NewKey(t, "prod", "airlock")
	keyFile := filepath.Join(dir, "bundle.pub")
	if err := os.WriteFile(keyFile, []byte(key.PublicPEM), 0o644); err != nil {
		t.Fatal(err)
	}
	secretsFile := filepath.Join(dir, "secrets.yaml")
	t.Setenv("ALK_BUNDLE_TOKEN", "tok-s3cret-value")
	if err := os.WriteFile(secretsFile, []byte("secrets:\n- {id: bundle-token, env: ALK_BUNDLE_TOKEN}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Decode(strings.NewReader(`
policy:
  bundle:
    url: https://bundles.example/airlock.tar.gz
    long_polling_timeout: 30s
    token_secret: bundle-token
    signing: {public_key_file: ` + keyFile + `, key_id: prod, scope: airlock}
secrets: {file: ` + secretsFile + `}
`))
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{log: slog.New(slog.DiscardHandler)}
	if err := d.buildSecrets(cfg); err != nil {
		t.Fatal(err)
	}
	bc, err := d.policyBundle(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if bc.URL != "https://bundles.example/airlock.tar.gz" || bc.MinDelay != config.DefaultBundleMinDelay || bc.LongPollingTimeout != 30*time.Second ||
		bc.PersistDir != config.DefaultBundlePersistDir || bc.Signing.PublicKey != key.PublicPEM || bc.Signing.Scope != "airlock" {
		t.Fatalf("got %+v", bc)
	}
	if v, err := bc.Authorization(context.Background()); err != nil || v != "Bearer tok-s3cret-value" {
		t.Fatalf("authorization %q, %v", v, err)
	}
	cfg.Policy.Bundle.Signing.PublicKeyFile = filepath.Join(dir, "missing.pub")
	if _, err := d.policyBundle(cfg); err == nil || !strings.Contains(err.Error(), "public_key_file") {
		t.Fatalf("missing key file: got %v", err)
	}
	cfg.Policy.Bundle.Signing = nil
	cfg.Policy.Bundle.TokenSecret = "nope"
	if _, err := d.policyBundle(cfg); err == nil || !strings.Contains(err.Error(), `no secret "nope"`) {
		t.Fatalf("unknown secret: got %v", err)
	}
}

// TestRootBundleRevisionInAudit: a daemon whose policy comes from a signed
// bundle lets a task reach the host the bundle allows, and the audit records
// of its requests carry the bundle's revision; a host it does not allow sees
// nothing.
func TestRootBundleRevisionInAudit(t *testing.T) {
	key := bundletest.NewKey(t, "prod", "airlock")
	srv := bundletest.NewServer(t)
	srv.Publish(bundletest.Build(t, bundletest.Bundle{Revision: "2026-11-27.1", Files: map[string]string{
		"egress.rego": "package airlock.egress\n\ndeny contains {\"id\": \"bundle_denies_pypi\", \"msg\": \"not today\"} if input.destination.host == \"pypi.org\"\n",
	}}, key))
	persist := filepath.Join(t.TempDir(), "bundle")
	d, n, cfg, _ := newTestDaemon(t, func(c *config.Config) {
		c.Policy.Bundle = &config.Bundle{URL: srv.URL, MinDelay: config.Duration(time.Minute), MaxDelay: config.Duration(time.Minute),
			StartTimeout: config.Duration(20 * time.Second), PersistDir: persist,
			Signing: &config.BundleSigning{PublicKey: key.PublicPEM, KeyID: key.ID, Scope: key.Scope}}
	})
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close()
		}
	})
	rev := d.Engine().Rev()
	if !strings.HasPrefix(rev, "2026-11-27.1@") {
		t.Fatalf("daemon policy rev %q, want the bundle's", rev)
	}
	if _, err := os.Stat(filepath.Join(persist, "bundle.tar.gz")); err != nil {
		t.Fatalf("bundle not persisted: %v", err)
	}
	var stdout, stderr bytes.Buffer
	res, err := d.Run(context.Background(), Task{ID: uniqueID("alk-bundle"), Argv: []string{"sh", "-c",
		"curl -sS --max-time 20 -o /dev/null -w '%{http_code}' https://pypi.org/simple/; echo; exit 0"},
		Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || strings.Contains(stdout.String(), "200") {
		t.Fatalf("exit %d, stdout %q, stderr %q: pypi.org reached against the bundle", res.ExitStatus(), stdout.String(), stderr.String())
	}
	if got := n.pypi.Requests(); got != 0 {
		t.Fatalf("pypi.org saw %d requests, want 0 (the bundle denies it)", got)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	var decided, activated int
	for _, r := range audittest.ReadLog(t, cfg.Audit.File) {
		if r.Kind == audit.KindPolicyBundle && r.Reasons[0].ID == ReasonBundleActivated && r.PolicyRev == rev {
			activated++
		}
		if r.Mode == "" || r.Host != "pypi.org" {
			continue
		}
		decided++
		if r.PolicyRev != rev || r.Decision != "deny" || len(r.Reasons) == 0 || r.Reasons[0].ID != "bundle_denies_pypi" {
			t.Errorf("record %s %s %s rev %q reasons %v; want a deny by the bundle, rev %q", r.Kind, r.Decision, r.Host, r.PolicyRev, r.Reasons, rev)
		}
	}
	if decided == 0 || activated != 1 {
		t.Fatalf("%d decision records about pypi.org, %d activation records; want some and 1", decided, activated)
	}
}

// TestBundlePersistDirHidden: sandboxes never see the persisted bundle.
func TestBundlePersistDirHidden(t *testing.T) {
	cfg := config.Default()
	cfg.Policy.Bundle = &config.Bundle{URL: "https://b.example/x", PersistDir: "/var/lib/alk-bundle"}
	if h := hiddenPaths(Options{RunDir: "/run/airlock/run-1"}, cfg, ""); !slices.Contains(h, "/var/lib/alk-bundle") {
		t.Fatalf("hidden paths %v lack the bundle's persist dir", h)
	}
}

// TestRootBundleFailClosed: a daemon whose bundle server is down and that
// has no persisted bundle lets nothing out, not even the embedded presets'
// registries: pypi.org sees no connection, and the records say why.
func TestRootBundleFailClosed(t *testing.T) {
	srv := bundletest.NewServer(t)
	srv.SetDown(true)
	d, n, cfg, _ := newTestDaemon(t, func(c *config.Config) {
		c.Policy.Bundle = &config.Bundle{URL: srv.URL, MinDelay: config.Duration(time.Minute), MaxDelay: config.Duration(time.Minute),
			StartTimeout: config.Duration(20 * time.Second), PersistDir: filepath.Join(t.TempDir(), "bundle")}
	})
	closed := false
	t.Cleanup(func() {
		if !closed {
			d.Close()
		}
	})
	if got := d.Engine().Rev(); got != policy.RevNoPolicy {
		t.Fatalf("rev %q, want %q", got, policy.RevNoPolicy)
	}
	var stdout bytes.Buffer
	res, err := d.Run(context.Background(), Task{ID: uniqueID("alk-bundle-closed"), Argv: []string{"sh", "-c",
		"curl -sS --max-time 20 -o /dev/null -w '%{http_code}' https://pypi.org/simple/; echo; exit 0"}, Stdout: &stdout})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus() != 0 || strings.Contains(stdout.String(), "200") {
		t.Fatalf("exit %d, stdout %q: pypi.org reached with no policy", res.ExitStatus(), stdout.String())
	}
	if got := n.pypi.Conns(); got != 0 {
		t.Fatalf("pypi.org saw %d connections, want 0", got)
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	var decided int
	for _, r := range audittest.ReadLog(t, cfg.Audit.File) {
		if r.Mode == "" && r.PolicyRev == "" {
			continue
		}
		decided++
		if r.PolicyRev != policy.RevNoPolicy || r.Decision == "allow" {
			t.Errorf("record %s %s %s rev %q; want no allow, rev %q", r.Kind, r.Decision, r.Host, r.PolicyRev, policy.RevNoPolicy)
		}
	}
	if decided == 0 {
		t.Fatal("no decision record")
	}
}
