package policy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/download"
	"github.com/open-policy-agent/opa/v1/logging"
	"github.com/open-policy-agent/opa/v1/plugins"
	"github.com/open-policy-agent/opa/v1/plugins/rest"

	"github.com/airlock-dev/airlock/oplog"
)

// The bundle source. OPA's downloader (github.com/open-policy-agent/opa/v1/
// download) does the HTTP side: its polling loop with jitter and backoff,
// If-None-Match with the last ETag, long polling, and reading the tarball
// with bundle.Reader, which verifies the signature and every file's digest
// before it parses anything. What it hands over goes through the engine's own
// activation (activate): the bundle's files overlay the embedded tree as a
// policy directory would, compile in strict mode, its *_test.rego must pass,
// and only then is the snapshot swapped and the tarball persisted. OPA's bundle
// plugin is not used: it activates into OPA's own store and compiler, without
// airlock's strict mode, schema, builtin restrictions and tests, and would
// call a bundle active that the engine refused.

// Log field names of the bundle source.
const (
	logURL      = "url"
	logRevision = "bundle_revision"
	logStage    = "stage"
	logFromDisk = "from_disk"
)

// Stages at which a bundle is refused (BundleStatus.LastErrorStage).
const (
	// BundleStageDownload: the request failed (connection, HTTP status).
	BundleStageDownload = "download"
	// BundleStageVerify: the tarball was refused before it became a policy
	// (signature, digest, format, size).
	BundleStageVerify = "verify"
	// BundleStageActivate: the policy did not build, compile or pass its
	// own tests; the current one stays.
	BundleStageActivate = "activate"
	// BundleStagePersist: the activated bundle could not be kept on disk (it
	// stays active).
	BundleStagePersist = "persist"
)

// errNoPolicy is the error of every decision while a bundle source has none.
var errNoPolicy = errors.New("no policy bundle active (none downloaded yet and none persisted): denying everything")

// BundleStatus is what a bundle source has done (GET /v1/health, metrics).
type BundleStatus struct {
	URL string
	// Active says a bundle is in force; without one every decision is denied.
	Active bool
	// Revision is the active bundle's manifest revision; PolicyRev the
	// engine's revision built from it (what audit records carry).
	Revision  string
	PolicyRev string
	ETag      string
	// FromDisk: the active bundle is the persisted one loaded at start.
	FromDisk bool
	// LastRequest is the last request the server answered (200 or 304),
	// LastDownload the last bundle received, LastActivation the last one
	// swapped in.
	LastRequest    time.Time
	LastDownload   time.Time
	LastActivation time.Time
	// LastError is the last failure and LastErrorStage its BundleStage*;
	// cleared by the next activation, or by a 304 for the active bundle.
	LastError      string
	LastErrorStage string
	LastErrorAt    time.Time
	// Counters since start.
	Downloaded      uint64 // 200 with a bundle
	NotModified     uint64 // 304
	Failed          uint64 // requests that failed
	RefusedVerify   uint64 // bundles refused by verification
	RefusedActivate uint64 // bundles refused at activation
	Activations     uint64 // bundles swapped in (the persisted one at start included)
}

// BundleEvent is a bundle put in force or refused (BundleConfig.Notify).
type BundleEvent struct {
	// Activated: the bundle is in force; else it was refused at Stage.
	Activated bool
	Stage     string
	// Revision is the bundle's manifest revision, when it was read.
	Revision string
	// PolicyRev is the revision in force after the event.
	PolicyRev string
	FromDisk  bool
	Err       error
}

// bundleContent is a verified bundle, as the files of a policy unit.
type bundleContent struct {
	revision string
	etag     string
	files    map[string]unitFile
	hash     string // of files, to know a bundle already refused
	raw      []byte // the tarball, persisted once active
}

