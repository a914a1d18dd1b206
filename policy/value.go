package policy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/airlock-dev/airlock/hostname"
)

// inputFields says which top-level input keys the compiled policy reads; the
// others are left out of the OPA value (nothing could observe them). all means
// the policy reads input as a whole.
type inputFields struct {
	all                                            bool
	kind, sandbox, destination, http, tls, dns, at bool
	content, jsonrpc, llm                          bool // content.go
}

// usedInputFields walks every reference in the compiled modules.
func usedInputFields(mods map[string]*ast.Module) inputFields {
	var f inputFields
	for _, m := range mods {
		ast.WalkTerms(m, func(t *ast.Term) bool {
			switch v := t.Value.(type) {
			case ast.Var:
				if v.Equal(ast.InputRootDocument.Value) {
					f.all = true // bare input
				}
			case ast.Ref:
				if !v[0].Equal(ast.InputRootDocument) {
					return false
				}
				if len(v) < 2 {
					f.all = true
					return true
				}
				k, ok := v[1].Value.(ast.String)
				if !ok {
					f.all = true
					return true
				}
				switch string(k) {
				case "kind":
					f.kind = true
				case "sandbox":
					f.sandbox = true
				case "destination":
					f.destination = true
				case "http":
					f.http = true
				case "tls":
					f.tls = true
				case "dns":
					f.dns = true
				case "attributes":
					f.at = true
				case "content":
					f.content = true
				case "jsonrpc":
					f.jsonrpc = true
				case "llm":
					f.llm = true
				}
				// The rest of the ref may hold refs of its own (input.a[input.b]).
				for _, x := range v[2:] {
					ast.WalkTerms(x, func(t *ast.Term) bool {
						if r, ok := t.Value.(ast.Ref); ok && r[0].Equal(ast.InputRootDocument) {
							f.all = true
						}
						return f.all
					})
				}
				return true
			}
			return false
		})
	}
	if f.all {
		return allInputFields
	}
	return f
}

// allInputFields builds the whole input.
var allInputFields = inputFields{all: true, kind: true, sandbox: true, destination: true, http: true, tls: true, dns: true, at: true,
	content: true, jsonrpc: true, llm: true}

// inputValue converts an input to an OPA value directly (no JSON round trip).
// It matches the JSON encoding of Input: absent and empty parts are absent; parts the policy never reads (f) are left out.
func inputValue(in *Input, f *inputFields) ast.Value {
	items := make([][2]*ast.Term, 0, 7)
	if f.kind {
		items = append(items, item("kind", ast.StringTerm(string(in.Kind))))
	}
	if f.sandbox {
		items = append(items, item("sandbox", ast.NewTerm(sandboxValue(&in.Sandbox))))
	}
	if f.destination {
		items = append(items, item("destination", ast.NewTerm(destinationValue(&in.Destination))))
	}
	if h := in.HTTP; h != nil && f.http {
		kv := [][2]*ast.Term{
			item("method", ast.StringTerm(h.Method)),
			item("scheme", ast.StringTerm(h.Scheme)),
			item("path", ast.StringTerm(h.Path)),
		}
		if len(h.Query) > 0 {
			q := make([][2]*ast.Term, 0, len(h.Query))
			for k, vs := range h.Query {
				q = append(q, item(k, ast.NewTerm(stringArray(vs))))
			}
			kv = append(kv, item("query", ast.NewTerm(ast.NewObject(q...))))
		}
		if len(h.Headers) > 0 {
			kv = append(kv, item("headers", ast.NewTerm(stringMap(h.Headers))))
		}
		if h.BodySize != 0 {
			kv = append(kv, item("body_size", ast.IntNumberTerm(int(h.BodySize))))
		}
		items = append(items, item("http", ast.NewTerm(ast.NewObject(kv...))))
	}
	if t := in.TLS; t != nil && f.tls {
		items = append(items, item("tls", ast.NewTerm(ast.NewObject(
			item("sni", ast.StringTerm(t.SNI)),
			item("intercepted", ast.BooleanTerm(t.Intercepted)),
		))))
	}
	if d := in.DNS; d != nil && f.dns {
		kv := [][2]*ast.Term{
			item("qname", ast.StringTerm(d.QName)),
			item("qtype", ast.StringTerm(d.QType)),
		}
		if len(d.Flags) > 0 {
			kv = append(kv, item("flags", ast.NewTerm(stringArray(d.Flags))))
		}
		items = append(items, item("dns", ast.NewTerm(ast.NewObject(kv...))))
	}
	if a := in.Attributes; a != nil && f.at {
		h := a.Request.HTTP
		kv := [][2]*ast.Term{
			item("method", ast.StringTerm(h.Method)),
			item("host", ast.StringTerm(h.Host)),
			item("path", ast.StringTerm(h.Path)),
			item("scheme", ast.StringTerm(h.Scheme)),
		}
		if len(h.Headers) > 0 {
			kv = append(kv, item("headers", ast.NewTerm(stringMap(h.Headers))))
		}
		items = append(items, item("attributes", ast.NewTerm(ast.NewObject(
			item("request", ast.NewTerm(ast.NewObject(
				item("http", ast.NewTerm(ast.NewObject(kv...))),
			))),
		))))
	}
	items = contentValues(in, f, items)
	return ast.NewObject(items...)
}

