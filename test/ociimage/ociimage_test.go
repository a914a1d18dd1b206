package ociimage

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-dev/airlock/test/roottest"
)

const containerfile = "../../Containerfile"

// TestContainerfileMatches: the Containerfile installs exactly Packages and
// runs the image as Config says, so the image `make image` writes offline
// and the one an engine builds hold the same files and start the same way.
func TestContainerfileMatches(t *testing.T) {
	b, err := os.ReadFile(containerfile)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	one := func(re string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)`+re).FindAllStringSubmatch(text, -1)
		if len(m) != 1 {
			t.Fatalf("Containerfile: got %d lines matching %s, want 1", len(m), re)
		}
		return m[0][1]
	}
	got := strings.Fields(one(`^ARG PACKAGES="([^"]*)"$`))
	if want := slices.Sorted(slices.Values(Packages)); !slices.Equal(slices.Sorted(slices.Values(got)), want) {
		t.Errorf("Containerfile PACKAGES: got %v, want spec.go's %v", got, want)
	}
	cfg := Config()
	if u := one(`^USER (\S+)$`); u != cfg.User {
		t.Errorf("Containerfile USER: got %s, want %s", u, cfg.User)
	}
	if env := one(`^ENV (\S+)$`); !slices.Equal([]string{env}, cfg.Env) {
		t.Errorf("Containerfile ENV: got %s, want %v", env, cfg.Env)
	}
	for _, c := range []struct {
		word string
		want []string
	}{{"ENTRYPOINT", cfg.Entrypoint}, {"CMD", cfg.Cmd}} {
		var got []string
		if err := json.Unmarshal([]byte(one(`^`+c.word+` (\[.*\])$`)), &got); err != nil {
			t.Fatalf("Containerfile %s: %v", c.word, err)
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("Containerfile %s: got %q, want %q", c.word, got, c.want)
		}
	}
	if !strings.Contains(text, `mkimage -bin /airlock-bin -packages "$PACKAGES" -rootfs /rootfs`) {
		t.Errorf("Containerfile does not assemble /rootfs with mkimage from $PACKAGES")
	}
}

// TestPackagesClosed: every Depends and Pre-Depends of a listed package is
// met by another listed package (one alternative of each group), so nothing
// the binaries load at run time is missing from the image.
func TestPackagesClosed(t *testing.T) {
	requireDpkg(t)
	for _, p := range Packages {
		groups, err := Dependencies(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, alts := range groups {
			if !slices.ContainsFunc(alts, func(a string) bool { return slices.Contains(Packages, a) }) {
				t.Errorf("%s depends on %s, which Packages does not list", p, strings.Join(alts, " | "))
			}
		}
	}
}

func TestDependenciesParse(t *testing.T) {
	requireDpkg(t)
	groups, err := Dependencies("iptables")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(groups, func(g []string) bool { return slices.Equal(g, []string{"libxtables12"}) }) {
		t.Errorf("iptables' dependencies: got %v, want libxtables12 among them without its version", groups)
	}
}

func requireDpkg(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		t.Skip("not a Debian host: no dpkg-query")
	}
}

// fakeBin writes stand-ins for the binaries `make build` writes.
func fakeBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name := range Binaries {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\necho "+name+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLayout writes the image and reads it back as a runtime's puller
// would: index.json to the manifest to the config and the layer, every blob
// matching its digest and size, and the layer holding the files the
// DaemonSet needs with the modes it needs. Writing it twice gives the same
// digest.
func TestLayout(t *testing.T) {
	requireDpkg(t)
	tree, err := Assemble(fakeBin(t))
	if err != nil {
		t.Fatalf("Assemble: %v (scripts/deps.sh installs the image's packages)", err)
	}
	dir := t.TempDir()
	d1, err := tree.WriteLayout(dir, "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	d2, err := tree.WriteLayout(t.TempDir(), "0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if d1 != d2 {
		t.Errorf("two writes of the same tree: got manifests %s and %s, want one digest", d1, d2)
	}
	var idx ocispec.Index
	readJSON(t, filepath.Join(dir, "index.json"), &idx)
	if len(idx.Manifests) != 1 || idx.Manifests[0].Annotations[ocispec.AnnotationRefName] != "0.1.0" || idx.Manifests[0].Digest != d1 {
		t.Fatalf("index.json: got %+v, want one manifest %s tagged 0.1.0", idx.Manifests, d1)
	}
	var man ocispec.Manifest
	readJSON(t, blob(t, dir, idx.Manifests[0]), &man)
	var img ocispec.Image
	readJSON(t, blob(t, dir, man.Config), &img)
	if img.OS != "linux" || img.Config.User != Config().User || !slices.Equal(img.Config.Entrypoint, Config().Entrypoint) {
		t.Errorf("config: got os %s, user %s, entrypoint %v", img.OS, img.Config.User, img.Config.Entrypoint)
	}
	if len(man.Layers) != 1 || len(img.RootFS.DiffIDs) != 1 {
		t.Fatalf("got %d layers, %d diff ids, want 1 each", len(man.Layers), len(img.RootFS.DiffIDs))
	}
	files := readLayer(t, blob(t, dir, man.Layers[0]), img.RootFS.DiffIDs[0])
	for _, c := range []struct {
		path string
		typ  byte
		mode int64
		link string
	}{
		{"usr/local/bin/airlock", tar.TypeReg, 0o755, ""},
		{"usr/local/bin/airlock-core", tar.TypeReg, 0o755, ""},
		{"usr/local/bin/airlock-cni", tar.TypeReg, 0o755, ""},
		{"usr/sbin/iptables-legacy-restore", tar.TypeSymlink, 0o777, "xtables-legacy-multi"},
		{"usr/sbin/iptables-nft-save", tar.TypeSymlink, 0o777, "xtables-nft-multi"},
		{"usr/sbin/xtables-legacy-multi", tar.TypeReg, 0o755, ""},
		{"bin/busybox", tar.TypeReg, 0o755, ""},
		{"bin/sh", tar.TypeSymlink, 0o777, "busybox"},
		{"etc/ssl/certs/ca-certificates.crt", tar.TypeReg, 0o644, ""},
		{"etc/passwd", tar.TypeReg, 0o644, ""},
		{"tmp/", tar.TypeDir, 0o1777, ""},
		{"home/sandbox/", tar.TypeDir, 0o755, ""},
		{"workspace/", tar.TypeDir, 0o755, ""},
		{"usr/share/doc/libc6/copyright", tar.TypeReg, 0o644, ""},
	} {
		h, ok := files[c.path]
		if !ok {
			t.Errorf("%s: not in the layer", c.path)
			continue
		}
		if h.Typeflag != c.typ || h.Mode != c.mode || h.Linkname != c.link || h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s: got type %c mode %o link %q owner %d:%d, want type %c mode %o link %q owner 0:0",
				c.path, h.Typeflag, h.Mode, h.Linkname, h.Uid, h.Gid, c.typ, c.mode, c.link)
		}
	}
	for p, h := range files {
		if h.Typeflag == tar.TypeDir {
			continue
		}
		if strings.HasPrefix(p, "usr/share/man/") || strings.HasPrefix(p, "usr/share/locale/") ||
			(strings.HasPrefix(p, "usr/share/doc/") && strings.Count(p, "/") > 3 && !strings.HasSuffix(p, "/copyright")) {
			t.Errorf("%s: documentation in the layer", p)
		}
	}
}