// bundleSource downloads, activates and persists bundles for one engine.
type bundleSource struct {
	e   *Engine
	cfg BundleConfig
	bvc *bundle.VerificationConfig
	dl  *download.Downloader

	// Guarded by e.mu (activations are serialized with Reload).
	active      *bundleContent
	refusedHash string

	mu sync.Mutex // guards st
	st BundleStatus

	first     chan struct{} // closed after the first download outcome
	firstOnce sync.Once
}

// startBundle builds the engine's bundle source: the persisted bundle when
// there is a good one, else the fail-closed snapshot; then the downloader.
// With nothing persisted it waits up to StartTimeout for the first download.
func (e *Engine) startBundle() error {
	s, err := newBundleSource(e, *e.cfg.Bundle)
	if err != nil {
		return err
	}
	e.bundle = s
	if s.cfg.Signing == nil {
		e.log.Warn("policy bundles are not verified: whoever serves the URL, or can change what it serves, decides egress; set bundle signing",
			logURL, RedactBundleURL(s.cfg.URL))
	}
	e.cur.Store(&snapshot{rev: RevNoPolicy, unavailable: errNoPolicy})
	s.loadPersisted()
	if s.cfg.Manual {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.dl.Start(ctx)
	e.stopMu.Lock()
	e.stop = func() {
		s.dl.Stop(ctx)
		cancel()
	}
	e.stopMu.Unlock()
	if e.cur.Load().unavailable != nil {
		t := time.NewTimer(s.cfg.StartTimeout)
		defer t.Stop()
		select {
		case <-s.first:
		case <-t.C:
			e.log.Error("no policy bundle yet, denying everything until one is activated", logURL, RedactBundleURL(s.cfg.URL), "waited", s.cfg.StartTimeout)
		}
	}
	return nil
}

func newBundleSource(e *Engine, cfg BundleConfig) (*bundleSource, error) {
	s := &bundleSource{e: e, cfg: cfg, first: make(chan struct{}), st: BundleStatus{URL: RedactBundleURL(cfg.URL)}}
	if sg := cfg.Signing; sg != nil {
		keys := map[string]*bundle.KeyConfig{sg.KeyID: {Key: sg.PublicKey, Algorithm: sg.Algorithm, Scope: sg.Scope}}
		s.bvc = bundle.NewVerificationConfig(keys, sg.KeyID, sg.Scope, nil)
	}
	client, err := newBundleClient(cfg)
	if err != nil {
		return nil, err
	}
	u, _ := url.Parse(cfg.URL) // validated by withDefaults
	trigger := plugins.TriggerPeriodic
	if cfg.Manual {
		trigger = plugins.TriggerManual
	}
	minS, maxS := int64(cfg.MinDelay/time.Second), int64(cfg.MaxDelay/time.Second)
	dc := download.Config{Trigger: &trigger, Polling: download.PollingConfig{MinDelaySeconds: &minS, MaxDelaySeconds: &maxS}}
	if cfg.LongPollingTimeout > 0 {
		lp := int64(cfg.LongPollingTimeout / time.Second)
		dc.Polling.LongPollingTimeoutSeconds = &lp
	}
	if err := dc.ValidateAndInjectDefaults(); err != nil {
		return nil, fmt.Errorf("policy: bundle: %w", err)
	}
	s.dl = download.New(dc, client, strings.TrimPrefix(u.RequestURI(), "/")).
		WithCallback(s.update).
		WithBundleVerificationConfig(s.bvc).
		WithSizeLimitBytes(MaxBundleFileSize).
		WithBundlePersistence(true). // hands over the raw tarball; refuses delta bundles
		WithBundleParserOpts(ast.ParserOptions{RegoVersion: ast.RegoV1, ProcessAnnotation: true})
	return s, nil
}

// authName names the one auth plugin the rest client is given.
const authName = "airlock"

// bundleAuth is the rest client's HTTP side: airlock's own transport (the
// server's CA, timeouts) and the Authorization header, asked for per request.
type bundleAuth struct {
	roots *x509.CertPool // nil: the system roots
	authz func(ctx context.Context) (string, error)
	// longPoll bounds a long poll's wait for headers (the downloader asks for
	// none): the server's promised wait plus longPollGrace.
	longPoll time.Duration
}

// longPollGrace is how much longer than the long-polling timeout a held
// request may wait for its answer before it fails.
const longPollGrace = 10 * time.Second

var _ rest.HTTPAuthPlugin = (*bundleAuth)(nil)

// NewClient builds a client for cfg; the rest client calls it again when it
// changes the response header timeout (0 while a long poll waits).
func (a *bundleAuth) NewClient(cfg rest.Config) (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: a.roots, MinVersion: tls.VersionTLS12}
	if cfg.ResponseHeaderTimeoutSeconds != nil {
		t.ResponseHeaderTimeout = time.Duration(*cfg.ResponseHeaderTimeoutSeconds) * time.Second
	}
	if t.ResponseHeaderTimeout == 0 {
		// Never unbounded: a server that holds a long poll past its promise
		// would stop every later update.
		t.ResponseHeaderTimeout = a.longPoll + longPollGrace
	}
	return &http.Client{Transport: cappedTransport{next: t, limit: MaxBundleSize}}, nil
}

