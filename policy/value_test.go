package policy

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/util"

	"github.com/airlock-dev/airlock/policies"
)

func TestParseInput(t *testing.T) {
	tests := []struct {
		name, src, want string // want: "" for success, else part of the error
	}{
		{"http", `{"kind":"http","sandbox":{"id":"s"},"destination":{"host":"PyPI.org.","port":443},"http":{"method":"GET","scheme":"https","path":"/"}}`, ""},
		{"dns", `{"kind":"dns","sandbox":{"id":"s"},"destination":{"host":"a.example","port":53},"dns":{"qname":"a.example","qtype":"A"}}`, ""},
		{"unknown field", `{"kind":"tls","sandbox":{"id":"s"},"destination":{"host":"a.example","port":443,"hostname":"x"}}`, "unknown field"},
		{"two documents", `{"kind":"tls","sandbox":{"id":"s"},"destination":{"host":"a.example","port":443}} {}`, "more than one"},
		{"bad kind", `{"kind":"udp","sandbox":{"id":"s"},"destination":{"host":"a.example","port":1}}`, "kind"},
		{"no sandbox id", `{"kind":"tls","sandbox":{},"destination":{"host":"a.example","port":443}}`, "sandbox.id"},
		{"no host", `{"kind":"tls","sandbox":{"id":"s"},"destination":{"port":443}}`, "destination.host"},
		{"bad host", `{"kind":"tls","sandbox":{"id":"s"},"destination":{"host":"a\u0000b","port":443}}`, "destination.host"},
		{"bad port", `{"kind":"tls","sandbox":{"id":"s"},"destination":{"host":"a.example","port":70000}}`, "port"},
		{"http without http", `{"kind":"http","sandbox":{"id":"s"},"destination":{"host":"a.example","port":80}}`, "needs http"},
		{"dns without dns", `{"kind":"dns","sandbox":{"id":"s"},"destination":{"host":"a.example","port":53}}`, "needs dns"},
		{"not json", `kind: http`, "input"},
		{"empty", ``, "empty, want one JSON object"},
		{"blank", " \n", "empty, want one JSON object"},
		{"truncated", `{"kind":"http",`, "truncated"},
		{"null", `null`, "kind"},
		{"sandbox mode and allow object", `{"kind":"tls","sandbox":{"id":"s","mode":"report","allow":{"a.example":true,"b.example":{"ports":[8443,"*"]}}},"destination":{"host":"a.example","port":443}}`, ""},
		{"sandbox allow entries", `{"kind":"tls","sandbox":{"id":"s","allow":["a.example","b.example:22"]},"destination":{"host":"a.example","port":443}}`, ""},
		{"sandbox pod", `{"kind":"tls","sandbox":{"id":"s","pod":{"namespace":"ci","name":"p","uid":"u","service_account":"sa"}},"destination":{"host":"a.example","port":443}}`, ""},
		{"sandbox pod unknown field", `{"kind":"tls","sandbox":{"id":"s","pod":{"node":"n"}},"destination":{"host":"a.example","port":443}}`, "unknown field"},
		{"bad sandbox mode", `{"kind":"tls","sandbox":{"id":"s","mode":"audit"},"destination":{"host":"a.example","port":443}}`, "sandbox.mode"},
		{"bad sandbox allow entry", `{"kind":"tls","sandbox":{"id":"s","allow":["a.example:0"]},"destination":{"host":"a.example","port":443}}`, "allow[0]"},
		{"bad sandbox allow value", `{"kind":"tls","sandbox":{"id":"s","allow":{"a.example":"yes"}},"destination":{"host":"a.example","port":443}}`, "a.example"},
		{"sandbox allow not a list", `{"kind":"tls","sandbox":{"id":"s","allow":"a.example"},"destination":{"host":"a.example","port":443}}`, "allow"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, err := ParseInput([]byte(tc.src))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				if in.Destination.Host != strings.ToLower(strings.TrimSuffix(in.Destination.Host, ".")) {
					t.Fatalf("got host %q, want normalized", in.Destination.Host)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestCacheKeyDistinguishesEveryField(t *testing.T) {
	base := func() *Input {
		return &Input{
			Kind:        KindHTTP,
			Sandbox:     Sandbox{ID: "s", Labels: map[string]string{"a": "b"}, Mode: ModeEnforce, Allow: mustAllow("a.example"), Pod: &Pod{Namespace: "ns", Name: "p", UID: "u", ServiceAccount: "sa"}},
			Destination: Destination{Host: "h.example", Port: 443, Suffixes: []string{"h.example", "example"}, IP: "198.18.0.1", Protocol: "tcp"},
			HTTP:        &HTTP{Method: "GET", Scheme: "https", Path: "/p", Query: map[string][]string{"q": {"1"}}, Headers: map[string]string{"h": "v"}},
			TLS:         &TLS{SNI: "h.example"},
			DNS:         &DNS{QName: "h.example", QType: "A", Flags: []string{"f"}},
		}
	}
	mutations := map[string]func(*Input){
		"kind":        func(in *Input) { in.Kind = KindTLS },
		"sandbox id":  func(in *Input) { in.Sandbox.ID = "t" },
		"label value": func(in *Input) { in.Sandbox.Labels["a"] = "c" },
		"label key":   func(in *Input) { in.Sandbox.Labels = map[string]string{"b": "b"} },
		"mode":        func(in *Input) { in.Sandbox.Mode = ModeReport },
		"no allow":    func(in *Input) { in.Sandbox.Allow = nil },
		"allow entry": func(in *Input) { in.Sandbox.Allow = mustAllow(in.Sandbox.Allow.Entries()[0] + ":8443") },
		"allow more":  func(in *Input) { in.Sandbox.Allow = mustAllow("a.example", "b.example") },
		"pod ns":      func(in *Input) { in.Sandbox.Pod.Namespace = "other" },
		"pod name":    func(in *Input) { in.Sandbox.Pod.Name = "q" },
		"pod uid":     func(in *Input) { in.Sandbox.Pod.UID = "v" },
		"pod sa":      func(in *Input) { in.Sandbox.Pod.ServiceAccount = "default" },
		"pod shift":   func(in *Input) { in.Sandbox.Pod.Namespace, in.Sandbox.Pod.Name = "nsp", "" },
		"no pod":      func(in *Input) { in.Sandbox.Pod = nil },
		"host":        func(in *Input) { in.Destination.Host = "i.example" },
		"port":        func(in *Input) { in.Destination.Port = 444 },
		"suffixes":    func(in *Input) { in.Destination.Suffixes = []string{"h.example"} },
		"ip":          func(in *Input) { in.Destination.IP = "198.18.0.2" },
		"protocol":    func(in *Input) { in.Destination.Protocol = "udp" },
		"method":      func(in *Input) { in.HTTP.Method = "POST" },
		"scheme":      func(in *Input) { in.HTTP.Scheme = "http" },
		"path":        func(in *Input) { in.HTTP.Path = "/q" },
		"query":       func(in *Input) { in.HTTP.Query["q"] = []string{"1", "2"} },
		"header":      func(in *Input) { in.HTTP.Headers["h"] = "w" },
		"no http":     func(in *Input) { in.HTTP = nil },
		"sni":         func(in *Input) { in.TLS.SNI = "x" },
		"intercepted": func(in *Input) { in.TLS.Intercepted = true },
		"no tls":      func(in *Input) { in.TLS = nil },
		"qname":       func(in *Input) { in.DNS.QName = "x" },
		"qtype":       func(in *Input) { in.DNS.QType = "AAAA" },
		"flags":       func(in *Input) { in.DNS.Flags = nil },
		"no dns":      func(in *Input) { in.DNS = nil },
		// Length prefixes keep field boundaries: "a"+"bc" is not "ab"+"c".
		"boundary": func(in *Input) { in.Sandbox.ID, in.Destination.Host = "sh", ".example" },
	}
	ref := cacheKey(base())
	for name, mut := range mutations {
		t.Run(name, func(t *testing.T) {
			in := base()
			mut(in)
			if cacheKey(in) == ref {
				t.Fatalf("got the same key after changing %s", name)
			}
		})
	}
	a, b := base(), base()
	b.Sandbox.Labels = map[string]string{"a": "b"}
	b.Sandbox.Allow = mustAllow("A.example.", "a.example")
	if cacheKey(a) != cacheKey(b) {
		t.Fatal("got different keys for equal inputs")
	}
}

func TestAuthority(t *testing.T) {
	tests := []struct {
		scheme, host string
		port         int
		want         string
	}{
		{"https", "a.example", 443, "a.example"},
		{"http", "a.example", 80, "a.example"},
		{"https", "a.example", 8443, "a.example:8443"},
		{"http", "a.example", 443, "a.example:443"},
		{"https", "2001:db8::1", 443, "[2001:db8::1]"},
		{"https", "2001:db8::1", 8443, "[2001:db8::1]:8443"},
	}
	for _, tc := range tests {
		if got := authority(tc.scheme, tc.host, tc.port); got != tc.want {
			t.Errorf("authority(%q, %q, %d): got %q, want %q", tc.scheme, tc.host, tc.port, got, tc.want)
		}
	}
}

// FuzzParseInput feeds policy input documents through the parser, the OPA value
// builder and the cache key. Whatever parses must convert to exactly the value
// its JSON encoding gives, and must key the same after a JSON round trip.
func FuzzParseInput(f *testing.F) {
	for _, s := range []string{
		`{"kind":"http","sandbox":{"id":"s","labels":{"team":"ml"}},"destination":{"host":"pypi.org","port":443},"http":{"method":"GET","scheme":"https","path":"/simple/","query":{"a":["1","2"],"b":null},"headers":{"user-agent":"pip"}}}`,
		`{"kind":"dns","sandbox":{"id":"s"},"destination":{"host":"a.example","port":53},"dns":{"qname":"a.example","qtype":"TXT","flags":["long_label"]}}`,
		`{"kind":"tls","sandbox":{"id":"s"},"destination":{"host":"xn--bcher-kva.example","port":443,"ip":"198.18.0.1"},"tls":{"sni":"xn--bcher-kva.example","intercepted":true}}`,
		`{"kind":"tcp","sandbox":{"id":"s"},"destination":{"host":"0x7f.1","port":22,"protocol":"tcp"}}`,
		`{"kind":"connect","sandbox":{"id":"s"},"destination":{"host":"[::1]","port":443,"suffixes":[]}}`,
		`{"kind":"tcp","sandbox":{"id":"s","mode":"report","allow":{"**.x.example":true,"2001:db8::1":{"ports":[22,"*"]}}},"destination":{"host":"a.x.example","port":22}}`,
		`{"kind":"tls","sandbox":{"id":"s","allow":["a.example:53","[2001:db8::1]:8443","*.b.example"]},"destination":{"host":"a.example","port":53}}`,
		`{"kind":"tls","sandbox":{"id":"s","pod":{"namespace":"ci","uid":"u"}},"destination":{"host":"a.example","port":443}}`,
		`{"kind":"tls","sandbox":{"id":"s","pod":{}},"destination":{"host":"a.example","port":443}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		in, err := ParseInput(src)
		if err != nil {
			return
		}
		x := prepare(in)
		v := inputValue(&x, &allInputFields)
		got, err := ast.JSON(v)
		if err != nil {
			t.Fatalf("ast.JSON: %v", err)
		}
		enc, err := json.Marshal(&x)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		var want any
		if err := util.UnmarshalJSON(enc, &want); err != nil {
			t.Fatalf("unmarshal: %v", err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("OPA value differs from JSON:\n got %v\nwant %v", got, want)
		}
		again, err := ParseInput(mustJSON(t, in))
		if err != nil {
			t.Fatalf("re-parse of %s: %v", mustJSON(t, in), err)
		}
		if ya := prepare(again); cacheKey(&ya) != cacheKey(&x) {
			t.Fatalf("got different cache keys after a JSON round trip")
		}
	})
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHostKeysMatchLibrary: the keys prepare fills are exactly what the
// library's host_keys computes for an input without them, and a caller's own
// keys are replaced.
func TestHostKeysMatchLibrary(t *testing.T) {
	lib, err := policies.FS.ReadFile("lib/airlock.rego")
	if err != nil {
		t.Fatal(err)
	}
	pq, err := rego.New(rego.Query("data.airlock.host_keys"), rego.Module("airlock.rego", string(lib))).PrepareForEval(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"a.b.example", "b.example", "localhost", "198.51.100.7", "2001:db8::1", "x.y.z.w.example", "xn--bcher-kva.example"} {
		for _, given := range [][]string{nil, {"evil.example"}} {
			x := prepare(&Input{Kind: KindTLS, Sandbox: Sandbox{ID: "s"}, Destination: Destination{Host: host, Port: 443, Keys: given}})
			noKeys := x
			noKeys.Destination.Keys = nil
			rs, err := pq.Eval(context.Background(), rego.EvalParsedInput(inputValue(&noKeys, &allInputFields)))
			if err != nil || len(rs) != 1 {
				t.Fatalf("%s: eval: %v %v", host, rs, err)
			}
			var want []string
			for _, k := range rs[0].Expressions[0].Value.([]any) {
				want = append(want, k.(string))
			}
			if !slices.Equal(x.Destination.Keys, want) {
				t.Errorf("%s (given %v): prepare filled %q, library computes %q", host, given, x.Destination.Keys, want)
			}
		}
	}
}
