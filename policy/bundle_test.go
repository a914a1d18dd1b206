package policy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policies"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/bundletest"
)

// allowHost is a bundle policy allowing every kind but tcp to host.
func allowHost(host string) string {
	return `package airlock.egress

allow if {
	input.kind != "tcp"
	input.destination.host == "` + host + `"
}
`
}

// allowHostTest is a passing test for allowHost(host).
func allowHostTest(host string) string {
	return `package airlock.egress_test

import data.airlock

test_host_allowed if {
	airlock.decision.allowed with input as {"kind": "connect", "sandbox": {"id": "t"}, "destination": {"host": "` + host + `", "port": 443}}
}
`
}

func signedBundle(t *testing.T, key *bundletest.Key, rev, host string) []byte {
	t.Helper()
	return bundletest.Build(t, bundletest.Bundle{Revision: rev, Files: map[string]string{
		"policy.rego": allowHost(host), "policy_test.rego": allowHostTest(host)}}, key)
}

// bundleEngine builds an engine polling srv manually, verifying with key
// (none when nil), persisting in dir (none when empty).
func bundleEngine(t *testing.T, srv *bundletest.Server, key *bundletest.Key, dir string, edit ...func(*policy.BundleConfig)) *policy.Engine {
	t.Helper()
	bc := &policy.BundleConfig{URL: srv.URL, Manual: true, PersistDir: dir}
	if key != nil {
		bc.Signing = &policy.BundleSigning{PublicKey: key.PublicPEM, KeyID: key.ID, Scope: key.Scope}
	}
	for _, e := range edit {
		e(bc)
	}
	// A decision's deadline long enough for a loaded machine under -race.
	e, err := policy.New(policy.Config{Bundle: bc, EvalTimeout: 10 * time.Second}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

func poll(t *testing.T, e *policy.Engine) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.PollBundle(ctx); err != nil {
		t.Fatalf("poll: %v", err)
	}
}

func connectTo(host string) *policy.Input {
	return &policy.Input{Kind: policy.KindConnect, Sandbox: policy.Sandbox{ID: "sb"}, Destination: policy.Destination{Host: host, Port: 443}}
}

// allowedHosts reports which of hosts the engine lets a connect reach.
func allowedHosts(e *policy.Engine, hosts ...string) map[string]bool {
	out := map[string]bool{}
	for _, h := range hosts {
		d := e.Decide(context.Background(), connectTo(h))
		out[h] = d.Permit()
	}
	return out
}

func status(t *testing.T, e *policy.Engine) policy.BundleStatus {
	t.Helper()
	st, ok := e.BundleStatus()
	if !ok {
		t.Fatal("no bundle status")
	}
	return st
}

// TestBundleActivation: a signed bundle is activated, and a new one served
// later changes the decisions; the revision is the manifest's plus a hash.
func TestBundleActivation(t *testing.T) {
	key := bundletest.NewKey(t, "airlock-test", "")
	srv := bundletest.NewServer(t)
	srv.Publish(signedBundle(t, key, "v1", "one.example"))
	e := bundleEngine(t, srv, key, "")
	poll(t, e)
	if got := allowedHosts(e, "one.example", "two.example"); !got["one.example"] || got["two.example"] {
		t.Fatalf("after v1: got %v, want one.example only", got)
	}
	if !strings.HasPrefix(e.Rev(), "v1@") || len(e.Rev()) != len("v1@")+16 {
		t.Fatalf("rev %q, want v1@<16 hex>", e.Rev())
	}
	revV1 := e.Rev()
	changed := e.Changed() // closed by the activation of v2: the gateway re-decides open connections
	srv.Publish(signedBundle(t, key, "v2", "two.example"))
	poll(t, e)
	select {
	case <-changed:
	default:
		t.Fatal("Changed not closed by the activation of v2")
	}
	if got := allowedHosts(e, "one.example", "two.example"); got["one.example"] || !got["two.example"] {
		t.Fatalf("after v2: got %v, want two.example only", got)
	}
	d := e.Decide(context.Background(), connectTo("two.example"))
	if !strings.HasPrefix(d.Rev, "v2@") || d.Rev == revV1 {
		t.Fatalf("decision rev %q, want v2@...", d.Rev)
	}
	st := status(t, e)
	if !st.Active || st.Revision != "v2" || st.PolicyRev != e.Rev() || st.Activations != 2 || st.Downloaded != 2 || st.LastError != "" {
		t.Fatalf("status %+v", st)
	}
	if st.LastActivation.IsZero() || st.LastDownload.IsZero() || st.LastRequest.IsZero() {
		t.Fatalf("status times unset: %+v", st)
	}
	// The embedded default policy still runs underneath: a preset registry.
	if got := allowedHosts(e, "pypi.org"); !got["pypi.org"] {
		t.Fatal("pypi.org refused: the embedded library and presets are not under the bundle")
	}
}

// TestBundleNotModified: an unchanged bundle is answered 304 (the request
// carried the ETag) and nothing is activated again; a server without ETags
// sends the same bundle again, which is not activated again either.
func TestBundleNotModified(t *testing.T) {
	for _, etags := range []bool{true, false} {
		name := "etag"
		if !etags {
			name = "no etag"
		}
		t.Run(name, func(t *testing.T) {
			key := bundletest.NewKey(t, "k", "")
			srv := bundletest.NewServer(t)
			srv.SetETags(etags)
			srv.Publish(signedBundle(t, key, "v1", "one.example"))
			e := bundleEngine(t, srv, key, "")
			poll(t, e)
			rev := e.Rev()
			for range 3 {
				poll(t, e)
			}
			st, got := status(t, e), srv.Stats()
			if etags {
				if got.OK != 1 || got.NotModified != 3 {
					t.Fatalf("server answered %+v, want 1 bundle and 3 not modified", got)
				}
				if st.NotModified != 3 || st.Downloaded != 1 {
					t.Fatalf("status %+v, want 3 not modified, 1 downloaded", st)
				}
			} else if got.OK != 4 || got.NotModified != 0 {
				t.Fatalf("server answered %+v, want 4 bundles", got)
			}
			if st.Activations != 1 || e.Rev() != rev || st.LastError != "" {
				t.Fatalf("activations %d, rev %q (was %q), error %q; want 1 activation, same rev", st.Activations, e.Rev(), rev, st.LastError)
			}
		})
	}
}

// TestBundleBadSignatureRefused: bundles whose signature does not hold are
// refused before they are used: the old policy stays, the status names the
// error, and the persisted bundle is still the good one.
func TestBundleBadSignatureRefused(t *testing.T) {
	key := bundletest.NewKey(t, "prod", "airlock")
	tests := []struct {
		name    string
		bundle  func(t *testing.T) []byte
		wantErr string
	}{
		{name: "signed by another key with the same id", bundle: func(t *testing.T) []byte {
			return signedBundle(t, bundletest.NewKey(t, "prod", "airlock"), "evil", "evil.example")
		}, wantErr: "verify"},
		{name: "unsigned", bundle: func(t *testing.T) []byte {
			return signedBundle(t, nil, "evil", "evil.example")
		}, wantErr: "missing .signatures.json"},
		{name: "file changed after signing", bundle: func(t *testing.T) []byte {
			return bundletest.Build(t, bundletest.Bundle{Revision: "evil", Files: map[string]string{"policy.rego": allowHost("one.example")},
				TamperAfterSign: map[string]string{"policy.rego": allowHost("evil.example")}}, key)
		}, wantErr: "digest mismatch"},
		{name: "wrong scope", bundle: func(t *testing.T) []byte {
			other := *key // the real key, another scope claim
			other.Scope = "staging"
			return signedBundle(t, &other, "evil", "evil.example")
		}, wantErr: "scope mismatch"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := bundletest.NewServer(t)
			srv.Publish(signedBundle(t, key, "v1", "one.example"))
			dir := t.TempDir()
			e := bundleEngine(t, srv, key, dir)
			poll(t, e)
			rev := e.Rev()
			persisted, err := os.ReadFile(filepath.Join(dir, "bundle.tar.gz"))
			if err != nil {
				t.Fatal(err)
			}
			srv.Publish(tt.bundle(t))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = e.PollBundle(ctx) // the download's error: recorded in the status
			if got := allowedHosts(e, "one.example", "evil.example"); !got["one.example"] || got["evil.example"] {
				t.Fatalf("after the bad bundle: got %v, want the old policy (one.example only)", got)
			}
			st := status(t, e)
			if e.Rev() != rev || st.Revision != "v1" || st.RefusedVerify != 1 || st.LastErrorStage != policy.BundleStageVerify ||
				!strings.Contains(st.LastError, tt.wantErr) {
				t.Fatalf("rev %q (want %q), status %+v; want a verify error containing %q", e.Rev(), rev, st, tt.wantErr)
			}
			now, err := os.ReadFile(filepath.Join(dir, "bundle.tar.gz"))
			if err != nil || !bytes.Equal(now, persisted) {
				t.Fatalf("the persisted bundle changed (%v)", err)
			}
		})
	}
}

