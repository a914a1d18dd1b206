package ociimage

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/test/roottest"
)

// The names the Containerfile's FROM lines give its base images; the test
// stands in for them in a buildah store of its own.
const (
	goBase     = "docker.io/library/golang:1.26-bookworm"
	debianBase = "docker.io/library/debian:bookworm-slim"
	builtImage = "localhost/airlock:alktest"
)

// TestRootContainerfileBuild builds the Containerfile itself with Debian's
// buildah, offline: no registry is reached (--pull-never) and no build step
// has a network (--network none). The two base images its FROM lines name
// are made here from the host, which is Debian bookworm like them: the
// debian one from the host's installed packages (the essential set, apt,
// make, ca-certificates and Packages, with their dpkg database), with apt
// pointed at an empty local repository, so the Containerfile's apt-get
// update and install run and find every package installed; the golang one
// adds the host's Go toolchain, with GOPROXY=off and the host's module and
// build caches mounted (overlay, never written) so `go mod download` and
// `make build` run for real. The image built must run `airlock version` as
// the Containerfile's VERSION, run as the non-root user with the
// Containerfile's entrypoint, run the image's iptables, and hold exactly the
// files `make image` (Assemble) writes.
func TestRootContainerfileBuild(t *testing.T) {
	roottest.Require(t)
	requireDpkg(t)
	for _, tool := range []string{"buildah", "runc", "tar"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s not found (scripts/deps.sh installs Debian's buildah and runc): %v", tool, err)
		}
	}
	// Every module of the build list in the host's cache: the build step
	// runs `go mod download` with GOPROXY=off.
	if out, err := exec.Command("go", "mod", "download").CombinedOutput(); err != nil {
		t.Fatalf("go mod download (the module cache the build mounts): %v\n%s", err, out)
	}
	b := newBuildah(t)
	b.standInBases(t)
	modcache := goEnv(t, "GOMODCACHE")
	gocache := goEnv(t, "GOCACHE")
	b.out(t, "bud", "--pull-never", "--network", "none",
		"-v", modcache+":/go/pkg/mod:O", "-v", gocache+":/root/.cache/go-build:O",
		"-f", containerfile, "-t", builtImage, "../..")
	checkBuiltImage(t, b)
}

