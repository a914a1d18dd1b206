package secrets

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
)

// TestBearerAuthorization: the named secret renders as Bearer; an unknown
// id and a value with a line break are errors that do not carry the value.
func TestBearerAuthorization(t *testing.T) {
	t.Setenv("ALK_BUNDLE_TOKEN", "tok-s3cret-bundle")
	t.Setenv("ALK_BUNDLE_BAD", "two\nlines-s3cret")
	cfg, err := Parse([]byte("secrets:\n- {id: bundle, env: ALK_BUNDLE_TOKEN}\n- {id: bad, env: ALK_BUNDLE_BAD}\n"))
	if err != nil {
		t.Fatal(err)
	}
	in, err := New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := in.BearerAuthorization("bundle")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f(context.Background()); err != nil || got != "Bearer tok-s3cret-bundle" {
		t.Fatalf("got %q, %v, want Bearer tok-s3cret-bundle", got, err)
	}
	if _, err := in.BearerAuthorization("nope"); err == nil || !strings.Contains(err.Error(), `no secret "nope"`) {
		t.Fatalf("unknown id: got %v", err)
	}
	f, _ = in.BearerAuthorization("bad")
	if _, err := f(context.Background()); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("bad value: got %v, want an error without the value", err)
	}
}