// Prepare sets the Authorization header; an error names no value.
func (a *bundleAuth) Prepare(r *http.Request) error {
	if a.authz == nil {
		return nil
	}
	v, err := a.authz(r.Context())
	if err != nil {
		return fmt.Errorf("bundle credential: %w", err)
	}
	r.Header.Set("Authorization", v)
	return nil
}

func newBundleClient(cfg BundleConfig) (rest.Client, error) {
	auth := &bundleAuth{authz: cfg.Authorization, longPoll: cfg.LongPollingTimeout}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return rest.Client{}, fmt.Errorf("policy: bundle.ca_file: %w", err)
		}
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool()
		}
		if !roots.AppendCertsFromPEM(pem) {
			return rest.Client{}, fmt.Errorf("policy: bundle.ca_file: %s holds no PEM certificate", cfg.CAFile)
		}
		auth.roots = roots
	}
	u, _ := url.Parse(cfg.URL)
	name := authName
	rc := map[string]any{"name": "airlock-bundle", "url": u.Scheme + "://" + u.Host, "credentials": map[string]any{"plugin": name}}
	j, err := json.Marshal(rc)
	if err != nil {
		return rest.Client{}, err
	}
	// OPA's logger stays silent: the source logs every outcome itself, and
	// nothing of a request's headers is ever logged.
	return rest.New(j, nil,
		rest.AuthPluginLookup(func(string) rest.HTTPAuthPlugin { return auth }),
		rest.Logger(logging.NewNoOpLogger()))
}

// update is the downloader's callback, called once per request outcome.
func (s *bundleSource) update(ctx context.Context, u download.Update) error {
	defer s.firstOnce.Do(func() { close(s.first) })
	now := time.Now()
	switch {
	case u.Error != nil:
		stage := BundleStageVerify
		var he download.HTTPError
		// The downloader wraps a failed request as "request failed: ..."; any
		// other error is the reader's (signature, digest, format, size).
		if errors.As(u.Error, &he) || strings.HasPrefix(u.Error.Error(), "request failed") {
			stage = BundleStageDownload
		}
		s.fail(now, stage, "", u.Error)
		return nil
	case u.Bundle == nil:
		s.mu.Lock()
		s.st.LastRequest = now
		s.st.NotModified++
		if u.ETag != "" && u.ETag == s.st.ETag && s.st.Active {
			s.st.LastError, s.st.LastErrorStage, s.st.LastErrorAt = "", "", time.Time{}
		}
		s.mu.Unlock()
		return nil
	}
	s.mu.Lock()
	s.st.LastRequest, s.st.LastDownload = now, now
	s.st.Downloaded++
	s.mu.Unlock()
	c, err := contentOf(u.Bundle, u.Raw, u.ETag)
	if err != nil {
		s.fail(now, BundleStageVerify, u.Bundle.Manifest.Revision, err)
		return nil
	}
	_ = s.activate(ctx, c, false) // activate records and logs its failure
	return nil
}

