package learn

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/policy"
)

// event is one request of a simulated run: its input, and a refusal of the
// gateway's own (the address guard, the secrets check) when it had one.
type event struct {
	in      policy.Input
	outside string
}

// runLog decides every event with the real engine e, writes the records the
// gateway would (decision, mode, reasons; the gateway's own reason after the
// policy's when the policy let the request pass) to a JSONL file, and returns
// its path.
func runLog(t *testing.T, e policy.Decider, evs []event) string {
	t.Helper()
	var b []byte
	for i, ev := range evs {
		d := e.Decide(context.Background(), &ev.in)
		if d.Err != nil {
			t.Fatalf("event %d: %v", i, d.Err)
		}
		r := recordOf(&ev.in)
		r.Seq, r.ID = uint64(i+1), "req-"+ev.in.Destination.Host
		r.Mode, r.PolicyRev = string(d.Mode), d.Rev
		r.Decision = audit.DecisionAllow
		if !d.Allowed {
			r.Decision = audit.DecisionDeny
		}
		for _, x := range d.Reasons {
			r.Reasons = append(r.Reasons, audit.Reason{ID: x.ID, Msg: x.Msg})
		}
		if ev.outside != "" && d.Permit() {
			r.Decision = audit.DecisionDeny
			r.Reasons = append(r.Reasons, audit.Reason{ID: ev.outside, Msg: "refused by the gateway"})
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b = append(append(b, line...), '\n')
		// A tunnel's close record follows its decision: never replayable.
		if ev.in.Kind == policy.KindConnect {
			c, _ := json.Marshal(&audit.Record{Seq: uint64(i + 1), ID: r.ID, Kind: audit.KindClose, Host: r.Host, Port: r.Port})
			b = append(append(b, c...), '\n')
		}
	}
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// recordOf is the record the gateway or DNS filter writes for in, before the
// decision.
func recordOf(in *policy.Input) *audit.Record {
	r := &audit.Record{Sandbox: in.Sandbox.ID, Kind: string(in.Kind), Host: in.Destination.Host, Port: in.Destination.Port}
	switch in.Kind {
	case policy.KindHTTP:
		r.Method, r.Path = in.HTTP.Method, in.HTTP.Path
	case policy.KindTCP:
		r.Protocol = "tcp"
		r.IP = in.Destination.IP
	case policy.KindTLS:
		if in.TLS.SNI == "" {
			r.Host = in.Destination.IP
		}
	case policy.KindDNS:
		r.Protocol, r.QName, r.QType, r.Flags = in.Destination.Protocol, in.DNS.QName, in.DNS.QType, in.DNS.Flags
	}
	return r
}

func sb() policy.Sandbox { return policy.Sandbox{ID: "sb-1"} }

func httpIn(method, host string, port int, path string) policy.Input {
	scheme := "http"
	var tls *policy.TLS
	if port == 443 {
		scheme, tls = "https", &policy.TLS{SNI: host, Intercepted: true}
	}
	return policy.Input{Kind: policy.KindHTTP, Sandbox: sb(), Destination: policy.Destination{Host: host, Port: port},
		HTTP: &policy.HTTP{Method: method, Scheme: scheme, Path: path}, TLS: tls}
}

func connIn(kind policy.Kind, host string, port int) policy.Input {
	in := policy.Input{Kind: kind, Sandbox: sb(), Destination: policy.Destination{Host: host, Port: port}}
	switch kind {
	case policy.KindTLS:
		in.TLS = &policy.TLS{SNI: host}
	case policy.KindTCP:
		in.Destination.Protocol, in.Destination.IP = "tcp", "198.18.0.5"
	}
	return in
}

func dnsIn(name, qtype string) policy.Input {
	return policy.Input{Kind: policy.KindDNS, Sandbox: sb(), Destination: policy.Destination{Host: name, Port: 53, Protocol: "udp"},
		DNS: &policy.DNS{QName: name, QType: qtype}}
}

// reportRun is the traffic of an agent in report mode: registries read (the
// default policy allows them), hosts only the allowlist refuses, and requests
// refused for other reasons that a learned policy must keep refusing.
func reportRun() []event {
	evs := []event{
		{in: httpIn("GET", "files.pythonhosted.org", 443, "/packages/ab/requests.whl")},
		{in: httpIn("GET", "pypi.org", 443, "/simple/requests/")},
		{in: httpIn("POST", "pypi.org", 443, "/legacy/")},
		{in: dnsIn("api.example-ai.dev", "A")},
		{in: connIn(policy.KindConnect, "api.example-ai.dev", 443)},
		{in: httpIn("POST", "api.example-ai.dev", 443, "/v1/chat/completions")},
		{in: httpIn("GET", "api.example-ai.dev", 443, "/v1/models")},
		{in: httpIn("GET", "api.example-ai.dev", 443, "/v1/models/gpt")},
		{in: httpIn("GET", "api.example-ai.dev", 443, "/health")},
		{in: connIn(policy.KindTCP, "db.corp.example", 5432)},
		{in: dnsIn("db.corp.example", "AAAA")},
		{in: connIn(policy.KindTLS, "b1.s3.amazonaws.com", 443)},
		// Refused for reasons no allowlist answers.
		{in: httpIn("GET", "metadata.google.internal", 80, "/computeMetadata/v1/"), outside: "destination_forbidden"},
		{in: connIn(policy.KindConnect, "api.example-ai.dev", 53)},
		{in: httpIn("GET", "api.example-ai.dev", 443, "/v1/files"), outside: "secret_wrong_host"},
	}
	for _, h := range []string{"a", "b", "c", "d", "e", "f"} {
		evs = append(evs, event{in: connIn(policy.KindConnect, h+".cdn.corp.example", 443)})
	}
	for _, h := range []string{"b2", "b3", "b4", "b5", "b6"} {
		evs = append(evs, event{in: connIn(policy.KindTLS, h+".s3.amazonaws.com", 443)})
	}
	for i := range evs {
		evs[i].in.Sandbox.Mode = policy.ModeReport
	}
	return evs
}

func engine(t *testing.T, dir string) *policy.Engine {
	t.Helper()
	e, err := NewEngine(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	return e
}

// suggestFrom runs Suggest and Write on log into a new directory.
func suggestFrom(t *testing.T, log string) (string, *Suggestion) {
	t.Helper()
	s, err := Suggest(context.Background(), []string{log}, SuggestConfig{Baseline: engine(t, "")})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "suggested")
	if err := Write(context.Background(), dir, s); err != nil {
		t.Fatal(err)
	}
	return dir, s
}

// TestSuggestRoundTrip: the policy suggested from a report-mode run, loaded
// by the real engine in enforce mode, allows exactly what the run let through
// and denies everything the run refused for another reason.
func TestSuggestRoundTrip(t *testing.T) {
	log := runLog(t, engine(t, ""), reportRun())
	dir, s := suggestFrom(t, log)
	if len(s.Conflicts) != 0 {
		t.Fatalf("got conflicts %v, want none", s.Conflicts)
	}
	sugg := engine(t, dir)
	rb := NewRebuilder()
	var allowed, denied int
	err := audit.Query(context.Background(), []string{log}, audit.Filter{}, func(r *audit.Record) error {
		in, skip := rb.Input(r)
		if skip != "" {
			return nil
		}
		in.Sandbox.Mode = policy.ModeEnforce
		want := r.Decision == audit.DecisionAllow || Learnable(r)
		d := sugg.Decide(context.Background(), &in)
		if d.Allowed != want {
			t.Errorf("seq %d %s %s:%d %s: got allowed %v (%v), want %v", r.Seq, r.Kind, r.Host, r.Port, r.Path, d.Allowed, d.Reasons, want)
		}
		if want {
			allowed++
		} else {
			denied++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if allowed != 23 || denied != 3 {
		t.Fatalf("got %d allowed and %d denied records, want 23 and 3", allowed, denied)
	}
	// Replaying the log against the suggestion opens exactly the learned records.
	rep, err := Replay(context.Background(), []string{log}, ReplayConfig{New: sugg})
	if err != nil {
		t.Fatal(err)
	}
	if rep.NewlyAllowed != s.Learned || rep.NewlyDenied != 0 || rep.Skipped[SkipNotDecision][audit.KindClose] != 8 {
		t.Fatalf("replay: got %+v, want %d newly allowed, none denied, 8 close records skipped", rep, s.Learned)
	}
}

// TestSuggestNarrows pins what the data document says: presets named, paths
// narrowed to prefixes only where several paths share one and no refused path
// falls under it, a wildcard only for many siblings under a non-public parent.
func TestSuggestNarrows(t *testing.T) {
	_, s := suggestFrom(t, runLog(t, engine(t, ""), reportRun()))
	if got := s.Presets["python"]; !slices.Equal(got, []string{"files.pythonhosted.org"}) {
		t.Errorf("python preset: got %v, want [files.pythonhosted.org]", got)
	}
	ai := s.Hosts["api.example-ai.dev"]
	if ai == nil {
		t.Fatalf("got hosts %v, want api.example-ai.dev", keys(s.Hosts))
	}
	if got := ai.HTTP["GET"].Paths; !slices.Equal(got, []string{"/health", "/v1/models", "/v1/models/gpt"}) {
		// /v1/files was refused (a secret): /v1/* would open it.
		t.Errorf("GET paths: got %v, want the three exact paths", got)
	}
	if got := ai.Ports["connect"]; !slices.Equal(got, []int{443}) {
		t.Errorf("connect ports: got %v, want [443]", got)
	}
	if _, ok := s.Hosts["*.cdn.corp.example"]; !ok {
		t.Errorf("got hosts %v, want *.cdn.corp.example for six siblings", keys(s.Hosts))
	}
	if _, ok := s.Hosts["*.s3.amazonaws.com"]; ok {
		t.Errorf("got a wildcard on the public suffix s3.amazonaws.com")
	}
	if _, ok := s.Hosts["metadata.google.internal"]; ok {
		t.Errorf("learned a host refused by the address guard")
	}
	if got := s.Hosts["db.corp.example"]; got == nil || !slices.Equal(got.Ports["tcp"], []int{5432}) || !got.DNS {
		t.Errorf("db.corp.example: got %+v, want tcp 5432 and dns", got)
	}
}

func TestPathPrefixes(t *testing.T) {
	for _, tc := range []struct {
		name         string
		paths, avoid []string
		want         []string
	}{
		{"one path exact", []string{"/v1/models"}, nil, []string{"/v1/models"}},
		{"shared directory", []string{"/simple/numpy/", "/simple/requests/"}, nil, []string{"/simple/*"}},
		{"deeper common directory", []string{"/v1/chat/a", "/v1/chat/b"}, nil, []string{"/v1/chat/*"}},
		{"avoided path under it", []string{"/v1/a", "/v1/b"}, []string{"/v1/admin"}, []string{"/v1/a", "/v1/b"}},
		{"root files exact", []string{"/", "/robots.txt"}, nil, []string{"/", "/robots.txt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := pathPrefixes(tc.paths, tc.avoid, DefaultPrefixPaths); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestWildcardOK(t *testing.T) {
	for _, tc := range []struct {
		parent string
		want   bool
	}{
		{"com", false},
		{"example.com", false},                   // directly under a public suffix
		{"github.io", false},                     // a public suffix (private section)
		{"user.github.io", false},                // directly under one
		{"s3.amazonaws.com", false},              // a public suffix
		{"cdn.example.com", true},                // below a registrable domain
		{"a.b.corp.example", true},               // deep enough
		{"198.18.0.1", false},                    // an address
		{"objects.githubusercontent.com", false}, // githubusercontent.com is a public suffix
		// Every name one label under it is a public suffix (the list's
		// *.compute-1.amazonaws.com rule), each an EC2 host of its own
		// owner: suggested before the rule was hostname's.
		{"compute-1.amazonaws.com", false},
	} {
		t.Run(tc.parent, func(t *testing.T) {
			if got := wildcardOK(tc.parent); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
