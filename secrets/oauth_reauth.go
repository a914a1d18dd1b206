package secrets

import (
	"context"
	"net/http"
	"time"

	"github.com/airlock-dev/airlock/oplog"
)

// A 401 to a request that carried a minted token (OAuth, GitHub App): the
// token may have been revoked or expired early. The gateway asks Reauthorize
// once per request; the token is refreshed once and, when the request can be
// sent again, the request is retried once with the fresh token.

// What a 401 to a minted token led to, for the audit record's secrets entry
// (audit.Secret.Reauth).
const (
	// ReauthRetried: the token was refreshed and the request sent once more
	// with the fresh one; the record's status is the retry's.
	ReauthRetried = "retried"
	// ReauthNotRetried: the request's body could not be sent again (it
	// streamed past max_body_scan, or a gRPC stream); the 401 went to the
	// sandbox and the token was dropped, so the next request carries a
	// fresh one.
	ReauthNotRetried = "not_retried"
	// ReauthHeld: a token minted for a retry was itself answered 401 within
	// OAuthRefusedHold; it is not refreshed again yet (no mint per request
	// against an upstream that refuses every token).
	ReauthHeld = "held"
	// ReauthFailed: the refresh failed; the sandbox got a 503 naming the
	// binding and the token endpoint's error code.
	ReauthFailed = "refresh_failed"
)

// OAuthRefusedHold is how long a token that the upstream refused right after
// it was minted for a retry is kept without another refresh on a 401.
const OAuthRefusedHold = 30 * time.Second

// minted is the token an Applied carried, for Reauthorize.
type minted struct {
	sb     Sandbox
	b      *binding
	key    tokenKey
	access string
}

// Reauthorize handles the upstream's 401 to the request a carried. It does
// something only when a carried a minted token and only once per Applied:
// it drops that token and, when retry is true (the gateway can send req
// again: it has no body, or a buffered one), mints a fresh token, puts it in
// req's bound header, adds it to what the response is scrubbed of and
// reports true: the gateway sends req once more and relays that answer,
// whatever it is. With retry false the token is only dropped: the 401 goes
// to the sandbox and the next request mints. A failed refresh is an
// *UnavailableError (503, naming the binding; never a value); nothing is
// sent again. The outcome is in a's audit entry (Reauth*).
func (in *Injector) Reauthorize(ctx context.Context, a *Applied, req *http.Request, retry bool) (bool, error) {
	if a == nil || a.minted == nil || a.rec.Reauth != "" {
		return false, nil
	}
	m := a.minted
	if in.oauthHeld(m.key, m.access) {
		a.rec.Reauth = ReauthHeld
		return false, nil
	}
	in.oauthRejected(m.key, m.access)
	if !retry {
		a.rec.Reauth = ReauthNotRetried
		in.log.Warn("minted token refused; request not retried (body not replayable)", oplog.SandboxKey, m.sb.ID,
			"secret", a.rec.ID, "binding", m.b.index)
		return false, nil
	}
	v, err := m.b.secret.get(ctx)
	if err != nil {
		a.rec.Reauth = ReauthFailed
		return false, err
	}
	t, err := in.oauthAccess(ctx, m.sb, m.b, v)
	if err != nil {
		a.rec.Reauth = ReauthFailed
		return false, err
	}
	cred, token := m.b.render(t.access)
	req.Header.Set(m.b.header, cred)
	scrub := mergeScrubbers(a.scrub, v.scrub, t.scrub)
	if token != "" {
		scrub = mergeScrubbers(scrub, newScrubber(CanaryForms(token)))
	}
	a.scrub = scrub
	a.minted = &minted{sb: m.sb, b: m.b, key: m.key, access: t.access}
	a.rec.Version, a.rec.Fingerprint, a.rec.Reauth = v.id, v.fp, ReauthRetried
	in.log.Info("minted token refused; refreshed and retrying once", oplog.SandboxKey, m.sb.ID,
		"secret", a.rec.ID, "binding", m.b.index)
	return true, nil
}

// oauthHeld reports whether access is a token the upstream refused right
// after it was minted for a retry, less than OAuthRefusedHold ago.
func (in *Injector) oauthHeld(key tokenKey, access string) bool {
	e := in.oauth.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.tok != nil && e.tok.access == access && in.now().Before(e.tok.refusedUntil)
}

// oauthRefusedFresh marks a token minted for a retry that was answered 401
// too: it stays cached (a refresh would not help) for OAuthRefusedHold.
func (in *Injector) oauthRefusedFresh(key tokenKey, access string) {
	e := in.oauth.entry(key)
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.tok != nil && e.tok.access == access {
		e.tok.refusedUntil = in.now().Add(OAuthRefusedHold)
	}
}

// unauthorized is ScrubResponse's part in a 401 to a minted token: a token
// not yet handled by Reauthorize is dropped (the next request mints); one
// that was minted for this request's retry is held (OAuthRefusedHold).
func (in *Injector) unauthorized(a *Applied) {
	m := a.minted
	if m == nil {
		return
	}
	switch a.rec.Reauth {
	case ReauthRetried:
		in.oauthRefusedFresh(m.key, m.access)
	case "":
		in.oauthRejected(m.key, m.access)
	}
}
