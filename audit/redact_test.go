package audit

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestRedactQuery(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"?", nil},
		{"token=abc", []string{"token"}},
		{"?b=2&a=1&b=3", []string{"a", "b"}},
		{"a&&b=&=v", []string{"a", "b"}},
		{"x%20y=1&z%zz=2", []string{"x y", "z%zz"}},
		{"api_key=secret;other=1", []string{"api_key"}},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := RedactQuery(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestIsSensitiveName(t *testing.T) {
	for name, want := range map[string]bool{
		"Authorization": true, "COOKIE": true, "set-cookie": true, "Proxy-Authorization": true,
		"proxy_authorization": true, " cookie ": true, "x-api-key": false, "cookies": false, "": false,
	} {
		if got := IsSensitiveName(name); got != want {
			t.Errorf("%q: got %v, want %v", name, got, want)
		}
	}
}

// The secret values below must never reach the audit file, however a caller
// smuggles them into a record.
var secretValues = []string{
	"Bearer sk-live-AUTHZ", "session=COOKIEVAL", "SETCOOKIEVAL", "Basic PROXYAUTHZ",
	"QUERYSECRET", "NESTEDSECRET", "LISTSECRET", "NAMEDSECRET", "LINESECRET", "BADJSONSECRET",
}

func TestWriterRedactsCredentials(t *testing.T) {
	cfg := testConfig(t)
	w, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	rec := &Record{
		Kind: KindHTTP, Host: "api.example", Method: "GET", Sandbox: "sb-1", Owner: "1000",
		Path:  "/v1/items?token=QUERYSECRET&page=2",
		Query: []string{"page"},
		Extra: map[string]json.RawMessage{
			"Authorization":       json.RawMessage(`"Bearer sk-live-AUTHZ"`),
			"cookie":              json.RawMessage(`"session=COOKIEVAL"`),
			"Proxy_Authorization": json.RawMessage(`"Basic PROXYAUTHZ"`),
			"headers":             json.RawMessage(`{"Set-Cookie":["SETCOOKIEVAL"],"inner":{"authorization":"NESTEDSECRET"},"accept":"*/*"}`),
			"header_list":         json.RawMessage(`[["Authorization","LISTSECRET"],["Accept","text/html"]]`),
			"named":               json.RawMessage(`[{"name":"Cookie","value":"NAMEDSECRET"}]`),
			"raw":                 json.RawMessage(`"GET / HTTP/1.1\r\nAuthorization: LINESECRET\r\n"`),
			"broken":              json.RawMessage(`{"cookie": BADJSONSECRET`),
			"escaped":             json.RawMessage(`{"\u0041uthorization":"NESTEDSECRET"}`),
			"harmless":            json.RawMessage(`{"user_agent":"curl/8"}`),
		},
	}
	before := AppendJSON(nil, rec)
	if err := w.Log(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.ReadFile(cfg.File)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range secretValues {
		if bytes.Contains(file, []byte(s)) {
			t.Errorf("audit file contains %q:\n%s", s, file)
		}
		// The test would prove nothing if the values were not in the input.
		if !bytes.Contains(before, []byte(jsonEscaped(s))) {
			t.Errorf("test input lacks %q", s)
		}
	}
	got := decodeLine(t, readLines(t, cfg.File)[0])
	if got.Path != "/v1/items" || !reflect.DeepEqual(got.Query, []string{"page", "token"}) {
		t.Errorf("path/query: got %q %q, want /v1/items [page token]", got.Path, got.Query)
	}
	if got.Sandbox != "sb-1" || got.Owner != "1000" {
		t.Errorf("sandbox/owner: got %q %q, want sb-1 1000 kept by redaction", got.Sandbox, got.Owner)
	}
	if string(got.Extra["harmless"]) != `{"user_agent":"curl/8"}` {
		t.Errorf("harmless extra changed: %s", got.Extra["harmless"])
	}
	var headers map[string]any
	json.Unmarshal(got.Extra["headers"], &headers)
	if headers["accept"] != "*/*" || headers["Set-Cookie"] != Redacted {
		t.Errorf("headers: got %v, want accept kept and Set-Cookie redacted", headers)
	}
	// The caller's record is untouched.
	if rec.Path != "/v1/items?token=QUERYSECRET&page=2" {
		t.Errorf("caller's record was modified: %q", rec.Path)
	}
	if _, err := VerifyFiles(VerifyOptions{PublicKey: w.PublicKey()}, cfg.File); err != nil {
		t.Fatal(err)
	}
}

func jsonEscaped(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// Regression: header shapes and name spellings that used to reach the file
// unredacted: {"Name","Value"} (a Go struct without tags), Envoy's
// {"key","value"}, a flat rawHeaders list, a tuple longer than two, and names
// with a trailing colon or NUL.
func TestRedactHeaderShapesAndSpellings(t *testing.T) {
	tests := []struct {
		name string
		key  string
		raw  string
	}{
		{"Name Value struct", "x", `{"h":[{"Name":"Cookie","Value":"SECRETX"}]}`},
		{"envoy key value", "x", `{"h":[{"key":"Authorization","value":"SECRETX"}]}`},
		{"flat raw headers", "x", `{"h":["Accept","*/*","Authorization","SECRETX"]}`},
		{"long tuple", "x", `{"h":[["Cookie","a","SECRETX"]]}`},
		{"values list", "x", `{"h":[{"name":"authorization","values":["SECRETX"]}]}`},
		{"upper case key", "x", `{"h":{"AUTHORIZATION":["SECRETX"]}}`},
		{"underscore", "x", `{"h":{"Proxy_Authorization":"SECRETX"}}`},
		{"escaped key", "x", `{"h":{"authoriz\u0061tion":"SECRETX"}}`},
		{"header line", "x", `{"h":"GET / HTTP/1.1\r\nAuthorization: Bearer SECRETX"}`},
		{"top key with colon", "Authorization:", `"SECRETX"`},
		{"top key with NUL", "Authorization\x00", `"SECRETX"`},
		{"top key spaced", "proxy authorization", `"SECRETX"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &Record{Kind: KindHTTP, Extra: map[string]json.RawMessage{tt.key: json.RawMessage(tt.raw)}}
			out := string(AppendJSON(nil, redact(r)))
			if strings.Contains(out, "SECRETX") || !strings.Contains(out, Redacted) {
				t.Fatalf("got %s, want the value redacted", out)
			}
		})
	}
	// A list of header names keeps its names.
	r := &Record{Kind: KindHTTP, Extra: map[string]json.RawMessage{"stripped": json.RawMessage(`["authorization","cookie"]`)}}
	if out := string(AppendJSON(nil, redact(r))); !strings.Contains(out, `["authorization","cookie"]`) {
		t.Fatalf("name list: got %s, want it unchanged", out)
	}
}
