package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// OAuth 2.0 bindings: the gateway holds the client secret (client
// credentials grant) or the refresh token (refresh token grant), mints access
// tokens at the token endpoint through its token client, caches each until
// shortly before it expires, and injects it with the binding's template. The
// sandbox holds at most the binding's placeholder.

// OAuth grants.
const (
	GrantClientCredentials = "client_credentials"
	GrantRefreshToken      = "refresh_token"
)

// OAuth client authentication styles.
const (
	OAuthAuthBasic = "basic" // client_id:client_secret in Authorization: Basic (RFC 6749 2.3.1)
	OAuthAuthBody  = "body"  // client_id and client_secret in the form
)

const (
	// OAuthRefreshBefore: a cached access token is replaced once it has less
	// than this left (or a tenth of its lifetime, when that is shorter).
	OAuthRefreshBefore = time.Minute
	// DefaultOAuthLifetime is assumed when the endpoint gives no expires_in.
	DefaultOAuthLifetime = 5 * time.Minute
	maxTokenResponse     = 64 << 10
)

// OAuthConfig makes a binding inject an access token minted by the gateway.
// The binding's secret is the client secret (client_credentials) or the
// refresh token (refresh_token).
type OAuthConfig struct {
	// TokenURL is the token endpoint, https only.
	TokenURL string `yaml:"token_url"`
	// Grant is client_credentials or refresh_token.
	Grant string `yaml:"grant"`
	// ClientID identifies the client.
	ClientID string `yaml:"client_id"`
	// ClientSecretSecret is the id of the secret holding the client secret,
	// for the refresh_token grant of a confidential client. Optional.
	ClientSecretSecret string `yaml:"client_secret_secret"`
	// Scopes asked for; empty: the endpoint's default.
	Scopes []string `yaml:"scopes"`
	// Audience, for endpoints that take one (Auth0 and others). Optional.
	Audience string `yaml:"audience"`
	// ClientAuth is basic (default) or body.
	ClientAuth string `yaml:"client_auth"`
	// PerSandbox mints one token per sandbox instead of one the binding's
	// sandboxes share, so the upstream can tell them apart; deleting the
	// sandbox revokes its token (RevocationURL). client_credentials only.
	PerSandbox bool `yaml:"per_sandbox"`
	// SandboxParam, with PerSandbox, is a form field of the token request
	// that carries "airlock-<sandbox id>", for an endpoint that records or
	// embeds it in the token (a custom claim). Optional.
	SandboxParam string `yaml:"sandbox_param"`
	// RevocationURL is the endpoint's RFC 7009 revocation endpoint, https:
	// a per-sandbox token is revoked there when its sandbox is deleted.
	// Optional.
	RevocationURL string `yaml:"revocation_url"`
}

// oauthReservedParams are the token request's own fields; sandbox_param may
// not name one.
var oauthReservedParams = map[string]bool{"grant_type": true, "client_id": true, "client_secret": true,
	"scope": true, "audience": true, "refresh_token": true}

var oauthParamRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`) })

var oauthErrRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[\x20-\x21\x23-\x5b\x5d-\x7e]{1,64}$`) })

func (o *OAuthConfig) applyDefaults() {
	if o.ClientAuth == "" {
		o.ClientAuth = OAuthAuthBasic
	}
}

func (o *OAuthConfig) validate(ids map[string]bool) error {
	u, err := url.Parse(o.TokenURL)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "":
		return fmt.Errorf("oauth.token_url: %q is not an https URL", o.TokenURL)
	case o.Grant != GrantClientCredentials && o.Grant != GrantRefreshToken:
		return fmt.Errorf("oauth.grant: %q is not one of client_credentials, refresh_token", o.Grant)
	case o.ClientID == "" || hasCtl(o.ClientID):
		return errors.New("oauth.client_id: required, without control characters")
	case o.ClientSecretSecret != "" && !ids[o.ClientSecretSecret]:
		return fmt.Errorf("oauth.client_secret_secret: %q is not a defined secret id", o.ClientSecretSecret)
	case o.ClientSecretSecret != "" && o.Grant != GrantRefreshToken:
		return errors.New("oauth.client_secret_secret: only for the refresh_token grant (the binding's secret is the client secret)")
	case o.ClientAuth != OAuthAuthBasic && o.ClientAuth != OAuthAuthBody:
		return fmt.Errorf("oauth.client_auth: %q is not one of basic, body", o.ClientAuth)
	}
	if err := o.validatePerSandbox(); err != nil {
		return err
	}
	for _, s := range o.Scopes {
		if s == "" || strings.ContainsAny(s, " \"\\") || hasCtl(s) {
			return fmt.Errorf("oauth.scopes: %q is not a scope", s)
		}
	}
	return nil
}

