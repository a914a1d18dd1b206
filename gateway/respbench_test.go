package gateway

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkInspectResponseStream: a 4 MiB chunked text response (a log, a
// large unsized JSON) relayed through two gateways in the same run, one with
// content inspection and one without; MB/s of each and the ratio. Both use
// the real policy engine and audit writer.
func BenchmarkInspectResponseStream(b *testing.B) {
	line := strings.Repeat("benign log line of a build, nothing to see here\n", 64)
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		for n := 0; n < 4<<20; n += len(line) {
			io.WriteString(w, line)
		}
	}), nil)
	off := benchHarness(b, nil)
	on := benchHarnessWith(b, nil, []harnessOpt{withInspector(benchInspector(b), 0)})
	off.allowUpstreams(up)
	on.allowUpstreams(up)
	url := fmt.Sprintf("http://pypi.org:%d/log", up.port)
	run := func(c *http.Client, n int) float64 {
		start := time.Now()
		var total int64
		for i := 0; i < n; i++ {
			resp, err := c.Get(url)
			if err != nil {
				b.Fatal(err)
			}
			m, _ := io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			total += m
		}
		return float64(total) / time.Since(start).Seconds() / 1e6
	}
	cOff, cOn := off.proxyClient(nil), on.proxyClient(nil)
	run(cOff, 2)
	run(cOn, 2)
	b.ResetTimer()
	var offRate, onRate float64
	for i := 0; i < 2; i++ {
		offRate += run(cOff, b.N/2+1) / 2
		onRate += run(cOn, b.N/2+1) / 2
	}
	b.ReportMetric(offRate, "off-MB/s")
	b.ReportMetric(onRate, "on-MB/s")
	b.ReportMetric(onRate/offRate, "ratio")
}