// TestAssembleErrors: a missing binary is named with what makes it.
func TestAssembleErrors(t *testing.T) {
	requireDpkg(t)
	bin := fakeBin(t)
	if err := os.Remove(filepath.Join(bin, "airlock-cni")); err != nil {
		t.Fatal(err)
	}
	_, err := Assemble(bin)
	if err == nil || !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "airlock-cni") || !strings.Contains(err.Error(), "make build") {
		t.Errorf("got %v, want a missing airlock-cni error naming make build", err)
	}
}

// blob opens a descriptor's blob and checks its size and digest.
func blob(t *testing.T, dir string, d ocispec.Descriptor) string {
	t.Helper()
	p := filepath.Join(dir, "blobs", d.Digest.Algorithm().String(), d.Digest.Encoded())
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != d.Size || digest.FromBytes(b) != d.Digest {
		t.Fatalf("blob %s: got %d bytes digest %s, want %d bytes", d.Digest, len(b), digest.FromBytes(b), d.Size)
	}
	return p
}

func readJSON(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}

// readLayer reads a gzipped tar layer, checks its diff id and returns its
// headers by name; a name twice fails.
func readLayer(t *testing.T, p string, diffID digest.Digest) map[string]*tar.Header {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	tr := tar.NewReader(io.TeeReader(zr, h))
	out := map[string]*tar.Header{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := out[hdr.Name]; dup {
			t.Errorf("%s twice in the layer", hdr.Name)
		}
		out[hdr.Name] = hdr
	}
	_, _ = io.Copy(io.Discard, zr)
	if got := fmt.Sprintf("sha256:%x", h.Sum(nil)); got != diffID.String() {
		t.Errorf("layer diff id: got %s, want %s", got, diffID)
	}
	return out
}

// TestRootWriteDir: the directory the Containerfile's assembly stage writes
// (mkimage -rootfs) holds every entry with its type, mode, link and size, and
// the dynamically linked iptables in it runs against the image's own
// libraries (chroot), which is what a missing library would break.
func TestRootWriteDir(t *testing.T) {
	roottest.Require(t)
	requireDpkg(t)
	tree, err := Assemble(fakeBin(t))
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := tree.WriteDir(root); err != nil {
		t.Fatal(err)
	}
	for _, e := range tree.Entries() {
		p := filepath.Join(root, e.Path)
		st, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if st.Mode() != e.Mode {
			t.Errorf("%s: got mode %v, want %v", e.Path, st.Mode(), e.Mode)
		}
		if e.Link != "" {
			if l, _ := os.Readlink(p); l != e.Link {
				t.Errorf("%s: got link %q, want %q", e.Path, l, e.Link)
			}
		}
		if e.Mode.IsRegular() {
			if _, size, _ := e.open(); size != st.Size() {
				t.Errorf("%s: got %d bytes, want %d", e.Path, st.Size(), size)
			}
		}
	}
	if err := tree.WriteDir(root); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("a second WriteDir into the same directory: got %v, want a not-empty error", err)
	}
	for _, argv := range [][]string{
		{"/usr/sbin/iptables-legacy-save", "--version"},
		{"/usr/sbin/iptables-nft-restore", "--version"},
		{"/bin/sh", "-c", "cp /etc/passwd /tmp/p && chmod 0600 /tmp/p && mv /tmp/p /tmp/q"},
	} {
		out, err := exec.Command("chroot", append([]string{root}, argv...)...).CombinedOutput()
		if err != nil {
			t.Errorf("chroot %v: %v: %s", argv, err, out)
		}
	}
}