// TestBundleBrokenKeepsOld: a bundle that does not compile, breaks strict
// mode or fails its own tests keeps the old policy; served again unchanged
// it is not compiled again.
func TestBundleBrokenKeepsOld(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		data    map[string]any
		wantErr string
		stage   string // default activate
	}{
		{name: "data the engine computes", files: map[string]string{"policy.rego": allowHost("one.example")},
			data: map[string]any{"airlock": map[string]any{"hosts": map[string]any{"allow": map[string]any{"evil.example": true}}}}, wantErr: "computed by the engine"},
		// OPA's reader parses the modules: a parse error refuses the bundle
		// before activation.
		{name: "parse error", files: map[string]string{"policy.rego": "package airlock.egress\n\nallow if {\n"}, wantErr: "rego_parse_error", stage: policy.BundleStageVerify},
		{name: "undefined function", files: map[string]string{"policy.rego": "package airlock.egress\n\nallow if nothing_here(input.kind)\n"}, wantErr: "undefined function"},
		{name: "input field not in the schema", files: map[string]string{"policy.rego": "package airlock.egress\n\nallow if input.destination.hostname == \"x\"\n"}, wantErr: "hostname"},
		{name: "failing test", files: map[string]string{"policy.rego": allowHost("evil.example"), "policy_test.rego": allowHostTest("other.example")}, wantErr: "test(s) failed"},
		{name: "denied builtin", files: map[string]string{"policy.rego": "package airlock.egress\n\nallow if http.send({\"method\": \"GET\", \"url\": \"http://127.0.0.1/\"}).status_code == 200\n"}, wantErr: "http.send"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key := bundletest.NewKey(t, "k", "")
			srv := bundletest.NewServer(t)
			srv.SetETags(false) // the same bundle is sent again, and must not be compiled again
			srv.Publish(signedBundle(t, key, "v1", "one.example"))
			e := bundleEngine(t, srv, key, "")
			poll(t, e)
			rev := e.Rev()
			if tt.stage == "" {
				tt.stage = policy.BundleStageActivate
			}
			srv.Publish(bundletest.Build(t, bundletest.Bundle{Revision: "v2", Files: tt.files, Data: tt.data}, key))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_ = e.PollBundle(ctx) // a reader's error is the download's: in the status
			st := status(t, e)
			if e.Rev() != rev || st.Revision != "v1" || st.LastErrorStage != tt.stage || !strings.Contains(st.LastError, tt.wantErr) {
				t.Fatalf("rev %q (want %q), status %+v; want a %s error containing %q", e.Rev(), rev, st, tt.stage, tt.wantErr)
			}
			if got := allowedHosts(e, "one.example", "evil.example"); !got["one.example"] || got["evil.example"] {
				t.Fatalf("after the broken bundle: got %v, want the old policy", got)
			}
			_ = e.PollBundle(ctx)
			if st2 := status(t, e); tt.stage == policy.BundleStageActivate && (st2.RefusedActivate != 2 || !strings.Contains(st2.LastError, "refused before")) {
				t.Fatalf("served again: status %+v, want it refused without compiling", st2)
			}
			// A good bundle after the broken one activates and clears the error.
			srv.Publish(signedBundle(t, key, "v3", "three.example"))
			poll(t, e)
			if st3 := status(t, e); st3.Revision != "v3" || st3.LastError != "" || !allowedHosts(e, "three.example")["three.example"] {
				t.Fatalf("after a good bundle: status %+v", st3)
			}
		})
	}
}

