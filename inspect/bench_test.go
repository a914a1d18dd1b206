package inspect_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/inspect"
)

// cpuRate reports MB per CPU-second (user+system time of the process):
// on a shared machine wall-clock MB/s understates what one core does.
func cpuRate(b *testing.B, n int) func() {
	start := cpuTime()
	return func() {
		if d := cpuTime() - start; d > 0 {
			b.ReportMetric(float64(n)*float64(b.N)/d.Seconds()/1e6, "MB/cpu-s")
		}
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchScanner(b *testing.B) *inspect.Scanner {
	s, err := inspect.New(inspect.Config{Key: testKey})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// BenchmarkScanBody reports bytes per second on one core for Scan over
// each kind of body in inspect.BodyKinds (b.SetBytes: the MB/s column;
// MB/cpu-s counts CPU time, fairer on a shared machine).
func BenchmarkScanBody(b *testing.B) {
	s := benchScanner(b)
	bodies := inspect.BodyKinds(b)
	for _, name := range inspect.BodyKindNames(bodies) {
		body := bodies[name]
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			defer cpuRate(b, len(body))()
			for b.Loop() {
				s.Scan("body", body)
			}
		})
	}
}

// BenchmarkStream is Stream over a body written in 32 KiB pieces.
func BenchmarkStream(b *testing.B) {
	s := benchScanner(b)
	body := inspect.BodyKinds(b)["go-source"]
	b.SetBytes(int64(len(body)))
	defer cpuRate(b, len(body))()
	for b.Loop() {
		st := s.NewStream("body")
		for p := body; len(p) > 0; {
			n := min(32<<10, len(p))
			st.Write(p[:n])
			p = p[n:]
		}
		st.Close()
	}
}

// BenchmarkScanURL is one request's path and query as the gateway scans
// them.
func BenchmarkScanURL(b *testing.B) {
	s := benchScanner(b)
	path := []byte("/v1/repos/octocat/hello-world/pulls/42/files")
	fields := []inspect.Field{{Where: "url.query", Name: "per_page", Value: []byte("100")}, {Where: "url.query", Name: "page", Value: []byte("2")}, {Where: "url.query", Name: "q", Value: []byte("is:open label:bug")}}
	for b.Loop() {
		s.Scan(inspect.WherePath, path)
		s.ScanFields(fields)
	}
}

// BenchmarkScanHeaders is a browser-like header set.
func BenchmarkScanHeaders(b *testing.B) {
	s := benchScanner(b)
	var fields []inspect.Field
	for _, h := range [][2]string{{"user-agent", "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"},
		{"accept", "application/json"}, {"accept-language", "en-US,en;q=0.9"}, {"x-request-id", "7f8e9d0c-1b2a-4c3d-8e9f-0a1b2c3d4e5f"},
		{"cookie", "_ga=GA1.1.1234567890.1700000000; theme=dark"}} {
		fields = append(fields, inspect.Field{Where: "header:" + h[0], Name: h[0], Value: []byte(h[1])})
	}
	b.Run("repeated", func(b *testing.B) {
		for b.Loop() {
			s.ScanFields(fields)
		}
	})
	// A request id that changes every request: the set is new each time,
	// its other values are not.
	b.Run("varying", func(b *testing.B) {
		fs := append([]inspect.Field(nil), fields...)
		i := 0
		for b.Loop() {
			i++
			fs[3].Value = fmt.Appendf(fs[3].Value[:0], "7f8e9d0c-1b2a-4c3d-8e9f-%012x", i)
			s.ScanFields(fs)
		}
	})
}

// BenchmarkScanDNS is one question name.
func BenchmarkScanDNS(b *testing.B) {
	s := benchScanner(b)
	name := []byte("objects.githubusercontent.com")
	for b.Loop() {
		s.Scan(inspect.WhereDNS, name)
	}
}

// BenchmarkCleanRequest is what the gateway's inspect stage asks of the
// scanner for one small clean kept-alive request (BenchmarkInspectKeepAlive
// in package gateway): its headers, its query, its path segments, the
// sandbox's window, and the two-byte response.
func BenchmarkCleanRequest(b *testing.B) {
	s := benchScanner(b)
	headers := []inspect.Field{
		{Where: "header:accept", Name: "Accept", Value: []byte("application/vnd.pypi.simple.v1+json")},
		{Where: "header:accept-encoding", Name: "Accept-Encoding", Value: []byte("gzip")},
		{Where: "header:user-agent", Name: "User-Agent", Value: []byte(`pip/24.0 {"installer":{"name":"pip"}}`)},
	}
	query := []inspect.Field{{Where: "url.query", Name: "format", Value: []byte("json")}}
	path := []inspect.Field{{Where: "url.path", Value: []byte("simple")}, {Where: "url.path", Value: []byte("requests")}}
	w := s.Window("sb-bench")
	for b.Loop() {
		s.ScanFields(headers)
		s.ScanFields(query)
		s.ScanFields(path)
		w.Add(query)
		s.ScanResponse("text/plain; charset=utf-8", []byte("ok"))
	}
}

// BenchmarkWindowJSON is the window's cost for an agent's JSON calls: each
// request brings six new values (a chat call's model, role, a fresh prompt,
// a tool call's arguments), so every Add scans its joins.
func BenchmarkWindowJSON(b *testing.B) {
	s := benchScanner(b)
	w := s.Window("sb-bench")
	fields := make([]inspect.Field, 6)
	i := 0
	for b.Loop() {
		i++
		for k := range fields {
			fields[k] = inspect.Field{Where: "body", Value: fmt.Appendf(nil, "value %d of request %d: refactor the handler", k, i)}
		}
		w.Add(fields)
	}
}
