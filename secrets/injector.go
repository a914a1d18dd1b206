package secrets

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
)

// PlaceholderPrefix starts every placeholder; a token with this prefix that is
// not the sandbox's own placeholder in its bound header is denied wherever it is
// seen (matched case-insensitively).
const PlaceholderPrefix = "airlock-ph-"

// placeholderRandLen is the length of the random part: 16 bytes of crypto/rand
// in lower-case unpadded base32.
const placeholderRandLen = 26

var phEncoding = base32.NewEncoding("abcdefghijklmnopqrstuvwxyz234567").WithPadding(base32.NoPadding)

// Injector adds credentials to intercepted requests, polices placeholders and
// scrubs responses. It is safe for concurrent use.
type Injector struct {
	log      *slog.Logger
	secrets  map[string]*secret
	bindings []*binding
	maxBody  int64
	budget   *scanBudget
	replay   *replayCache
	now      func() time.Time
	assume   assumeCache
	oauth    oauthCache
	revokes  sync.WaitGroup // background revocations (githubapp.go)

	mu       sync.Mutex
	ph       map[phKey]string           // (sandbox, secret) -> placeholder
	phOwner  map[string]phKey           // placeholder -> (sandbox, secret)
	phCount  map[string]int             // sandbox -> placeholders issued to it
	attached map[string]map[string]bool // sandbox -> binding ids attached by the API (attach.go); never mutated once stored
	tokens   TokenClient                // the gateway's client for token endpoints (SetTokenClient)
}

type phKey struct{ sandbox, secret string }

// Applied is what Inject did to one request. The gateway keeps it for the
// response (ScrubResponse) and the audit record (Audit). A nil *Applied means
// nothing was injected. It holds no value in a printable field.
type Applied struct {
	rec      audit.Secret
	scrub    *scrubber
	scrubbed atomic.Int64
	partial  bool    // a 206 may pass: only re-signed AWS requests (aws.go)
	minted   *minted // the minted token it carried (OAuth, GitHub App): on a 401, oauth_reauth.go
}

// Audit returns the audit entries of the injected secret, with the number of
// scrubs so far. Call it after the response body is done for a final count.
func (a *Applied) Audit() []audit.Secret {
	if a == nil {
		return nil
	}
	r := a.rec
	r.Scrubbed = int(a.scrubbed.Load())
	return []audit.Secret{r}
}

// New builds an Injector from a Config (defaults are applied and it is
// validated again).
func New(cfg Config, logger *slog.Logger) (*Injector, error) {
	if logger == nil {
		return nil, errors.New("secrets: nil logger")
	}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	var key []byte
	if cfg.FingerprintKeyFile != "" {
		k, err := loadFingerprintKey(cfg.FingerprintKeyFile)
		if err != nil {
			return nil, fmt.Errorf("secrets: %w", err)
		}
		key = k
	} else {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("secrets: fingerprint key: %w", err)
		}
	}
	log := oplog.For(logger, "secrets")
	in := &Injector{
		log:      log,
		secrets:  map[string]*secret{},
		maxBody:  cfg.MaxBodyScan,
		budget:   newScanBudget(cfg.MaxBodyScanPerSandbox),
		replay:   newReplayCache(DefaultAWSReplayEntries),
		now:      time.Now,
		ph:       map[phKey]string{},
		phOwner:  map[string]phKey{},
		phCount:  map[string]int{},
		attached: map[string]map[string]bool{},
	}
	for _, sc := range cfg.Secrets {
		in.secrets[sc.ID] = newSecret(sc, key, log)
	}
	for i, bc := range cfg.Bindings {
		host, port, err := parseBindingHost(bc.Host, bc.Port)
		if err != nil {
			return nil, fmt.Errorf("secrets: bindings[%d]: %w", i, err)
		}
		b := &binding{
			index: i, secret: in.secrets[bc.Secret], ids: map[string]bool{},
			labels: bc.Sandboxes.Labels, host: host, port: port, paths: bc.Paths,
			header: http.CanonicalHeaderKey(bc.Header), template: bc.Template,
			basicUser: bc.BasicUser, basic: bc.BasicUser != "", mode: bc.Mode,
			env: bc.PlaceholderEnv, id: bc.ID,
		}
		if a := bc.Attach; a != nil {
			b.attachUIDs = map[int]bool{}
			for _, u := range a.UIDs {
				b.attachUIDs[u] = true
			}
		}
		for _, id := range bc.Sandboxes.IDs {
			b.ids[id] = true
		}
		if len(bc.Methods) > 0 {
			b.methods = map[string]bool{}
			for _, m := range bc.Methods {
				b.methods[m] = true
			}
		}
		for _, h := range bc.Strip {
			b.strip = append(b.strip, http.CanonicalHeaderKey(h))
		}
		b.github = bc.GitHubApp
		if o := bc.OAuth; o != nil {
			b.oauth = o
			if o.ClientSecretSecret != "" {
				b.oauthClientSecret = in.secrets[o.ClientSecretSecret]
			}
		}
		if a := bc.AWS; a != nil {
			b.aws = &awsBinding{keyID: a.AccessKeyID, region: a.Region, service: a.Service, assume: a.AssumeRole}
			if a.SessionTokenSecret != "" {
				b.aws.token = in.secrets[a.SessionTokenSecret]
			}
		}
		in.bindings = append(in.bindings, b)
	}
	return in, nil
}