func (o *OAuthConfig) validatePerSandbox() error {
	if o.RevocationURL != "" {
		u, err := url.Parse(o.RevocationURL)
		if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.Fragment != "" {
			return fmt.Errorf("oauth.revocation_url: %q is not an https URL", o.RevocationURL)
		}
		if !o.PerSandbox {
			return errors.New("oauth.revocation_url: only with per_sandbox (a shared token outlives any one sandbox)")
		}
	}
	switch {
	case o.PerSandbox && o.Grant != GrantClientCredentials:
		return errors.New("oauth.per_sandbox: only with the client_credentials grant (a rotated refresh token cannot serve several sandboxes)")
	case o.SandboxParam != "" && !o.PerSandbox:
		return errors.New("oauth.sandbox_param: only with per_sandbox")
	case o.SandboxParam != "" && (!oauthParamRE().MatchString(o.SandboxParam) || oauthReservedParams[o.SandboxParam]):
		return fmt.Errorf("oauth.sandbox_param: %q is not a form field name of its own (letters, digits, _ . -; not a token request field)", o.SandboxParam)
	}
	return nil
}

// oauthToken is one minted access token.
type oauthToken struct {
	access  string
	expires time.Time
	scrub   *scrubber
	revoke  string // URL that revokes it (GitHub installation tokens); "" for none
	// refusedUntil: minted for a retry and refused too; no refresh on a 401
	// before then (oauth_reauth.go). Guarded by the entry's mu.
	refusedUntil time.Time
}

// oauthCache holds each binding's current token; one mint at a time per
// binding.
type oauthCache = mintCache[oauthEntry]

type oauthEntry struct {
	mu      sync.Mutex
	tok     *oauthToken
	refresh string // a rotated refresh token the endpoint handed back
}

// tokenKey is where b's token for sb is cached.
func (b *binding) tokenKey(sb Sandbox) tokenKey {
	key := tokenKey{binding: b.index}
	if b.github != nil || (b.oauth != nil && b.oauth.PerSandbox) {
		key.sandbox = sb.ID
	}
	return key
}

// oauthAccess returns b's current access token, minting one when there is
// none or it is about to expire.
func (in *Injector) oauthAccess(ctx context.Context, sb Sandbox, b *binding, v *version) (*oauthToken, error) {
	e := in.oauth.entry(b.tokenKey(sb))
	e.mu.Lock()
	defer e.mu.Unlock()
	now := in.now()
	if t := e.tok; t != nil {
		margin := min(OAuthRefreshBefore, t.expires.Sub(now)/10)
		if now.Add(margin).Before(t.expires) {
			return t, nil
		}
	}
	var t *oauthToken
	var rotated string
	var err error
	what := "oauth token from " + b.tokenURL()
	if b.github != nil {
		t, err = in.mintGitHub(ctx, sb, b, v)
		what = "github app installation token from " + b.tokenURL()
	} else {
		t, rotated, err = in.mintOAuth(ctx, sb, b, v, e.refresh)
	}
	if err != nil {
		in.log.Error("token request failed", oplog.SandboxKey, sb.ID, "secret", b.secret.cfg.ID,
			"binding", b.index, oplog.ErrorKey, err)
		e := fmt.Errorf("bindings[%d] (secret %s): %s: %w", b.index, b.secret.cfg.ID, what, err)
		return nil, &UnavailableError{SecretID: b.secret.cfg.ID, Err: e, Note: e.Error()}
	}
	e.tok = t
	if rotated != "" {
		e.refresh = rotated
	}
	in.log.Info("oauth token minted", oplog.SandboxKey, sb.ID, "secret", b.secret.cfg.ID, "binding", b.index,
		"expires", t.expires.UTC().Format(time.RFC3339))
	return t, nil
}

