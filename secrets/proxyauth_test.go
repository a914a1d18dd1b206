package secrets

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestProxyAuthorization: the named secret renders as Basic; an unknown id
// and a value without a colon are errors that do not carry the value.
func TestProxyAuthorization(t *testing.T) {
	t.Setenv("ALK_PROXY_CRED", "alice:s3cret-pw")
	t.Setenv("ALK_PROXY_BAD", "no-colon-here")
	cfg, err := Parse([]byte("secrets:\n- {id: corp, env: ALK_PROXY_CRED}\n- {id: bad, env: ALK_PROXY_BAD}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := in.ProxyAuthorization("corp")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f(context.Background()); err != nil || got != "Basic YWxpY2U6czNjcmV0LXB3" {
		t.Fatalf("got %q, %v, want Basic YWxpY2U6czNjcmV0LXB3", got, err)
	}
	if _, err := in.ProxyAuthorization("nope"); err == nil || !strings.Contains(err.Error(), `no secret "nope"`) {
		t.Fatalf("unknown id: got %v", err)
	}
	f, _ = in.ProxyAuthorization("bad")
	if _, err := f(context.Background()); err == nil || strings.Contains(err.Error(), "no-colon-here") {
		t.Fatalf("bad value: got %v, want an error without the value", err)
	}
}