// TestBundleRestartFromPersisted: a restart with the server down starts from
// the bundle persisted by the last run, verified again; a persisted bundle
// changed on disk is refused and the engine denies everything.
func TestBundleRestartFromPersisted(t *testing.T) {
	key := bundletest.NewKey(t, "k", "")
	srv := bundletest.NewServer(t)
	srv.Publish(signedBundle(t, key, "v1", "one.example"))
	dir := t.TempDir()
	e1 := bundleEngine(t, srv, key, dir)
	poll(t, e1)
	rev := e1.Rev()
	e1.Close()
	srv.Close() // the server is down from here

	// Not manual: the real loop starts, and New does not wait with a good
	// persisted bundle.
	e2 := bundleEngine(t, srv, key, dir, func(c *policy.BundleConfig) { c.Manual = false })
	if e2.Rev() != rev {
		t.Fatalf("rev after restart %q, want the persisted %q", e2.Rev(), rev)
	}
	if got := allowedHosts(e2, "one.example", "evil.example"); !got["one.example"] || got["evil.example"] {
		t.Fatalf("after restart: got %v, want the persisted policy", got)
	}
	if st := status(t, e2); !st.Active || !st.FromDisk || st.Revision != "v1" {
		t.Fatalf("status %+v, want the persisted v1 active from disk", st)
	}

	t.Run("tampered on disk", func(t *testing.T) {
		tdir := t.TempDir()
		evil := bundletest.Build(t, bundletest.Bundle{Revision: "v1", Files: map[string]string{"policy.rego": allowHost("one.example")},
			TamperAfterSign: map[string]string{"policy.rego": allowHost("evil.example")}}, key)
		if err := os.WriteFile(filepath.Join(tdir, "bundle.tar.gz"), evil, 0o600); err != nil {
			t.Fatal(err)
		}
		e := bundleEngine(t, srv, key, tdir)
		if got := allowedHosts(e, "one.example", "evil.example", "pypi.org"); got["one.example"] || got["evil.example"] || got["pypi.org"] {
			t.Fatalf("a tampered persisted bundle: got %v, want everything denied", got)
		}
		if st := status(t, e); st.Active || !strings.Contains(st.LastError, "digest mismatch") {
			t.Fatalf("status %+v, want inactive with a digest error", st)
		}
	})
}

