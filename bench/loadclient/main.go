package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Result is the line loadclient prints.
type Result struct {
	Requests int64   `json:"requests"`
	Errors   int64   `json:"errors"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	FirstErr string  `json:"first_error,omitempty"`
}

func main() {
	target := flag.String("url", "", "URL to GET (required)")
	n := flag.Int("n", 1000, "requests in all (at most 1,000,000)")
	c := flag.Int("c", 4, "concurrent keep-alive connections (1..64)")
	maxDur := flag.Duration("max", 30*time.Second, "stop after this long even if -n is not reached (at most 5m)")
	proxy := flag.String("proxy", "", "HTTP proxy URL; empty means none (the environment is ignored)")
	connect := flag.String("connect", "", "dial this IP:PORT instead of the URL's host (direct runs)")
	caFile := flag.String("ca", "", "PEM file of roots to trust; empty means the system roots")
	tunnel := flag.Bool("tunnel", false, "reach -proxy with CONNECT for http:// URLs too (a tunnel, not a forwarded request)")
	upload := flag.Int("upload", 0, "POST a text/plain body of this many bytes (at most 64 MiB) with each request; bytes then counts what was sent")
	hold := flag.Int("hold", 0, "instead of a load: open this many connections (CONNECT tunnels with -proxy), hold them -max/2, then send one request on each (at most 5,000)")
	flag.Parse()
	var err error
	if *hold > 0 {
		err = holdConns(*target, *hold, *maxDur, *proxy, *connect)
	} else {
		err = run(*target, *n, *c, *maxDur, *proxy, *connect, *caFile, *tunnel, *upload)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(2)
	}
}

func run(target string, n, c int, maxDur time.Duration, proxy, connect, caFile string, tunnel bool, upload int) error {
	switch {
	case target == "":
		return errors.New("-url is required")
	case upload < 0 || upload > 64<<20:
		return fmt.Errorf("-upload %d: want 0..%d", upload, 64<<20)
	case n < 1 || n > 1_000_000:
		return fmt.Errorf("-n %d: want 1..1000000", n)
	case c < 1 || c > 64:
		return fmt.Errorf("-c %d: want 1..64", c)
	case maxDur <= 0 || maxDur > 5*time.Minute:
		return fmt.Errorf("-max %s: want (0, 5m]", maxDur)
	}
	tr := &http.Transport{MaxIdleConns: c, MaxIdleConnsPerHost: c, MaxConnsPerHost: c,
		DisableCompression: true, ForceAttemptHTTP2: false, TLSClientConfig: &tls.Config{}}
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil {
			return fmt.Errorf("-proxy: %w", err)
		}
		tr.Proxy = http.ProxyURL(u)
		if tunnel {
			tr.Proxy = nil
			tr.DialContext = func(ctx context.Context, _, addr string) (net.Conn, error) {
				return dialTunnel(ctx, u.Host, addr)
			}
		}
	}
	if connect != "" {
		d := &net.Dialer{Timeout: 10 * time.Second}
		tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, connect)
		}
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return fmt.Errorf("-ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("-ca %s: no certificates", caFile)
		}
		tr.TLSClientConfig.RootCAs = pool
	}
	client := &http.Client{Transport: tr, Timeout: maxDur}
	ctx, cancel := context.WithTimeout(context.Background(), maxDur)
	defer cancel()

	var res Result
	var next atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	buf := make([][]byte, c)
	body := textBody(upload)
	start := time.Now()
	for i := 0; i < c; i++ {
		buf[i] = make([]byte, 256<<10)
		wg.Add(1)
		go func(b []byte) {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				got, err := get(ctx, client, target, b, body)
				mu.Lock()
				res.Bytes += got
				if err != nil {
					res.Errors++
					if res.FirstErr == "" {
						res.FirstErr = err.Error()
					}
				} else {
					res.Requests++
				}
				mu.Unlock()
			}
		}(buf[i])
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// get GETs target, or POSTs body when there is one; it returns the bytes
// received, or for a POST the bytes sent once the answer is 200.
func get(ctx context.Context, client *http.Client, target string, buf, body []byte) (int64, error) {
	method, rd := http.MethodGet, io.Reader(nil)
	if body != nil {
		method, rd = http.MethodPost, bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, target, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "text/plain; charset=utf-8")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	got, err := io.CopyBuffer(io.Discard, resp.Body, buf)
	if err != nil {
		return got, err
	}
	if resp.StatusCode != http.StatusOK {
		return got, fmt.Errorf("status %d", resp.StatusCode)
	}
	if body != nil {
		return int64(len(body)), nil
	}
	return got, nil
}

// textBody is n bytes of ordinary prose and code, the kind of upload a
// content scanner reads in full and finds nothing in (nil for 0).
func textBody(n int) []byte {
	if n == 0 {
		return nil
	}
	line := []byte("func handle(w http.ResponseWriter, r *http.Request) { // the quick brown fox jumps over the lazy dog 0123456789\n")
	return bytes.Repeat(line, n/len(line)+1)[:n]
}
