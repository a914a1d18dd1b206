package gateway

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkHTTPKeepAliveConns: small responses on 16 and 64 kept-alive
// connections at once (what bench-compare's wrk does), direct and through the
// explicit proxy with the real engine and audit writer, in the same run. Besides
// req/s and p99 it reports the process CPU per request the proxy adds
// (gateway-cpu-µs/req: proxied minus direct, user + system), the number that
// decides throughput on a loaded machine, and the read and write system calls
// per request it adds (gateway-syscalls/req, from /proc/self/io: a count that
// does not depend on the machine's load; 6 is the floor of a Go relay, see
// DESIGN.md), and the heap allocations per request it adds
// (gateway-allocs/req and gateway-B/req, runtime.MemStats: proxied minus
// direct, so the client's and the origin's own are left out). The
// inspect-c16 case has content inspection on (the daemon's default).
func BenchmarkHTTPKeepAliveConns(b *testing.B) {
	up := newUpstream(b, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }), nil)
	plain := benchHarness(b, nil)
	plain.allowUpstreams(up)
	inspected := benchHarnessWith(b, nil, []harnessOpt{withInspector(benchInspector(b), 0)})
	inspected.allowUpstreams(up)
	url := fmt.Sprintf("http://pypi.org:%d/simple/x/", up.port)
	directURL := fmt.Sprintf("http://%s/simple/x/", up.addr)
	for _, tc := range []struct {
		name  string
		conns int
		h     *harness
	}{{"c16", 16, plain}, {"c64", 64, plain}, {"inspect-c16", 16, inspected}} {
		conns, h := tc.conns, tc.h
		b.Run(tc.name, func(b *testing.B) {
			clients := func(proxied bool) []*http.Client {
				cs := make([]*http.Client, conns)
				for i := range cs {
					if proxied {
						cs[i] = h.proxyClient(nil)
					} else {
						cs[i] = &http.Client{Transport: &http.Transport{Proxy: nil}, Timeout: 10 * time.Second}
					}
				}
				return cs
			}
			run := func(cs []*http.Client, u string, n int) (rate float64, cpu time.Duration, sys int64, heap heapUse, lat []time.Duration) {
				var next atomic.Int64
				lats := make([][]time.Duration, len(cs))
				var wg sync.WaitGroup
				var failed atomic.Value
				cpu0, sys0, heap0 := processCPU(), processSyscalls(), readHeapUse()
				start := time.Now()
				for i, c := range cs {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for next.Add(1) <= int64(n) {
							t0 := time.Now()
							resp, err := c.Get(u)
							if err != nil {
								failed.Store(err)
								return
							}
							io.Copy(io.Discard, resp.Body)
							resp.Body.Close()
							lats[i] = append(lats[i], time.Since(t0))
						}
					}()
				}
				wg.Wait()
				el := time.Since(start)
				cpu, sys, heap = processCPU()-cpu0, processSyscalls()-sys0, readHeapUse().minus(heap0)
				if err, _ := failed.Load().(error); err != nil {
					b.Fatal(err)
				}
				for _, l := range lats {
					lat = append(lat, l...)
				}
				return float64(n) / el.Seconds(), cpu, sys, heap, lat
			}
			direct, proxied := clients(false), clients(true)
			run(direct, directURL, 20*conns)
			run(proxied, url, 20*conns)
			b.ResetTimer()
			dRate, dCPU, dSys, dHeap, _ := run(direct, directURL, b.N)
			pRate, pCPU, pSys, pHeap, pLat := run(proxied, url, b.N)
			b.ReportMetric(dRate, "direct-req/s")
			b.ReportMetric(pRate, "proxy-req/s")
			b.ReportMetric(pRate/dRate, "ratio")
			b.ReportMetric(float64(percentile(pLat, 0.99).Microseconds())/1000, "proxy-p99-ms")
			b.ReportMetric(float64((pCPU-dCPU).Microseconds())/float64(b.N), "gateway-cpu-µs/req")
			gw := pHeap.minus(dHeap)
			b.ReportMetric(float64(gw.mallocs)/float64(b.N), "gateway-allocs/req")
			b.ReportMetric(float64(gw.bytes)/float64(b.N), "gateway-B/req")
			if dSys >= 0 && pSys >= 0 {
				b.ReportMetric(float64(pSys-dSys)/float64(b.N), "gateway-syscalls/req")
			}
		})
	}
}

// heapUse is the process's heap allocations so far: objects and bytes.
type heapUse struct{ mallocs, bytes int64 }

func readHeapUse() heapUse {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return heapUse{int64(m.Mallocs), int64(m.TotalAlloc)}
}

func (h heapUse) minus(o heapUse) heapUse { return heapUse{h.mallocs - o.mallocs, h.bytes - o.bytes} }

// processSyscalls is the number of read and write system calls the process
// made so far (syscr + syscw of /proc/self/io, would-block reads included),
// or -1 where that file cannot be read.
func processSyscalls() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return -1
	}
	var n int64
	for _, line := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(line, ": ")
		if k == "syscr" || k == "syscw" {
			x, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return -1
			}
			n += x
		}
	}
	return n
}

// BenchmarkWireHead: the gateway's own request and response heads
// (writeRequestHead, writeResponseHead) against net/http's Request.Write and
// Response.Write for the same kept-alive exchange.
func BenchmarkWireHead(b *testing.B) {
	req, err := http.ReadRequest(bufio.NewReader(strings.NewReader("GET http://pypi.org/simple/x/ HTTP/1.1\r\nHost: pypi.org\r\nUser-Agent: pip/24.0\r\nAccept: */*\r\nAccept-Encoding: gzip\r\n\r\n")))
	if err != nil {
		b.Fatal(err)
	}
	req.URL.Scheme, req.URL.Host, req.RequestURI = "", "", ""
	resp, err := http.ReadResponse(bufio.NewReader(strings.NewReader("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nDate: Sun, 29 Nov 2026 07:00:00 GMT\r\nContent-Length: 2\r\n\r\nok")), req)
	if err != nil {
		b.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	bw := bufio.NewWriter(io.Discard)
	b.Run("request/net-http", func(b *testing.B) {
		for b.Loop() {
			req.Write(bw)
			bw.Flush()
		}
	})
	b.Run("request/gateway", func(b *testing.B) {
		for b.Loop() {
			writeRequestHead(bw, req)
			bw.Flush()
		}
	})
	b.Run("response/net-http", func(b *testing.B) {
		for b.Loop() {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			resp.Write(bw)
			bw.Flush()
		}
	})
	b.Run("response/gateway", func(b *testing.B) {
		for b.Loop() {
			resp.Body = io.NopCloser(bytes.NewReader(body))
			writeResponseHead(bw, resp)
			io.CopyN(bw, resp.Body, resp.ContentLength)
			bw.Flush()
		}
	})
}