// TestBundleFailClosed: with no persisted bundle and the server down, every
// decision is the policy_error deny, the embedded presets included.
func TestBundleFailClosed(t *testing.T) {
	srv := bundletest.NewServer(t)
	srv.SetDown(true)
	e := bundleEngine(t, srv, nil, t.TempDir(), func(c *policy.BundleConfig) {
		c.Manual, c.StartTimeout = false, 10*time.Second
	})
	// New waited for the first download, which failed.
	if got := srv.Stats().Unavailable; got < 1 {
		t.Fatalf("the server saw %d requests, want the start's download", got)
	}
	for _, in := range []*policy.Input{connectTo("pypi.org"), connectTo("one.example"),
		{Kind: policy.KindDNS, Sandbox: policy.Sandbox{ID: "sb"}, Destination: policy.Destination{Host: "pypi.org", Port: 53}, DNS: &policy.DNS{QName: "pypi.org", QType: "A"}}} {
		d := e.Decide(context.Background(), in)
		if d.Permit() || d.Allowed || !errors.Is(d.Err, policy.ErrPolicy) || d.Reasons[0].ID != policy.ReasonPolicyError || d.Rev != policy.RevNoPolicy {
			t.Fatalf("%s %s: got %+v, want the fail-closed deny", in.Kind, in.Destination.Host, d)
		}
	}
	st := status(t, e)
	if st.Active || st.LastErrorStage != policy.BundleStageDownload || st.Failed < 1 {
		t.Fatalf("status %+v, want inactive with a download error", st)
	}
	if err := e.Reload(context.Background()); err == nil {
		t.Fatal("Reload with no bundle succeeded")
	}
}

