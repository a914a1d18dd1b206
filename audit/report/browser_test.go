package report_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"

	"github.com/airlock-dev/airlock/audit/report"
)

// Environment for the browser test.
const (
	// envRequireBrowser (or AIRLOCK_REQUIRE_ROOT_TESTS, which CI sets) turns
	// a missing chromium from a skip into a failure.
	envRequireBrowser = "AIRLOCK_REQUIRE_BROWSER_TESTS"
	envRequireRoot    = "AIRLOCK_REQUIRE_ROOT_TESTS"
	// envArtifacts is where the test leaves the report and its screenshot
	// (default: $TMPDIR/airlock-artifacts).
	envArtifacts = "AIRLOCK_ARTIFACTS"
	// browserLimit bounds the whole browser session.
	browserLimit = 90 * time.Second
)

// chromium returns Debian's chromium, or skips t (fails it under
// AIRLOCK_REQUIRE_BROWSER_TESTS=1 or AIRLOCK_REQUIRE_ROOT_TESTS=1).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(envRequireBrowser) == "1" || os.Getenv(envRequireRoot) == "1" {
		t.Fatalf("chromium not found (make deps installs it), and %s=1 or %s=1 forbids skipping", envRequireBrowser, envRequireRoot)
	}
	t.Skip("chromium not found: run make deps (Debian's chromium) to run the report's browser test")
	return ""
}

func artifactsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv(envArtifacts)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "airlock-artifacts")
	}
	dir = filepath.Join(dir, t.Name())
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// browser starts headless chromium that cannot reach any network: a fresh
// profile, background networking off, every host name unresolvable and a
// dead proxy. It returns a tab's context and the URLs of every request the
// tab sent.
func browser(t *testing.T, bin string) (context.Context, func() []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), browserLimit)
	t.Cleanup(cancel)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(bin),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("no-default-browser-check", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("disable-extensions", true),
		chromedp.Flag("disable-breakpad", true),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND"),
		chromedp.Flag("proxy-server", "http://127.0.0.1:9"),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	}
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	t.Cleanup(acancel)
	tab, tcancel := chromedp.NewContext(actx)
	t.Cleanup(tcancel)
	var mu sync.Mutex
	var sent []string
	// Listen starts the browser and the tab (with the network domain on) and
	// sees every request the tab sends from then on.
	err := chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			mu.Lock()
			sent = append(sent, e.Request.URL)
			mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return tab, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), sent...)
	}
}

// shown is what the page displays, read from the DOM.
type shown struct {
	Totals    map[string]int64            `json:"totals"`
	Sandboxes map[string]map[string]int64 `json:"sandboxes"`
	Dests     []string                    `json:"dests"`
	Secrets   int                         `json:"secrets"`
	Flags     int                         `json:"flags"`
	Buckets   int                         `json:"buckets"`
	DenyMarks int                         `json:"deny_marks"`
	Images    int                         `json:"images"`
	Pwned     bool                        `json:"pwned"`
	Banner    string                      `json:"banner"`
}

const readShown = `(() => {
  const v = el => Number(el.getAttribute("data-v"));
  const out = {totals: {}, sandboxes: {}, dests: [], images: document.querySelectorAll("img").length,
    pwned: !!document.body.dataset.pwned, banner: document.getElementById("verification").className};
  document.querySelectorAll("#totals [data-k]").forEach(c => out.totals[c.dataset.k] = v(c.querySelector(".v")));
  document.querySelectorAll("#t-sandboxes tbody tr[data-key]").forEach(tr => {
    const row = {};
    tr.querySelectorAll("td[data-v]").forEach(td => row[td.dataset.col] = v(td));
    out.sandboxes[tr.dataset.key] = row;
  });
  document.querySelectorAll("#t-destinations tbody tr[data-key]").forEach(tr => out.dests.push(tr.querySelector("td").textContent));
  out.secrets = document.querySelectorAll("#t-secrets tbody tr[data-key]").length;
  out.flags = document.querySelectorAll("#t-dns-flags tbody tr[data-key]").length;
  out.buckets = document.querySelectorAll("#timeline g.bucket").length;
  out.deny_marks = document.querySelectorAll("#timeline .deny-mark").length;
  return JSON.stringify(out);
})()`