// NeedsMITM reports whether the gateway must intercept this sandbox's TLS
// connection to host:port (after policy allowed it): a binding applies to the
// destination, or the sandbox holds placeholders (HoldsPlaceholders), in which
// case every TLS destination is intercepted so that the placeholder check sees
// every request.
func (in *Injector) NeedsMITM(sb Sandbox, host string, port int) bool {
	if in.HoldsPlaceholders(sb) {
		return true
	}
	h, err := hostname.Normalize(host)
	if err != nil {
		return false
	}
	att := in.attachedTo(sb.ID)
	for _, b := range in.bindings {
		if b.applies(sb, att) && b.matchDest(h, port) {
			return true
		}
	}
	return false
}

// HoldsPlaceholders reports whether the sandbox may hold a placeholder: a
// placeholder or require binding selects it, or a placeholder was issued to
// it. Such a sandbox could send its placeholder anywhere, so the gateway must
// see every byte it sends: every TLS tunnel is intercepted (NeedsMITM) and
// other opaque streams are scanned or refused.
func (in *Injector) HoldsPlaceholders(sb Sandbox) bool {
	att := in.attachedTo(sb.ID)
	for _, b := range in.bindings {
		if b.mode != ModeDefault && b.applies(sb, att) {
			return true
		}
	}
	if sb.ID == "" {
		return false
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.phCount[sb.ID] > 0
}

// Placeholders returns, for the executor, the environment a sandbox gets: the
// placeholder of each secret bound to it in placeholder or require mode, keyed
// by the binding's placeholder_env. A placeholder is random per sandbox and
// secret and stays the same until Forget.
func (in *Injector) Placeholders(sb Sandbox) (map[string]string, error) {
	out := map[string]string{}
	if sb.ID == "" {
		return out, nil
	}
	att := in.attachedTo(sb.ID)
	for _, b := range in.bindings {
		if b.mode == ModeDefault || !b.applies(sb, att) {
			continue
		}
		if b.aws != nil {
			if err := in.awsPlaceholders(sb, b, out); err != nil {
				return nil, err
			}
			continue
		}
		p, err := in.placeholder(sb.ID, b.secret.cfg.ID)
		if err != nil {
			return nil, err
		}
		out[b.env] = p
	}
	return out, nil
}

func (in *Injector) placeholder(sandbox, secretID string) (string, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	k := phKey{sandbox, secretID}
	if p, ok := in.ph[k]; ok {
		return p, nil
	}
	var r [16]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", fmt.Errorf("secrets: placeholder: %w", err)
	}
	p := PlaceholderPrefix + phEncoding.EncodeToString(r[:])
	in.ph[k] = p
	in.phOwner[p] = k
	in.phCount[sandbox]++
	return p, nil
}

// Forget drops a sandbox's placeholders when it ends; they are then denied as
// unknown wherever they appear.
func (in *Injector) Forget(sandboxID string) {
	in.assume.take(sandboxID) // its AWS sessions: dropped, they cannot be revoked
	in.revokeMinted(sandboxID)
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, p := range in.ph {
		if k.sandbox == sandboxID {
			delete(in.ph, k)
			delete(in.phOwner, p)
		}
	}
	delete(in.phCount, sandboxID)
	delete(in.attached, sandboxID)
}

