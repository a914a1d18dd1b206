package gateway

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/inspect"
)

// benchInspector is the real scanner (package inspect's rules and
// decoders), keyed for the benchmark.
func benchInspector(b *testing.B) Inspector {
	sc, err := inspect.New(inspect.Config{Key: bytes.Repeat([]byte("k"), 32)})
	if err != nil {
		b.Fatal(err)
	}
	return NewInspector(sc)
}

// BenchmarkInspectKeepAlive: small requests (a query, the usual headers) on
// one kept-alive connection through two gateways in the same run, one with
// content inspection and one without; the ratio is its cost. Both use the
// real policy engine and audit writer.
func BenchmarkInspectKeepAlive(b *testing.B) {
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }), nil)
	off := benchHarness(b, nil)
	on := benchHarnessWith(b, nil, []harnessOpt{withInspector(benchInspector(b), 0)})
	off.allowUpstreams(up)
	on.allowUpstreams(up)
	url := fmt.Sprintf("http://pypi.org:%d/simple/requests/?format=json", up.port)
	run := func(c *http.Client, n int) float64 {
		start := time.Now()
		for i := 0; i < n; i++ {
			req, _ := http.NewRequest("GET", url, nil)
			req.Header.Set("User-Agent", "pip/24.0 {\"installer\":{\"name\":\"pip\"}}")
			req.Header.Set("Accept", "application/vnd.pypi.simple.v1+json")
			resp, err := c.Do(req)
			if err != nil {
				b.Fatal(err)
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return float64(n) / time.Since(start).Seconds()
	}
	cOff, cOn := off.proxyClient(nil), on.proxyClient(nil)
	run(cOff, 200)
	run(cOn, 200)
	b.ResetTimer()
	// Interleaved halves, so a slow patch of the shared machine hits both.
	var offRate, onRate float64
	for i := 0; i < 2; i++ {
		offRate += run(cOff, b.N/2+1) / 2
		onRate += run(cOn, b.N/2+1) / 2
	}
	b.ReportMetric(offRate, "off-req/s")
	b.ReportMetric(onRate, "on-req/s")
	b.ReportMetric(onRate/offRate, "ratio")
}

// BenchmarkInspectBody: 1 MiB request bodies streamed through the gateway
// with inspection on; SetBytes makes the MB/s the body scan rate through the
// whole path (relay included).
func BenchmarkInspectBody(b *testing.B) {
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Write([]byte("ok"))
	}), nil)
	for _, tc := range []struct {
		name string
		in   bool
	}{{"off", false}, {"on", true}} {
		b.Run(tc.name, func(b *testing.B) {
			var opts []harnessOpt
			if tc.in {
				opts = append(opts, withInspector(benchInspector(b), 64<<20))
			}
			h := benchHarnessWith(b, nil, opts)
			h.allowUpstreams(up)
			c := h.proxyClient(nil)
			body := bytes.Repeat([]byte("pkg source line: func main() { fmt.Println(\"hello\") }\n"), (1<<20)/54)
			url := fmt.Sprintf("http://pypi.org:%d/upload", up.port)
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				resp, err := c.Post(url, "application/octet-stream", bytes.NewReader(body))
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("status %d", resp.StatusCode)
				}
			}
		})
	}
}
