package reporttest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
)

// Base is the fixture's first timestamp.
var Base = time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)

// XSSHost is a destination the fixture logs that would run script, or fetch,
// if the page ever treated a logged value as markup.
const XSSHost = `<img src="http://198.18.0.1/x" onerror="document.body.dataset.pwned=1">`

// Fixture names the files Write created.
type Fixture struct {
	Log    string // the audit log
	Key    string // the signing key
	PubKey string // its public key (PEM), for --pubkey
}

func raw(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func at(s int) time.Time { return Base.Add(time.Duration(s) * time.Second) }

func reasons(id string) []audit.Reason { return []audit.Reason{{ID: id, Msg: id}} }

// Records are the fixture's records, in order (the writer numbers and chains
// them). Three sandboxes over three minutes:
//
//	sb-build:   allowed 4, denied 2, errors 0, bytes up 2700, down 155000
//	sb-agent:   allowed 2, denied 72 (5 + 40 in a DNS summary + 1 drop + 25 in a
//	            drop summary + 1), bytes up 3100, down 17000; secret openai_key v3
//	            used twice at api.openai.com:443; DNS flags on tunnel.example
//	sb-scraper: allowed 1, denied 100 (a gateway budget summary), errors 1,
//	            bytes up 100, down 2000
func Records() []audit.Record {
	secret := []audit.Secret{{ID: "openai_key", Version: "v3", Fingerprint: "hmac-sha256:ab12cd34ef56", Where: "header"}}
	return []audit.Record{
		{TS: at(0), Sandbox: "sb-build", Kind: audit.KindSandbox, Decision: audit.DecisionAllow, Reasons: reasons("created")},
		{TS: at(0), Sandbox: "sb-build", Kind: audit.KindExec, Exec: &audit.Exec{Phase: audit.ExecStart, Argv: []string{"pip", "install", "requests"}}},
		{TS: at(0), Sandbox: "sb-build", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "pypi.org", Port: 443, Method: "GET", Path: "/simple/requests/", Status: 200, BytesUp: 300, BytesDown: 5000, Reasons: reasons("preset_python")},
		{TS: at(1), Sandbox: "sb-build", Kind: audit.KindDNS, Decision: audit.DecisionAllow, QName: "pypi.org.", QType: "A", RCode: "NOERROR", Port: 53, Reasons: reasons("preset_python")},
		{TS: at(5), Sandbox: "sb-build", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "files.pythonhosted.org", Port: 443, Method: "GET", Path: "/packages/requests.whl", Status: 200, BytesUp: 400, BytesDown: 120000, Reasons: reasons("preset_python")},
		{TS: at(10), Sandbox: "sb-build", Kind: audit.KindConnect, Decision: audit.DecisionAllow, Host: "github.com", Port: 443, Reasons: reasons("allowlist")},
		{TS: at(20), Sandbox: "sb-agent", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "api.openai.com", Port: 443, Method: "POST", Path: "/v1/chat/completions", Status: 200, BytesUp: 1500, BytesDown: 8000, Secrets: secret, Reasons: reasons("allowlist")},
		{TS: at(30), Sandbox: "sb-scraper", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "example.com", Port: 80, Method: "GET", Path: "/", Status: 200, BytesUp: 100, BytesDown: 2000, Reasons: reasons("allowlist")},
		{TS: at(40), Sandbox: "sb-build", Kind: audit.KindClose, Host: "github.com", Port: 443, BytesUp: 2000, BytesDown: 30000, DurationMS: 30000},
		{TS: at(59), Sandbox: "sb-build", Kind: audit.KindDNS, Decision: audit.DecisionDeny, QName: "evil.example.", QType: "A", Port: 53, Reasons: reasons("not_allowlisted")},
		{TS: at(60), Sandbox: "sb-build", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "evil.example", Port: 443, Method: "GET", Path: "/", Status: 403, Reasons: reasons("not_allowlisted")},
		{TS: at(80), Sandbox: "sb-agent", Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: "api.openai.com", Port: 443, Method: "POST", Path: "/v1/chat/completions", Status: 200, BytesUp: 1600, BytesDown: 9000, Secrets: secret, Reasons: reasons("allowlist")},
		{TS: at(90), Sandbox: "sb-agent", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: "pastebin.com", Port: 443, Method: "POST", Path: "/api", Status: 403, Reasons: reasons("exfil_destination")},
		{TS: at(95), Sandbox: "sb-agent", Kind: audit.KindConnect, Decision: audit.DecisionDeny, Host: "pastebin.com", Port: 443, Reasons: reasons("not_allowlisted")},
		{TS: at(100), Sandbox: "sb-agent", Kind: audit.KindTCP, Decision: audit.DecisionDeny, IP: "198.18.0.9", Port: 22, Reasons: reasons("raw_tcp_blocked")},
		{TS: at(110), Sandbox: "sb-agent", Kind: audit.KindDNS, Decision: audit.DecisionDeny, QName: "aGVsbG8gd29ybGQ.x7.tunnel.example.", QType: "TXT", Port: 53, Flags: []string{"high_entropy", "long_label"}, Reasons: reasons("dns_flag_blocked")},
		{TS: at(111), Sandbox: "sb-agent", Kind: audit.KindDNS, Decision: audit.DecisionDeny, QName: "bXlzZWNyZXQ.x8.tunnel.example.", QType: "TXT", Port: 53, Flags: []string{"high_entropy"}, Reasons: reasons("dns_flag_blocked")},
		{TS: at(120), Sandbox: "sb-agent", Kind: audit.KindDNS, Decision: audit.DecisionDeny, Port: 53, Reasons: reasons("dns_audit_summary"), Flags: []string{"high_entropy", "many_unique_names"},
			Extra: map[string]json.RawMessage{
				audit.SummaryQueriesKey: raw(40), audit.SummaryByDecisionKey: raw(map[string]int{"deny": 40}),
				audit.SummaryByFlagKey: raw(map[string]int{"high_entropy": 40, "many_unique_names": 12}),
				"top_names":            raw([]map[string]any{{"name": "q1.tunnel.example.", "count": 3}}),
			}},
		{TS: at(130), Sandbox: "sb-agent", Kind: audit.KindDrop, Decision: audit.DecisionDeny, Protocol: "tcp", IP: "203.0.113.7", Port: 443, Reasons: reasons("dropped")},
		{TS: at(131), Sandbox: "sb-agent", Kind: audit.KindDrop, Decision: audit.DecisionDeny, Reasons: reasons("drop_summary"),
			Extra: map[string]json.RawMessage{audit.SummarySuppressedKey: raw(25), "by_protocol": raw(map[string]int{"udp": 25})}},
		{TS: at(140), Sandbox: "sb-agent", Kind: audit.KindHTTP, Decision: audit.DecisionDeny, Host: XSSHost, Port: 80, Method: "GET", Path: "/", Status: 403, Reasons: reasons("not_allowlisted")},
		{TS: at(150), Sandbox: "sb-scraper", Kind: audit.KindHTTP, Decision: audit.DecisionError, Host: "example.org", Port: 443, Method: "GET", Path: "/", Error: "upstream dial failed", Reasons: reasons("upstream_error")},
		{TS: at(170), Sandbox: "sb-scraper", Kind: audit.KindSummary, Decision: audit.DecisionDeny, Reasons: reasons(audit.ReasonAuditSummary),
			Extra: map[string]json.RawMessage{
				audit.SummaryRequestsKey: raw(100), audit.SummaryByDecisionKey: raw(map[string]int{"deny": 100}),
				"by_kind": raw(map[string]int{"http": 100}), "by_reason": raw(map[string]int{"not_allowlisted": 100}),
				audit.SummaryFinalKey: raw(true),
			}},
		{TS: at(179), Sandbox: "sb-build", Kind: audit.KindExec, Exec: &audit.Exec{Phase: audit.ExecEnd, ExitCode: new(int)}},
	}
}

// CrashAfter is how many of Records the first writer logs before it "dies"
// (its closing checkpoint is cut off); the second writer appends a
// crash_recovered record and a checkpoint at open, then logs the rest.
const CrashAfter = 12

// Write writes Records to dir/audit.jsonl, signed with a new key (a
// checkpoint every 5 records), with a writer crash after CrashAfter records,
// and closes it: the log verifies whole with the key and ends in a signed
// checkpoint; it holds len(Records())+1 records (the crash_recovered one).
func Write(t testing.TB, dir string) Fixture {
	t.Helper()
	f := Fixture{Log: filepath.Join(dir, "audit.jsonl"), Key: filepath.Join(dir, "audit.key")}
	f.PubKey = f.Key + ".pub"
	recs := Records()
	logAll(t, f, recs[:CrashAfter])
	cutLastLine(t, f.Log)
	logAll(t, f, recs[CrashAfter:])
	return f
}

func logAll(t testing.TB, f Fixture, recs []audit.Record) {
	t.Helper()
	w, err := audit.New(audit.Config{File: f.Log, SigningKeyFile: f.Key, CheckpointEvery: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if err := w.Log(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// cutLastLine removes the closing checkpoint, as a writer that died before
// Close leaves the file.
func cutLastLine(t testing.TB, path string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.LastIndexByte(b[:len(b)-1], '\n')
	if err := os.WriteFile(path, b[:i+1], 0o600); err != nil {
		t.Fatal(err)
	}
}

// WriteLarge writes n generated records over 24 hours to dir/audit.jsonl,
// signed (a checkpoint every audit.DefaultCheckpointEvery records): 50
// sandboxes, 5000 destinations, one in ten denied, DNS with flags, secrets,
// tunnels' close records, drops and budget summaries.
func WriteLarge(t testing.TB, dir string, n int) Fixture {
	t.Helper()
	f := Fixture{Log: filepath.Join(dir, "audit.jsonl"), Key: filepath.Join(dir, "audit.key")}
	f.PubKey = f.Key + ".pub"
	w, err := audit.New(audit.Config{File: f.Log, SigningKeyFile: f.Key, MaxSize: 1 << 40}, nil)
	if err != nil {
		t.Fatal(err)
	}
	step := 24 * time.Hour / time.Duration(max(n, 1))
	secret := []audit.Secret{{ID: "gh_token", Version: "v1", Fingerprint: "hmac-sha256:0011223344556677", Where: "header"}}
	for i := range n {
		r := largeRecord(i, Base.Add(time.Duration(i)*step), secret)
		if err := w.Log(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return f
}

func largeRecord(i int, ts time.Time, secret []audit.Secret) audit.Record {
	sb := fmt.Sprintf("sb-%02d", i%50)
	host := fmt.Sprintf("h%04d.example.com", (i*7919)%5000)
	r := audit.Record{TS: ts, Sandbox: sb, Kind: audit.KindHTTP, Decision: audit.DecisionAllow, Host: host, Port: 443,
		Method: "GET", Path: "/p", Status: 200, BytesUp: int64(100 + i%900), BytesDown: int64(1000 + i%90000), Reasons: reasons("allowlist")}
	switch {
	case i%10 == 3:
		r.Decision, r.Status, r.BytesUp, r.BytesDown = audit.DecisionDeny, 403, 0, 0
		r.Reasons = reasons([]string{"not_allowlisted", "exfil_destination", "method_not_allowed"}[i%3])
	case i%10 == 5:
		r = audit.Record{TS: ts, Sandbox: sb, Kind: audit.KindDNS, Decision: audit.DecisionAllow, QName: host + ".", QType: "A", Port: 53, Reasons: reasons("allowlist")}
		if i%70 == 5 {
			r.QName = fmt.Sprintf("x%08x.t%d.tunnel.example.", i, i%40)
			r.Decision, r.Flags, r.Reasons = audit.DecisionDeny, []string{"high_entropy"}, reasons("dns_flag_blocked")
		}
	case i%10 == 7:
		r = audit.Record{TS: ts, Sandbox: sb, Kind: audit.KindClose, Host: host, Port: 443, BytesUp: 5000, BytesDown: 50000}
	case i%1000 == 9:
		r = audit.Record{TS: ts, Sandbox: sb, Kind: audit.KindDrop, Decision: audit.DecisionDeny, Protocol: "udp", IP: "203.0.113.7", Port: 53, Reasons: reasons("dropped")}
	case i%5000 == 11:
		r = audit.Record{TS: ts, Sandbox: sb, Kind: audit.KindSummary, Decision: audit.DecisionDeny, Reasons: reasons(audit.ReasonAuditSummary),
			Extra: map[string]json.RawMessage{audit.SummaryRequestsKey: raw(50), audit.SummaryByDecisionKey: raw(map[string]int{"deny": 50})}}
	case i%100 == 1:
		r.Secrets = secret
	}
	return r
}
