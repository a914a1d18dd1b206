package learn

import (
	"context"
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/policies"
	"github.com/airlock-dev/airlock/policy"
)

// benignHosts are names agents really reach: every preset host and common
// APIs, registries, CDNs and cloud endpoints (a few with machine-made labels,
// which the detector may flag for review: counted, not hidden).
var benignHosts = []string{
	"api.github.com", "github.com", "codeload.github.com", "objects.githubusercontent.com", "raw.githubusercontent.com",
	"api.openai.com", "api.anthropic.com", "api.mistral.ai", "api.cohere.ai", "generativelanguage.googleapis.com",
	"registry.npmjs.org", "registry.yarnpkg.com", "pypi.org", "files.pythonhosted.org", "proxy.golang.org",
	"sum.golang.org", "crates.io", "static.crates.io", "index.crates.io", "rubygems.org", "index.rubygems.org",
	"repo1.maven.org", "plugins.gradle.org", "api.nuget.org", "hub.docker.com", "registry-1.docker.io",
	"auth.docker.io", "production.cloudflare.docker.com", "ghcr.io", "pkg-containers.githubusercontent.com",
	"quay.io", "gcr.io", "registry.k8s.io", "mcr.microsoft.com", "huggingface.co", "cdn-lfs.huggingface.co",
	"download.pytorch.org", "conda.anaconda.org", "repo.anaconda.com", "storage.googleapis.com",
	"oauth2.googleapis.com", "www.googleapis.com", "accounts.google.com", "fonts.googleapis.com",
	"fonts.gstatic.com", "ajax.googleapis.com", "dl.google.com", "cdn.jsdelivr.net", "unpkg.com",
	"cdnjs.cloudflare.com", "login.microsoftonline.com", "graph.microsoft.com", "dev.azure.com",
	"pkgs.dev.azure.com", "management.azure.com", "sts.amazonaws.com", "s3.amazonaws.com",
	"my-bucket.s3.us-east-1.amazonaws.com", "bedrock-runtime.us-east-1.amazonaws.com",
	"dynamodb.eu-west-1.amazonaws.com", "ec2.us-west-2.amazonaws.com", "api.stripe.com", "hooks.slack.com",
	"slack.com", "api.telegram.org", "sentry.io", "o450123.ingest.sentry.io", "api.segment.io", "gitlab.com",
	"bitbucket.org", "api.bitbucket.org", "update.code.visualstudio.com", "marketplace.visualstudio.com",
	"deb.debian.org", "security.debian.org", "archive.ubuntu.com", "security.ubuntu.com", "dl-cdn.alpinelinux.org",
	"nodejs.org", "static.rust-lang.org", "go.dev", "golang.org", "storage.googleapis.com",
	"d1a2b3c4d5e6f7.cloudfront.net", "az764295.vo.msecnd.net", "api.example-ai.dev", "db.corp.example",
	"a.cdn.corp.example", "jira.atlassian.com", "api.linear.app", "api.notion.com", "www.wikipedia.org",
}

// exfilHosts are destinations an agent leaking data uses: known services and
// generated names (random subdomains carrying data, throwaway domains).
func exfilHosts() []string {
	out := []string{
		"pastebin.com", "webhook.site", "abc.requestbin.net", "eo1x2y3.m.pipedream.net", "x.ngrok-free.app",
		"quiet-river.trycloudflare.com", "transfer.sh", "0x0.st", "file.io", "c123.oast.fun", "x.interact.sh",
		"198.18.0.7", "mybox.loca.lt", "paste.ee", "hastebin.com", "beeceptor.com",
	}
	r := rand.New(rand.NewPCG(1, 2))
	const alnum = "abcdefghijklmnopqrstuvwxyz0123456789"
	const hexd = "0123456789abcdef"
	gen := func(n int, set string) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = set[r.IntN(len(set))]
		}
		return string(b)
	}
	for i := 0; i < 30; i++ {
		out = append(out, gen(12+r.IntN(10), alnum)+".attacker.example") // data in a label
		out = append(out, gen(16+r.IntN(16), hexd)+".c2.example")        // hex chunks
		out = append(out, gen(10+r.IntN(6), alnum)+".xyz")               // a throwaway domain
		out = append(out, gen(12+r.IntN(8), alnum[:26])+".top")          // letters only: the hard case
	}
	return out
}

