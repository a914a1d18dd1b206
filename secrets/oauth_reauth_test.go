package secrets

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

func unauthorized401() *http.Response {
	return &http.Response{StatusCode: http.StatusUnauthorized, Status: "401 Unauthorized", Header: http.Header{},
		Body: io.NopCloser(strings.NewReader("no"))}
}

// TestReauthorizeOnce: a 401 refreshes once per request and never again for
// the same Applied; a fresh token refused too is held (no mint per request)
// until OAuthRefusedHold has passed; a request whose body cannot be replayed
// only drops the token.
func TestReauthorizeOnce(t *testing.T) {
	const clientSecret = "client-SECRET-value-0123"
	ep := &fakeTokenEndpoint{clientID: "cid", secret: clientSecret}
	in, clock := newOAuthInjector(t, ep, clientSecret,
		`{token_url: "https://auth.fake.test/token", grant: client_credentials, client_id: cid, scopes: [read, write]}`)
	ctx := context.Background()
	req, _ := http.NewRequest("GET", "https://api.fake.test/v1/x", nil)
	a, err := in.Inject(ctx, Sandbox{ID: "sb-1"}, req)
	if err != nil {
		t.Fatal(err)
	}
	first := req.Header.Get("Authorization")
	retry, err := in.Reauthorize(ctx, a, req, true)
	if err != nil || !retry || req.Header.Get("Authorization") == first || ep.count() != 2 {
		t.Fatalf("got retry %v %v, header %q after %d mints, want a retry with a fresh token", retry, err, req.Header.Get("Authorization"), ep.count())
	}
	if retry, _ := in.Reauthorize(ctx, a, req, true); retry || ep.count() != 2 {
		t.Fatalf("second Reauthorize on one Applied: got retry %v after %d mints, want no retry, no mint", retry, ep.count())
	}
	in.ScrubResponse(a, unauthorized401()) // the retry was refused too: held
	if got := a.Audit()[0].Reauth; got != ReauthRetried {
		t.Errorf("got reauth %q, want %q", got, ReauthRetried)
	}

	held := func() (*Applied, *http.Request) {
		req, _ := http.NewRequest("GET", "https://api.fake.test/v1/x", nil)
		a, err := in.Inject(ctx, Sandbox{ID: "sb-1"}, req)
		if err != nil {
			t.Fatal(err)
		}
		return a, req
	}
	a2, req2 := held()
	if retry, _ := in.Reauthorize(ctx, a2, req2, true); retry || ep.count() != 2 || a2.Audit()[0].Reauth != ReauthHeld {
		t.Fatalf("held token: got retry %v after %d mints, reauth %q; want none, 2, %q", retry, ep.count(), a2.Audit()[0].Reauth, ReauthHeld)
	}
	*clock = clock.Add(OAuthRefusedHold + 1)
	a3, req3 := held()
	if retry, _ := in.Reauthorize(ctx, a3, req3, false); retry || ep.count() != 2 || a3.Audit()[0].Reauth != ReauthNotRetried {
		t.Fatalf("not replayable: got retry %v after %d mints, reauth %q; want none, 2, %q", retry, ep.count(), a3.Audit()[0].Reauth, ReauthNotRetried)
	}
	if _, _, err := oauthInject(t, in); err != nil || ep.count() != 3 {
		t.Fatalf("after a dropped token: got %v after %d mints, want a fresh mint", err, ep.count())
	}
}
