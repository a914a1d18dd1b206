package inspect

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"go/build"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"syscall"
	"testing"
	"time"
)

// BodyKinds are request bodies of the kinds agents send, each at least
// 16 KiB (past the clean cache) and built the same way on every machine:
// registry metadata JSON, a JSON API body (an LLM chat request), Go
// source, minified JavaScript, a base64 blob in a JSON upload, random
// bytes, plain prose, and a body of spaces (the walk's floor). Exported for
// the benchmarks of package inspect_test.
func BodyKinds(tb testing.TB) map[string][]byte {
	tb.Helper()
	goroot := build.Default.GOROOT
	read := func(p string) []byte {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		return b
	}
	out := map[string][]byte{}
	out["registry-json"] = read(filepath.Join("inspecttest", "testdata", "npm-express.json"))

	var chat bytes.Buffer
	chat.WriteString(`{"model":"gpt-4o","messages":[`)
	for i := range 200 {
		fmt.Fprintf(&chat, `{"role":"user","content":"Step %d: refactor the handler so the request context is passed down and errors are wrapped with the operation name."},`, i)
	}
	chat.WriteString(`{"role":"user","content":"done"}]}`)
	out["llm-chat"] = chat.Bytes()

	out["go-source"] = read(filepath.Join(goroot, "src", "net", "http", "server.go"))

	// Minified JavaScript: the Go wasm loader with comments dropped and
	// whitespace squeezed out, repeated to 128 KiB.
	js := read(filepath.Join(goroot, "lib", "wasm", "wasm_exec.js"))
	js = regexp.MustCompile(`(?m)^\s*//.*$`).ReplaceAll(js, nil)
	js = regexp.MustCompile(`\s*([{}()\[\];,=:+\-*/<>!&|?])\s*`).ReplaceAll(js, []byte("$1"))
	js = regexp.MustCompile(`\s+`).ReplaceAll(js, []byte(" "))
	out["minified-js"] = repeatTo(js, 128<<10)

	rnd := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 96<<10)
	for i := range raw {
		raw[i] = byte(rnd.Uint32())
	}
	out["random-bytes"] = raw[:64<<10]
	out["base64-blob"] = []byte(`{"name":"screenshot.png","content":"` + base64.StdEncoding.EncodeToString(raw) + `"}`)

	prose := read(filepath.Join(goroot, "src", "testdata", "Isaac.Newton-Opticks.txt"))
	out["prose"] = prose[:min(len(prose), 256<<10)]

	out["spaces"] = bytes.Repeat([]byte(" "), 128<<10)
	return out
}

// BodyKindNames is BodyKinds' keys, sorted.
func BodyKindNames(m map[string][]byte) []string {
	var names []string
	for k := range m {
		names = append(names, k)
	}
	sort.Strings(names)
	return names
}

func repeatTo(b []byte, n int) []byte {
	out := make([]byte, 0, n+len(b))
	for len(out) < n {
		out = append(out, b...)
	}
	return out[:n]
}

// cpuTime is the process's user and system CPU time: on a shared machine
// MB per CPU-second is fairer than wall-clock MB/s.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
