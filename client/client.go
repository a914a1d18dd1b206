package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"syscall"
	"time"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/config"
)

// SocketEnv names the environment variable that overrides the default socket.
const SocketEnv = "AIRLOCK_SOCKET"

// Defaults of the Options.
const (
	// DefaultSocket is the daemon's socket when neither New's argument nor
	// SocketEnv names one (the config's api.socket default).
	DefaultSocket = config.DefaultAPISocket
	// DefaultDialTimeout bounds connecting to the socket.
	DefaultDialTimeout = 5 * time.Second
	// DefaultMaxIdleConns is how many idle connections are kept for reuse.
	DefaultMaxIdleConns = 16
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// maxJSONBody bounds a JSON response (a list of every sandbox is the largest).
const maxJSONBody = 64 << 20

// baseURL is the URL every request is sent to; the host is never resolved
// (the transport dials the socket).
const baseURL = "http://airlock"

// Client talks to one daemon over its unix socket. It is safe for concurrent
// use; Close releases its idle connections.
type Client struct {
	socket string
	tr     *http.Transport
	hc     *http.Client
}

// Option changes a Client's defaults.
type Option func(*options)

type options struct {
	dialTimeout time.Duration
	maxIdle     int
}

// WithDialTimeout bounds connecting to the socket (DefaultDialTimeout).
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithMaxIdleConns sets how many idle connections are kept for reuse
// (DefaultMaxIdleConns; raise it for many concurrent execs).
func WithMaxIdleConns(n int) Option { return func(o *options) { o.maxIdle = n } }

// New returns a client of the daemon at socket; "" means ResolveSocket's
// choice. Nothing is dialled until a call.
func New(socket string, opts ...Option) *Client {
	o := options{dialTimeout: DefaultDialTimeout, maxIdle: DefaultMaxIdleConns}
	for _, opt := range opts {
		opt(&o)
	}
	socket = ResolveSocket(socket)
	c := &Client{socket: socket}
	d := net.Dialer{Timeout: o.dialTimeout}
	c.tr = &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := d.DialContext(ctx, "unix", socket)
			if err != nil {
				return nil, &ConnError{Socket: socket, Err: err}
			}
			return conn, nil
		},
		// Output streams are never compressed; a gzip layer would hold
		// back bytes a user should see as they are produced.
		DisableCompression:  true,
		MaxIdleConns:        o.maxIdle,
		MaxIdleConnsPerHost: o.maxIdle,
		IdleConnTimeout:     90 * time.Second,
	}
	c.hc = &http.Client{Transport: c.tr}
	return c
}

// ResolveSocket is the socket a client dials when asked for socket: socket
// itself when it is not "", else $AIRLOCK_SOCKET, else (for a user other
// than root) that user's own daemon's (`airlock serve --user`:
// $XDG_RUNTIME_DIR/airlock/airlock.sock, else /run/user/UID/airlock/) when
// it exists, else DefaultSocket.
func ResolveSocket(socket string) string {
	return resolveSocket(socket, os.Getenv, os.Geteuid(), isSocket)
}

func resolveSocket(socket string, getenv func(string) string, euid int, exists func(string) bool) string {
	if socket != "" {
		return socket
	}
	if s := getenv(SocketEnv); s != "" {
		return s
	}
	if euid != 0 {
		if s := config.UserSocket(getenv, euid); exists(s) {
			return s
		}
	}
	return DefaultSocket
}

func isSocket(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode()&os.ModeSocket != 0
}

// Socket is the path this client dials.
func (c *Client) Socket() string { return c.socket }

// Close releases the client's idle connections. Calls in flight are not
// affected; the Client stays usable.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// ConnError is a daemon that could not be reached: no socket, no permission
// to connect, nothing listening.
type ConnError struct {
	Socket string
	Err    error
}

func (e *ConnError) Error() string {
	msg := fmt.Sprintf("airlock daemon at %s: %v", e.Socket, e.Err)
	switch {
	case errors.Is(e.Err, syscall.EACCES), errors.Is(e.Err, syscall.EPERM):
		msg += " (the socket is for root and the daemon's group, api.group, default airlock: ask for your user to be added to it)"
	case errors.Is(e.Err, syscall.ENOENT), errors.Is(e.Err, syscall.ECONNREFUSED):
		msg += " (is `airlock serve` running? --socket or $" + SocketEnv + " name another socket)"
	}
	return msg
}

func (e *ConnError) Unwrap() error { return e.Err }

// Code returns the API error code carried by err ("not_found", ...), or ""
// when err is not an *api.Error.
func Code(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return ""
}

// request is one call: method, path below api.Version, query, body.
type request struct {
	method, path string
	query        url.Values
	body         io.Reader
	contentType  string
}

// do sends r and returns a response with a 2xx status; any other status is
// read into an *api.Error.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		return nil, readError(resp)
	}
	return resp, nil
}

// send sends r and returns the response whatever its status.
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := baseURL + api.Version + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, r.body)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	if r.contentType != "" {
		req.Header.Set("Content-Type", r.contentType)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ce *ConnError
		if errors.As(err, &ce) {
			return nil, ce
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", r.method, r.path, ctx.Err())
		}
		return nil, fmt.Errorf("%s %s: %w", r.method, r.path, err)
	}
	return resp, nil
}

// doJSON sends in (when not nil) as JSON and decodes the response into out
// (when not nil).
func (c *Client) doJSON(ctx context.Context, method, path string, query url.Values, in, out any) error {
	r := request{method: method, path: path, query: query}
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		r.body, r.contentType = bytes.NewReader(b), "application/json"
	}
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxJSONBody)).Decode(out); err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return fmt.Errorf("%s %s: response: %w", method, path, err)
	}
	return nil
}

// readError turns a non-2xx response into an *api.Error. A body that is not
// an api.Error (a proxy's, an older daemon's {"error": ...}) keeps its text
// and gets the code of its status.
func readError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	return errorOf(resp, body)
}

// errorOf is readError for a body already read.
func errorOf(resp *http.Response, body []byte) error {
	var ae api.Error
	if json.Unmarshal(body, &ae) == nil && ae.Code != "" {
		return &ae
	}
	var legacy struct {
		Error string `json:"error"`
	}
	msg := string(bytes.TrimSpace(body))
	if json.Unmarshal(body, &legacy) == nil && legacy.Error != "" {
		msg = legacy.Error
	}
	if msg == "" {
		msg = resp.Status
	}
	return &api.Error{Code: api.CodeOf(resp.StatusCode), Message: msg}
}

// sandboxPath is the path of a sandbox's route, the id escaped.
func sandboxPath(id string, rest ...string) string {
	p := "/sandboxes/" + url.PathEscape(id)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}
