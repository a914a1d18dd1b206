package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// rustToolchain returns the host's Rust toolchain directory (rustc's
// sysroot: bin/cargo, bin/rustc and the libraries rustc loads) when its cargo
// speaks the sparse index protocol (1.68 or later). It fails, never skips:
// scripts/deps.sh installs one.
func rustToolchain(t *testing.T) string {
	t.Helper()
	path := os.Getenv("PATH") + ":/usr/local/cargo/bin"
	if home, err := os.UserHomeDir(); err == nil {
		path += ":" + filepath.Join(home, ".cargo", "bin")
	}
	cmd := exec.Command("rustc", "--print", "sysroot")
	cmd.Env = append(os.Environ(), "PATH="+path)
	if p, err := exec.LookPath("rustc"); err == nil {
		cmd.Path = p
	} else {
		for _, dir := range filepath.SplitList(path) {
			if _, err := os.Stat(filepath.Join(dir, "rustc")); err == nil {
				cmd.Path = filepath.Join(dir, "rustc")
				break
			}
		}
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("no Rust toolchain (make deps installs one): rustc --print sysroot: %v", err)
	}
	root := strings.TrimSpace(string(out))
	v, err := exec.Command(filepath.Join(root, "bin", "cargo"), "--version").Output()
	if err != nil {
		t.Fatalf("no cargo in the toolchain %s (make deps installs one): %v", root, err)
	}
	// "cargo 1.95.0 (...)": the sparse protocol is stable from 1.68.
	f := strings.Fields(string(v))
	parts := strings.Split(f[min(1, len(f)-1)], ".")
	if minor, _ := strconv.Atoi(parts[min(1, len(parts)-1)]); len(parts) < 2 || parts[0] != "1" || minor < 68 {
		t.Fatalf("%s is %s: the sparse index needs cargo 1.68 or later (make deps installs one)", root, strings.TrimSpace(string(v)))
	}
	return root
}

// TestRootCargoFetch: cargo resolves a crate on the fake crates.io sparse
// index (index.crates.io) and downloads it from static.crates.io, through
// the gateway under the default policy with content inspection on; the
// checksum in the index is verified by cargo, and nothing is refused.
func TestRootCargoFetch(t *testing.T) {
	e := newEnv(t, "")
	tc := rustToolchain(t)
	// The sandbox cannot see the toolchain where it is (root's home is
	// masked): cargo, rustc (cargo asks it for the target) and the libraries
	// rustc loads go into the workspace, linked when they can be.
	ws := filepath.Join(e.dir, "rust")
	for _, f := range []string{"bin/cargo", "bin/rustc", "lib"} {
		linkTree(t, filepath.Join(tc, f), filepath.Join(ws, f), f == "lib")
	}
	tc = ws
	seenBefore := len(w.crates.Seen())
	res := e.sh([]string{"--id", sandboxID("cargo"), "--workspace", tc,
		"--env", "CARGO_HOME=/tmp/cargo-home", "--env", "RUSTC=" + tc + "/bin/rustc", "--env", "CARGO_HTTP_TIMEOUT=120",
		"--env", "CARGO_TERM_COLOR=never"}, `
set -e
mkdir -p /tmp/app/src && cd /tmp/app
printf '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\n`+crateName+` = "0.1"\n' > Cargo.toml
echo 'fn main() { println!("{}", `+crateName+`::MARKER); }' > src/main.rs
`+tc+`/bin/cargo fetch
f=$(ls /tmp/cargo-home/registry/cache/*/`+crateName+`-`+crateVersion+`.crate)
echo "marker=$(tar xzOf "$f" `+crateName+`-`+crateVersion+`/src/lib.rs | grep -o `+crateMarker+`)"
`)
	wantCode(t, res, 0)
	wantKV(t, kv(res.stdout), "marker", crateMarker, res)
	recs := e.records()
	noContentFindings(t, recs)
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "index.crates.io", method: "GET", path: "/config.json"})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "index.crates.io", method: "GET", path: "/" + crateName[:2] + "/" + crateName[2:4] + "/" + crateName})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "static.crates.io", method: "GET", path: "/crates/" + crateName + "/"})
	mustNotFind(t, recs, match{decision: audit.DecisionDeny})
	got := map[string]bool{}
	for _, r := range seenSince(w.crates, seenBefore) {
		got[r.Host+r.URL.Path] = true
	}
	for _, want := range []string{"index.crates.io/config.json", "static.crates.io/crates/" + crateName + "/" + crateName + "-" + crateVersion + ".crate"} {
		if !got[want] {
			t.Errorf("the fake crates.io never received %s; it saw %v", want, got)
		}
	}
}

// TestRootAptDownload: apt-get update reads a Debian archive on the fake
// deb.debian.org over HTTP ([trusted=yes]: the fixture's Release is
// unsigned) and apt-get download fetches a real .deb (built by dpkg-deb)
// whose size and SHA256 apt checks against the index, through the gateway
// under the default policy with content inspection on; nothing is refused.
// apt runs unprivileged with its state, cache and sources under /tmp.
func TestRootAptDownload(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/apt-get")
	requireTool(t, "/usr/bin/dpkg-deb")
	seenBefore := len(w.debian.Seen())
	res := e.sh([]string{"--id", sandboxID("apt"), "--env", "APT_CONFIG=/tmp/apt/apt.conf"}, `
set -e
A=/tmp/apt
mkdir -p $A/state/lists/partial $A/cache/archives/partial $A/etc/apt.conf.d $A/etc/preferences.d $A/etc/sources.list.d $A/etc/trusted.gpg.d $A/dl
: > $A/status
cat > $A/apt.conf <<CONF
Dir::State "$A/state";
Dir::State::status "$A/status";
Dir::Cache "$A/cache";
Dir::Etc "$A/etc";
Dir::Log "$A";
Debug::NoLocking "true";
APT::Sandbox::User "";
Acquire::Languages "none";
Acquire::Retries "0";
Acquire::http::Timeout "120";
CONF
echo "deb [trusted=yes] http://deb.debian.org/debian `+debSuite+` main" > $A/etc/sources.list
apt-get -q update
cd $A/dl
apt-get -q download `+debName+`
dpkg-deb --fsys-tarfile `+debName+`_*_all.deb | tar xO ./usr/share/doc/`+debName+`/marker | sed 's/^/marker=/'
`)
	wantCode(t, res, 0)
	wantKV(t, kv(res.stdout), "marker", debMarker, res)
	recs := e.records()
	noContentFindings(t, recs)
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "deb.debian.org", method: "GET", path: "/debian/dists/" + debSuite + "/"})
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "deb.debian.org", method: "GET", path: "/debian/pool/main/"})
	mustNotFind(t, recs, match{decision: audit.DecisionDeny})
	pool := false
	for _, r := range seenSince(w.debian, seenBefore) {
		pool = pool || strings.HasPrefix(r.URL.Path, "/debian/pool/main/a/"+debName+"/")
	}
	if !pool {
		t.Errorf("the fake deb.debian.org never received the .deb's GET")
	}
}

// linkTree hard-links src to dst (copying when it cannot link); a directory
// (dir) has its regular files linked, one level, the shared libraries.
func linkTree(t *testing.T, src, dst string, dir bool) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if dir {
		ents, err := os.ReadDir(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if e.Type().IsRegular() && strings.Contains(e.Name(), ".so") {
				linkTree(t, filepath.Join(src, e.Name()), filepath.Join(dst, e.Name()), false)
			}
		}
		return
	}
	if os.Link(src, dst) == nil {
		return
	}
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}
