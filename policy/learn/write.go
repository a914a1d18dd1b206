package learn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/termtext"
)

// Files Write creates in the policy directory.
const (
	FileData   = "data.json"
	FilePolicy = "suggested.rego"
	FileTests  = "suggested_test.rego"
	FileReadme = "README.md"
)

// replayEvalTimeout bounds one evaluation offline: nothing waits on it but
// the command, and a loaded CI machine must not turn allows into policy errors.
const replayEvalTimeout = 10 * time.Second

// NewEngine loads a policy for offline evaluation (replay, suggest): dir ""
// is the embedded default; every preset is active, as in `airlock run`
// without --preset.
func NewEngine(dir string) (*policy.Engine, error) {
	return policy.New(policy.Config{Dir: dir, EvalTimeout: replayEvalTimeout}, nil)
}

// suggestedRego reads data.suggested.hosts (see Entry). It is the same for
// every suggestion; the data document says what is allowed.
const suggestedRego = `# Written by airlock policy suggest: allows what data.suggested.hosts
# (data.json) lists, and nothing else. Edit data.json, not this file.
package airlock.egress

import data.airlock

# The entries whose key matches the destination: the host, or "*.parent".
_entries contains e if {
	some k in airlock.host_keys
	e := data.suggested.hosts[k]
}

# CONNECT, TLS by SNI and raw TCP on the ports listed for the kind.
allow if {
	input.kind in {"connect", "tls", "tcp"}
	some e in _entries
	input.destination.port in e.ports[input.kind]
}

# DNS questions for a listed name.
allow if {
	input.kind == "dns"
	some e in _entries
	e.dns == true
}

# HTTP by method, on the ports and paths listed ("/p/*" is a prefix).
allow if {
	input.kind == "http"
	not _dot_segment
	some e in _entries
	r := e.http[input.http.method]
	input.destination.port in r.ports
	some p in r.paths
	_path_ok(p)
}

_path_ok(p) if input.http.path == p

_path_ok(p) if {
	endswith(p, "*")
	startswith(input.http.path, trim_suffix(p, "*"))
}

# A prefix never lets a path climb out of it.
_dot_segment if contains(input.http.path, "/../")

_dot_segment if endswith(input.http.path, "/..")
`

// Write writes s as a policy directory at dir (which must not exist or be
// empty): the data document, the policy reading it, tests generated from the
// log and a README. It loads the directory with the real engine, moves
// denied inputs it cannot keep denied to s.Conflicts, checks every allowed
// input is allowed, and finally loads it with its tests.
func Write(ctx context.Context, dir string, s *Suggestion) error {
	if err := emptyDir(dir); err != nil {
		return err
	}
	table, rest := splitTable(s.Hosts)
	doc := *s
	doc.Hosts = rest
	data, err := json.MarshalIndent(map[string]any{"suggested": &doc}, "", "  ")
	if err != nil {
		return err
	}
	if err := writeExtras(dir, s, table); err != nil {
		return err
	}
	// People review it before use: what a terminal would act on is
	// written as \u escapes (the same values).
	if err := writeFile(dir, FileData, append(termtext.EscapeJSON(data), '\n')); err != nil {
		return err
	}
	if err := writeFile(dir, FilePolicy, []byte(suggestedRego)); err != nil {
		return err
	}
	e, err := NewEngine(dir)
	if err != nil {
		return fmt.Errorf("learn: the suggested policy does not load: %w", err)
	}
	defer e.Close()
	for _, x := range s.Allowed {
		if d := e.Decide(ctx, &x.Input); !d.Allowed {
			return fmt.Errorf("learn: the suggested policy denies record %d (%s %s:%d): %v", x.Seq, x.Input.Kind, x.Input.Destination.Host, x.Input.Destination.Port, d.Reasons)
		}
	}
	kept := s.Denied[:0:0]
	for _, x := range s.Denied {
		if e.Decide(ctx, &x.Input).Allowed {
			s.Conflicts = append(s.Conflicts, x)
			continue
		}
		kept = append(kept, x)
	}
	s.Denied = kept
	if err := writeFile(dir, FileTests, testsOf(s, DefaultMaxTests)); err != nil {
		return err
	}
	if err := writeFile(dir, FileReadme, readmeOf(s)); err != nil {
		return err
	}
	e2, err := NewEngine(dir) // runs the generated tests
	if err != nil {
		return fmt.Errorf("learn: the suggested policy fails its generated tests: %w", err)
	}
	return e2.Close()
}

