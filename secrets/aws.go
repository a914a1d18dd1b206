package secrets

import (
	"context"
	"crypto/hmac"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
)

// AWS SigV4 bindings: the sandbox holds placeholder AWS credentials and signs
// with them; the gateway verifies that signature with the placeholder secret
// and re-signs the request with the real credentials for the bound region
// and service (docs/CREDENTIALS.md).

// Environment variables an AWS binding plants in the sandbox.
const (
	EnvAWSAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvAWSSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvAWSSessionToken    = "AWS_SESSION_TOKEN"
)

// AWSMaxSkew is how far a header-signed request's X-Amz-Date may be from the
// gateway's clock, either way, and how long a signature is remembered to
// refuse its replay.
const AWSMaxSkew = 15 * time.Minute

// DefaultAWSReplayEntries bounds the signatures remembered for replay checks.
const DefaultAWSReplayEntries = 1 << 18

// Denial codes of AWS bindings.
const (
	// CodeAWSSignature: the request's SigV4 signature is malformed, made with
	// another key, for another region, service or host, or does not verify.
	CodeAWSSignature = "secret_aws_signature"
	// CodeAWSStale: X-Amz-Date is more than AWSMaxSkew from now, or a
	// presigned URL is used outside its validity.
	CodeAWSStale = "secret_aws_stale"
	// CodeAWSReplay: the same signature was seen within its window.
	CodeAWSReplay = "secret_aws_replay"
	// CodeAWSUnsupported: a payload mode the gateway cannot re-sign.
	CodeAWSUnsupported = "secret_aws_unsupported"
)

// AWSConfig makes a binding an AWS Signature Version 4 binding: the binding's
// secret is the secret access key. Template, basic_user and placeholder_env
// are not used; mode is require (default) or placeholder; the placeholders
// go in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and, with a session token,
// AWS_SESSION_TOKEN.
type AWSConfig struct {
	// AccessKeyID is the real access key id (AKIA... or ASIA...).
	AccessKeyID string `yaml:"access_key_id"`
	// SessionTokenSecret is the id of a secret holding a session token, for
	// temporary credentials. Optional.
	SessionTokenSecret string `yaml:"session_token_secret"`
	// Region is the one region requests may be signed for (us-east-1).
	Region string `yaml:"region"`
	// Service is the one signing name requests may be signed for (s3, sts).
	Service string `yaml:"service"`
	// AssumeRole has the gateway sign with temporary credentials of a role,
	// assumed per sandbox with the long-term key (aws_assume.go).
	AssumeRole *AssumeRoleConfig `yaml:"assume_role"`
}