// standInBases makes the Containerfile's two base images: debian from the
// host's packages, golang from it and the host's Go toolchain.
func (b *buildah) standInBases(t *testing.T) {
	t.Helper()
	b.commitDir(t, debianRootfs(t), debianBase, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	ctr := strings.TrimSpace(b.out(t, "from", debianBase))
	b.out(t, "copy", ctr, goEnv(t, "GOROOT"), "/usr/local/go")
	b.out(t, "config", "--env", "PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"--env", "GOPATH=/go", "--env", "GOPROXY=off", "--env", "GOFLAGS=-mod=mod", ctr)
	b.out(t, "commit", "--rm", "-q", ctr, goBase)
}

// checkBuiltImage: the image runs as Config says, holds exactly the files
// Assemble (make image) writes, and its programs run.
func checkBuiltImage(t *testing.T, b *buildah) {
	t.Helper()
	var inspected struct {
		OCIv1 struct {
			Config struct {
				User       string
				Entrypoint []string
				Cmd        []string
			} `json:"config"`
		}
	}
	if err := json.Unmarshal([]byte(b.out(t, "inspect", "--type", "image", builtImage)), &inspected); err != nil {
		t.Fatal(err)
	}
	if got, want := inspected.OCIv1.Config, Config(); got.User != want.User || !slices.Equal(got.Entrypoint, want.Entrypoint) || !slices.Equal(got.Cmd, want.Cmd) {
		t.Errorf("the built image's user, entrypoint and command: got %+v, want %s %v %v", got, want.User, want.Entrypoint, want.Cmd)
	}
	// The files, before anything ran in a container of the image (buildah
	// run adds /etc/hostname and the like to its container).
	tree, err := Assemble(fakeBin(t))
	if err != nil {
		t.Fatal(err)
	}
	mnt := strings.TrimSpace(b.out(t, "mount", strings.TrimSpace(b.out(t, "from", builtImage))))
	got := filesUnder(t, mnt)
	var want []string
	for _, e := range tree.Entries() {
		if !e.Mode.IsDir() {
			want = append(want, e.Path)
		}
	}
	slices.Sort(want)
	if missing, extra := diffSorted(want, got); len(missing)+len(extra) > 0 {
		t.Errorf("the Containerfile's image and make image's differ: only in make image %v; only in the Containerfile's %v", missing, extra)
	}
	run := strings.TrimSpace(b.out(t, "from", builtImage))
	if got := b.out(t, "run", "--network", "none", run, "--", "/usr/local/bin/airlock", "version"); !strings.HasPrefix(got, "airlock 0.1.0 ") {
		t.Errorf("airlock version in the built image: got %q, want airlock 0.1.0 (the Containerfile's VERSION)", got)
	}
	if got := b.out(t, "run", "--network", "none", "--user", "0:0", run, "--", "/usr/sbin/iptables-legacy-save", "--version"); !strings.Contains(got, "iptables-save v") {
		t.Errorf("iptables in the built image: got %q", got)
	}
	if got := b.out(t, "run", "--network", "none", run, "--", "/bin/sh", "-c", "cp /etc/passwd /tmp/p && chmod 0600 /tmp/p && mv /tmp/p /tmp/q && echo ok"); got != "ok\n" {
		t.Errorf("the install-cni container's sh, cp, chmod and mv in the built image: got %q", got)
	}
}

// buildah runs buildah on a store of its own under a temporary directory,
// removed with everything in it when the test ends.
type buildah struct {
	root, runroot string
}

func newBuildah(t *testing.T) *buildah {
	t.Helper()
	dir, err := os.MkdirTemp("", "alk-buildah-")
	if err != nil {
		t.Fatal(err)
	}
	b := &buildah{root: filepath.Join(dir, "root"), runroot: filepath.Join(dir, "run")}
	t.Cleanup(func() {
		for _, args := range [][]string{{"unmount", "--all"}, {"rm", "--all"}, {"rmi", "--all", "--force"}} {
			if out, err := b.cmd(args...).CombinedOutput(); err != nil {
				t.Logf("buildah %v: %v\n%s", args, err, out)
			}
		}
		// A mount buildah left (an overlay of a failed step) is taken
		// down before the directory goes.
		for _, m := range mountsUnder(t, dir) {
			exec.Command("umount", "-l", m).Run()
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("removing buildah's store: %v", err)
		}
	})
	return b
}

func (b *buildah) cmd(args ...string) *exec.Cmd {
	return exec.Command("buildah", append([]string{"--root", b.root, "--runroot", b.runroot, "--storage-driver", "overlay"}, args...)...)
}

// out runs buildah and returns its standard output; a failure ends the
// test with both outputs.
func (b *buildah) out(t *testing.T, args ...string) string {
	t.Helper()
	cmd := b.cmd(args...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("buildah %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr.String())
	}
	return string(out)
}

// commitDir commits directory root as image name, with env.
func (b *buildah) commitDir(t *testing.T, root, name string, env ...string) {
	t.Helper()
	ctr := strings.TrimSpace(b.out(t, "from", "scratch"))
	b.out(t, "copy", ctr, root+"/", "/")
	for _, e := range env {
		b.out(t, "config", "--env", e, ctr)
	}
	b.out(t, "commit", "--rm", "-q", ctr, name)
}

// offlineRepo is the empty apt repository the stand-in debian image's
// sources name: apt-get update reads it without a network.
const offlineRepo = "/opt/airlock-offline-repo"

// debianRootfs writes a bookworm root filesystem from the host's installed
// packages: the essential ones, apt, make, ca-certificates and Packages,
// closed under Depends and Pre-Depends, with their dpkg database entries,
// the host's alternatives, users and CA bundle, and apt's sources pointed
// at offlineRepo.
func debianRootfs(t *testing.T) string {
	t.Helper()
	pkgs := installedClosure(t, append([]string{"apt", "make", "ca-certificates"}, Packages...))
	root := filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{"usr/bin", "usr/sbin", "usr/lib", "usr/lib64"} {
		mkdir(t, filepath.Join(root, d), 0o755)
	}
	for _, l := range []string{"bin", "sbin", "lib", "lib64"} { // merged /usr, as bookworm's images
		if err := os.Symlink("usr/"+l, filepath.Join(root, l)); err != nil {
			t.Fatal(err)
		}
	}
	var files []string
	for _, p := range pkgs {
		paths, err := packageFiles(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range paths {
			switch f {
			case "/.", "/bin", "/sbin", "/lib", "/lib64":
			default:
				files = append(files, strings.TrimPrefix(f, "/"))
			}
		}
	}
	// The host's own files under the package's paths, symlinks kept, the
	// merged-/usr links of the new root kept.
	copyTree(t, "/", root, files, false)
	copyTree(t, "/", root, []string{"etc/alternatives", "etc/passwd", "etc/group", "etc/shadow", "etc/gshadow", "etc/ssl/certs",
		"var/lib/dpkg/info/format", "var/lib/dpkg/diversions", "var/lib/dpkg/statoverride", "var/lib/dpkg/alternatives"}, true)
	var info []string
	for _, p := range pkgs {
		for _, pat := range []string{p + ".*", p + ":*.*"} {
			m, _ := filepath.Glob(filepath.Join("/var/lib/dpkg/info", pat))
			for _, f := range m {
				info = append(info, strings.TrimPrefix(f, "/"))
			}
		}
	}
	copyTree(t, "/", root, info, false)
	writeStatus(t, filepath.Join(root, "var/lib/dpkg/status"), pkgs)
	for _, d := range []string{"var/lib/dpkg/updates", "var/lib/apt/lists/partial", "var/cache/apt/archives/partial", "var/log/apt", "root", "proc", "sys", "dev", "run", offlineRepo[1:]} {
		mkdir(t, filepath.Join(root, d), 0o755)
	}
	mkdir(t, filepath.Join(root, "tmp"), 0o777|fs.ModeSticky)
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o777|fs.ModeSticky); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(root, "var/lib/dpkg/available"), "")
	writeFile(t, filepath.Join(root, offlineRepo, "Packages"), "")
	writeFile(t, filepath.Join(root, "etc/apt/sources.list"), "deb [trusted=yes] file:"+offlineRepo+" ./\n")
	return root
}

// installedClosure is want and every installed package they depend on
// (Depends, Pre-Depends; the first installed alternative of a group, or an
// installed package providing it), with the host's essential packages.
func installedClosure(t *testing.T, want []string) []string {
	t.Helper()
	out, err := dpkgQuery("-W", "-f", "${Package}\t${db:Status-Abbrev}\t${Essential}\t${Provides}\n")
	if err != nil {
		t.Fatal(err)
	}
	installed := map[string]bool{}
	providers := map[string]string{}
	var todo []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || strings.TrimSpace(f[1]) != "ii" {
			continue
		}
		installed[f[0]] = true
		if f[2] == "yes" {
			todo = append(todo, f[0])
		}
		for _, p := range strings.Split(f[3], ",") {
			name, _, _ := strings.Cut(strings.TrimSpace(p), " ")
			if name != "" && providers[name] == "" {
				providers[name] = f[0]
			}
		}
	}
	todo = append(todo, want...)
	seen := map[string]bool{}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		if seen[p] {
			continue
		}
		if !installed[p] {
			t.Fatalf("package %s is not installed on the host", p)
		}
		seen[p] = true
		groups, err := Dependencies(p)
		if err != nil {
			t.Fatal(err)
		}
	group:
		for _, g := range groups {
			for _, alt := range g {
				switch {
				case installed[alt]:
					todo = append(todo, alt)
					continue group
				case providers[alt] != "":
					todo = append(todo, providers[alt])
					continue group
				}
			}
			t.Fatalf("package %s: no installed package satisfies %v", p, g)
		}
	}
	pkgs := make([]string, 0, len(seen))
	for p := range seen {
		pkgs = append(pkgs, p)
	}
	slices.Sort(pkgs)
	return pkgs
}