// oauthRejected drops b's cached token when the upstream answered 401 to a
// request that carried it, so that the next mint is a fresh one
// (Reauthorize retries the request once when it can).
func (in *Injector) oauthRejected(key tokenKey, access string) {
	e := in.oauth.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tok != nil && e.tok.access == access {
		e.tok = nil
	}
}

// mintOAuth calls the token endpoint once.
func (in *Injector) mintOAuth(ctx context.Context, sb Sandbox, b *binding, v *version, rotated string) (*oauthToken, string, error) {
	in.mu.Lock()
	client := in.tokens
	in.mu.Unlock()
	if client == nil {
		return nil, "", errors.New("the gateway gave the secrets injector no token client")
	}
	o := b.oauth
	form := url.Values{"grant_type": {o.Grant}}
	clientSecret := ""
	forms := CanaryForms(v.value.reveal())
	switch o.Grant {
	case GrantClientCredentials:
		clientSecret = v.value.reveal()
	case GrantRefreshToken:
		rt := v.value.reveal()
		if rotated != "" {
			rt = rotated
		}
		form.Set("refresh_token", rt)
		if b.oauthClientSecret != nil {
			cv, err := b.oauthClientSecret.get(ctx)
			if err != nil {
				return nil, "", err
			}
			clientSecret = cv.value.reveal()
		}
	}
	if len(o.Scopes) > 0 {
		form.Set("scope", strings.Join(o.Scopes, " "))
	}
	if o.Audience != "" {
		form.Set("audience", o.Audience)
	}
	if o.SandboxParam != "" {
		form.Set(o.SandboxParam, sessionName(sb.ID))
	}
	ctx, cancel := context.WithTimeout(ctx, AssumeTimeout)
	defer cancel()
	resp, err := oauthPost(ctx, client, o, o.TokenURL, form, clientSecret)
	if err != nil {
		return nil, "", fmt.Errorf("token endpoint: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse+1))
	if err != nil || len(raw) > maxTokenResponse {
		return nil, "", errors.New("token endpoint: answer unreadable or longer than 64 KiB")
	}
	var r struct {
		Access    string  `json:"access_token"`
		Type      string  `json:"token_type"`
		ExpiresIn float64 `json:"expires_in"`
		Refresh   string  `json:"refresh_token"`
		Error     string  `json:"error"`
	}
	_ = json.Unmarshal(raw, &r)
	if resp.StatusCode != http.StatusOK || r.Access == "" {
		code := "no access_token"
		if oauthErrRE().MatchString(r.Error) {
			code = r.Error
		}
		return nil, "", fmt.Errorf("token endpoint answered %d (%s)", resp.StatusCode, code)
	}
	if len(r.Access) < MinValueLength || hasCtl(r.Access) {
		return nil, "", errors.New("token endpoint: the access token is too short or has control characters")
	}
	life := DefaultOAuthLifetime
	if r.ExpiresIn > 0 {
		life = time.Duration(r.ExpiresIn * float64(time.Second))
	}
	forms = append(forms, CanaryForms(r.Access)...)
	if r.Refresh != "" {
		forms = append(forms, CanaryForms(r.Refresh)...)
	}
	return &oauthToken{access: r.Access, expires: in.now().Add(life), scrub: newScrubber(forms),
		revoke: o.RevocationURL}, r.Refresh, nil
}

// oauthPost posts form to an endpoint of o's authorization server with o's
// client authentication (RFC 6749 2.3.1; RFC 7009 2.1 uses the same).
func oauthPost(ctx context.Context, client TokenClient, o *OAuthConfig, endpoint string, form url.Values, clientSecret string) (*http.Response, error) {
	if o.ClientAuth == OAuthAuthBody || clientSecret == "" {
		form.Set("client_id", o.ClientID)
		if clientSecret != "" {
			form.Set("client_secret", clientSecret)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(form.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	if o.ClientAuth == OAuthAuthBasic && clientSecret != "" {
		req.SetBasicAuth(url.QueryEscape(o.ClientID), url.QueryEscape(clientSecret))
	}
	return client.Do(req)
}
