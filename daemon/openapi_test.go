package daemon

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/api/apitest"
)

// openAPI is the checked-in document, loaded and validated once, with a
// router over it.
type openAPI struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	openAPIOnce sync.Once
	openAPIDoc  *openAPI
	openAPIErr  error
)

func loadOpenAPI(t testing.TB) *openAPI {
	t.Helper()
	openAPIOnce.Do(func() {
		apitest.RegisterStreamDecoders()
		doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI())
		if err != nil {
			openAPIErr = err
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			openAPIErr = fmt.Errorf("the document is not valid OpenAPI 3: %w", err)
			return
		}
		r, err := gorillamux.NewRouter(doc)
		if err != nil {
			openAPIErr = err
			return
		}
		openAPIDoc = &openAPI{doc: doc, router: r}
	})
	if openAPIErr != nil {
		t.Fatal(openAPIErr)
	}
	return openAPIDoc
}

// validating checks every response against the document once its body has
// been read to the end, reporting a mismatch as a test error.
type validating struct {
	t    testing.TB
	next http.RoundTripper
	doc  *openAPI
}

func validatingClient(t testing.TB, c *http.Client) *http.Client {
	next := c.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	return &http.Client{Transport: &validating{t: t, next: next, doc: loadOpenAPI(t)}}
}

func (v *validating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	probe := req.Clone(context.Background())
	probe.URL = &url.URL{Scheme: "http", Host: "airlock", Path: req.URL.Path, RawQuery: req.URL.RawQuery}
	probe.Host = "airlock"
	route, params, ferr := v.doc.router.FindRoute(probe)
	if ferr != nil {
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			v.t.Errorf("%s %s answered %d but is not in api/openapi.json: %v", req.Method, req.URL.Path, resp.StatusCode, ferr)
		}
		return resp, nil
	}
	resp.Body = &checkedBody{rc: resp.Body, check: func(body []byte) {
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: probe, PathParams: params, Route: route},
			Status:                 resp.StatusCode,
			Header:                 resp.Header,
			Options:                &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes(body)
		if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
			v.t.Errorf("%s %s: the %d response does not match api/openapi.json: %v\nbody: %.2000s", req.Method, req.URL.Path, resp.StatusCode, err, body)
		}
	}}
	return resp, nil
}

// checkedBody collects a body and checks it at EOF (a body closed early, a
// client that went away, is not checked).
type checkedBody struct {
	rc    io.ReadCloser
	buf   bytes.Buffer
	check func([]byte)
	once  sync.Once
}

func (b *checkedBody) Read(p []byte) (int, error) {
	n, err := b.rc.Read(p)
	b.buf.Write(p[:n])
	if errors.Is(err, io.EOF) {
		b.once.Do(func() { b.check(b.buf.Bytes()) })
	}
	return n, err
}

func (b *checkedBody) Close() error { return b.rc.Close() }

// TestOpenAPIRoutes: every route the handler serves is in the document with
// its method, and every path and method of the document is served.
func TestOpenAPIRoutes(t *testing.T) {
	doc := loadOpenAPI(t).doc
	var inDoc []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			inDoc = append(inDoc, method+" "+path)
		}
	}
	var served []string
	for _, rt := range (&Daemon{}).routes() {
		served = append(served, rt.method+" "+rt.path)
	}
	sort.Strings(inDoc)
	sort.Strings(served)
	for _, r := range served {
		if !slices.Contains(inDoc, r) {
			t.Errorf("the handler serves %s; api/openapi.json does not describe it", r)
		}
	}
	for _, r := range inDoc {
		if !slices.Contains(served, r) {
			t.Errorf("api/openapi.json describes %s; the handler does not serve it", r)
		}
	}
}

