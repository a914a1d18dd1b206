package report_test

import (
	"bytes"
	"context"
	"encoding/json"
	stdhtml "html"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/audit/report"
	"github.com/airlock-dev/airlock/audit/report/reporttest"
)

// want is what reporttest.Records holds, counted by hand.
var want = map[string]report.Counts{
	"sb-build":   {Allowed: 4, Denied: 2, BytesUp: 2700, BytesDown: 155000},
	"sb-agent":   {Allowed: 2, Denied: 72, BytesUp: 3100, BytesDown: 17000},
	"sb-scraper": {Allowed: 1, Denied: 100, Errors: 1, BytesUp: 100, BytesDown: 2000},
}

var wantTotals = report.Counts{Allowed: 7, Denied: 174, Errors: 1, BytesUp: 5900, BytesDown: 174000}

func buildFixture(t *testing.T, cfg report.Config) (*report.Report, reporttest.Fixture) {
	t.Helper()
	fx := reporttest.Write(t, t.TempDir())
	pemBytes, err := os.ReadFile(fx.PubKey)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PublicKey == nil {
		if cfg.PublicKey, err = audit.ParsePublicKey(pemBytes); err != nil {
			t.Fatal(err)
		}
	}
	cfg.Files = []string{fx.Log}
	cfg.Now = func() time.Time { return reporttest.Base.Add(time.Hour) }
	rep, err := report.Build(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep, fx
}

func TestReportFixtureNumbers(t *testing.T) {
	rep, _ := buildFixture(t, report.Config{})
	v := rep.Verification
	if !v.OK || !v.SignaturesChecked || v.Records != len(reporttest.Records())+1 || v.Unsigned != 0 {
		t.Fatalf("verification: got %+v, want ok, signed, %d records, none unsigned", v, len(reporttest.Records())+1)
	}
	if len(rep.Sandboxes) != len(want) {
		t.Fatalf("got %d sandbox rows %+v, want %d", len(rep.Sandboxes), rep.Sandboxes, len(want))
	}
	for _, row := range rep.Sandboxes {
		if row.Counts != want[row.Key] {
			t.Errorf("sandbox %s: got %+v, want %+v", row.Key, row.Counts, want[row.Key])
		}
	}
	if rep.Totals != wantTotals {
		t.Errorf("totals: got %+v, want %+v", rep.Totals, wantTotals)
	}
	var tl report.Counts
	for _, r := range rep.Timeline.Rows {
		dec := rep.Cells.Dict.Decision[r[3]]
		switch dec {
		case audit.DecisionAllow:
			tl.Allowed += r[4]
		case audit.DecisionDeny:
			tl.Denied += r[4]
		default:
			tl.Errors += r[4]
		}
		tl.BytesUp += r[5]
		tl.BytesDown += r[6]
	}
	if tl != wantTotals || rep.Timeline.BucketSeconds != 1 || rep.Timeline.Buckets != 171 {
		t.Errorf("timeline: got %+v in %d buckets of %ds, want %+v in 171 of 1s", tl, rep.Timeline.Buckets, rep.Timeline.BucketSeconds, wantTotals)
	}
	if got := rep.Scope.Records; got != int64(len(reporttest.Records())+1) {
		t.Errorf("scope records: got %d, want %d", got, len(reporttest.Records())+1)
	}
	checkTables(t, rep)
}

func checkTables(t *testing.T, rep *report.Report) {
	t.Helper()
	wantDenied := []report.DeniedRow{
		{Destination: report.Summarized, Reason: audit.ReasonAuditSummary, Outcome: audit.DecisionDeny, Count: 100, Sandboxes: 1, Samples: []string{}},
		{Destination: report.Summarized, Reason: "dns_audit_summary", Outcome: audit.DecisionDeny, Count: 40, Sandboxes: 1, Samples: []string{}},
		{Destination: report.Summarized, Reason: "drop_summary", Outcome: audit.DecisionDeny, Count: 25, Sandboxes: 1, Samples: []string{}},
	}
	if len(rep.TopDenied) != 13 {
		t.Errorf("top denied: got %d rows %+v, want 13", len(rep.TopDenied), rep.TopDenied)
	}
	for i, w := range wantDenied {
		if i >= len(rep.TopDenied) || !reflect.DeepEqual(rep.TopDenied[i], w) {
			t.Errorf("top denied %d: got %+v, want %+v", i, rep.TopDenied, w)
		}
	}
	wantSecret := report.SecretUse{Sandbox: "sb-agent", ID: "openai_key", Version: "v3", Fingerprint: "hmac-sha256:ab12cd34ef56",
		Where: "header", Destination: "api.openai.com:443", Decision: "allow", Count: 2,
		First: reporttest.Base.Add(20 * time.Second), Last: reporttest.Base.Add(80 * time.Second)}
	if len(rep.Secrets) != 1 || rep.Secrets[0] != wantSecret {
		t.Errorf("secrets: got %+v, want [%+v]", rep.Secrets, wantSecret)
	}
	if d := rep.DNS; d.Queries != 44 || d.Flagged != 2 {
		t.Errorf("dns: got %d queries, %d flagged, want 44, 2", d.Queries, d.Flagged)
	}
	wantFlags := []report.FlagRow{
		{Sandbox: "sb-agent", Flag: "high_entropy", Count: 42, Summarized: 40},
		{Sandbox: "sb-agent", Flag: "many_unique_names", Count: 12, Summarized: 12},
		{Sandbox: "sb-agent", Flag: "long_label", Count: 1},
	}
	if !equalJSON(rep.DNS.ByFlag, wantFlags) {
		t.Errorf("dns flags: got %+v, want %+v", rep.DNS.ByFlag, wantFlags)
	}
	if n := rep.DNS.Names; len(n) != 1 || n[0].Domain != "tunnel.example" || n[0].Count != 2 || n[0].Denied != 2 || n[0].Distinct != 2 ||
		strings.Join(n[0].Flags, ",") != "high_entropy,long_label" {
		t.Errorf("dns names: got %+v, want tunnel.example x2 denied, 2 names", n)
	}
	if !equalJSON(rep.Drops, []report.DropRow{{Sandbox: "sb-agent", Logged: 1, Suppressed: 25}}) {
		t.Errorf("drops: got %+v", rep.Drops)
	}
	if b := rep.Budgets; len(b) != 2 || b[0].Sandbox != "sb-agent" || b[0].Source != report.SourceDNS || b[0].Events != 40 ||
		b[1].Sandbox != "sb-scraper" || b[1].Events != 100 || !b[1].Final || b[1].ByReason["not_allowlisted"] != 100 {
		t.Errorf("budgets: got %+v, want sb-agent dns 40, sb-scraper gateway 100 final", b)
	}
	if e := rep.Events; len(e) != 1 || e[0].Kind != audit.KindCrashRecovered || !strings.Contains(e[0].Detail, "unsigned") {
		t.Errorf("events: got %+v, want the crash_recovered record", e)
	}
}

func equalJSON(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

// TestReportHTMLEmbedsTheJSON: the page carries exactly the bytes --format
// json writes, so the two cannot disagree, and the headline numbers are in
// the page's markup for a reader without script.
func TestReportHTMLEmbedsTheJSON(t *testing.T) {
	rep, _ := buildFixture(t, report.Config{})
	var js, page bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	embedded := `<script type="application/json" id="report-data">` + strings.TrimSuffix(js.String(), "\n") + `</script>`
	if !strings.Contains(html, embedded) {
		t.Fatalf("the page does not embed the JSON output verbatim")
	}
	for sb, c := range want {
		re := regexp.MustCompile(`<tr data-key="` + sb + `"><td data-col="key">` + sb + `</td><td class="num" data-col="allowed" data-v="(\d+)">[^<]*</td><td class="num[^"]*" data-col="denied" data-v="(\d+)">`)
		m := re.FindStringSubmatch(html)
		if m == nil || m[1] != itoa(c.Allowed) || m[2] != itoa(c.Denied) {
			t.Errorf("sandbox row %s in the page: got %v, want allowed %d denied %d", sb, m, c.Allowed, c.Denied)
		}
	}
	for _, s := range []string{`data-k="denied"><span class="v" data-v="174">174</span>`, "Chain verified:", "signed through seq", `data-ok="true"`} {
		if !strings.Contains(html, s) {
			t.Errorf("the page lacks %q", s)
		}
	}
	// The fixture logs a destination that is markup (reporttest.XSSHost):
	// it must stay text, and the page must forbid itself any fetch.
	if strings.Contains(html, "<img") {
		t.Errorf("the page contains <img: a logged value became markup")
	}
	if !strings.Contains(stdhtml.UnescapeString(html), `content="default-src 'none'; script-src 'sha256-`) {
		t.Errorf("the page lacks its Content-Security-Policy (default-src 'none', script by hash)")
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestSummarize(t *testing.T) {
	fx := reporttest.Write(t, t.TempDir())
	tests := []struct {
		name   string
		by     string
		filter audit.Filter
		want   []report.Row
	}{
		{"by sandbox", report.BySandbox, audit.Filter{}, []report.Row{
			{Key: "sb-scraper", Counts: want["sb-scraper"]}, {Key: "sb-agent", Counts: want["sb-agent"]}, {Key: "sb-build", Counts: want["sb-build"]}}},
		{"by host, one sandbox", report.ByHost, audit.Filter{Sandbox: "sb-build"}, []report.Row{
			{Key: "files.pythonhosted.org:443", Counts: report.Counts{Allowed: 1, BytesUp: 400, BytesDown: 120000}},
			{Key: "github.com:443", Counts: report.Counts{Allowed: 1, BytesUp: 2000, BytesDown: 30000}},
			{Key: "pypi.org:443", Counts: report.Counts{Allowed: 1, BytesUp: 300, BytesDown: 5000}},
			{Key: "evil.example", Counts: report.Counts{Denied: 1}},
			{Key: "evil.example:443", Counts: report.Counts{Denied: 1}},
			{Key: "pypi.org", Counts: report.Counts{Allowed: 1}},
		}},
		{"by kind, denials", report.ByKind, audit.Filter{Decision: audit.DecisionDeny, Sandbox: "sb-agent"}, []report.Row{
			{Key: "dns", Counts: report.Counts{Denied: 42}}, {Key: "drop", Counts: report.Counts{Denied: 26}},
			{Key: "http", Counts: report.Counts{Denied: 2}}, {Key: "connect", Counts: report.Counts{Denied: 1}}, {Key: "tcp", Counts: report.Counts{Denied: 1}}}},
		{"by reason", report.ByReason, audit.Filter{Sandbox: "sb-scraper"}, []report.Row{
			{Key: audit.ReasonAuditSummary, Counts: report.Counts{Denied: 100}},
			{Key: "allowlist", Counts: report.Counts{Allowed: 1, BytesUp: 100, BytesDown: 2000}},
			{Key: "upstream_error", Counts: report.Counts{Errors: 1}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := report.Summarize(context.Background(), []string{fx.Log}, tc.filter, tc.by)
			if err != nil {
				t.Fatal(err)
			}
			if !equalJSON(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
	if _, err := report.Summarize(context.Background(), []string{fx.Log}, audit.Filter{}, "path"); err == nil || !strings.Contains(err.Error(), `"path"`) {
		t.Errorf("by path: got %v, want an error naming it", err)
	}
}

// TestReportBrokenChainCountsEveryRecord: a chain broken early still gets
// every readable record aggregated (the verifying pass stops at the break;
// the report reads on), and the verification says where it broke.
func TestReportBrokenChainCountsEveryRecord(t *testing.T) {
	fx := reporttest.Write(t, t.TempDir())
	b, err := os.ReadFile(fx.Log)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	// Line 3 is sb-build's first http record: allowed becomes denied.
	if !strings.Contains(lines[2], `"host":"pypi.org"`) {
		t.Fatalf("line 3 is %s, want pypi.org's http record", lines[2])
	}
	lines[2] = strings.Replace(lines[2], `"decision":"allow"`, `"decision":"deny"`, 1)
	if err := os.WriteFile(fx.Log, []byte(strings.Join(lines, "")), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := report.Build(context.Background(), report.Config{Files: []string{fx.Log}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Verification.OK || !strings.Contains(rep.Verification.Error, "audit.jsonl:4: prev mismatch") {
		t.Errorf("verification: got %+v, want the break at line 4", rep.Verification)
	}
	wantTampered := wantTotals
	wantTampered.Allowed--
	wantTampered.Denied++
	if rep.Totals != wantTampered || rep.Scope.Records != int64(len(reporttest.Records())+1) {
		t.Errorf("got totals %+v of %d records, want %+v of %d", rep.Totals, rep.Scope.Records, wantTampered, len(reporttest.Records())+1)
	}
}

// TestReportBoundsFoldWithoutLoss: past each bound rows fold into (other)
// rows and wider buckets, the scope says so, and no request or byte is lost.
func TestReportBoundsFoldWithoutLoss(t *testing.T) {
	rep, _ := buildFixture(t, report.Config{MaxCells: 5, MaxSandboxes: 2, MaxBuckets: 10, TopN: 3})
	if rep.Totals != wantTotals {
		t.Errorf("totals: got %+v, want %+v", rep.Totals, wantTotals)
	}
	if got := rep.Timeline.BucketSeconds; got != 30 || rep.Timeline.Buckets > 10 {
		t.Errorf("timeline: got %d buckets of %ds, want at most 10 of 30s", rep.Timeline.Buckets, got)
	}
	var n int64
	for _, r := range rep.Timeline.Rows {
		n += r[4]
	}
	if n != wantTotals.Allowed+wantTotals.Denied+wantTotals.Errors {
		t.Errorf("timeline counts %d requests, want %d", n, wantTotals.Allowed+wantTotals.Denied+wantTotals.Errors)
	}
	keys := map[string]bool{}
	for _, r := range rep.Sandboxes {
		keys[r.Key] = true
	}
	if len(rep.Sandboxes) != 3 || !keys[report.OtherSandboxes] {
		t.Errorf("sandboxes: got %+v, want two and %q", rep.Sandboxes, report.OtherSandboxes)
	}
	if len(rep.Destinations) != 4 || rep.Destinations[3].Key != report.Other {
		t.Errorf("destinations: got %+v, want the top 3 and %q", rep.Destinations, report.Other)
	}
	if rep.Scope.Folded["cells"] == 0 || rep.Scope.Folded["sandboxes"] == 0 || !strings.Contains(strings.Join(rep.Scope.Notes, "\n"), "folded cells") {
		t.Errorf("scope: got folded %v, notes %q; want cells and sandboxes folded, and said", rep.Scope.Folded, rep.Scope.Notes)
	}
}