func emptyDir(dir string) error {
	ents, err := os.ReadDir(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return os.MkdirAll(dir, 0o755)
	case err != nil:
		return fmt.Errorf("learn: %w", err)
	case len(ents) > 0:
		return fmt.Errorf("learn: %s is not empty: suggest writes a new policy directory", dir)
	}
	return nil
}

func writeFile(dir, name string, b []byte) error {
	if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
		return fmt.Errorf("learn: %w", err)
	}
	return nil
}

// testsOf writes one test per distinct input, at most max per side: allowed
// inputs must be allowed, denied ones denied.
func testsOf(s *Suggestion, max int) []byte {
	var b bytes.Buffer
	b.WriteString("# Written by airlock policy suggest from the audit log: each test is one\n")
	b.WriteString("# decision the log shows (its record's seq in the comment).\n")
	b.WriteString("package suggested_test\n\nimport data.airlock\n")
	write := func(name string, x Sample, want bool) {
		// JSON as Rego reads it, with what a terminal would act on
		// written as \u escapes: same value, safe to cat.
		in, _ := json.Marshal(&x.Input)
		in = termtext.EscapeJSON(in)
		fmt.Fprintf(&b, "\n# seq %d: %s\n%s if {\n\t", x.Seq, describe(&x.Input), name)
		if !want {
			b.WriteString("not ")
		}
		fmt.Fprintf(&b, "airlock.decision.allowed with input as %s\n}\n", in)
	}
	for i, x := range s.Allowed {
		if i == max {
			break
		}
		write(fmt.Sprintf("test_allowed_%d", i+1), x, true)
	}
	for i, x := range s.Denied {
		if i == max {
			break
		}
		write(fmt.Sprintf("test_denied_%d", i+1), x, false)
	}
	return b.Bytes()
}

func describe(in *policy.Input) string {
	d := fmt.Sprintf("%s %s:%d", in.Kind, in.Destination.Host, in.Destination.Port)
	switch {
	case in.HTTP != nil:
		d += " " + in.HTTP.Method + " " + in.HTTP.Path
	case in.DNS != nil:
		d = fmt.Sprintf("dns %s %s", in.DNS.QName, in.DNS.QType)
	}
	// One comment line, shown escaped: the host and path are the sandbox's.
	return termtext.Escape(d)
}

func readmeOf(s *Suggestion) []byte {
	var b bytes.Buffer
	b.WriteString("# Suggested policy\n\nWritten by `airlock policy suggest` from an audit log. Review `data.json`\n")
	b.WriteString("before use: it allows what the log shows was allowed or refused only by the\n")
	b.WriteString("allowlist, narrowed to the kinds, ports, methods and paths seen. Hosts reached\n")
	b.WriteString("only over HTTP(S) are in `http_allow.rego` (method and path per host); the rest\n")
	b.WriteString("are in `data.json`.\n\n")
	fmt.Fprintf(&b, "- records read: %d; allowed already: %d; learned from allowlist refusals: %d; denied for other reasons (kept denied): %d\n",
		s.Records, s.AllowedAlready, s.Learned, s.OtherDenied)
	if len(s.Presets) > 0 {
		names := make([]string, 0, len(s.Presets))
		for p := range s.Presets {
			names = append(names, p)
		}
		sort.Strings(names)
		fmt.Fprintf(&b, "- hosts left to presets: %s (airlock-policy.yaml names them; no other preset is active)\n", strings.Join(names, ", "))
	}
	b.Write(flaggedOf(s))
	if len(s.Conflicts) > 0 {
		fmt.Fprintf(&b, "- %d denied decisions look like allowed ones to a policy (same host, port, method, path); they are not tested:\n", len(s.Conflicts))
		for _, c := range s.Conflicts {
			fmt.Fprintf(&b, "  - seq %d: %s\n", c.Seq, describe(&c.Input))
		}
	}
	b.WriteString("\nLoad it with `airlock run --policy DIR`; check it with `airlock policy test DIR`.\n")
	return b.Bytes()
}