// TestOpenAPISchemasMatchTypes: each schema's properties are exactly the
// json fields of its api type, so the document cannot drift from the wire
// types the clients are built on.
func TestOpenAPISchemasMatchTypes(t *testing.T) {
	doc := loadOpenAPI(t).doc
	types := map[string]any{
		"Error": api.Error{}, "Limits": api.Limits{}, "ResolvedLimits": api.ResolvedLimits{}, "Usage": api.Usage{},
		"Egress": api.Egress{}, "CreateSandboxRequest": api.CreateSandboxRequest{}, "Sandbox": api.Sandbox{},
		"ExecRequest": api.ExecRequest{}, "ExecResult": api.ExecResult{}, "Frame": api.Frame{}, "Exec": api.Exec{},
		"SignalRequest": api.SignalRequest{}, "FilesResult": api.FilesResult{}, "Event": api.Event{},
		"RunRequest": api.RunRequest{}, "RunResponse": api.RunResponse{}, "AttachRequest": api.AttachRequest{},
		"Attached": api.Attached{}, "Pod": api.Pod{}, "Inbound": api.Inbound{}, "AttachStatus": api.AttachStatus{}, "PolicyRev": api.PolicyRev{}, "SummaryRow": api.SummaryRow{}, "Health": api.Health{}, "HealthPart": api.HealthPart{},
		"PolicyBundle": api.PolicyBundle{},
	}
	for name, v := range types {
		s := doc.Components.Schemas[name]
		if s == nil || s.Value == nil {
			t.Errorf("no schema %s", name)
			continue
		}
		var inDoc, inGo []string
		for p := range s.Value.Properties {
			inDoc = append(inDoc, p)
		}
		for p := range jsonFields(reflect.TypeOf(v)) {
			inGo = append(inGo, p)
		}
		sort.Strings(inDoc)
		sort.Strings(inGo)
		if !slices.Equal(inDoc, inGo) {
			t.Errorf("schema %s has properties %v; api.%s has json fields %v", name, inDoc, name, inGo)
		}
		for _, req := range s.Value.Required {
			f := reflect.TypeOf(v)
			idx := jsonFields(f)[req]
			if tag := f.FieldByIndex(idx).Tag.Get("json"); strings.Contains(tag, "omitempty") {
				t.Errorf("schema %s requires %s, which api.%s omits when empty", name, req, name)
			}
		}
	}
	var codes []string
	for _, e := range doc.Components.Schemas["Error"].Value.Properties["code"].Value.Enum {
		codes = append(codes, e.(string))
	}
	for _, c := range []string{api.CodeBadRequest, api.CodeInvalidField, api.CodeInvalidPath, api.CodeNotFound, api.CodeForbidden,
		api.CodeConflict, api.CodeTooLarge, api.CodeLimit, api.CodeUnprocessable, api.CodeUnavailable, api.CodeInternal} {
		if !slices.Contains(codes, c) {
			t.Errorf("error code %s is not in the document's enum %v", c, codes)
		}
	}
}

// TestOpenAPIServed: GET /v1/openapi.json serves the checked-in document.
func TestOpenAPIServed(t *testing.T) {
	w := newFakeWorld(t)
	r := w.client(alice).json(t, "GET", "/v1/openapi.json", "")
	if r.status != 200 || !bytes.Equal(r.body, api.OpenAPI()) || r.header.Get("Content-Type") != "application/json" {
		t.Fatalf("got %d %s, %d bytes", r.status, r.header.Get("Content-Type"), len(r.body))
	}
}

// TestOpenAPIValidatorCatchesDrift: the validating client used by every API
// test fails a response that does not match (so those tests could fail).
func TestOpenAPIValidatorCatchesDrift(t *testing.T) {
	doc := loadOpenAPI(t)
	rt := roundTripFunc(func(*http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {"application/json"}},
			Body: io.NopCloser(strings.NewReader(`{"ok": true, "parts": [], "policy_rev": "x", "sandboxes": [], "pool_depth": "two", "audit": "ok"}`))}, nil
	})
	rec := &recordingTB{TB: t}
	c := &http.Client{Transport: &validating{t: rec, next: rt, doc: doc}}
	resp, err := c.Get("http://x/v1/health")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], "pool_depth") {
		t.Fatalf("validator errors %q, want one naming pool_depth", rec.errs)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type recordingTB struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recordingTB) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

var _ = time.Second
