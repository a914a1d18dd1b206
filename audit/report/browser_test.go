package report_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit/report"
	"github.com/airlock-dev/airlock/audit/report/reporttest"
)

func checkSandboxes(t *testing.T, what string, got map[string]map[string]int64, want map[string]report.Counts) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: got sandbox rows %v, want %d", what, got, len(want))
	}
	for sb, w := range want {
		g := got[sb]
		if g["allowed"] != w.Allowed || g["denied"] != w.Denied || g["errors"] != w.Errors || g["bytes_up"] != w.BytesUp || g["bytes_down"] != w.BytesDown {
			t.Errorf("%s: sandbox %s shows %v, want %+v", what, sb, g, w)
		}
	}
}

func checkTotals(t *testing.T, what string, got map[string]int64, w report.Counts) {
	t.Helper()
	if got["allowed"] != w.Allowed || got["denied"] != w.Denied || got["errors"] != w.Errors || got["bytes_up"] != w.BytesUp || got["bytes_down"] != w.BytesDown {
		t.Errorf("%s: totals show %v, want %+v", what, got, w)
	}
}

// TestBrowserReport opens the fixture's report in headless chromium: the
// numbers shown are the fixture's, the sandbox, time and decision filters
// change them to the right subset, a destination that is markup stays text,
// and the page sends no request but its own file. It leaves report.html and
// report.png in the artifacts directory.
func TestBrowserReport(t *testing.T) {
	bin := reporttest.Chromium(t)
	rep, _ := buildFixture(t, report.Config{})
	dir := reporttest.ArtifactsDir(t)
	path := filepath.Join(dir, "report.html")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}

	page := reporttest.Open(t, bin, path)
	s := page.Shown()
	checkTotals(t, "unfiltered", s.Totals, wantTotals)
	checkSandboxes(t, "unfiltered", s.Sandboxes, want)
	if s.Banner != "banner ok" || s.Secrets != 1 || s.Flags != 3 || s.Buckets != 171 || s.DenyMarks != 12 {
		t.Errorf("got banner %q, %d secret rows, %d flag rows, %d buckets, %d denial marks; want banner ok, 1, 3, 171, 12", s.Banner, s.Secrets, s.Flags, s.Buckets, s.DenyMarks)
	}
	if s.Images != 0 || s.Pwned || !containsString(s.Dests, "<img") {
		t.Errorf("a logged destination that is markup: got %d images, pwned %v, destinations %q; want it shown as text", s.Images, s.Pwned, s.Dests)
	}

	page.Choose("f-sandbox", "sb-agent")
	s = page.Shown()
	checkSandboxes(t, "sandbox sb-agent", s.Sandboxes, map[string]report.Counts{"sb-agent": want["sb-agent"]})
	checkTotals(t, "sandbox sb-agent", s.Totals, want["sb-agent"])
	if s.Secrets != 1 || containsString(s.Dests, "pypi.org:443") {
		t.Errorf("sandbox sb-agent: got %d secret rows and destinations %q; want 1 and none of sb-build's", s.Secrets, s.Dests)
	}

	// From bucket 100 (10:01:40) on, sb-agent was only refused: tcp, two
	// flagged DNS questions, 40 summarized, a drop, 25 summarized, the markup host.
	page.Choose("f-from", "100")
	s = page.Shown()
	late := report.Counts{Denied: 70}
	checkSandboxes(t, "sb-agent from 10:01:40", s.Sandboxes, map[string]report.Counts{"sb-agent": late})
	checkTotals(t, "sb-agent from 10:01:40", s.Totals, late)

	// Reset, then only denials: nothing allowed or failed anywhere.
	page.Click("#f-reset")
	checkTotals(t, "after reset", page.Shown().Totals, wantTotals)
	page.Choose("f-decision", "deny")
	s = page.Shown()
	denials := map[string]report.Counts{}
	for sb, c := range want {
		denials[sb] = report.Counts{Denied: c.Denied}
	}
	checkSandboxes(t, "decision deny", s.Sandboxes, denials)
	checkTotals(t, "decision deny", s.Totals, report.Counts{Denied: wantTotals.Denied})
	page.Choose("f-sandbox", "sb-agent")

	shot := filepath.Join(dir, "report.png")
	page.Screenshot(shot)
	t.Logf("artifacts: %s and %s", path, shot)
	for _, u := range page.Requests() {
		t.Errorf("the page sent a request for %q: it must fetch nothing", u)
	}
}

func containsString(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