// writeStatus writes the host's dpkg status entries of pkgs.
func writeStatus(t *testing.T, path string, pkgs []string) {
	t.Helper()
	data, err := os.ReadFile("/var/lib/dpkg/status")
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, para := range strings.Split(strings.TrimSpace(string(data)), "\n\n") {
		first, _, _ := strings.Cut(para, "\n")
		name, ok := strings.CutPrefix(first, "Package: ")
		if ok && slices.Contains(pkgs, name) {
			kept = append(kept, para)
		}
	}
	writeFile(t, path, strings.Join(kept, "\n\n")+"\n")
}

// copyTree copies the named paths (relative to from; a directory whole
// when recursive, else only itself) into to with tar, keeping modes, owners
// and symlinks, and following to's directory symlinks (merged /usr).
func copyTree(t *testing.T, from, to string, paths []string, recursive bool) {
	t.Helper()
	recursion := "--recursion"
	if !recursive {
		recursion = "--no-recursion" // before -T: it applies to the names after it
	}
	pack := exec.Command("tar", "-C", from, recursion, "-cf", "-", "-T", "-")
	pack.Stdin = strings.NewReader(strings.Join(paths, "\n") + "\n")
	unpack := exec.Command("tar", "-C", to, "--keep-directory-symlink", "-xf", "-")
	pipe, err := pack.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	unpack.Stdin = pipe
	var packErr, unpackErr strings.Builder
	pack.Stderr, unpack.Stderr = &packErr, &unpackErr
	if err := unpack.Start(); err != nil {
		t.Fatal(err)
	}
	if err := pack.Run(); err != nil {
		t.Fatalf("tar -c of %d paths: %v\n%s", len(paths), err, packErr.String())
	}
	if err := unpack.Wait(); err != nil {
		t.Fatalf("tar -x: %v\n%s", err, unpackErr.String())
	}
}

// filesUnder lists the paths under root that are not directories, as
// absolute paths inside it, sorted.
func filesUnder(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			out = append(out, "/"+strings.TrimPrefix(p, root+"/"))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// diffSorted returns what only a holds and what only b holds.
func diffSorted(a, b []string) (onlyA, onlyB []string) {
	for _, x := range a {
		if _, ok := slices.BinarySearch(b, x); !ok {
			onlyA = append(onlyA, x)
		}
	}
	for _, x := range b {
		if _, ok := slices.BinarySearch(a, x); !ok {
			onlyB = append(onlyB, x)
		}
	}
	return onlyA, onlyB
}

// mountsUnder lists the mount points under dir, deepest first.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			out = append(out, fields[4])
		}
	}
	slices.SortFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env %s: %q, %v", key, out, err)
	}
	return strings.TrimSpace(string(out))
}

func mkdir(t *testing.T, p string, mode fs.FileMode) {
	t.Helper()
	if err := os.MkdirAll(p, mode); err != nil {
		t.Fatal(err)
	}
}

func writeFile(t *testing.T, p, body string) {
	t.Helper()
	mkdir(t, filepath.Dir(p), 0o755)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(fmt.Errorf("writing %s: %w", p, err))
	}
}