var (
	awsKeyIDRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z0-9]{16,128}$`) })
	awsRegionRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9-]{1,32}$`) })
	awsServiceRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9-]{1,64}$`) })
)

func (b *BindingConfig) validateAWS(ids map[string]bool) error {
	a := b.AWS
	switch {
	case b.Template != "" || b.BasicUser != "":
		return errors.New("aws_sigv4: template and basic_user do not apply (the request is re-signed)")
	case b.PlaceholderEnv != "":
		return errors.New("aws_sigv4: placeholder_env does not apply (placeholders go in AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN)")
	case http.CanonicalHeaderKey(b.Header) != DefaultHeader:
		return errors.New("aws_sigv4: header must be Authorization")
	case b.Mode != ModeRequire && b.Mode != ModePlaceholder:
		return fmt.Errorf("aws_sigv4: mode %q is not one of require, placeholder", b.Mode)
	case !awsKeyIDRE().MatchString(a.AccessKeyID):
		return errors.New("aws_sigv4.access_key_id: not an access key id (16-128 upper-case letters and digits)")
	case !awsRegionRE().MatchString(a.Region):
		return fmt.Errorf("aws_sigv4.region: %q is not a region such as us-east-1", a.Region)
	case !awsServiceRE().MatchString(a.Service):
		return fmt.Errorf("aws_sigv4.service: %q is not a signing name such as s3 or sts", a.Service)
	case a.SessionTokenSecret != "" && !ids[a.SessionTokenSecret]:
		return fmt.Errorf("aws_sigv4.session_token_secret: %q is not a defined secret id", a.SessionTokenSecret)
	case a.AssumeRole != nil && a.SessionTokenSecret != "":
		return errors.New("aws_sigv4: set session_token_secret or assume_role, not both (assume_role needs a long-term key)")
	case a.AssumeRole != nil:
		return a.AssumeRole.validate()
	}
	return nil
}

// awsBinding is the compiled AWSConfig of a binding.
type awsBinding struct {
	keyID   string
	region  string
	service string
	token   *secret // nil: long-term credentials
	assume  *AssumeRoleConfig
}

// hasToken: the sandbox signs with a session token placeholder.
func (a *awsBinding) hasToken() bool { return a.token != nil || a.assume != nil }

// placeholder keys of an AWS binding's three placeholders.
func awsKeyIDKey(secretID string) string  { return secretID + "/aws-access-key-id" }
func awsSecretKey(secretID string) string { return secretID + "/aws-secret-access-key" }
func awsTokenKey(secretID string) string  { return secretID + "/aws-session-token" }

// awsPlaceholders adds an AWS binding's placeholders to out.
func (in *Injector) awsPlaceholders(sb Sandbox, b *binding, out map[string]string) error {
	id := b.secret.cfg.ID
	add := func(env, key string) error {
		p, err := in.placeholder(sb.ID, key)
		if err != nil {
			return err
		}
		if old, ok := out[env]; ok && old != p {
			return fmt.Errorf("secrets: sandbox %s: two AWS bindings with different secrets select it (%s)", sb.ID, env)
		}
		out[env] = p
		return nil
	}
	if err := add(EnvAWSAccessKeyID, awsKeyIDKey(id)); err != nil {
		return err
	}
	if err := add(EnvAWSSecretAccessKey, awsSecretKey(id)); err != nil {
		return err
	}
	if b.aws.hasToken() {
		return add(EnvAWSSessionToken, awsTokenKey(id))
	}
	return nil
}

// awsOwnAllowed: the hit is this sandbox's access key id placeholder in the
// Authorization header or the query (presigned), or its session token
// placeholder in X-Amz-Security-Token or the query. The secret key
// placeholder is never allowed on the wire.
func awsOwnAllowed(owner phKey, sb Sandbox, h hit, b *binding) bool {
	if owner.sandbox != sb.ID {
		return false
	}
	id := b.secret.cfg.ID
	switch owner.secret {
	case awsKeyIDKey(id):
		return h.where == "header:Authorization" || h.where == "query"
	case awsTokenKey(id):
		return b.aws.hasToken() && (h.where == "header:X-Amz-Security-Token" || h.where == "query")
	}
	return false
}

func (in *Injector) lookupPlaceholder(sandbox, key string) string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.ph[phKey{sandbox, key}]
}

// injectAWS verifies req's signature with the sandbox's placeholder secret
// and re-signs it with the real credentials.
func (in *Injector) injectAWS(ctx context.Context, sb Sandbox, b *binding, req *http.Request) (*Applied, error) {
	a := b.aws
	deny := func(code, msg string) error {
		return in.logDeny(sb, &Denial{Code: code, SecretID: b.secret.cfg.ID, Where: b.awsWhere(), Msg: msg})
	}
	p, err := parseSigv4(req)
	if err != nil {
		return nil, deny(CodeAWSSignature, err.Error())
	}
	phID := in.lookupPlaceholder(sb.ID, awsKeyIDKey(b.secret.cfg.ID))
	phSecret := in.lookupPlaceholder(sb.ID, awsSecretKey(b.secret.cfg.ID))
	if phID == "" || phSecret == "" || !hmac.Equal([]byte(strings.ToLower(p.accessKey)), []byte(phID)) {
		d := &Denial{Code: CodeAWSSignature, SecretID: b.secret.cfg.ID, Where: b.awsWhere(),
			Msg: "signed with an access key that is not the sandbox's placeholder", Flag: FlagOwnCredential}
		return nil, in.logDeny(sb, d)
	}
	if p.scope.region != a.region || p.scope.service != a.service {
		return nil, deny(CodeAWSSignature, fmt.Sprintf("signed for %s/%s; this destination takes %s/%s",
			p.scope.service, p.scope.region, a.service, a.region))
	}
	until, err := in.awsFresh(p)
	if err != nil {
		return nil, deny(CodeAWSStale, err.Error())
	}
	host, port, _, err := dest(req)
	if err != nil {
		return nil, err
	}
	sr, stream, err := in.awsRequest(req, p, host, a.service)
	if err != nil {
		var d *Denial
		if errors.As(err, &d) {
			return nil, in.logDeny(sb, d)
		}
		return nil, deny(CodeAWSSignature, err.Error())
	}
	phKeyBytes := sigv4Key(phSecret, p.scope)
	if err := verifySigv4(sr, p, phKeyBytes, host, port); err != nil {
		return nil, deny(CodeAWSSignature, err.Error())
	}
	if !in.replay.first(p.signature, until, in.now()) {
		return nil, deny(CodeAWSReplay, "this signature was already used")
	}
	return in.awsResign(ctx, sb, b, req, p, sr, stream, phKeyBytes)
}

// verifySigv4 checks p's signature over sr with the placeholder key. The
// gateway sends an intercepted request's Host without the port of the
// connection it arrived on, so the re-signed request signs the bare host;
// the sandbox's SDK signed host:port when its endpoint named a port other
// than 443, so that spelling is tried first, then the bare host. On success
// sr.host is the bare host.
func verifySigv4(sr *sigv4Request, p *sigv4Parts, key []byte, host string, port int) error {
	hosts := []string{host}
	if port != DefaultPort {
		hosts = []string{hostname.JoinHostPort(host, port), host}
	}
	for _, h := range hosts {
		sr.host = h
		c, err := sr.canonical()
		if err != nil {
			return err
		}
		if hmac.Equal([]byte(sigv4Sign(key, sigv4StringToSign(p.amzDate, p.scope, c))), []byte(p.signature)) {
			sr.host = host
			return nil
		}
	}
	return errors.New("the signature does not verify with the sandbox's placeholder secret for this host, region and service")
}

// awsFresh checks the request's date against the clock and returns until when
// its signature must be remembered.
func (in *Injector) awsFresh(p *sigv4Parts) (time.Time, error) {
	t, _ := time.Parse(sigv4TimeFormat, p.amzDate)
	now := in.now()
	if p.presigned {
		if now.Before(t.Add(-AWSMaxSkew)) || now.After(t.Add(p.expires)) {
			return time.Time{}, fmt.Errorf("presigned URL dated %s for %v is not valid now", p.amzDate, p.expires)
		}
		return t.Add(p.expires), nil
	}
	if d := now.Sub(t); d > AWSMaxSkew || d < -AWSMaxSkew {
		return time.Time{}, fmt.Errorf("x-amz-date %s is more than %v from the gateway's clock", p.amzDate, AWSMaxSkew)
	}
	return t.Add(AWSMaxSkew), nil
}

// awsRequest builds the canonical-request input of req as the sandbox signed
// it, and reports whether the body is aws-chunked with signed chunks.
func (in *Injector) awsRequest(req *http.Request, p *sigv4Parts, host, service string) (*sigv4Request, bool, error) {
	sr := &sigv4Request{
		method: req.Method, escapedPath: req.URL.EscapedPath(), rawQuery: req.URL.RawQuery,
		host: host, header: req.Header, contentLength: req.ContentLength, transferEncoding: req.TransferEncoding,
		signedHeaders: p.signedHeaders, presigned: p.presigned,
		s3: service == "s3" || service == "s3-object-lambda",
	}
	if req.Body == nil || req.Body == http.NoBody {
		sr.contentLength = 0
	}
	hashes := req.Header.Values("X-Amz-Content-Sha256")
	if len(hashes) > 1 {
		return nil, false, errors.New("more than one x-amz-content-sha256")
	}
	unsupported := func(mode string) error {
		return &Denial{Code: CodeAWSUnsupported, Where: "header:X-Amz-Content-Sha256",
			Msg: "payload mode " + mode + " cannot be re-signed by the gateway"}
	}
	switch h := strings.Join(hashes, ""); {
	case h == streamingSigned:
		if p.presigned {
			return nil, false, unsupported(h + " with a presigned URL")
		}
		sr.payloadHash = h
		return sr, true, nil
	case h == unsignedPayload || h == streamingTrailer:
		sr.payloadHash = h
	case strings.HasPrefix(h, "STREAMING-"):
		return nil, false, unsupported(h)
	case h != "":
		if len(h) != 64 || strings.Trim(h, "0123456789abcdef") != "" {
			return nil, false, errors.New("x-amz-content-sha256 is not a SHA-256 or a known payload mode")
		}
		sr.payloadHash = h
	case p.presigned && sr.s3:
		sr.payloadHash = unsignedPayload
	default:
		body, ok := bufferedBody(req)
		if !ok {
			return nil, false, unsupported("signed body hash over a body longer than max_body_scan (send x-amz-content-sha256)")
		}
		sr.payloadHash = sha256Hex(body)
	}
	return sr, false, nil
}

// bufferedBody returns the whole request body when it is held in memory.
func bufferedBody(req *http.Request) ([]byte, bool) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, true
	}
	if g, ok := req.Body.(*bodyGuard); ok && g.buffered != nil {
		return g.buffered, true
	}
	return nil, false
}

// awsResign signs req with the real credentials: the same date, scope and
// signed headers, the real access key id and session token.
func (in *Injector) awsResign(ctx context.Context, sb Sandbox, b *binding, req *http.Request,
	p *sigv4Parts, sr *sigv4Request, stream bool, phKeyBytes []byte) (*Applied, error) {
	v, c, scrub, err := in.awsCredentials(ctx, sb, b)
	if err != nil {
		return nil, err
	}
	token := c.token
	cred := c.keyID + "/" + p.scope.String()
	signed := slices.DeleteFunc(slices.Clone(p.signedHeaders), func(h string) bool { return h == "x-amz-security-token" })
	req.Header.Del("X-Amz-Security-Token")
	if p.presigned {
		req.URL.RawQuery = presignedQuery(req.URL.RawQuery, cred, token)
	} else if token != "" {
		req.Header.Set("X-Amz-Security-Token", token)
		signed = append(signed, "x-amz-security-token")
		slices.Sort(signed)
	}
	sr.rawQuery, sr.signedHeaders = req.URL.RawQuery, signed
	realKey := sigv4Key(c.secret, p.scope)
	canon, err := sr.canonical()
	if err != nil {
		return nil, in.logDeny(sb, &Denial{Code: CodeAWSSignature, SecretID: b.secret.cfg.ID, Where: b.awsWhere(), Msg: err.Error()})
	}
	sig := sigv4Sign(realKey, sigv4StringToSign(p.amzDate, p.scope, canon))
	if p.presigned {
		req.URL.RawQuery += "&X-Amz-Signature=" + sig
	} else {
		req.Header.Set("Authorization", sigv4Algorithm+" Credential="+cred+", SignedHeaders="+
			strings.Join(signed, ";")+", Signature="+sig)
	}
	req.Host = sr.host
	if err := leftPlaceholder(req); err != nil {
		return nil, in.logDeny(sb, err)
	}
	if stream {
		req.Body = newChunkResigner(req.Body, p.amzDate, p.scope, phKeyBytes, realKey, p.signature, sig,
			func(d *Denial) { d.SecretID = b.secret.cfg.ID; _ = in.logDeny(sb, d) })
		req.GetBody = nil
	}
	ap := &Applied{
		rec:     audit.Secret{ID: b.secret.cfg.ID, Version: v.id, Fingerprint: v.fp, Where: b.awsWhere()},
		scrub:   scrub,
		partial: true,
	}
	in.log.Info("aws request re-signed", oplog.SandboxKey, sb.ID, "secret", ap.rec.ID,
		"version", ap.rec.Version, "where", ap.rec.Where, "presigned", p.presigned)
	return ap, nil
}

// leftPlaceholder denies a re-signed request that still carries a
// placeholder: the access key id's is allowed only where re-signing replaces
// it (Authorization, X-Amz-Credential), the session token's only where it is
// swapped (X-Amz-Security-Token); anywhere else in the query or a header it
// would have been signed over and sent on.
func leftPlaceholder(req *http.Request) error {
	var hits []hit
	findTokens(req.URL.RawQuery, "query", &hits)
	if q, err := url.QueryUnescape(req.URL.RawQuery); err == nil {
		findTokens(q, "query", &hits)
	}
	for name, vals := range req.Header {
		for _, v := range vals {
			findTokens(v, "header:"+name, &hits)
		}
	}
	if len(hits) > 0 {
		return &Denial{Code: CodePlaceholderMisuse, Flag: FlagPlaceholderLeak, Where: hits[0].where,
			Msg: "an AWS placeholder outside the fields re-signing replaces"}
	}
	return nil
}

// awsCredentials returns the credentials b signs with for sb: the long-term
// ones (with their session token, if any), or the sandbox's temporary ones
// with assume_role; the version of the long-term secret for the audit
// record; and the scrubber of every value involved.
func (in *Injector) awsCredentials(ctx context.Context, sb Sandbox, b *binding) (*version, *awsCreds, *scrubber, error) {
	a := b.aws
	v, err := b.secret.get(ctx)
	if err != nil {
		in.log.Error("secret unavailable", oplog.SandboxKey, sb.ID, "secret", b.secret.cfg.ID, oplog.ErrorKey, err)
		return nil, nil, nil, err
	}
	c := &awsCreds{keyID: a.keyID, secret: v.value.reveal()}
	scrub := mergeScrubbers(v.scrub, newScrubber(CanaryForms(a.keyID)))
	if a.token != nil {
		tv, err := a.token.get(ctx)
		if err != nil {
			in.log.Error("secret unavailable", oplog.SandboxKey, sb.ID, "secret", a.token.cfg.ID, oplog.ErrorKey, err)
			return nil, nil, nil, err
		}
		c.token, scrub = tv.value.reveal(), mergeScrubbers(scrub, tv.scrub)
	}
	if a.assume != nil {
		tc, err := in.assumed(ctx, sb, b, *c)
		if err != nil {
			return nil, nil, nil, err
		}
		c = tc
		var forms []string
		for _, s := range []string{c.keyID, c.secret, c.token} {
			forms = append(forms, CanaryForms(s)...)
		}
		scrub = mergeScrubbers(scrub, newScrubber(forms))
	}
	return v, c, scrub, nil
}

// presignedQuery rewrites a presigned query for the real credentials: the
// credential replaced, the session token replaced, added or removed, the
// signature dropped (the caller appends the new one). Other parameters keep
// their order and spelling.
func presignedQuery(raw, cred, token string) string {
	var out []string
	for _, part := range strings.Split(raw, "&") {
		k, _, _ := strings.Cut(part, "=")
		dk, _ := url.QueryUnescape(k)
		switch dk {
		case "X-Amz-Signature", "X-Amz-Security-Token":
			continue
		case "X-Amz-Credential":
			part = "X-Amz-Credential=" + awsEscape(cred, true)
		}
		if part != "" {
			out = append(out, part)
		}
	}
	if token != "" {
		out = append(out, "X-Amz-Security-Token="+awsEscape(token, true))
	}
	return strings.Join(out, "&")
}

func (b *binding) awsWhere() string {
	return "aws-sigv4:" + b.aws.service + "/" + b.aws.region
}

// replayCache remembers signatures until their window ends.
type replayCache struct {
	mu  sync.Mutex
	m   map[string]time.Time
	max int
}

func newReplayCache(max int) *replayCache {
	return &replayCache{m: map[string]time.Time{}, max: max}
}

// first records sig until the given time and reports whether it was not
// already recorded. When the cache is full of live signatures it refuses
// (fails closed) rather than forget one.
func (r *replayCache) first(sig string, until, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if exp, ok := r.m[sig]; ok && now.Before(exp) {
		return false
	}
	if len(r.m) >= r.max {
		for k, exp := range r.m {
			if !now.Before(exp) {
				delete(r.m, k)
			}
		}
		if len(r.m) >= r.max {
			return false
		}
	}
	r.m[sig] = until
	return true
}
