package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The crate and the Debian package the cargo and apt fixtures serve.
const (
	crateName    = "tinycrate"
	crateVersion = "0.1.0"
	crateMarker  = "tinycrate-rust-ok"
	debName      = "airlock-tinydeb"
	debVersion   = "1.0-1"
	debMarker    = "tinydeb-apt-ok"
	debSuite     = "bookworm"
)

// buildCrate returns a .crate (a gzipped tar of NAME-VERSION/ with
// Cargo.toml and src/lib.rs).
func buildCrate() ([]byte, error) {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	prefix := crateName + "-" + crateVersion + "/"
	for _, f := range []struct{ path, body string }{
		{"Cargo.toml", fmt.Sprintf("[package]\nname = %q\nversion = %q\nedition = \"2021\"\n", crateName, crateVersion)},
		{"src/lib.rs", fmt.Sprintf("pub const MARKER: &str = %q;\n", crateMarker)},
	} {
		if err := tw.WriteHeader(&tar.Header{Name: prefix + f.path, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1700000000, 0)}); err != nil {
			return nil, err
		}
		if _, err := tw.Write([]byte(f.body)); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// cratesHandler serves crates.io's sparse index (index.crates.io: config.json
// and the crate's index file) and its downloads (static.crates.io), as the
// real ones lay them out.
func cratesHandler() (http.Handler, error) {
	crate, err := buildCrate()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(crate)
	entry := fmt.Sprintf(`{"name":%q,"vers":%q,"deps":[],"cksum":%q,"features":{},"yanked":false,"v":2}`+"\n",
		crateName, crateVersion, hex.EncodeToString(sum[:]))
	indexPath := "/" + crateName[:2] + "/" + crateName[2:4] + "/" + crateName
	dlPath := fmt.Sprintf("/crates/%s/%s-%s.crate", crateName, crateName, crateVersion)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acceptWrites(w, r) {
			return
		}
		switch {
		case r.Host == "index.crates.io" && r.URL.Path == "/config.json":
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"dl":"https://static.crates.io/crates/{crate}/{crate}-{version}.crate","api":"https://crates.io"}`)
		case r.Host == "index.crates.io" && r.URL.Path == indexPath:
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, entry)
		case r.Host == "static.crates.io" && r.URL.Path == dlPath:
			w.Header().Set("Content-Type", "application/gzip")
			w.Write(crate)
		default:
			http.NotFound(w, r)
		}
	}), nil
}

// buildDeb builds a real Debian package with dpkg-deb in dir: one file,
// /usr/share/doc/NAME/marker, holding debMarker.
func buildDeb(dir string) ([]byte, error) {
	root := filepath.Join(dir, "debroot")
	doc := filepath.Join(root, "usr", "share", "doc", debName)
	if err := os.MkdirAll(doc, 0o755); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(root, "DEBIAN"), 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(doc, "marker"), []byte(debMarker+"\n"), 0o644); err != nil {
		return nil, err
	}
	control := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: airlock e2e <e2e@example.test>\nDescription: airlock e2e fixture\n an empty package with one marker file\n", debName, debVersion)
	if err := os.WriteFile(filepath.Join(root, "DEBIAN", "control"), []byte(control), 0o644); err != nil {
		return nil, err
	}
	out := filepath.Join(dir, debName+".deb")
	if b, err := exec.Command("dpkg-deb", "--root-owner-group", "--build", root, out).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("dpkg-deb: %v: %s", err, b)
	}
	return os.ReadFile(out)
}

// debianHandler serves a Debian archive for deb.debian.org/debian: a
// Release (unsigned: the sandbox's sources.list says [trusted=yes]) listing
// the Packages index by size and hash, and the package in the pool.
func debianHandler(dir string) (http.Handler, error) {
	deb, err := buildDeb(dir)
	if err != nil {
		return nil, err
	}
	pool := fmt.Sprintf("pool/main/a/%s/%s_%s_all.deb", debName, debName, debVersion)
	debSHA := sha256.Sum256(deb)
	debMD5 := md5.Sum(deb)
	packages := fmt.Sprintf("Package: %s\nVersion: %s\nArchitecture: all\nMaintainer: airlock e2e <e2e@example.test>\nInstalled-Size: 1\nFilename: %s\nSize: %d\nMD5sum: %s\nSHA256: %s\nSection: misc\nPriority: optional\nDescription: airlock e2e fixture\n\n",
		debName, debVersion, pool, len(deb), hex.EncodeToString(debMD5[:]), hex.EncodeToString(debSHA[:]))
	var release strings.Builder
	fmt.Fprintf(&release, "Origin: Debian\nLabel: Debian\nSuite: stable\nCodename: %s\nDate: %s\nArchitectures: amd64 arm64 all\nComponents: main\nDescription: airlock e2e fixture archive\nSHA256:\n",
		debSuite, time.Unix(1700000000, 0).UTC().Format(time.RFC1123))
	indexes := map[string]string{}
	for _, arch := range []string{"amd64", "arm64", "all"} {
		p := "main/binary-" + arch + "/Packages"
		indexes[p] = packages
		s := sha256.Sum256([]byte(packages))
		fmt.Fprintf(&release, " %s %d %s\n", hex.EncodeToString(s[:]), len(packages), p)
	}
	base := "/debian/dists/" + debSuite + "/"
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if acceptWrites(w, r) {
			return
		}
		p := r.URL.Path
		switch {
		case p == base+"Release":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, release.String())
		case strings.HasPrefix(p, base) && indexes[strings.TrimPrefix(p, base)] != "":
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, indexes[strings.TrimPrefix(p, base)])
		case p == "/debian/"+pool:
			w.Header().Set("Content-Type", "application/vnd.debian.binary-package")
			w.Write(deb)
		default:
			http.NotFound(w, r)
		}
	}), nil
}