// Check looks at a request that is not intercepted (plain HTTP, a CONNECT
// line) or any request before policy, and denies a placeholder seen where it
// must not be. It may replace req.Body with an equivalent reader (see
// Config.MaxBodyScan). Inject runs the same checks; calling both is harmless.
func (in *Injector) Check(sb Sandbox, req *http.Request) error {
	_, _, err := in.analyze(sb, req)
	return err
}

// CheckName denies a placeholder inside a name (a DNS question, a TLS SNI).
func (in *Injector) CheckName(sb Sandbox, name string) error {
	var hits []hit
	findTokens(name, "name", &hits)
	for _, h := range hits {
		return in.denyToken(sb, h, nil)
	}
	return nil
}

// Inject runs on an intercepted request after policy allowed it, with the
// request the gateway is about to send upstream (URL scheme https, URL host
// and Host naming the same host). With exactly one binding matching, it strips
// the bound header, the binding's strip list, Range and If-Range, sets the
// credential from the binding's template and forces Accept-Encoding: identity,
// and returns the Applied the response must be scrubbed with. With no binding
// it returns (nil, nil). A *Denial refuses the request (403), an
// *UnavailableError means the source failed (503); in both cases nothing may
// be forwarded. A binding never widens policy: Inject is only asked after
// policy allowed the request.
func (in *Injector) Inject(ctx context.Context, sb Sandbox, req *http.Request) (*Applied, error) {
	b, present, err := in.analyze(sb, req)
	if err != nil {
		return nil, err
	}
	if b == nil || (b.mode == ModePlaceholder && !present) {
		return nil, nil
	}
	if b.aws != nil {
		return in.injectAWS(ctx, sb, b, req)
	}
	v, err := b.secret.get(ctx)
	if err != nil {
		in.log.Error("secret unavailable", oplog.SandboxKey, sb.ID, "secret", b.secret.cfg.ID, oplog.ErrorKey, err)
		return nil, err
	}
	value, scrub := v.value.reveal(), v.scrub
	var mint *minted
	if b.oauth != nil || b.github != nil {
		t, err := in.oauthAccess(ctx, sb, b, v)
		if err != nil {
			return nil, err
		}
		value, scrub = t.access, mergeScrubbers(scrub, t.scrub)
		mint = &minted{sb: sb, b: b, key: b.tokenKey(sb), access: t.access}
	}
	cred, token := b.render(value)
	req.Header.Del(b.header)
	for _, h := range b.strip {
		req.Header.Del(h)
	}
	req.Header.Del("Range")
	req.Header.Del("If-Range")
	req.Header.Set(b.header, cred)
	req.Header.Set("Accept-Encoding", "identity")
	if token != "" {
		scrub = mergeScrubbers(scrub, newScrubber(CanaryForms(token)))
	}
	a := &Applied{
		rec: audit.Secret{
			ID: b.secret.cfg.ID, Version: v.id, Fingerprint: v.fp, Where: b.where(),
		},
		scrub:  scrub,
		minted: mint,
	}
	in.log.Info("secret injected", oplog.SandboxKey, sb.ID, "secret", a.rec.ID,
		"version", a.rec.Version, "where", a.rec.Where)
	return a, nil
}

// render returns the header value and, for basic auth, the base64 token that
// carries the value (itself scrubbed from responses).
func (b *binding) render(value string) (cred, token string) {
	if b.basic {
		token = base64.StdEncoding.EncodeToString([]byte(b.basicUser + ":" + value))
		return "Basic " + token, token
	}
	return strings.Replace(b.template, ValuePlaceholder, value, 1), ""
}

// dest returns the request's normalized host and port and whether it may carry
// a secret at all (https, not a CONNECT line).
func dest(req *http.Request) (host string, port int, https bool, err error) {
	scheme := strings.ToLower(req.URL.Scheme)
	if scheme == "" {
		scheme = "http"
		if req.TLS != nil {
			scheme = "https"
		}
	}
	def := 80
	if scheme == "https" {
		def = 443
	}
	hostHdr, urlHost := req.Host, req.URL.Host
	if req.Method == http.MethodConnect {
		def = 443
		if urlHost == "" {
			urlHost = req.URL.Opaque
		}
	}
	if hostHdr == "" && urlHost == "" {
		return "", 0, false, &Denial{Code: CodeHostMismatch, Msg: "request names no host"}
	}
	if hostHdr == "" {
		hostHdr = urlHost
	}
	h1, p1, err := hostname.SplitHostPort(hostHdr, def)
	if err != nil {
		return "", 0, false, &Denial{Code: CodeHostMismatch, Where: "host", Msg: "invalid Host"}
	}
	if urlHost != "" {
		h2, p2, err := hostname.SplitHostPort(urlHost, def)
		if err != nil || h2 != h1 || p2 != p1 {
			return "", 0, false, &Denial{Code: CodeHostMismatch, Where: "host",
				Msg: "URL host and Host header name different destinations"}
		}
	}
	return h1, p1, scheme == "https" && req.Method != http.MethodConnect, nil
}