// fail records a failure of stage; revision is the bundle's when known.
func (s *bundleSource) fail(now time.Time, stage, revision string, err error) {
	err = redactedError{err, redactQuery(s.cfg.URL, err.Error())}
	s.mu.Lock()
	switch stage {
	case BundleStageDownload:
		s.st.Failed++
	case BundleStageVerify:
		s.st.RefusedVerify++
	case BundleStageActivate:
		s.st.RefusedActivate++
	}
	s.st.LastError, s.st.LastErrorStage, s.st.LastErrorAt = err.Error(), stage, now
	rev := s.st.PolicyRev
	s.mu.Unlock()
	msg := "policy bundle refused, keeping current policy"
	switch stage {
	case BundleStageDownload:
		msg = "policy bundle download failed, keeping current policy"
	case BundleStagePersist:
		msg = "policy bundle activated but not persisted for the next start"
	}
	s.e.log.Error(msg, logURL, RedactBundleURL(s.cfg.URL), logStage, stage, oplog.PolicyRevKey, rev, oplog.ErrorKey, err)
	if stage != BundleStageDownload {
		s.notify(BundleEvent{Stage: stage, Revision: revision, PolicyRev: s.e.cur.Load().rev, Err: err})
	}
}

// notify calls BundleConfig.Notify, if set.
func (s *bundleSource) notify(ev BundleEvent) {
	if s.cfg.Notify != nil {
		s.cfg.Notify(ev)
	}
}

// activate compiles and tests c as the policy directory and swaps it in; on
// failure the current snapshot stays. A bundle refused once is not compiled
// again while it is served unchanged.
func (s *bundleSource) activate(ctx context.Context, c *bundleContent, fromDisk bool) error {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	if s.active != nil && c.hash == s.active.hash {
		s.mu.Lock()
		s.st.ETag = c.etag // the same policy under a new ETag: nothing to swap
		s.mu.Unlock()
		return nil
	}
	if c.hash == s.refusedHash {
		err := errors.New("the bundle refused before is served again unchanged")
		s.fail(now, BundleStageActivate, c.revision, err)
		return err
	}
	snap, err := e.compileUnit(ctx, c.unit(), true, revPrefix(c.revision))
	if err != nil {
		if ctx.Err() == nil { // a compile cut short says nothing of the bundle
			s.refusedHash = c.hash
		}
		err = fmt.Errorf("bundle revision %q: %w", c.revision, err)
		s.fail(now, BundleStageActivate, c.revision, err)
		return err
	}
	old := e.cur.Load()
	s.active = c
	e.swap(snap)
	s.mu.Lock()
	s.st.Active, s.st.Revision, s.st.PolicyRev, s.st.ETag, s.st.FromDisk = true, c.revision, snap.rev, c.etag, fromDisk
	s.st.LastActivation = now
	s.st.Activations++
	s.st.LastError, s.st.LastErrorStage, s.st.LastErrorAt = "", "", time.Time{}
	s.mu.Unlock()
	e.log.Info("policy bundle activated", logURL, RedactBundleURL(s.cfg.URL), logRevision, c.revision, oplog.PolicyRevKey, snap.rev,
		"previous_rev", old.rev, logFromDisk, fromDisk, logCached, snap.cache != nil)
	s.notify(BundleEvent{Activated: true, Revision: c.revision, PolicyRev: snap.rev, FromDisk: fromDisk})
	if !fromDisk {
		if err := s.persist(c); err != nil {
			s.fail(now, BundleStagePersist, c.revision, err)
		}
	}
	return nil
}

// reload rebuilds the active bundle's snapshot (Reload: nothing to download).
func (s *bundleSource) reload(ctx context.Context) (*snapshot, error) {
	if s.active == nil {
		return nil, errNoPolicy
	}
	return s.e.compileUnit(ctx, s.active.unit(), true, revPrefix(s.active.revision))
}