func read(t *testing.T, tab context.Context) shown {
	t.Helper()
	s, err := chromedp.Run(tab, chromedp.Evaluate[string](readShown))
	if err != nil {
		t.Fatalf("read the page: %v", err)
	}
	var out shown
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// choose sets a filter's select as a user would and fires its change event.
func choose(t *testing.T, tab context.Context, id, value string) {
	t.Helper()
	js := fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); return s.value; })()`, id, value)
	got, err := chromedp.Run(tab, chromedp.Evaluate[string](js))
	if err != nil || got != value {
		t.Fatalf("choose %s=%s: got %q, %v", id, value, got, err)
	}
}

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
// numbers shown are the fixture's, the sandbox and time filters change them
// to the right subset, a destination that is markup stays text, and the page
// sends no request but its own file. It leaves report.html and
// report.png in the artifacts directory.
func TestBrowserReport(t *testing.T) {
	bin := chromium(t)
	rep, _ := buildFixture(t, report.Config{})
	dir := artifactsDir(t)
	page := filepath.Join(dir, "report.html")
	f, err := os.Create(page)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.WriteHTML(f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	pageURL := (&url.URL{Scheme: "file", Path: page}).String()

	tab, sent := browser(t, bin)
	if err := chromedp.Do(tab, chromedp.Navigate(pageURL), chromedp.WaitVisible(`body[data-rendered="1"]`)); err != nil {
		t.Fatalf("open %s: %v", pageURL, err)
	}
	s := read(t, tab)
	checkTotals(t, "unfiltered", s.Totals, wantTotals)
	checkSandboxes(t, "unfiltered", s.Sandboxes, want)
	if s.Banner != "banner ok" || s.Secrets != 1 || s.Flags != 3 || s.Buckets != 171 || s.DenyMarks != 12 {
		t.Errorf("got banner %q, %d secret rows, %d flag rows, %d buckets, %d denial marks; want banner ok, 1, 3, 171, 12", s.Banner, s.Secrets, s.Flags, s.Buckets, s.DenyMarks)
	}
	if s.Images != 0 || s.Pwned || !containsString(s.Dests, "<img") {
		t.Errorf("a logged destination that is markup: got %d images, pwned %v, destinations %q; want it shown as text", s.Images, s.Pwned, s.Dests)
	}

	choose(t, tab, "f-sandbox", "sb-agent")
	s = read(t, tab)
	agent := map[string]report.Counts{"sb-agent": want["sb-agent"]}
	checkSandboxes(t, "sandbox sb-agent", s.Sandboxes, agent)
	checkTotals(t, "sandbox sb-agent", s.Totals, want["sb-agent"])
	if s.Secrets != 1 || containsString(s.Dests, "pypi.org:443") {
		t.Errorf("sandbox sb-agent: got %d secret rows and destinations %q; want 1 and none of sb-build's", s.Secrets, s.Dests)
	}

	// From bucket 100 (10:01:40) on, sb-agent was only refused: tcp, two
	// flagged DNS questions, 40 summarized, a drop, 25 summarized, the markup host.
	choose(t, tab, "f-from", "100")
	s = read(t, tab)
	late := report.Counts{Denied: 70}
	checkSandboxes(t, "sb-agent from 10:01:40", s.Sandboxes, map[string]report.Counts{"sb-agent": late})
	checkTotals(t, "sb-agent from 10:01:40", s.Totals, late)

	// Reset, then only denials: nothing allowed or failed anywhere.
	if err := chromedp.Do(tab, chromedp.Click("#f-reset")); err != nil {
		t.Fatalf("reset: %v", err)
	}
	checkTotals(t, "after reset", read(t, tab).Totals, wantTotals)
	choose(t, tab, "f-decision", "deny")
	s = read(t, tab)
	denials := map[string]report.Counts{}
	for sb, c := range want {
		denials[sb] = report.Counts{Denied: c.Denied}
	}
	checkSandboxes(t, "decision deny", s.Sandboxes, denials)
	checkTotals(t, "decision deny", s.Totals, report.Counts{Denied: wantTotals.Denied})
	choose(t, tab, "f-sandbox", "sb-agent")

	png, err := chromedp.Run(tab, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	shot := filepath.Join(dir, "report.png")
	if err := os.WriteFile(shot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("artifacts: %s and %s", page, shot)

	for _, u := range sent() {
		if u != pageURL {
			t.Errorf("the page sent a request for %q: it must fetch nothing", u)
		}
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
