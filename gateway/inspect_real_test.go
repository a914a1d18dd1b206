package gateway

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
)

// realKey keys the real scanner in these tests; its canaries are the ones a
// sandbox of the harness ("sb-test") would have been given.
var realKey = bytes.Repeat([]byte("airlock-test-key"), 2)

func realInspector(t testing.TB) Inspector {
	t.Helper()
	sc, err := inspect.New(inspect.Config{Key: realKey})
	if err != nil {
		t.Fatal(err)
	}
	return NewInspector(sc)
}

// TestInspectRealScannerTransports runs package inspect's real detectors
// through a real gateway (every destination allowed and intercepted by a
// team policy, the library's content rules on top) against a fake origin
// that witnesses what arrives: each exfiltration attack on each transport is
// refused and the origin never sees its secret; realistic benign traffic
// passes. It prints the block rate on attacks and the false-positive rate
// on benign traffic.
func TestInspectRealScannerTransports(t *testing.T) {
	eng := allowAllEngine(t, map[string]string{"mitm.rego": "package airlock.egress\n\nmitm := true\n"})
	pki := newTestPKI(t)
	cert := pki.leaf(t, "api.example")
	witness := newWitness()
	up := newUpstreamProto(t, witness, &cert, true)
	plain := newUpstream(t, witness, nil)
	h := newHarness(t, eng, names("api.example"), pki, withInspector(realInspector(t), 0))
	h.allowUpstreams(up, plain)
	canary := inspect.NewCanaries(realKey).For("sb-test").Env["AWS_ACCESS_KEY_ID"]
	if canary == "" {
		t.Fatal("no canary AWS key for the sandbox")
	}
	const key = "AKIAQWERTYUIOPASDFGH"
	h1 := fmt.Sprintf("http://api.example:%d", plain.port)
	h2 := fmt.Sprintf("https://api.example:%d", up.port)
	c1, c2 := h.proxyClient(nil), h.h2Client()
	big := strings.Repeat("x", 200<<10)

	type req struct {
		name, method, url, ct, body string
		hdr                         map[string]string
		client                      *http.Client
		secret                      string // what the origin must never see whole
	}
	attacks := []req{
		{name: "http1 query", method: "GET", url: h1 + "/q?token=" + key, secret: key},
		{name: "http1 query split across parameters", method: "GET", url: h1 + "/q?a=AKIAQWERTY&b=UIOPASDFGH", secret: "UIOPASDFGH"},
		{name: "http1 header", method: "GET", url: h1 + "/h", hdr: map[string]string{"X-Note": key}, secret: key},
		{name: "http1 json body", method: "POST", url: h1 + "/j", ct: "application/json", body: `{"k":"` + key + `"}`, secret: key},
		{name: "http1 base64 body", method: "POST", url: h1 + "/b", ct: "text/plain", body: base64.StdEncoding.EncodeToString([]byte("aws " + key)), secret: base64.StdEncoding.EncodeToString([]byte("aws " + key))},
		{name: "http1 hex path", method: "GET", url: h1 + "/p/" + hex.EncodeToString([]byte(key)), secret: hex.EncodeToString([]byte(key))},
		{name: "http1 canary in a header", method: "GET", url: h1 + "/c", hdr: map[string]string{"Authorization": "AWS4-HMAC-SHA256 Credential=" + canary + "/x"}, secret: canary},
		{name: "http1 streamed body, key at the end", method: "POST", url: h1 + "/s", ct: "application/octet-stream", body: big + "\n" + key, secret: key},
		{name: "mcp tools/call split across args", method: "POST", url: h2 + "/mcp", ct: "application/json", client: c2,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"note","arguments":{"a":"AKIAQWERTY","b":"UIOPASDFGH"}}}`, secret: "UIOPASDFGH"},
		{name: "a2a message", method: "POST", url: h2 + "/a2a", ct: "application/json", client: c2,
			body: `{"jsonrpc":"2.0","id":"1","method":"message/send","params":{"message":{"role":"user","parts":[{"kind":"text","text":"creds ` + canary + `"}]}}}`, secret: canary},
		{name: "h2 query", method: "GET", url: h2 + "/q?k=" + key, client: c2, secret: key},
		{name: "h2 streamed body", method: "POST", url: h2 + "/s", ct: "application/octet-stream", body: big + "\n" + key, client: c2, secret: key},
	}
	benign := []req{
		{name: "pip simple index", method: "GET", url: h2 + "/simple/requests/", hdr: map[string]string{"Accept": "application/vnd.pypi.simple.v1+json", "User-Agent": "pip/24.0 {\"ci\":null,\"cpu\":\"x86_64\"}"}, client: c2},
		{name: "npm metadata", method: "GET", url: h2 + "/left-pad", hdr: map[string]string{"Accept": "application/vnd.npm.install-v1+json; q=1.0", "npm-session": "3f9a1c2b7d8e4f60"}, client: c2},
		{name: "go module proxy", method: "GET", url: h2 + "/golang.org/x/net/@v/v0.62.0.info", client: c2},
		{name: "github api with etag", method: "GET", url: h2 + "/repos/acme/app/commits?per_page=100&sha=6dcb09b5b57875f334f61aebed695e2e4193db5e", hdr: map[string]string{"If-None-Match": `W/"a1b2c3d4e5f60718293a4b5c6d7e8f90"`}, client: c2},
		{name: "llm chat", method: "POST", url: h2 + "/v1/chat/completions", ct: "application/json", client: c2,
			body: `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Refactor this function to use a context.Context and explain the change."}]}`},
		{name: "mcp tools/call", method: "POST", url: h2 + "/mcp", ct: "application/json", client: c2,
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"sha256 of go.sum","limit":10}}}`},
		{name: "lock file upload", method: "POST", url: h1 + "/lock", ct: "text/plain",
			body: "requests==2.32.3 --hash=sha256:70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6\nurllib3==2.2.2 --hash=sha256:a448b2f64d686155468037e1ace9f2d2199776e17f0a46610480d311f73e3472\n"},
		{name: "source code", method: "POST", url: h1 + "/src", ct: "text/x-go",
			body: "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tids := []string{\"a1b2\", \"c3d4\"}\n\tfmt.Println(ids)\n}\n"},
		{name: "base64 png", method: "POST", url: h1 + "/img", ct: "application/json",
			body: `{"image":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}`},
		{name: "big benign body", method: "POST", url: h1 + "/big", ct: "application/octet-stream", body: big},
	}
	send := func(t *testing.T, r req) (*http.Response, error) {
		var body io.Reader
		if r.body != "" {
			body = strings.NewReader(r.body)
		}
		hr, _ := http.NewRequest(r.method, r.url, body)
		if r.ct != "" {
			hr.Header.Set("Content-Type", r.ct)
		}
		for k, v := range r.hdr {
			hr.Header.Set(k, v)
		}
		c := r.client
		if c == nil {
			c = c1
		}
		resp, err := c.Do(hr)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	blocked := 0
	for _, a := range attacks {
		t.Run("attack/"+a.name, func(t *testing.T) {
			mark := witness.mark()
			resp, err := send(t, a)
			if err == nil && resp.StatusCode != http.StatusForbidden {
				t.Errorf("got %d, want 403", resp.StatusCode)
				return
			}
			if err == nil && !strings.HasPrefix(resp.Header.Get("X-Airlock-Reason"), "content_") {
				t.Errorf("got reason %q, want a content_ reason", resp.Header.Get("X-Airlock-Reason"))
				return
			}
			if witness.sawSince(mark, a.secret) {
				t.Errorf("the origin received %q", a.secret)
				return
			}
			blocked++
		})
	}
	fps := 0
	for _, b := range benign {
		t.Run("benign/"+b.name, func(t *testing.T) {
			resp, err := send(t, b)
			if err != nil || resp.StatusCode != http.StatusOK {
				fps++
				t.Errorf("got %v %v, want 200", resp, err)
			}
		})
	}
	// One record carries the MCP split finding, never the value.
	for _, r := range h.log.Records() {
		line := string(audit.AppendJSON(nil, &r))
		if strings.Contains(line, key) || strings.Contains(line, canary) || strings.Contains(line, "UIOPASDFGH") {
			t.Errorf("an audit record holds a secret: %s", line)
		}
	}
	t.Logf("through the gateway: blocked %d/%d attacks (%.0f%%), %d/%d false positives on benign traffic",
		blocked, len(attacks), 100*float64(blocked)/float64(len(attacks)), fps, len(benign))
}

// TestInspectRealScannerWebSocket: a key split across two continuation
// frames, found by the real scanner's stream; the completing frame never
// reaches the origin.
func TestInspectRealScannerWebSocket(t *testing.T) {
	eng := allowAllEngine(t, nil)
	up := newRawWSUpstream(t)
	h := newHarness(t, eng, names("api.example"), nil, withInspector(realInspector(t), 0))
	h.allowUpstreams(up.upstream)
	h.origDst.Store(netip.MustParseAddrPort(up.addr))
	c, br := wsUpgrade(t, h.transp, "/ws", fmt.Sprintf("api.example:%d", up.port), "")
	defer c.Close()
	c.Write(wsFrame(false, false, 1, `{"note":"AKIAQWERTY`))
	time.Sleep(100 * time.Millisecond)
	c.Write(wsFrame(true, false, 0, `UIOPASDFGH"}`))
	io.Copy(io.Discard, br)
	r := h.log.Wait(t, "websocket", func(r audit.Record) bool { return r.Path == "/ws" })
	if r.Decision != audit.DecisionDeny || len(r.Findings) == 0 {
		t.Fatalf("record: got %s %+v, want a deny with findings", r.Decision, r.Findings)
	}
	if bytes.Contains(up.received(), []byte("UIOPASDFGH")) {
		t.Fatal("the origin received the completing frame")
	}
}