func item(k string, v *ast.Term) [2]*ast.Term { return [2]*ast.Term{ast.StringTerm(k), v} }

// allowValue is a sandbox allow list as OPA reads it, built once per list.
// A list that does not convert (it cannot: entries are normalized) is empty:
// it allows nothing more.
func allowValue(a *AllowList) ast.Value {
	return a.Compiled(func(obj map[string]any) any {
		v, err := ast.InterfaceToValue(obj)
		if err != nil {
			return ast.NewObject()
		}
		return v
	}).(ast.Value)
}

// sandboxValue builds input.sandbox. The allow list's value was built once by
// NewAllowList and is shared by every evaluation (OPA only reads input), so a
// sandbox with 10,000 entries costs no more here than one with none.
func sandboxValue(s *Sandbox) ast.Value {
	kv := make([][2]*ast.Term, 0, 4)
	kv = append(kv, item("id", ast.StringTerm(s.ID)))
	if len(s.Labels) > 0 {
		kv = append(kv, item("labels", ast.NewTerm(stringMap(s.Labels))))
	}
	if s.Mode != "" {
		kv = append(kv, item("mode", ast.StringTerm(string(s.Mode))))
	}
	if s.Allow != nil {
		kv = append(kv, item("allow", ast.NewTerm(allowValue(s.Allow))))
	}
	if s.Pod != nil {
		kv = append(kv, item("pod", ast.NewTerm(podValue(s.Pod))))
	}
	return ast.NewObject(kv...)
}

// podValue builds input.sandbox.pod: its given fields, as the JSON encoding
// (omitempty) has them.
func podValue(p *Pod) ast.Value {
	kv := make([][2]*ast.Term, 0, 4)
	for _, f := range [...]struct{ k, v string }{
		{"namespace", p.Namespace}, {"name", p.Name}, {"uid", p.UID}, {"service_account", p.ServiceAccount},
	} {
		if f.v != "" {
			kv = append(kv, item(f.k, ast.StringTerm(f.v)))
		}
	}
	return ast.NewObject(kv...)
}

func destinationValue(d *Destination) ast.Value {
	kv := [][2]*ast.Term{
		item("host", ast.StringTerm(d.Host)),
		item("port", ast.IntNumberTerm(d.Port)),
	}
	if len(d.Suffixes) > 0 {
		kv = append(kv, item("suffixes", ast.NewTerm(stringArray(d.Suffixes))))
	}
	if len(d.Keys) > 0 {
		kv = append(kv, item("keys", ast.NewTerm(stringArray(d.Keys))))
	}
	if d.IP != "" {
		kv = append(kv, item("ip", ast.StringTerm(d.IP)))
	}
	if d.Protocol != "" {
		kv = append(kv, item("protocol", ast.StringTerm(d.Protocol)))
	}
	return ast.NewObject(kv...)
}

