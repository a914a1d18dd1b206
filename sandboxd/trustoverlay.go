package sandboxd

import (
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// OverlayTrustDir writes at dir (which must not exist) the trust directory of
// baseBundle followed by extra (WriteTrustDir's layout) without rewriting
// what base already holds: base is OpenTrustDir's directory for baseBundle,
// held by the caller until done is called, and its hashed files are
// hard-linked; only extra's certificates are written, and the Java
// truststore (one file for every certificate) is encoded while the links are
// made. It is what gives a run with a CA of its own (an ephemeral one) its
// trust directory: the system roots stay one cache entry shared by every
// run, where a cache entry per CA was written, hashed and evicted on every
// start. It returns once the hashed directory is complete, with the Java
// truststore still being written (Overlay.Java waits for it): a sandbox may
// mount dir meanwhile (a bind mount shows the store once it is renamed into
// place), but must not run anything before Java returned.
//
// The links are kept between runs: Done (called once no sandbox uses dir,
// before it is removed) removes extra's files and hands the hashed directory
// back to the cache as base's spare (trustSpareSuffix), which the next
// overlay of base takes with one rename, where it made a link per root (and
// removing dir unlinked each one). A spare is used only while it checks out:
// held, owned and not writable by others, and holding exactly base's names,
// each the same file as base's; else it is removed and the links made.
func OverlayTrustDir(dir, base string, baseBundle, extra []byte) (*Overlay, error) {
	extraCerts, err := parseBundle(extra)
	if err != nil {
		return nil, err
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
	if err := mkdir0755(dir); err != nil {
		return nil, err
	}
	certsDir := filepath.Join(dir, TrustCertsDir)
	baseCerts := filepath.Join(base, TrustCertsDir)
	var wg sync.WaitGroup
	var javaErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		all := make([]bundleCert, len(ders))
		for i, d := range ders {
			all[i].raw = d
		}
		javaErr = writeJavaStoreAt(dir, all)
	}()
	java := sync.OnceValue(func() error {
		wg.Wait()
		return javaErr
	})
	spare := filepath.Clean(base) + trustSpareSuffix
	hold, names, err := takeSpare(spare, certsDir, baseCerts)
	var written []string
	if err == nil && hold == nil {
		if err = mkdir0755(certsDir); err == nil {
			err = linkBase(certsDir, baseCerts, names)
		}
	}
	if err == nil {
		written, err = writeExtra(certsDir, names, fresh)
	}
	if err != nil {
		_ = java() // nothing writes in dir once this returns
		if hold != nil {
			hold.Close()
		}
		return nil, err
	}
	return &Overlay{N: len(ders), Java: java, Done: sync.OnceFunc(func() {
		_ = java()
		giveSpare(certsDir, spare, written, hold)
	})}, nil
}

// Overlay is a trust directory OverlayTrustDir laid out.
type Overlay struct {
	// N is how many distinct certificates it holds.
	N int
	// Java waits for the Java truststore and returns its error (any number
	// of times).
	Java func() error
	// Done hands the hashed directory's links back to the cache, once no
	// sandbox uses the directory (before it is removed).
	Done func()
}

// writeJavaStoreAt writes dir's Java truststore under another name and
// renames it into place: what reads dir meanwhile sees the whole store or
// none.
func writeJavaStoreAt(dir string, certs []bundleCert) error {
	tmp := filepath.Join(dir, "."+TrustJavaStore+".tmp")
	if err := writeJavaStore(tmp, certs); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o644); err != nil { // past the umask
		return fmt.Errorf("trust dir: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, TrustJavaStore)); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	return nil
}

// trustSpareSuffix names, beside a cache entry, its spare hashed directory
// (OverlayTrustDir): the entry's hashed files linked, left by the last run
// that overlaid it for the next.
const trustSpareSuffix = ".links"

// mkdir0755 makes dir readable by every sandbox user, whatever the umask.
func mkdir0755(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	return nil
}

// takeSpare moves spare, base's spare hashed directory, to certsDir when it
// checks out, and returns the hold on it (a shared flock, which keeps an
// evictor from removing it; nil when there was none to take, or it did not
// check out and was removed) and the names of base's hashed files.
func takeSpare(spare, certsDir, base string) (hold *os.File, names []string, err error) {
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, nil, fmt.Errorf("trust dir: %w", err)
	}
	names = make([]string, len(ents))
	for i, e := range ents {
		names[i] = e.Name()
	}
	f, err := os.OpenFile(spare, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, names, nil
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB) != nil || os.Rename(spare, certsDir) != nil {
		f.Close() // an evictor's, or another run took it first
		return nil, names, nil
	}
	if !spareChecks(f, certsDir, base, names) {
		f.Close()
		os.RemoveAll(certsDir)
		return nil, names, nil
	}
	return f, names, nil
}

// spareChecks reports whether the directory at certsDir is f (what was
// locked and moved), is owned and writable by no one else with mode 0755,
// and holds exactly names, each the same file as base's.
func spareChecks(f *os.File, certsDir, base string, names []string) bool {
	fi, err := os.Lstat(certsDir)
	held, herr := f.Stat()
	if err != nil || herr != nil || !os.SameFile(fi, held) || ownedFile(certsDir, fi, true) != nil || fi.Mode().Perm() != 0o755 {
		return false
	}
	ents, err := f.ReadDir(-1)
	if err != nil || len(ents) != len(names) {
		return false
	}
	for _, name := range names {
		a, aerr := os.Lstat(filepath.Join(certsDir, name))
		b, berr := os.Lstat(filepath.Join(base, name))
		if aerr != nil || berr != nil || !os.SameFile(a, b) {
			return false
		}
	}
	return true
}

// giveSpare removes the files written over the base's links and moves
// certsDir back to spare (unless another run's is there already: then it is
// removed), then drops the hold.
func giveSpare(certsDir, spare string, written []string, hold *os.File) {
	if hold != nil {
		defer hold.Close()
	}
	for _, name := range written {
		if err := os.Remove(filepath.Join(certsDir, name)); err != nil {
			os.RemoveAll(certsDir)
			return
		}
	}
	if unix.Renameat2(unix.AT_FDCWD, certsDir, unix.AT_FDCWD, spare, unix.RENAME_NOREPLACE) != nil {
		os.RemoveAll(certsDir)
	}
}

// linkBase links base's hashed files (names) into dir, copying one that
// cannot be linked.
func linkBase(dir, base string, names []string) error {
	for _, name := range names {
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
	return nil
}

// writeExtra writes extra's certificates into dir, which holds names,
// each under the next free hashed name of its subject, and returns the
// names it wrote.
func writeExtra(dir string, names []string, extra []bundleCert) ([]string, error) {
	taken := make(map[string]bool, len(names)+len(extra))
	for _, name := range names {
		taken[name] = true
	}
	var written []string
	for _, c := range extra {
		h, err := SubjectHash(c.rawSubject)
		if err != nil {
			return written, fmt.Errorf("trust dir: %w", err)
		}
		n := 0
		for taken[hashName(h, n)] {
			n++
		}
		name := hashName(h, n)
		taken[name] = true
		if err := writeFile0644(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.raw})); err != nil {
			return written, err
		}
		written = append(written, name)
	}
	return written, nil
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