// TestBundleLongPolling: with long polling the server holds the request and
// a new bundle is activated when published, long before the 60 s poll delay.
func TestBundleLongPolling(t *testing.T) {
	key := bundletest.NewKey(t, "k", "")
	srv := bundletest.NewServer(t)
	srv.SetLongPolling(true)
	srv.Publish(signedBundle(t, key, "v1", "one.example"))
	e := bundleEngine(t, srv, key, "", func(c *policy.BundleConfig) {
		c.Manual = false
		c.MinDelay, c.MaxDelay = 60*time.Second, 60*time.Second
		c.LongPollingTimeout = 30 * time.Second
	})
	if !strings.HasPrefix(e.Rev(), "v1@") {
		t.Fatalf("rev %q after start, want v1", e.Rev())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !srv.WaitHeld(ctx) {
		t.Fatal("no request was held")
	}
	srv.Publish(signedBundle(t, key, "v2", "two.example"))
	for !strings.HasPrefix(e.Rev(), "v2@") {
		select {
		case <-ctx.Done():
			t.Fatalf("v2 not activated; rev %q, server %+v", e.Rev(), srv.Stats())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if got := allowedHosts(e, "two.example"); !got["two.example"] {
		t.Fatal("two.example refused after v2")
	}
}

// TestBundleAuthorization: the credential is sent with each request and
// appears in no log line and no status.
func TestBundleAuthorization(t *testing.T) {
	const token = "Bearer alk-s3cret-bundle-token"
	srv := bundletest.NewServer(t)
	srv.Publish(signedBundle(t, nil, "v1", "one.example"))
	var logs bytes.Buffer
	bc := &policy.BundleConfig{URL: srv.URL, Manual: true,
		Authorization: func(context.Context) (string, error) { return token, nil }}
	e, err := policy.New(policy.Config{Bundle: bc}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	poll(t, e)
	srv.SetDown(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = e.PollBundle(ctx)
	if got := srv.Authorizations(); len(got) != 2 || got[0] != token || got[1] != token {
		t.Fatalf("server saw Authorization %q, want the token twice", got)
	}
	st := status(t, e)
	if strings.Contains(logs.String(), "s3cret") || strings.Contains(st.LastError, "s3cret") {
		t.Fatalf("the token leaked: logs %s, status %+v", logs.String(), st)
	}
	if !strings.Contains(logs.String(), "policy bundle activated") {
		t.Fatalf("logs lack the activation: %s", logs.String())
	}
	// A credential that cannot be read fails the request, naming no value.
	bc2 := &policy.BundleConfig{URL: srv.URL, Manual: true,
		Authorization: func(context.Context) (string, error) { return "", errors.New("secret bundle-token: file missing") }}
	e2, err := policy.New(policy.Config{Bundle: bc2}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer e2.Close()
	srv.SetDown(false)
	before := srv.Stats().Requests
	_ = e2.PollBundle(ctx)
	if st := status(t, e2); st.Active || !strings.Contains(st.LastError, "bundle credential") || srv.Stats().Requests != before {
		t.Fatalf("status %+v, server requests %d (was %d): want the request not sent", st, srv.Stats().Requests, before)
	}
}

// TestBundleConfigErrors: each bad setting is refused naming its field.
func TestBundleConfigErrors(t *testing.T) {
	key := bundletest.NewKey(t, "k", "")
	good := func() *policy.BundleConfig {
		return &policy.BundleConfig{URL: "https://bundles.example/airlock.tar.gz", Manual: true}
	}
	tests := []struct {
		name    string
		cfg     policy.Config
		edit    func(*policy.BundleConfig)
		wantErr string
	}{
		{name: "no url", edit: func(c *policy.BundleConfig) { c.URL = "" }, wantErr: "bundle.url: empty"},
		{name: "ftp", edit: func(c *policy.BundleConfig) { c.URL = "ftp://x/b.tar.gz" }, wantErr: "scheme must be http or https"},
		{name: "credentials in url", edit: func(c *policy.BundleConfig) { c.URL = "https://u:p@x/b.tar.gz" }, wantErr: "carries credentials"},
		{name: "no host", edit: func(c *policy.BundleConfig) { c.URL = "https:///b.tar.gz" }, wantErr: "has no host"},
		{name: "fractional delay", edit: func(c *policy.BundleConfig) { c.MinDelay, c.MaxDelay = 1500*time.Millisecond, 2*time.Second }, wantErr: "bundle.min_delay"},
		{name: "max below min", edit: func(c *policy.BundleConfig) { c.MinDelay, c.MaxDelay = 10*time.Second, 5*time.Second }, wantErr: "bundle.max_delay"},
		{name: "long poll under a second", edit: func(c *policy.BundleConfig) { c.LongPollingTimeout = time.Millisecond }, wantErr: "bundle.long_polling_timeout"},
		{name: "with dir", cfg: policy.Config{Dir: "/tmp"}, wantErr: "cannot be combined with dir"},
		{name: "no key id", edit: func(c *policy.BundleConfig) { c.Signing = &policy.BundleSigning{PublicKey: key.PublicPEM} }, wantErr: "key_id"},
		{name: "not pem", edit: func(c *policy.BundleConfig) { c.Signing = &policy.BundleSigning{PublicKey: "abc", KeyID: "k"} }, wantErr: "not PEM"},
		{name: "hmac", edit: func(c *policy.BundleConfig) {
			c.Signing = &policy.BundleSigning{PublicKey: key.PublicPEM, KeyID: "k", Algorithm: "HS256"}
		}, wantErr: "HMAC"},
		{name: "rsa algorithm for an ec key", edit: func(c *policy.BundleConfig) {
			c.Signing = &policy.BundleSigning{PublicKey: key.PublicPEM, KeyID: "k", Algorithm: "RS256"}
		}, wantErr: "does not fit the EC key"},
		{name: "ca file missing", edit: func(c *policy.BundleConfig) { c.CAFile = "/nonexistent/alk-ca.pem" }, wantErr: "bundle.ca_file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bc := good()
			if tt.edit != nil {
				tt.edit(bc)
			}
			cfg := tt.cfg
			cfg.Bundle = bc
			e, err := policy.New(cfg, slog.New(slog.DiscardHandler))
			if err == nil {
				e.Close()
				t.Fatalf("no error, want one containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestBundleCarriesPerSandboxData: a bundle's data.json is visible to its
// rules as in a policy directory. The team-allowlists example (rules keyed
// by the sandbox's team label, lists in data.json) shipped as a bundle runs
// its own tests at activation, decides by label, and a later bundle that
// only changes the data changes what a team reaches.
func TestBundleCarriesPerSandboxData(t *testing.T) {
	const ex = "examples/team-allowlists/"
	files := map[string]string{}
	for _, f := range []string{"policy.rego", "policy_test.rego"} {
		src, err := fs.ReadFile(policies.FS, ex+f)
		if err != nil {
			t.Fatal(err)
		}
		files[f] = string(src)
	}
	raw, err := fs.ReadFile(policies.FS, ex+"data.json")
	if err != nil {
		t.Fatal(err)
	}
	var data map[string]any
	if err := json.Unmarshal(raw, &data); err != nil {
		t.Fatal(err)
	}
	key := bundletest.NewKey(t, "k", "")
	srv := bundletest.NewServer(t)
	srv.Publish(bundletest.Build(t, bundletest.Bundle{Revision: "teams-1", Files: files, Data: data}, key))
	e := bundleEngine(t, srv, key, "")
	poll(t, e)
	team := func(name, host string) bool {
		in := connectTo(host)
		if name != "" {
			in.Sandbox.Labels = map[string]string{"team": name}
		}
		d := e.Decide(context.Background(), in)
		return d.Permit()
	}
	if !team("ml", "huggingface.co") || team("web", "huggingface.co") || team("", "huggingface.co") || !team("web", "api.stripe.com") {
		t.Fatal("teams-1: the lists by label are not what data.json says")
	}
	if team("ml", "new-model-hub.example") {
		t.Fatal("teams-1: an unlisted host is reachable")
	}
	// Only the data changes: the ML team gets one more host.
	ml := data["team_hosts"].(map[string]any)["ml"].(map[string]any)
	ml["new-model-hub.example"] = true
	srv.Publish(bundletest.Build(t, bundletest.Bundle{Revision: "teams-2", Files: files, Data: data}, key))
	poll(t, e)
	if !strings.HasPrefix(e.Rev(), "teams-2@") || !team("ml", "new-model-hub.example") || team("web", "new-model-hub.example") {
		t.Fatalf("teams-2 (rev %q): the new host is not the ML team's alone", e.Rev())
	}
}

// TestBundleTLS: over https the server's certificate must chain to the
// system roots or ca_file; an unknown one fails the download and nothing is
// activated.
func TestBundleTLS(t *testing.T) {
	srv := bundletest.NewTLSServer(t)
	srv.Publish(signedBundle(t, nil, "v1", "one.example"))
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, srv.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	untrusted := bundleEngine(t, srv, nil, "")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_ = untrusted.PollBundle(ctx)
	if st := status(t, untrusted); st.Active || st.LastErrorStage != policy.BundleStageDownload || !strings.Contains(st.LastError, "certificate") {
		t.Fatalf("untrusted server: status %+v, want a certificate error", st)
	}
	if got := srv.Stats().OK; got != 0 {
		t.Fatalf("the server sent %d bundles over an untrusted connection", got)
	}
	trusted := bundleEngine(t, srv, nil, "", func(c *policy.BundleConfig) { c.CAFile = caFile })
	poll(t, trusted)
	if st := status(t, trusted); !st.Active || st.Revision != "v1" {
		t.Fatalf("with ca_file: status %+v, want v1 active", st)
	}
}
