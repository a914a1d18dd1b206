package secrets

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
)

func BenchmarkScrubReader(b *testing.B) {
	s := newScrubber(CanaryForms(canary))
	data := bytes.Repeat([]byte("0123456789abcdefghijklmnopqrstuvwxyz{}\":,\n"), 1<<20/42)
	copy(data[len(data)/2:], canary)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		var n atomic.Int64
		r := newScrubReader(s, io.NopCloser(bytes.NewReader(data)), &n, nil)
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkInject(b *testing.B) {
	b.Setenv(canaryEnv, canary)
	in, err := New(Config{
		Secrets: []SecretConfig{{ID: "canary", Env: canaryEnv}},
		Bindings: []BindingConfig{{Secret: "canary", Sandboxes: SandboxSelector{IDs: []string{"sb-1"}},
			Host: "api.example.com", Template: "Bearer {{value}}"}},
	}, discardLogger())
	if err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("x", 4096)
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		req, _ := http.NewRequest("POST", "https://api.example.com/v1/things?a=b", strings.NewReader(body))
		req.Header.Set("User-Agent", "bench")
		req.Header.Set("Content-Type", "application/json")
		a, err := in.Inject(context.Background(), sb1, req)
		if err != nil || a == nil {
			b.Fatal(err)
		}
	}
}
