package sandboxd

import (
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
)

// OverlayTrustDir writes at dir (which must not exist) the trust directory of
// baseBundle followed by extra (WriteTrustDir's layout) without rewriting
// what base already holds: base is OpenTrustDir's directory for baseBundle,
// held by the caller until this returns, and its hashed files are
// hard-linked; only extra's certificates are written, and the Java
// truststore (one file for every certificate) is encoded while the links are
// made. It is what gives a run with a CA of its own (an ephemeral one) its
// trust directory: the system roots stay one cache entry shared by every
// run, where a cache entry per CA was written, hashed and evicted on every
// start. It returns how many distinct certificates dir holds.
func OverlayTrustDir(dir, base string, baseBundle, extra []byte) (int, error) {
	extraCerts, err := parseBundle(extra)
	if err != nil {
		return 0, err
	}
	// The base's certificates are needed for the Java store only: their
	// DER, not their subjects (the hashed names are in base already).
	var ders [][]byte
	seen := map[string]bool{}
	for rest := baseBundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type == "CERTIFICATE" && !seen[string(b.Bytes)] {
			seen[string(b.Bytes)] = true
			ders = append(ders, b.Bytes)
		}
	}
	var fresh []bundleCert
	for _, c := range extraCerts {
		if !seen[string(c.raw)] {
			seen[string(c.raw)] = true
			fresh = append(fresh, c)
			ders = append(ders, c.raw)
		}
	}
	certsDir := filepath.Join(dir, TrustCertsDir)
	for _, d := range []string{dir, certsDir} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return 0, fmt.Errorf("trust dir: %w", err)
		}
		if err := os.Chmod(d, 0o755); err != nil { // past the umask
			return 0, fmt.Errorf("trust dir: %w", err)
		}
	}
	var wg sync.WaitGroup
	var javaErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		all := make([]bundleCert, len(ders))
		for i, d := range ders {
			all[i].raw = d
		}
		javaErr = writeJavaStore(filepath.Join(dir, TrustJavaStore), all)
	}()
	err = overlayHashedDir(certsDir, filepath.Join(base, TrustCertsDir), fresh)
	wg.Wait()
	if err = errors.Join(err, javaErr); err != nil {
		return 0, err
	}
	if err := os.Chmod(filepath.Join(dir, TrustJavaStore), 0o644); err != nil {
		return 0, fmt.Errorf("trust dir: %w", err)
	}
	return len(ders), nil
}

// overlayHashedDir fills dir with base's hashed files (linked, or copied
// when a link is refused: another file system) and then extra's, each
// numbered after the names its subject hash already has.
func overlayHashedDir(dir, base string, extra []bundleCert) error {
	ents, err := os.ReadDir(base)
	if err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	taken := make(map[string]bool, len(ents)+len(extra))
	for _, e := range ents {
		name := e.Name()
		taken[name] = true
		src, dst := filepath.Join(base, name), filepath.Join(dir, name)
		if os.Link(src, dst) == nil {
			continue
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return fmt.Errorf("trust dir: %w", err)
		}
		if err := writeFile0644(dst, b); err != nil {
			return err
		}
	}
	for _, c := range extra {
		h, err := SubjectHash(c.rawSubject)
		if err != nil {
			return fmt.Errorf("trust dir: %w", err)
		}
		n := 0
		for taken[hashName(h, n)] {
			n++
		}
		name := hashName(h, n)
		taken[name] = true
		if err := writeFile0644(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.raw})); err != nil {
			return err
		}
	}
	return nil
}

// hashName is c_rehash's file name for the nth certificate whose subject
// hashes to h.
func hashName(h uint32, n int) string {
	return fmt.Sprintf("%08x", h) + "." + strconv.Itoa(n)
}

// writeFile0644 writes a file every sandbox user may read, whatever the
// umask.
func writeFile0644(path string, b []byte) error {
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	return nil
}
