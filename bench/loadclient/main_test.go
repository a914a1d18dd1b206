package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// captureStdout runs f and returns what it printed.
func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	defer func() { os.Stdout = old }()
	errc := make(chan error, 1)
	go func() { errc <- f(); w.Close() }()
	out, _ := io.ReadAll(r)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestUpload: -upload POSTs a text body of exactly that size with each
// request, and the result counts the bytes sent.
func TestUpload(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	var types []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sizes, types = append(sizes, len(b)), append(types, r.Method+" "+r.Header.Get("Content-Type"))
		mu.Unlock()
		_, _ = w.Write([]byte("ok\n"))
	}))
	defer srv.Close()
	const size = 300_001
	out := captureStdout(t, func() error { return run(srv.URL+"/sink", 3, 2, time.Minute, "", "", "", false, size) })
	var res Result
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &res); err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if res.Requests != 3 || res.Errors != 0 || res.Bytes != 3*size {
		t.Errorf("got %+v, want 3 requests, 0 errors, %d bytes", res, 3*size)
	}
	for i, n := range sizes {
		if n != size || types[i] != "POST text/plain; charset=utf-8" {
			t.Errorf("request %d: got %d bytes, %q, want %d, a text/plain POST", i, n, types[i], size)
		}
	}
	if !bytes.Equal(textBody(40)[:4], []byte("func")) || len(textBody(size)) != size || textBody(0) != nil {
		t.Errorf("textBody: wrong size or content")
	}
	if err := run(srv.URL, 1, 1, time.Minute, "", "", "", false, 65<<20); err == nil || !strings.Contains(err.Error(), "-upload") {
		t.Errorf("-upload over 64 MiB: got %v, want an error naming -upload", err)
	}
}
