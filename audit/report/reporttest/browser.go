package reporttest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/chromedp"
)

// Environment of the browser helpers.
const (
	// EnvRequireBrowser (or AIRLOCK_REQUIRE_ROOT_TESTS, which CI sets) turns
	// a missing chromium from a skip into a failure.
	EnvRequireBrowser = "AIRLOCK_REQUIRE_BROWSER_TESTS"
	envRequireRoot    = "AIRLOCK_REQUIRE_ROOT_TESTS"
	// EnvArtifacts is where tests leave reports and screenshots (default:
	// $TMPDIR/airlock-artifacts), one directory per test.
	EnvArtifacts = "AIRLOCK_ARTIFACTS"
	// BrowserLimit bounds one browser session.
	BrowserLimit = 90 * time.Second
)

// Chromium returns Debian's chromium, or skips t (fails it under
// AIRLOCK_REQUIRE_BROWSER_TESTS=1 or AIRLOCK_REQUIRE_ROOT_TESTS=1).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv(EnvRequireBrowser) == "1" || os.Getenv(envRequireRoot) == "1" {
		t.Fatalf("chromium not found (make deps installs it), and %s=1 or %s=1 forbids skipping", EnvRequireBrowser, envRequireRoot)
	}
	t.Skip("chromium not found: run make deps (Debian's chromium) to run the report's browser test")
	return ""
}

// ArtifactsDir returns (and creates) the test's directory under
// $AIRLOCK_ARTIFACTS.
func ArtifactsDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv(EnvArtifacts)
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "airlock-artifacts")
	}
	dir = filepath.Join(dir, filepath.Clean(t.Name()))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// Page is a report open in headless chromium that cannot reach any network:
// a fresh profile, background networking off, every host name unresolvable
// and a dead proxy on loopback.
type Page struct {
	t    testing.TB
	tab  context.Context
	URL  string
	mu   sync.Mutex
	sent []string
}

// Open starts chromium (bin from Chromium), opens the report at path and
// waits until its script has drawn it.
func Open(t testing.TB, bin, path string) *Page {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), BrowserLimit)
	t.Cleanup(cancel)
	actx, acancel := chromedp.NewExecAllocator(ctx,
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
	)
	t.Cleanup(acancel)
	tab, tcancel := chromedp.NewContext(actx)
	t.Cleanup(tcancel)
	p := &Page{t: t, tab: tab, URL: (&url.URL{Scheme: "file", Path: abs}).String()}
	// Listen starts the browser and the tab (with the network domain on) and
	// sees every request the tab sends from then on, blocked ones included.
	err = chromedp.Listen(tab, func(ev any) {
		if e, ok := ev.(*network.EventRequestWillBeSent); ok {
			p.mu.Lock()
			p.sent = append(p.sent, e.Request.URL)
			p.mu.Unlock()
		}
	})
	if err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	if err := chromedp.Do(tab, chromedp.Navigate(p.URL), chromedp.WaitVisible(`body[data-rendered="1"]`)); err != nil {
		t.Fatalf("open %s: %v", p.URL, err)
	}
	return p
}

// Requests returns every request the page sent but for its own file.
func (p *Page) Requests() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, u := range p.sent {
		if u != p.URL {
			out = append(out, u)
		}
	}
	return out
}

// Shown is what the page displays, read from its DOM.
type Shown struct {
	Totals    map[string]int64            `json:"totals"`    // allowed, denied, errors, bytes_up, bytes_down
	Sandboxes map[string]map[string]int64 `json:"sandboxes"` // the sandbox table's rows
	Dests     []string                    `json:"dests"`     // the destination table's first column
	Secrets   int                         `json:"secrets"`   // secret-use rows
	Flags     int                         `json:"flags"`     // DNS flag rows
	Buckets   int                         `json:"buckets"`   // timeline buckets drawn
	DenyMarks int                         `json:"deny_marks"`
	Images    int                         `json:"images"` // <img> elements (a report has none)
	Pwned     bool                        `json:"pwned"`  // set only by injected script
	Banner    string                      `json:"banner"` // the verification banner's class
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

// Shown reads what the page displays now.
func (p *Page) Shown() Shown {
	p.t.Helper()
	s, err := chromedp.Run(p.tab, chromedp.Evaluate[string](readShown))
	if err != nil {
		p.t.Fatalf("read the page: %v", err)
	}
	var out Shown
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		p.t.Fatal(err)
	}
	return out
}

// Text returns the text the page renders (document.body.innerText): what
// a reader sees, without the embedded data.
func (p *Page) Text() string {
	p.t.Helper()
	s, err := chromedp.Run(p.tab, chromedp.Evaluate[string](`document.body.innerText`))
	if err != nil {
		p.t.Fatalf("read the page's text: %v", err)
	}
	return s
}

// Choose sets a filter's select (f-sandbox, f-kind, f-decision, f-from,
// f-to) as a user would and fires its change event.
func (p *Page) Choose(id, value string) {
	p.t.Helper()
	js := fmt.Sprintf(`(() => { const s = document.getElementById(%q); s.value = %q; s.dispatchEvent(new Event("change")); return s.value; })()`, id, value)
	got, err := chromedp.Run(p.tab, chromedp.Evaluate[string](js))
	if err != nil || got != value {
		p.t.Fatalf("choose %s=%s: got %q, %v (no such option?)", id, value, got, err)
	}
}

// Click clicks the element sel (a CSS selector) finds.
func (p *Page) Click(sel string) {
	p.t.Helper()
	if err := chromedp.Do(p.tab, chromedp.Click(sel)); err != nil {
		p.t.Fatalf("click %s: %v", sel, err)
	}
}

// Screenshot saves the whole page as a PNG at path.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	png, err := chromedp.Run(p.tab, chromedp.FullScreenshot(100))
	if err != nil {
		p.t.Fatalf("screenshot: %v", err)
	}
	if err := os.WriteFile(path, png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}