// analyze finds the one binding that applies to req (nil if none), whether the
// sandbox's placeholder sits in that binding's header, and any denial.
func (in *Injector) analyze(sb Sandbox, req *http.Request) (*binding, bool, error) {
	host, port, https, err := dest(req)
	if err != nil {
		return nil, false, in.logDeny(sb, err)
	}
	var candidates, full []*binding
	if https {
		att := in.attachedTo(sb.ID)
		for _, b := range in.bindings {
			if b.applies(sb, att) && b.matchDest(host, port) {
				candidates = append(candidates, b)
			}
		}
	}
	if len(candidates) > 0 {
		cleaned, perr := cleanPath(req.URL.EscapedPath())
		if perr != nil {
			return nil, false, in.logDeny(sb, &Denial{Code: CodePathRefused, Flag: FlagPathTrick,
				Where: "path", Msg: perr.Error()})
		}
		for _, b := range candidates {
			if b.matchMethodPath(req.Method, cleaned) {
				full = append(full, b)
			}
		}
	}
	if len(full) > 1 {
		ids := make([]string, len(full))
		for i, b := range full {
			ids[i] = fmt.Sprintf("bindings[%d]", b.index)
		}
		return nil, false, in.logDeny(sb, &Denial{Code: CodeAmbiguous,
			Msg: "more than one binding matches: " + strings.Join(ids, ", ")})
	}
	var b *binding
	if len(full) == 1 {
		b = full[0]
	}

	hits, err := in.scanRequest(sb, req)
	if err != nil {
		return nil, false, in.logDeny(sb, err)
	}
	present := false
	for _, h := range hits {
		if in.ownAllowed(sb, h, b) {
			present = true
			continue
		}
		return nil, false, in.logDeny(sb, in.denyToken(sb, h, b))
	}
	if !(b != nil && b.mode != ModeDefault && present) && (b == nil || b.mode != ModeDefault) {
		for _, c := range candidates {
			if c.mode == ModeRequire {
				d := &Denial{Code: CodePlaceholderRequired, SecretID: c.secret.cfg.ID, Where: c.where(),
					Msg: "this destination only takes the sandbox's placeholder in " + c.header}
				if req.Header.Get(c.header) != "" {
					d.Flag = FlagOwnCredential
				}
				return nil, false, in.logDeny(sb, d)
			}
		}
	}
	return b, present, nil
}

// ownAllowed: the hit is this sandbox's placeholder for b's secret, in b's
// header, and b substitutes placeholders.
func (in *Injector) ownAllowed(sb Sandbox, h hit, b *binding) bool {
	if b == nil || b.mode == ModeDefault {
		return false
	}
	in.mu.Lock()
	owner, ok := in.phOwner[h.token]
	in.mu.Unlock()
	if b.aws != nil {
		return ok && awsOwnAllowed(owner, sb, h, b)
	}
	return ok && h.where == b.where() && owner.sandbox == sb.ID && owner.secret == b.secret.cfg.ID
}

func (in *Injector) denyToken(sb Sandbox, h hit, b *binding) error {
	in.mu.Lock()
	owner, ok := in.phOwner[h.token]
	in.mu.Unlock()
	if !ok || owner.sandbox != sb.ID {
		return &Denial{Code: CodePlaceholderForeign, Flag: FlagForeignToken, Where: h.where,
			Msg: "a placeholder that is not this sandbox's"}
	}
	return &Denial{Code: CodePlaceholderMisuse, Flag: FlagPlaceholderLeak, SecretID: owner.secret,
		Where: h.where, Msg: "the placeholder may only be sent in its bound header to its bound destination"}
}

func (in *Injector) logDeny(sb Sandbox, err error) error {
	var d *Denial
	if errors.As(err, &d) {
		in.log.Warn("secrets denied request", oplog.SandboxKey, sb.ID, "code", d.Code, "flag", d.Flag,
			"secret", d.SecretID, "where", d.Where)
	}
	return err
}
