package dnsfilter

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/inspect/inspecttest"
	"github.com/airlock-dev/airlock/policy"
)

// TestScanNameFindingsDecide: a question whose name carries a credential
// (hex in a label, as an exfiltrating agent would send it) under a domain a
// team policy allows is refused by the library's content rules, never
// forwarded, and its record holds the finding and not the value; a clean name
// under the same domain is answered. Before ScanName, the name went upstream.
func TestScanNameFindingsDecide(t *testing.T) {
	zone := map[string][]string{"ok.allowed.example.": {"ok.allowed.example. 300 IN A 151.101.0.1"}}
	up := startUpstream(t, records(zone))
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team.rego"), []byte("package airlock.egress\n\nallow := true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	key := regexp.MustCompile(`AKIA[0-9A-Z]{16}`)
	scan := func(_ policy.Sandbox, name string) []policy.Finding {
		for _, label := range strings.Split(name, ".") {
			if b, err := hex.DecodeString(label); err == nil && key.Match(b) {
				return []policy.Finding{{Detector: "aws-access-token", Class: "credential", Where: "dns.qname", Encoding: "hex", Confidence: "high", Fingerprint: "00112233aabbccdd"}}
			}
		}
		return nil
	}
	e := newEnv(t, Config{ScanName: scan}, up, eng)
	label := hex.EncodeToString([]byte("AKIAQWERTYUIOPASDFGH"))
	name := label + ".allowed.example."
	r := e.ask(t, "udp", name, dns.TypeA)
	if r.Rcode != dns.RcodeNameError || len(r.Answer) != 0 {
		t.Fatalf("hex credential in a label: got %s %v, want NXDOMAIN", dns.RcodeToString[r.Rcode], r.Answer)
	}
	if n := up.count(strings.TrimSuffix(name, ".")); n != 0 {
		t.Fatalf("upstream saw the name %d times, want 0", n)
	}
	rec := e.last(t, "[withheld].allowed.example")
	if rec.Decision != audit.DecisionDeny || len(rec.Findings) != 1 || rec.Findings[0].Encoding != "hex" || len(rec.Reasons) == 0 || rec.Reasons[0].ID != "content_credential" {
		t.Fatalf("record: got %+v, want a content_credential deny with the finding", rec)
	}
	if r := e.ask(t, "udp", "ok.allowed.example.", dns.TypeA); r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		t.Fatalf("a clean name: got %s %v, want one answer", dns.RcodeToString[r.Rcode], r.Answer)
	}
}

