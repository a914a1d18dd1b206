package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"
)

// dialTunnel opens a CONNECT tunnel to addr through the HTTP proxy at
// proxyAddr.
func dialTunnel(ctx context.Context, proxyAddr, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", proxyAddr)
	if err != nil {
		return nil, err
	}
	if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
		c.Close()
		return nil, err
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %w", addr, err)
	}
	if resp.StatusCode != http.StatusOK {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: status %d", addr, resp.StatusCode)
	}
	if br.Buffered() > 0 {
		c.Close()
		return nil, fmt.Errorf("CONNECT %s: %d bytes after the response", addr, br.Buffered())
	}
	return c, nil
}

// HoldResult is the line -hold prints.
type HoldResult struct {
	Opened   int     `json:"opened"`
	Answered int     `json:"answered"`
	Errors   int     `json:"errors"`
	Seconds  float64 `json:"seconds"`
	FirstErr string  `json:"first_error,omitempty"`
}

// holdConns opens n connections to target's host (through proxy's CONNECT
// when proxy is set, else to connect or the host itself), prints "open" to
// stderr, holds them all for maxDur/2, then asks once on each (a GET of an
// http:// target's path, a line echoed back by a tcp:// one) and counts the
// answers.
func holdConns(target string, n int, maxDur time.Duration, proxy, connect string) error {
	if n > 5000 {
		return fmt.Errorf("-hold %d: at most 5000", n)
	}
	u, err := url.Parse(target)
	if err != nil || (u.Scheme != "http" && u.Scheme != "tcp") || u.Host == "" || (u.Scheme == "tcp" && u.Port() == "") {
		return fmt.Errorf("-url %q: want http://host[:port]/path or tcp://host:port (an echo server)", target)
	}
	addr := u.Host
	if u.Port() == "" {
		addr = net.JoinHostPort(u.Hostname(), "80")
	}
	ctx, cancel := context.WithTimeout(context.Background(), maxDur)
	defer cancel()
	var res HoldResult
	start := time.Now()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for range n {
		var c net.Conn
		switch {
		case proxy != "":
			pu, perr := url.Parse(proxy)
			if perr != nil {
				return fmt.Errorf("-proxy: %w", perr)
			}
			c, err = dialTunnel(ctx, pu.Host, addr)
		case connect != "":
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", connect)
		default:
			c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}
		if err != nil {
			res.Errors++
			if res.FirstErr == "" {
				res.FirstErr = err.Error()
			}
			continue
		}
		conns = append(conns, c)
	}
	res.Opened = len(conns)
	fmt.Fprintln(os.Stderr, "open", res.Opened)
	select {
	case <-ctx.Done():
	case <-time.After(maxDur / 2):
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, c := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := askOnce(c, u)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				res.Errors++
				if res.FirstErr == "" {
					res.FirstErr = err.Error()
				}
				return
			}
			res.Answered++
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	return json.NewEncoder(os.Stdout).Encode(res)
}

// askOnce sends one GET (http) or one line to echo back (tcp) on c.
func askOnce(c net.Conn, u *url.URL) error {
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if u.Scheme == "tcp" {
		const ping = "airlock-hold-ping\n"
		if _, err := io.WriteString(c, ping); err != nil {
			return err
		}
		got := make([]byte, len(ping))
		if _, err := io.ReadFull(c, got); err != nil {
			return err
		}
		if string(got) != ping {
			return fmt.Errorf("echo: got %q, want %q", got, ping)
		}
		return nil
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", u.RequestURI(), u.Host); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}
