package secrets

import (
	"context"
	"fmt"
	"net/http"
	"net/url"

	"github.com/airlock-dev/airlock/oplog"
)

// Revoking what was minted for a sandbox when it is deleted (Forget): a
// GitHub App installation token (DELETE /installation/token, with the token
// itself) and an oauth.per_sandbox token with a revocation_url (RFC 7009:
// POST token=...&token_type_hint=access_token with the client's
// authentication). AWS sessions cannot be revoked one by one; they expire.

// revokeMinted revokes a forgotten sandbox's minted tokens in the
// background: Forget does not wait on the provider. A failed revocation is
// logged; the token still expires.
func (in *Injector) revokeMinted(sandbox string) {
	in.mu.Lock()
	client := in.tokens
	in.mu.Unlock()
	for k, e := range in.oauth.take(sandbox) {
		e.mu.Lock()
		t := e.tok
		e.mu.Unlock()
		if t == nil || t.revoke == "" || client == nil || !in.now().Before(t.expires) {
			continue
		}
		b := in.bindings[k.binding]
		in.revokes.Add(1)
		go func() {
			defer in.revokes.Done()
			ctx, cancel := context.WithTimeout(context.Background(), AssumeTimeout)
			defer cancel()
			err := in.revokeOne(ctx, client, b, t)
			if err != nil {
				in.log.Warn("revoking a sandbox's minted token failed", oplog.SandboxKey, sandbox,
					"secret", b.secret.cfg.ID, "binding", b.index, oplog.ErrorKey, err)
				return
			}
			in.log.Info("minted token revoked", oplog.SandboxKey, sandbox, "secret", b.secret.cfg.ID, "binding", b.index)
		}()
	}
}

// revokeOne sends one revocation and checks the provider's answer: 204 from
// GitHub, 200 from an RFC 7009 endpoint (which answers 200 for a token it
// no longer knows, too).
func (in *Injector) revokeOne(ctx context.Context, client TokenClient, b *binding, t *oauthToken) error {
	var resp *http.Response
	var err error
	want := http.StatusOK
	if b.github != nil {
		want = http.StatusNoContent
		req, rerr := http.NewRequestWithContext(ctx, http.MethodDelete, t.revoke, nil)
		if rerr != nil {
			return rerr
		}
		req.Header.Set("Authorization", "Bearer "+t.access)
		req.Header.Set("Accept", "application/vnd.github+json")
		resp, err = client.Do(req)
	} else {
		v, verr := b.secret.get(ctx)
		if verr != nil {
			return verr
		}
		form := url.Values{"token": {t.access}, "token_type_hint": {"access_token"}}
		resp, err = oauthPost(ctx, client, b.oauth, t.revoke, form, v.value.reveal())
	}
	if err != nil {
		return fmt.Errorf("revocation endpoint: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != want {
		return fmt.Errorf("revocation endpoint answered %d", resp.StatusCode)
	}
	return nil
}