// witness is an origin handler that keeps everything it received (target,
// headers, body) to answer whether a secret arrived.
type witness struct {
	mu  chan struct{}
	all bytes.Buffer
}

func newWitness() *witness { return &witness{mu: make(chan struct{}, 1)} }

func (w *witness) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.mu <- struct{}{}
	w.all.WriteString(r.URL.RequestURI())
	for k, vs := range r.Header {
		w.all.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
	}
	w.all.Write(b)
	<-w.mu
	rw.Header().Set("Content-Type", "application/json")
	rw.Write([]byte(`{"ok":true}`))
}

// mark is where the next request's bytes start.
func (w *witness) mark() int {
	w.mu <- struct{}{}
	defer func() { <-w.mu }()
	return w.all.Len()
}

// sawSince reports whether s arrived after mark.
func (w *witness) sawSince(mark int, s string) bool {
	w.mu <- struct{}{}
	defer func() { <-w.mu }()
	return bytes.Contains(w.all.Bytes()[mark:], []byte(s))
}

// TestInspectFoldedCanaryInURL: canaries the sandbox was given, folded to
// lower case as a case-folding tool or proxy sends them, in a query and in
// a path segment, through a real gateway under a policy allowing every
// destination: refused as canaries (reason content_canary, not merely a
// credential shape), and the origin never sees them. The same shape never
// issued is at most a credential, never a canary. Before the scanner kept
// the issued set, the folded GitHub and OpenAI-shaped canaries were no
// canary at all.
func TestInspectFoldedCanaryInURL(t *testing.T) {
	eng := allowAllEngine(t, nil)
	witness := newWitness()
	plain := newUpstream(t, witness, nil)
	canaries := inspect.NewCanaries(realKey)
	sc, err := inspect.New(inspect.Config{Key: realKey, Canaries: canaries})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, eng, names("api.example"), nil, withInspector(NewInspector(sc), 0))
	h.allowUpstreams(plain)
	var github, openai string
	for _, v := range canaries.For("sb-test").Values {
		switch {
		case strings.HasPrefix(v, "ghp_"):
			github = strings.ToLower(v)
		case strings.HasPrefix(v, "sk-proj-"):
			openai = strings.ToLower(v)
		}
	}
	base := fmt.Sprintf("http://api.example:%d", plain.port)
	c := h.proxyClient(nil)
	lookalike := github[:len(github)-6] + "zzzzzz"
	for _, tc := range []struct {
		name, url, secret string
		canary            bool
	}{
		{"github canary in a query", base + "/q?token=" + github, github, true},
		{"openai canary in a path", base + "/v1/" + openai + "/x", openai, true},
		{"a never-issued lookalike", base + "/q?token=" + lookalike, lookalike, false},
	} {
		mark := witness.mark()
		resp, err := c.Get(tc.url)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		reason := resp.Header.Get("X-Airlock-Reason")
		t.Logf("%s: %d %s", tc.name, resp.StatusCode, reason)
		switch {
		case tc.canary && (resp.StatusCode != http.StatusForbidden || reason != "content_canary"):
			t.Errorf("%s: got %d %q, want 403 content_canary", tc.name, resp.StatusCode, reason)
		case tc.canary && witness.sawSince(mark, tc.secret):
			t.Errorf("%s: the origin received it", tc.name)
		case !tc.canary && reason == "content_canary":
			t.Errorf("%s: refused as a canary", tc.name)
		}
	}
}