// TestScanNameCorpus runs the DNS cases of the detectors' corpus
// (inspect/inspecttest) through the filter with the real scanner and the
// real engine under a policy allowing every name: a block case is answered
// NXDOMAIN and never forwarded, a detect case is recorded with its finding,
// a benign name is allowed with no finding above low.
func TestScanNameCorpus(t *testing.T) {
	key := bytes.Repeat([]byte("airlock-dns-key!"), 2)
	sc, err := inspect.New(inspect.Config{Key: key})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(_ policy.Sandbox, name string) []policy.Finding {
		var out []policy.Finding
		for _, f := range sc.Scan("dns.qname", []byte(name)) {
			out = append(out, policy.Finding(f))
		}
		return out
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team.rego"), []byte("package airlock.egress\n\nallow := true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	up := startUpstream(t, records(nil))
	e := newEnv(t, Config{ScanName: scan, UniqueNames: 100000, RateLimit: 100000, RateBurst: 100000}, up, eng)
	var blocks, blocked, detects, detected, benign, fps int
	for _, c := range inspecttest.Cases(inspect.NewCanaries(key).For("sb-1")) {
		if c.Transport != inspecttest.DNS {
			continue
		}
		name := strings.TrimSuffix(c.Host, ".") + "."
		before := len(e.aud.Records())
		r := e.ask(t, "udp", name, dns.TypeA)
		recs := e.aud.Records()[before:]
		var rec audit.Record
		for _, x := range recs {
			if x.Kind == audit.KindDNS {
				rec = x
			}
		}
		high, found := false, false
		for _, f := range rec.Findings {
			high = high || f.Confidence != inspect.Low
			found = found || f.Class == c.Class
		}
		switch c.Expect {
		case inspecttest.ExpectBlock:
			blocks++
			if r.Rcode == dns.RcodeNameError && up.count(name) == 0 && rec.Decision == audit.DecisionDeny {
				blocked++
			} else {
				t.Logf("block %s: rcode %s, forwarded %d, record %s %+v", c.Name, dns.RcodeToString[r.Rcode], up.count(name), rec.Decision, rec.Reasons)
			}
		case inspecttest.ExpectDetect:
			detects++
			if found {
				detected++
			} else {
				t.Logf("detect %s: findings %+v", c.Name, rec.Findings)
			}
		default:
			benign++
			// A name the filter refuses for itself (an underscore label is
			// no host name) is not inspection's doing.
			if high || rec.Decision != audit.DecisionAllow && len(rec.Findings) > 0 {
				fps++
				t.Logf("benign %s: %s %+v", c.Name, rec.Decision, rec.Findings)
			}
		}
	}
	t.Logf("DNS corpus through the filter: blocked %d/%d, detected %d/%d, false positives %d/%d", blocked, blocks, detected, detects, fps, benign)
	if blocked != blocks || fps != 0 {
		t.Errorf("want every block case blocked and no false positive")
	}
}

// TestScanNameFoldedCanary: a mixed-case canary the sandbox was given (the
// AWS secret key, 40 base64 characters), sent as a DNS label (which folds
// it to lower case), is recognized by the real scanner as a canary, refused
// under a policy allowing every name and never forwarded; the same shape
// never issued is not a canary. Before the issued set, the keyed mark did
// not survive the folding and the name went upstream. (A GitHub or OpenAI
// canary cannot be a label: the filter refuses an underscore, and the
// OpenAI key is longer than a label.)
func TestScanNameFoldedCanary(t *testing.T) {
	key := bytes.Repeat([]byte("airlock-dns-key!"), 2)
	canaries := inspect.NewCanaries(key)
	sc, err := inspect.New(inspect.Config{Key: key, Canaries: canaries})
	if err != nil {
		t.Fatal(err)
	}
	scan := func(_ policy.Sandbox, name string) []policy.Finding {
		var out []policy.Finding
		for _, f := range sc.Scan("dns.qname", []byte(name)) {
			out = append(out, policy.Finding(f))
		}
		return out
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "team.rego"), []byte("package airlock.egress\n\nallow := true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	eng, err := policy.New(policy.Config{Dir: dir, Presets: []string{policy.PresetNone}, EvalTimeout: 10 * time.Second}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	up := startUpstream(t, records(nil))
	e := newEnv(t, Config{ScanName: scan}, up, eng)
	// The first sandbox whose secret is letters and digits only (a label
	// holds no '+' or '/').
	var secret string
	for i := 0; secret == ""; i++ {
		v := canaries.For(fmt.Sprintf("sb-%d", i)).Env["AWS_SECRET_ACCESS_KEY"]
		if !strings.ContainsAny(v, "+/") {
			secret = v
		}
	}
	for _, tc := range []struct {
		name   string
		canary bool
	}{
		{strings.ToLower(secret) + ".exfil.example.", true},
		{strings.ToLower(secret[:len(secret)-4]) + "zzzz.exfil.example.", false},
	} {
		before := len(e.aud.Records())
		r := e.ask(t, "udp", tc.name, dns.TypeA)
		var rec audit.Record
		for _, x := range e.aud.Records()[before:] {
			if x.Kind == audit.KindDNS {
				rec = x
			}
		}
		canary := false
		for _, f := range rec.Findings {
			canary = canary || f.Class == inspect.ClassCanary
		}
		forwarded := up.count(strings.TrimSuffix(tc.name, "."))
		t.Logf("%.16s...: rcode %s, forwarded %d, decision %s, canary finding %v", tc.name, dns.RcodeToString[r.Rcode], forwarded, rec.Decision, canary)
		if tc.canary && (r.Rcode != dns.RcodeNameError || forwarded != 0 || rec.Decision != audit.DecisionDeny || !canary) {
			t.Errorf("folded canary %.16s...: want refused, never forwarded, with a canary finding", tc.name)
		}
		if !tc.canary && canary {
			t.Errorf("a never-issued lookalike %.16s... reported as a canary", tc.name)
		}
	}
}