func stringArray(ss []string) ast.Value {
	ts := make([]*ast.Term, len(ss))
	for i, s := range ss {
		ts[i] = ast.StringTerm(s)
	}
	return ast.NewArray(ts...)
}

func stringMap(m map[string]string) ast.Value {
	kv := make([][2]*ast.Term, 0, len(m))
	for k, v := range m {
		kv = append(kv, item(k, ast.StringTerm(v)))
	}
	return ast.NewObject(kv...)
}

// cacheKey is a canonical serialization of every field of a prepared input
// (Attributes and Destination.Keys excepted: prepare derives them from the rest). Strings are length
// prefixed and maps sorted, so two inputs share a key only when they are equal.
// A sandbox's allow list stands in the key as the SHA-256 of its normalized
// entries, so the key is as long with 10,000 entries as with one.
func cacheKey(in *Input) string {
	return string(appendCacheKey(nil, in))
}

// appendCacheKey appends in's cache key to dst: the exact serialization
// cacheKey returns, built without allocating when dst has room, so a cached
// decision is found by the map's own hash of these bytes and its full key
// compared (Engine.Decide, decisionCache.getBytes).
func appendCacheKey(dst []byte, in *Input) []byte {
	b := keyBuilder{buf: dst}
	b.str(string(in.Kind))
	b.str(in.Sandbox.ID)
	b.strMap(in.Sandbox.Labels)
	b.str(string(in.Sandbox.Mode))
	if a := in.Sandbox.Allow; a != nil {
		b.tag('l')
		d := a.Digest()
		b.str(string(d[:]))
	} else {
		b.tag('-')
	}
	if p := in.Sandbox.Pod; p != nil {
		b.tag('p')
		b.str(p.Namespace)
		b.str(p.Name)
		b.str(p.UID)
		b.str(p.ServiceAccount)
	} else {
		b.tag('-')
	}
	d := &in.Destination
	b.str(d.Host)
	b.int(d.Port)
	b.strs(d.Suffixes)
	b.str(d.IP)
	b.str(d.Protocol)
	if h := in.HTTP; h != nil {
		b.tag('h')
		b.str(h.Method)
		b.str(h.Scheme)
		b.str(h.Path)
		if len(h.Query) == 0 {
			b.tag('-')
		} else {
			b.tag('q')
			keys := sortedKeys(h.Query)
			b.int(len(keys))
			for _, k := range keys {
				b.str(k)
				b.strs(h.Query[k])
			}
		}
		b.strMap(h.Headers)
		b.int(int(h.BodySize))
	} else {
		b.tag('-')
	}
	if t := in.TLS; t != nil {
		b.tag('t')
		b.str(t.SNI)
		if t.Intercepted {
			b.tag('1')
		} else {
			b.tag('0')
		}
	} else {
		b.tag('-')
	}
	if q := in.DNS; q != nil {
		b.tag('d')
		b.str(q.QName)
		b.str(q.QType)
		b.strs(q.Flags)
	} else {
		b.tag('-')
	}
	contentKey(&b, in)
	return b.buf
}

// keyBuilder appends a cache key: every value length-prefixed, every optional
// part tagged, so two different inputs never make the same bytes.
type keyBuilder struct{ buf []byte }

func (b *keyBuilder) tag(c byte) { b.buf = append(b.buf, c) }

func (b *keyBuilder) int(n int) {
	b.buf = strconv.AppendInt(b.buf, int64(n), 10)
	b.buf = append(b.buf, ';')
}

func (b *keyBuilder) str(s string) {
	b.int(len(s))
	b.buf = append(b.buf, s...)
}

