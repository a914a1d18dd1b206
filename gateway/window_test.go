package gateway

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
)

// TestInspectWindowOneSandbox replays the attack rows of the e2e coverage
// test, then realistic benign traffic, all from ONE sandbox through a real
// gateway and the real scanner (every destination allowed and
// intercepted), as a sandbox really sends them, so what the window keeps of
// the attacks is there when the benign requests come. Pinned:
//   - a missed split: a key's halves sent together in one request
//     (refused), then one half per request, passed: the window had kept the
//     halves as known-clean values, so their retry cost no scan. The origin
//     must see nothing of the second half's request.
//   - a false split: after the attack rows, a benign LLM chat call
//     was refused as a split escaped key (the kept \u-escaped key, a decoded
//     finding with no position, was blamed on the next request's values).
//
// It prints the block rate on attacks and the false-positive rate on the
// benign requests that follow them.
func TestInspectWindowOneSandbox(t *testing.T) {
	eng := allowAllEngine(t, map[string]string{"mitm.rego": "package airlock.egress\n\nmitm := true\n"})
	pki := newTestPKI(t)
	cert := pki.leaf(t, "api.example")
	witness := newWitness()
	up := newUpstreamProto(t, witness, &cert, true)
	plain := newUpstream(t, witness, nil)
	h := newHarness(t, eng, names("api.example"), pki, withInspector(realInspector(t), 0))
	h.allowUpstreams(up, plain)
	const (
		key  = "AKIAQWERTYUIOPASDFGH"
		half = "UIOPASDFGH"
		key2 = "AKIAMNBVCXZLKJHGFDSA"
	)
	h1 := fmt.Sprintf("http://api.example:%d", plain.port)
	h2 := fmt.Sprintf("https://api.example:%d", up.port)
	c1, c2 := h.proxyClient(nil), h.h2Client()
	hexKey := hex.EncodeToString([]byte(key))
	b64 := base64.StdEncoding.EncodeToString([]byte("aws " + key))
	b32 := base32.StdEncoding.EncodeToString([]byte("aws " + key))
	dblURL := url.QueryEscape(url.QueryEscape("aws " + key + " "))
	var ue strings.Builder
	for _, r := range key {
		fmt.Fprintf(&ue, `\\u%04x`, r) // a JSON string whose value is \u escapes
	}
	rev := []byte(key)
	slices.Reverse(rev)
	type req struct {
		name, method, url, ct, body string
		hdr                         map[string]string
		c                           *http.Client
		want                        int    // the status; 0: 403 content_*
		secret                      string // what the origin must never see (want 0)
	}
	json := "application/json"
	rows := []req{
		{name: "query", method: "GET", url: h1 + "/q?token=" + key, c: c1, secret: key},
		{name: "header", method: "GET", url: h2 + "/h", hdr: map[string]string{"X-Note": key}, c: c2, secret: key},
		{name: "json body", method: "POST", url: h2 + "/j", ct: json, body: `{"k":"` + key + `"}`, c: c2, secret: key},
		{name: "h2 body", method: "POST", url: h2 + "/h2", ct: "text/plain", body: "key " + key, c: c2, secret: key},
		{name: "split query", method: "GET", url: h1 + "/sq?a=" + key[:10] + "&b=" + half, c: c1, secret: half},
		{name: "split mcp arguments", method: "POST", url: h2 + "/mcp", ct: json, c: c2, secret: half,
			body: `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"note","arguments":{"a":"` + key[:10] + `","b":"` + half + `"}}}`},
		// Defect A: the halves the two requests above carried together,
		// now one per request: the first passes, the second is refused.
		{name: "retry first half", method: "POST", url: h1 + "/seqA", ct: "text/plain", body: key[:10], c: c1, want: 200},
		{name: "retry second half (defect A)", method: "POST", url: h1 + "/seqB", ct: "text/plain", body: half, c: c1, secret: half},
		{name: "consecutive first", method: "POST", url: h1 + "/seq1", ct: "text/plain", body: key2[:10], c: c1, want: 200},
		{name: "consecutive second", method: "POST", url: h1 + "/seq2", ct: "text/plain", body: key2[10:], c: c1, secret: key2[10:]},
		{name: "base64 body", method: "POST", url: h1 + "/b64", ct: "text/plain", body: b64, c: c1, secret: b64},
		{name: "base32 body", method: "POST", url: h2 + "/b32", ct: "text/plain", body: b32, c: c2, secret: b32},
		{name: "double url query", method: "GET", url: h1 + "/du?v=" + dblURL, c: c1, secret: key},
		{name: "unicode escapes", method: "POST", url: h2 + "/ue", ct: json, body: `{"k":"` + ue.String() + `"}`, c: c2, secret: `u0041`},
		{name: "reversed header", method: "GET", url: h2 + "/rev", hdr: map[string]string{"X-Note": string(rev)}, c: c2, secret: string(rev)},
		{name: "hex path", method: "GET", url: h1 + "/p/" + hexKey, c: c1, secret: hexKey},
		{name: "entropy path (flag)", method: "GET", url: h1 + "/e/q8Zr3LwT9xKp2VbN7mYc4HsJ6dFg1RtE5uWa0iOk", c: c1, want: 200},
		{name: "malformed json-rpc (flag)", method: "POST", url: h2 + "/rpc", ct: json, body: `{"jsonrpc":"2.0","method":`, c: c2, want: 200},
	}
	benign := []req{
		{name: "llm chat (defect B)", method: "POST", url: h2 + "/v1/chat/completions", ct: json, c: c2,
			body: `{"model":"gpt-4o","stream":true,"messages":[{"role":"user","content":"Refactor this function to take a context."}]}`},
		{name: "llm chat with code", method: "POST", url: h2 + "/v1/messages", ct: json, c: c2,
			body: `{"model":"claude-sonnet-4","max_tokens":1024,"messages":[{"role":"user","content":"Why does fmt.Printf(\"%q\\n\", s) print \\u00e9 here?"}]}`},
		{name: "mcp tools/call", method: "POST", url: h2 + "/mcp", ct: json, c: c2,
			body: `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"search","arguments":{"query":"sha256 of go.sum","limit":10}}}`},
		{name: "pip simple index", method: "GET", url: h2 + "/simple/requests/", c: c2, hdr: map[string]string{"Accept": "application/vnd.pypi.simple.v1+json"}},
		{name: "github api", method: "GET", url: h2 + "/repos/acme/app/commits?per_page=100&sha=6dcb09b5b57875f334f61aebed695e2e4193db5e", c: c2},
		{name: "search query", method: "GET", url: h1 + "/search?q=aws+access+key+rotation&page=2", c: c1},
		{name: "lock file", method: "POST", url: h1 + "/lock", ct: "text/plain", c: c1,
			body: "requests==2.32.3 --hash=sha256:70761cfe03c773ceb22aa2f671b4757976145175cdfca038c02654d061d6dcc6\n"},
		{name: "json with escapes", method: "POST", url: h2 + "/notes", ct: json, c: c2,
			body: `{"title":"caf\u00e9 \u2014 notes","path":"C:\\Users\\dev\\notes.txt","body":"line one\nline two"}`},
		{name: "base64 png", method: "POST", url: h1 + "/img", ct: json, c: c1,
			body: `{"image":"iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="}`},
		{name: "form post", method: "POST", url: h1 + "/form", ct: "application/x-www-form-urlencoded", c: c1, body: "name=dev&comment=looks+good%21"},
	}
	for i := range benign {
		benign[i].want = 200
	}
	send := func(r req) (*http.Response, error) {
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
		resp, err := r.c.Do(hr)
		if err == nil {
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
		return resp, err
	}
	blocked, attacks, fps := 0, 0, 0
	for _, group := range [][]req{rows, benign} {
		for _, r := range group {
			mark := witness.mark()
			resp, err := send(r)
			if err != nil {
				t.Errorf("%s: %v", r.name, err)
				continue
			}
			switch {
			case r.want == 0:
				attacks++
				if resp.StatusCode != http.StatusForbidden || !strings.HasPrefix(resp.Header.Get("X-Airlock-Reason"), "content_") {
					t.Errorf("%s: got %d %s, want 403 content_* (the origin received the secret: %v)", r.name,
						resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), witness.sawSince(mark, r.secret))
				} else if witness.sawSince(mark, r.secret) || witness.mark() != mark {
					t.Errorf("%s: refused, but the origin received the request", r.name)
				} else {
					blocked++
				}
			case resp.StatusCode != r.want:
				if r.want == 200 && group[0].name == benign[0].name {
					fps++
				}
				t.Errorf("%s: got %d %s, want %d", r.name, resp.StatusCode, resp.Header.Get("X-Airlock-Reason"), r.want)
			}
		}
	}
	t.Logf("one sandbox, attacks then benign: blocked %d/%d attacks (%.0f%%), %d/%d false positives on the benign requests after them (%.0f%%)",
		blocked, attacks, pct(blocked, attacks), fps, len(benign), pct(fps, len(benign)))
}
