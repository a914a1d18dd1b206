package main

import (
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
	hold := flag.Int("hold", 0, "instead of a load: open this many connections (CONNECT tunnels with -proxy), hold them -max/2, then send one request on each (at most 5,000)")
	flag.Parse()
	var err error
	if *hold > 0 {
		err = holdConns(*target, *hold, *maxDur, *proxy, *connect)
	} else {
		err = run(*target, *n, *c, *maxDur, *proxy, *connect, *caFile, *tunnel)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadclient:", err)
		os.Exit(2)
	}
}

func run(target string, n, c int, maxDur time.Duration, proxy, connect, caFile string, tunnel bool) error {
	switch {
	case target == "":
		return errors.New("-url is required")
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
	start := time.Now()
	for i := 0; i < c; i++ {
		buf[i] = make([]byte, 256<<10)
		wg.Add(1)
		go func(b []byte) {
			defer wg.Done()
			for next.Add(1) <= int64(n) && ctx.Err() == nil {
				got, err := get(ctx, client, target, b)
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

func get(ctx context.Context, client *http.Client, target string, buf []byte) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return 0, err
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
	return got, nil
}