// The detector on both sides: how many exfil-looking destinations it flags,
// and how many benign ones (printed; each bounded).
func TestExfilSignalsRates(t *testing.T) {
	benign := append([]string(nil), benignHosts...)
	for _, f := range []string{"python", "node", "go", "rust", "github", "debian", "ubuntu"} {
		src, err := policies.FS.ReadFile("presets/" + f + ".json")
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(src, &m); err != nil {
			t.Fatal(err)
		}
		for h := range m {
			benign = append(benign, h)
		}
	}
	var fp []string
	for _, h := range benign {
		if why := ExfilSignals(h); why != nil {
			fp = append(fp, h+": "+strings.Join(why, "; "))
		}
	}
	bad := exfilHosts()
	var missed []string
	for _, h := range bad {
		if ExfilSignals(h) == nil {
			missed = append(missed, h)
		}
	}
	tpr := 100 * float64(len(bad)-len(missed)) / float64(len(bad))
	fpr := 100 * float64(len(fp)) / float64(len(benign))
	t.Logf("exfil-looking flagged: %d/%d (%.1f%%); benign flagged: %d/%d (%.1f%%)", len(bad)-len(missed), len(bad), tpr, len(fp), len(benign), fpr)
	for _, f := range fp {
		t.Logf("benign flagged: %s", f)
	}
	if tpr < 95 {
		t.Errorf("flagged %.1f%% of exfil-looking destinations, want at least 95%%; missed %v", tpr, missed)
	}
	if fpr > 5 {
		t.Errorf("flagged %.1f%% of benign destinations, want at most 5%%", fpr)
	}
}

// A report-mode run that reached a paste site and random subdomains: suggest
// flags them, allows none of them, and still allows the rest; the API host
// reached only over HTTPS is written as an http_allow table, and the manifest
// names the presets used.
func TestSuggestFlagsExfilAndWritesTable(t *testing.T) {
	evs := reportRun()
	for _, in := range []policy.Input{
		connIn(policy.KindConnect, "pastebin.com", 443),
		httpIn("POST", "pastebin.com", 443, "/api/api_post.php"),
		dnsIn("k3j9x0q7zt2m.attacker.example", "A"),
		dnsIn("p8v1n4c6w0rb.attacker.example", "A"),
	} {
		in.Sandbox.Mode = policy.ModeReport
		evs = append(evs, event{in: in})
	}
	dir, s := suggestFrom(t, runLog(t, engine(t, ""), evs))
	for _, k := range []string{"pastebin.com", "k3j9x0q7zt2m.attacker.example", "p8v1n4c6w0rb.attacker.example"} {
		if s.Flagged[k] == nil {
			t.Errorf("%s not flagged: flagged %v", k, s.Flagged)
		}
		if s.Hosts[k] != nil {
			t.Errorf("%s suggested", k)
		}
	}
	sugg := engine(t, dir)
	for _, in := range []policy.Input{httpIn("POST", "pastebin.com", 443, "/api/api_post.php"), dnsIn("k3j9x0q7zt2m.attacker.example", "A")} {
		in.Sandbox.Mode = policy.ModeEnforce
		if d := sugg.Decide(context.Background(), &in); d.Allowed {
			t.Errorf("suggested policy allows flagged %s %s", in.Kind, in.Destination.Host)
		}
	}
	readme, _ := os.ReadFile(filepath.Join(dir, FileReadme))
	if !strings.Contains(string(readme), "look like exfiltration and are NOT allowed") || !strings.Contains(string(readme), "pastebin.com: pastebin.com is a paste") {
		t.Errorf("README does not list the flagged destinations:\n%s", readme)
	}
	table, err := os.ReadFile(filepath.Join(dir, FileHTTPAllow))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(table), `"api.example-ai.dev": [{"methods":["GET"],"paths":["/health","/v1/models","/v1/models/gpt"]},{"methods":["POST"],"paths":["/v1/chat/completions"]}]`) {
		t.Errorf("http_allow.rego: got\n%s", table)
	}
	data, _ := os.ReadFile(filepath.Join(dir, FileData))
	if strings.Contains(string(data), "api.example-ai.dev") || !strings.Contains(string(data), "db.corp.example") {
		t.Errorf("data.json: want the tcp host and not the table's:\n%s", data)
	}
	manifest, _ := os.ReadFile(filepath.Join(dir, policy.ManifestFile))
	if !strings.Contains(string(manifest), "presets: [python]") {
		t.Errorf("manifest: got %q, want presets: [python]", manifest)
	}
	// Enforced: the table's host takes DELETE and other paths no more.
	for _, in := range []policy.Input{httpIn("DELETE", "api.example-ai.dev", 443, "/v1/models"), httpIn("GET", "api.example-ai.dev", 443, "/admin")} {
		if d := sugg.Decide(context.Background(), &in); d.Allowed {
			t.Errorf("suggested policy allows %s %s", in.HTTP.Method, in.HTTP.Path)
		}
	}
}