// status returns a copy of the status.
func (s *bundleSource) status() BundleStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// PollBundle downloads the bundle once and activates it when it changed
// (BundleConfig.Manual only; the loop polls otherwise). The error is the
// download's; an activation's failure is in BundleStatus.
func (e *Engine) PollBundle(ctx context.Context) error {
	if e.bundle == nil || !e.bundle.cfg.Manual {
		return errors.New("policy: PollBundle needs a bundle source with Manual set")
	}
	return e.bundle.dl.Trigger(ctx)
}

// BundleStatus returns the bundle source's status; ok is false when the
// engine has no bundle source.
func (e *Engine) BundleStatus() (st BundleStatus, ok bool) {
	if e.bundle == nil {
		return BundleStatus{}, false
	}
	return e.bundle.status(), true
}

// revPrefix is what a bundle's policy revision starts with.
func revPrefix(manifestRev string) string {
	if manifestRev == "" {
		return "bundle"
	}
	return manifestRev
}

// unit is the policy unit of c: the embedded tree without its tests,
// overlaid by the bundle's files, as a policy directory.
func (c *bundleContent) unit() unit {
	base, err := baseFiles()
	if err != nil { // the embedded tree is read when airlock is built and tested
		panic(fmt.Sprintf("policy: embedded policies: %v", err))
	}
	return unit{Files: overlay(withoutTests(base), c.files)}
}

// bundleTag prefixes the display names of a bundle's files.
const bundleTag = "bundle:"

// contentOf turns a verified bundle into policy files: every module at its
// path (examples/ left out, as in a directory), and the data, merged by OPA
// from the bundle's data.json and data.yaml files, as one data.json at the
// root. raw is the tarball. Delta bundles, wasm and plan modules are refused.
func contentOf(b *bundle.Bundle, raw io.Reader, etag string) (*bundleContent, error) {
	if b.Type() != bundle.SnapshotBundleType {
		return nil, fmt.Errorf("a %s bundle; only snapshot bundles are supported", b.Type())
	}
	if len(b.WasmModules) > 0 || len(b.PlanModules) > 0 {
		return nil, errors.New("the bundle carries wasm or plan modules; only Rego is supported")
	}
	rev := b.Manifest.Revision
	if err := checkRevision(rev); err != nil {
		return nil, err
	}
	c := &bundleContent{revision: rev, etag: etag, files: map[string]unitFile{}}
	for _, m := range b.Modules {
		rel := strings.TrimPrefix(m.Path, "/")
		if strings.HasPrefix(rel, examplesDir+"/") {
			continue
		}
		c.files[rel] = unitFile{Rel: rel, Name: bundleTag + rel, Src: m.Raw}
	}
	if len(b.Data) > 0 {
		j, err := json.Marshal(b.Data)
		if err != nil {
			return nil, fmt.Errorf("bundle data: %w", err)
		}
		c.files["data.json"] = unitFile{Rel: "data.json", Name: bundleTag + "data.json", Src: j}
	}
	rels := make([]string, 0, len(c.files))
	for rel := range c.files {
		rels = append(rels, rel)
	}
	sort.Strings(rels)
	h := sha256.New()
	for _, rel := range rels {
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(c.files[rel].Src))
		h.Write(c.files[rel].Src)
	}
	c.hash = hex.EncodeToString(h.Sum(nil))
	if raw != nil {
		var buf bytes.Buffer
		if _, err := io.Copy(&buf, raw); err != nil {
			return nil, err
		}
		c.raw = buf.Bytes()
	}
	return c, nil
}

// redactedError is an error whose message had the bundle URL's query taken
// out; errors.Is and As still see the original.
type redactedError struct {
	err error
	msg string
}

func (r redactedError) Error() string { return r.msg }
func (r redactedError) Unwrap() error { return r.err }