func (b *keyBuilder) strs(ss []string) {
	if len(ss) == 0 {
		b.tag('-')
		return
	}
	b.tag('a')
	b.int(len(ss))
	for _, s := range ss {
		b.str(s)
	}
}

func (b *keyBuilder) strMap(m map[string]string) {
	if len(m) == 0 {
		b.tag('-')
		return
	}
	b.tag('m')
	var small [16]string // most header maps: sorted without allocating
	keys := small[:0]
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b.int(len(keys))
	for _, k := range keys {
		b.str(k)
		b.str(m[k])
	}
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// authority is host, or host:port when port is not the scheme's default
// (Envoy's attributes.request.http.host).
func authority(scheme, host string, port int) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == 0 || (scheme == "https" && port == 443) || (scheme == "http" && port == 80) {
		return host
	}
	return host + ":" + strconv.Itoa(port)
}

// pathWithQuery is Envoy's :path: the path and, when present, the query string
// (keys sorted).
func pathWithQuery(p string, q map[string][]string) string {
	if len(q) == 0 {
		return p
	}
	return p + "?" + url.Values(q).Encode()
}

// ParseInput decodes a policy input document strictly (unknown fields are
// errors, one document only), normalizes destination.host and checks the fields every kind needs. It is what
// `airlock policy eval` reads.
func ParseInput(src []byte) (*Input, error) {
	dec := json.NewDecoder(bytes.NewReader(src))
	dec.DisallowUnknownFields()
	var in Input
	if err := dec.Decode(&in); err != nil {
		switch {
		case errors.Is(err, io.EOF):
			return nil, fmt.Errorf("policy: input: empty, want one JSON object such as {\"kind\": \"http\", ...}: %w", err)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, fmt.Errorf("policy: input: JSON ends before the object is closed (truncated?): %w", err)
		}
		return nil, fmt.Errorf("policy: input: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("policy: input: more than one JSON document")
	}
	if in.HTTP != nil {
		for k, v := range in.HTTP.Query {
			if v == nil {
				in.HTTP.Query[k] = []string{} // "k": null reads as no values
			}
		}
	}
	if in.Destination.Host != "" {
		h, err := hostname.Normalize(in.Destination.Host)
		if err != nil {
			return nil, fmt.Errorf("policy: input: destination.host: %w", err)
		}
		in.Destination.Host = h
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return &in, nil
}

// Validate checks what every caller must fill: a known kind, a sandbox id, a
// sandbox mode that is empty, enforce or report, a host and a port in
// 0..65535, and the part the kind names.
func (in *Input) Validate() error {
	switch in.Kind {
	case KindHTTP, KindConnect, KindTLS, KindTCP, KindDNS:
	default:
		return fmt.Errorf("policy: input: kind %q is not one of http, connect, tls, tcp, dns", in.Kind)
	}
	if in.Sandbox.ID == "" {
		return fmt.Errorf("policy: input: sandbox.id is empty")
	}
	if err := checkMode(in.Sandbox.Mode); err != nil {
		return err
	}
	if in.Destination.Host == "" {
		return fmt.Errorf("policy: input: destination.host is empty")
	}
	if in.Destination.Port < 0 || in.Destination.Port > 65535 {
		return fmt.Errorf("policy: input: destination.port %d is not in 0..65535", in.Destination.Port)
	}
	if in.Kind == KindHTTP && in.HTTP == nil {
		return fmt.Errorf("policy: input: kind http needs http")
	}
	if in.Kind == KindDNS && in.DNS == nil {
		return fmt.Errorf("policy: input: kind dns needs dns")
	}
	return nil
}

// checkMode accepts a sandbox's mode: empty (the engine's), enforce or report.
func checkMode(m Mode) error {
	switch m {
	case "", ModeEnforce, ModeReport:
		return nil
	}
	return fmt.Errorf("policy: input: sandbox.mode %q is not one of enforce, report (or empty for the gateway's)", m)
}
