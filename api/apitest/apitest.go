package apitest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/airlock-dev/airlock/api"
)

// maxChecked bounds the body a Checker keeps of one response; a larger one
// is checked for its route and status only.
const maxChecked = 16 << 20

// Checker validates responses against api/openapi.json and keeps what did
// not match. Safe for concurrent use.
type Checker struct {
	doc    *openapi3.T
	router routers.Router

	mu   sync.Mutex
	errs []string
}

var (
	loadOnce sync.Once
	loaded   *openapi3.T
	router   routers.Router
	loadErr  error
)

// Load returns a Checker over the embedded document (parsed and validated
// once per process).
func Load() (*Checker, error) {
	loadOnce.Do(func() {
		RegisterStreamDecoders()
		doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
		if err != nil {
			loadErr = fmt.Errorf("apitest: api/openapi.json: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			loadErr = fmt.Errorf("apitest: api/openapi.json is not valid OpenAPI 3: %w", err)
			return
		}
		if router, err = gorillamux.NewRouter(doc); err != nil {
			loadErr = fmt.Errorf("apitest: api/openapi.json: %w", err)
			return
		}
		loaded = doc
	})
	if loadErr != nil {
		return nil, loadErr
	}
	return &Checker{doc: loaded, router: router}, nil
}

// Check wraps h for t: every response is checked, and a mismatch fails t
// when it ends. Call it before anything that serves h registers its own
// cleanup (so the server stops, and its last responses are checked, first).
func Check(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, e := range c.Errors() {
			t.Error(e)
		}
	})
	return c.Handler(h)
}

// Errors returns the mismatches so far, in the order they were seen.
func (c *Checker) Errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

func (c *Checker) fail(format string, args ...any) {
	c.mu.Lock()
	c.errs = append(c.errs, fmt.Sprintf(format, args...))
	c.mu.Unlock()
}

// Has reports whether the document describes method on path (a template
// such as /v1/sandboxes/{id}).
func (c *Checker) Has(method, path string) bool {
	item := c.doc.Paths.Value(path)
	return item != nil && item.GetOperation(strings.ToUpper(method)) != nil
}

// Handler wraps h: each response h writes goes to the client as it is
// written (streams stay streams) and is checked once h returns: a route the
// document does not describe (unless answered 404 or 405), a status it does
// not list for the route, or a body that does not match is recorded.
func (c *Checker) Handler(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		c.check(r, rec)
	})
}

func (c *Checker) check(r *http.Request, rec *recorder) {
	status := rec.status
	if status == 0 {
		status = http.StatusOK
	}
	probe := r.Clone(context.Background())
	probe.URL = &url.URL{Scheme: "http", Host: "airlock", Path: r.URL.Path, RawQuery: r.URL.RawQuery}
	probe.Host = "airlock"
	route, params, err := c.router.FindRoute(probe)
	if err != nil {
		if status != http.StatusNotFound && status != http.StatusMethodNotAllowed {
			c.fail("%s %s answered %d but is not in api/openapi.json: %v", r.Method, r.URL.Path, status, err)
		}
		return
	}
	if route.Operation.Responses.Status(status) == nil && route.Operation.Responses.Default() == nil {
		c.fail("%s %s answered %d, a status api/openapi.json does not list for %s %s", r.Method, r.URL.Path, status, r.Method, route.Path)
		return
	}
	if rec.overflow {
		return
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route},
		Status:                 status,
		Header:                 rec.Header(),
		Options:                &openapi3filter.Options{IncludeResponseStatus: true},
	}
	in.SetBodyBytes(rec.body.Bytes())
	if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
		c.fail("%s %s: the %d response does not match api/openapi.json: %v\nbody: %.2000s", r.Method, r.URL.Path, status, err, rec.body.Bytes())
	}
}

// recorder passes a response through and keeps a copy of it.
type recorder struct {
	http.ResponseWriter
	status   int
	body     bytes.Buffer
	overflow bool
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	if !r.overflow {
		if r.body.Len()+len(b) > maxChecked {
			r.overflow = true
			r.body.Reset()
		} else {
			r.body.Write(b)
		}
	}
	return r.ResponseWriter.Write(b)
}

// Flush keeps streaming responses streaming.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the connection.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

var registerOnce sync.Once

// RegisterStreamDecoders teaches openapi3filter the API's bodies that are
// not one JSON value: a tar archive, NDJSON (each line validated against the
// schema on its own) and server-sent events (each event's data on its own;
// an event of type decision carries a record, sandbox a sandbox). The whole
// stream then stands for its last value. It changes openapi3filter's
// process-wide registry, once.
func RegisterStreamDecoders() {
	registerOnce.Do(func() {
		openapi3filter.RegisterBodyDecoder("application/x-tar", openapi3filter.FileBodyDecoder)
		openapi3filter.RegisterBodyDecoder("application/x-ndjson", decodeNDJSON)
		openapi3filter.RegisterBodyDecoder("text/event-stream", decodeSSE)
	})
}

func decodeNDJSON(body io.Reader, _ http.Header, s *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	var last any
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), maxChecked)
	for n := 1; sc.Scan(); n++ {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		if err := s.Value.VisitJSON(v, openapi3.VisitAsResponse()); err != nil {
			return nil, fmt.Errorf("line %d %s: %w", n, sc.Bytes(), err)
		}
		last = v
	}
	return last, sc.Err()
}

// SSE event types of GET /v1/sandboxes/{id}/events (api.Event).
const (
	eventDecision = "decision"
	eventSandbox  = "sandbox"
)

func decodeSSE(body io.Reader, _ http.Header, s *openapi3.SchemaRef, _ openapi3filter.EncodingFn) (any, error) {
	var last any
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 1<<20), maxChecked)
	var typ, data string
	seen := false
	flush := func() error {
		defer func() { typ, data, seen = "", "", false }()
		if data == "" { // a comment (heartbeat) or an event without data
			return nil
		}
		var v map[string]any
		if err := json.Unmarshal([]byte(data), &v); err != nil {
			return fmt.Errorf("event %q: %w", data, err)
		}
		if err := s.Value.VisitJSON(v, openapi3.VisitAsResponse()); err != nil {
			return fmt.Errorf("event %s: %w", data, err)
		}
		_, rec := v["record"]
		_, sb := v["sandbox"]
		if !(typ == eventDecision && rec) && !(typ == eventSandbox && sb) {
			return fmt.Errorf("event %q with data %s: want decision with a record or sandbox with a sandbox", typ, data)
		}
		last = v
		return nil
	}
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if seen {
				if err := flush(); err != nil {
					return nil, err
				}
			}
		case strings.HasPrefix(line, ":"):
			seen = true
		case strings.HasPrefix(line, "event: "):
			typ, seen = strings.TrimPrefix(line, "event: "), true
		case strings.HasPrefix(line, "data: "):
			data, seen = strings.TrimPrefix(line, "data: "), true
		}
	}
	return last, sc.Err()
}

// Routes are the document's operations, "METHOD /path", sorted.
func (c *Checker) Routes() []string {
	var out []string
	for path, item := range c.doc.Paths.Map() {
		for method := range item.Operations() {
			out = append(out, method+" "+path)
		}
	}
	slices.Sort(out)
	return out
}
