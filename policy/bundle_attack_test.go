package policy_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/policy/bundletest"
)

// withExtraFiles returns tarball with files appended after its own (the
// signature, if any, untouched), gzipped again.
func withExtraFiles(t *testing.T, tarball []byte, files map[string][]byte) []byte {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(tarball))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	tw := tar.NewWriter(zw)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(tw, tr); err != nil {
			t.Fatal(err)
		}
	}
	for name, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "/" + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// pollQuiet polls once; the download's own error is in the status.
func pollQuiet(e *policy.Engine) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_ = e.PollBundle(ctx)
}

// TestBundleUnsignedFileBesideSigned: files added to a signed bundle after
// it was signed (a module allowing evil.example, a data document) are
// refused with the whole bundle: the signature must cover every file.
func TestBundleUnsignedFileBesideSigned(t *testing.T) {
	key := bundletest.NewKey(t, "prod", "airlock")
	for name, extra := range map[string]map[string][]byte{
		"module":        {"evil.rego": []byte(allowHost("evil.example"))},
		"data document": {"airlock/presets/evil/data.json": []byte(`{"evil.example": true}`)},
	} {
		t.Run(name, func(t *testing.T) {
			srv := bundletest.NewServer(t)
			srv.Publish(signedBundle(t, key, "v1", "one.example"))
			e := bundleEngine(t, srv, key, "")
			poll(t, e)
			srv.Publish(withExtraFiles(t, signedBundle(t, key, "v2", "one.example"), extra))
			pollQuiet(e)
			if got := allowedHosts(e, "one.example", "evil.example"); !got["one.example"] || got["evil.example"] {
				t.Fatalf("got %v, want the signed policy only (one.example)", got)
			}
			st := status(t, e)
			if st.Revision != "v1" || st.LastErrorStage != policy.BundleStageVerify || !strings.Contains(st.LastError, "not included in bundle signature") {
				t.Fatalf("status %+v; want v1 kept and a verify error naming the unsigned file", st)
			}
		})
	}
}

// TestBundleOversizedRefused: a bundle whose files are each under the
// per-file limit but together unpack past MaxBundleSize (about 100
// kilobytes gzipped: a memory bomb) is refused before OPA's reader holds
// it, signed or not, downloaded or persisted; the old policy stays, and a
// start from such a persisted file denies everything.
func TestBundleOversizedRefused(t *testing.T) {
	key := bundletest.NewKey(t, "prod", "airlock")
	pad := make([]byte, policy.MaxBundleSize/2)
	for i := range pad {
		pad[i] = ' '
	}
	copy(pad, "{}")
	bomb := withExtraFiles(t, signedBundle(t, key, "v2", "one.example"), map[string][]byte{
		"a/data.json": pad, "b/data.json": pad, "c/data.json": pad})
	if len(bomb) > 2<<20 {
		t.Fatalf("the bomb is %d bytes gzipped; the test wants a small one", len(bomb))
	}
	srv := bundletest.NewServer(t)
	srv.Publish(signedBundle(t, key, "v1", "one.example"))
	dir := t.TempDir()
	e := bundleEngine(t, srv, key, dir)
	poll(t, e)
	srv.Publish(bomb)
	pollQuiet(e)
	st := status(t, e)
	if st.Revision != "v1" || st.LastErrorStage != policy.BundleStageVerify || !strings.Contains(st.LastError, "bundle over") {
		t.Fatalf("status %+v; want v1 kept and a verify error naming the size", st)
	}
	if got := allowedHosts(e, "one.example"); !got["one.example"] {
		t.Fatal("the old policy is gone")
	}

	// The same tarball planted as the persisted bundle: refused at start.
	if err := os.WriteFile(filepath.Join(dir, "bundle.tar.gz"), bomb, 0o600); err != nil {
		t.Fatal(err)
	}
	srv.SetDown(true)
	e2 := bundleEngine(t, srv, key, dir)
	st = status(t, e2)
	if st.Active || !strings.Contains(st.LastError, "bundle over") {
		t.Fatalf("restart from the planted bundle: status %+v; want none active and the size named", st)
	}
	if got := allowedHosts(e2, "one.example", "pypi.org"); got["one.example"] || got["pypi.org"] {
		t.Fatalf("got %v, want everything denied", got)
	}
}

// TestBundleURLQueryRedacted: a credential in the bundle URL's query (a
// presigned URL's signature) reaches the server but no log line, status
// (GET /v1/health shows it to every API caller) or error.
func TestBundleURLQueryRedacted(t *testing.T) {
	srv := bundletest.NewServer(t)
	srv.Publish(signedBundle(t, nil, "v1", "one.example"))
	var logs bytes.Buffer
	bc := &policy.BundleConfig{URL: srv.URL + "?X-Sig=alk-presigned-s3cret&b=1", Manual: true}
	e, err := policy.New(policy.Config{Bundle: bc, EvalTimeout: 10 * time.Second}, slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	poll(t, e)
	if got := allowedHosts(e, "one.example"); !got["one.example"] {
		t.Fatal("the bundle behind the presigned URL was not activated")
	}
	srv.SetDown(true)
	pollQuiet(e)
	srv.Close() // connection refused: the HTTP error quotes the URL
	pollQuiet(e)
	st := status(t, e)
	if st.LastError == "" || strings.Contains(st.LastError, "s3cret") || strings.Contains(st.URL, "s3cret") || strings.Contains(logs.String(), "s3cret") {
		t.Fatalf("the query leaked (or no error recorded): status %+v\nlogs %s", st, logs.String())
	}
	if !strings.Contains(st.URL, "REDACTED") {
		t.Fatalf("status URL %q, want the query shown as REDACTED", st.URL)
	}
	if got := policy.RedactBundleURL("https://b.example/x.tar.gz"); got != "https://b.example/x.tar.gz" {
		t.Fatalf("a URL without a query: got %q", got)
	}
}
