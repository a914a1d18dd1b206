package sandboxd

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// The trust cache: trust directories WriteTrustDir built, kept between
// processes under a root-owned directory (the daemon's DefaultRunDir), one
// per bundle, named by the bundle's SHA-256. Writing the hashed directory is
// a file per root (about 145 files, 10-40 ms on an ext4 /run), and `airlock
// run` would write it on every start; with the cache a start whose bundle an
// earlier one built reads and checks it instead.
//
// An entry is used only after it checks out: the cache directory, the entry
// and everything in it owned by this process's user and writable by no one
// else, no symlinks, and every file's SHA-256 what the entry's manifest says
// (written last, before the entry is renamed into place; a torn or altered
// entry is rebuilt). Entries are built in a temporary directory and renamed
// into place, so no process ever sees half of one. A process holds a shared
// flock on the entry it uses until release; entries no process holds are
// removed by the next process that builds or uses another one.
const (
	// TrustManifest lists each file of a cached trust directory with its
	// SHA-256 ("<hex>  <path>", sorted by path).
	TrustManifest    = ".airlock-manifest"
	trustBuildPrefix = ".build-"
)

// OpenTrustDir returns a trust directory for bundle (WriteTrustDir's layout)
// from the cache in cacheDir, building it there when no intact one exists, and
// the number of certificates it holds. release drops this process's hold on it
// and waits for the removal of entries nobody holds; the directory must not be
// used after it.
func OpenTrustDir(cacheDir string, bundle []byte) (dir string, n int, release func(), err error) {
	if err := privateDir(cacheDir, true); err != nil {
		return "", 0, nil, err
	}
	sum := sha256.Sum256(bundle)
	name := hex.EncodeToString(sum[:])
	dir = filepath.Join(cacheDir, name)
	var certs []bundleCert // parsed only to build
	for attempt := 0; attempt < 3; attempt++ {
		lock, err := holdEntry(dir)
		if err == nil {
			if n, verr := verifyTrustDir(dir); verr == nil {
				return dir, n, startEviction(cacheDir, name, lock), nil
			}
			lock.Close()
		} else if !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, errEntryMoved) && !notDir(err) {
			return "", 0, nil, err
		}
		if certs == nil {
			if certs, err = parseBundle(bundle); err != nil {
				return "", 0, nil, err
			}
		}
		lock, err = buildEntry(cacheDir, dir, certs)
		if err == nil {
			return dir, len(certs), startEviction(cacheDir, name, lock), nil
		}
		if !errors.Is(err, errEntryRaced) {
			return "", 0, nil, err
		}
	}
	return "", 0, nil, fmt.Errorf("trust cache %s: the entry kept changing under this process", dir)
}

var (
	errEntryMoved = errors.New("trust cache entry replaced while it was opened")
	errEntryRaced = errors.New("trust cache entry put in place by another process")
)

// notDir: the path is not a directory (a symlink refused by O_NOFOLLOW, a
// file): a damaged entry to replace.
func notDir(err error) bool {
	return errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP)
}

// privateDir checks (after creating it, with create) that dir is a directory
// owned by this process's user that no one else can write, and that its
// parent is too.
func privateDir(dir string, create bool) error {
	if create {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("trust cache: %w", err)
		}
	}
	for _, p := range []string{filepath.Dir(dir), dir} {
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("trust cache: %w", err)
		}
		if err := ownedFile(p, fi, true); err != nil {
			return err
		}
	}
	return nil
}

// ownedFile: fi (of path) is a directory (dir) or a regular file, owned by
// this process's user or root, writable by no one else.
func ownedFile(path string, fi fs.FileInfo, dir bool) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case dir && !fi.IsDir(), !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("trust cache: %s is a %v, not a %s", path, fi.Mode().Type(), map[bool]string{true: "directory", false: "regular file"}[dir])
	case !ok || (int(st.Uid) != os.Geteuid() && st.Uid != 0):
		return fmt.Errorf("trust cache: %s is not owned by this user or root", path)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("trust cache: %s is writable by group or others (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}

// holdEntry opens dir and takes a shared flock on it, then checks the path
// still names what was locked (an evictor may have removed it in between).
func holdEntry(dir string) (*os.File, error) {
	f, err := os.OpenFile(dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_SH); err != nil {
		f.Close()
		return nil, fmt.Errorf("trust cache: lock %s: %w", dir, err)
	}
	if err := sameFile(f, dir); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func sameFile(f *os.File, path string) error {
	a, err := f.Stat()
	if err != nil {
		return err
	}
	b, err := os.Lstat(path)
	if err != nil {
		return errEntryMoved
	}
	if !os.SameFile(a, b) {
		return errEntryMoved
	}
	return nil
}

// buildEntry writes the trust directory for certs in a temporary directory
// of cacheDir (held, so no evictor removes it) and renames it to dir. An
// entry already at dir that checks out was put there by another process
// (errEntryRaced: use it); one that does not is moved aside for eviction.
func buildEntry(cacheDir, dir string, certs []bundleCert) (*os.File, error) {
	tmp, err := os.MkdirTemp(cacheDir, trustBuildPrefix)
	if err != nil {
		return nil, fmt.Errorf("trust cache: %w", err)
	}
	// Held before anything else is done to it: another process's evictor
	// removes every directory nobody holds, a fresh one included.
	lock, err := holdEntry(tmp)
	if err != nil {
		// An evictor may have taken it before the lock: build again.
		os.RemoveAll(tmp)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errEntryMoved) {
			return nil, errEntryRaced
		}
		return nil, err
	}
	fail := func(err error) (*os.File, error) {
		lock.Close()
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fail(fmt.Errorf("trust cache: %w", err))
	}
	if err := writeTrustTree(tmp, certs, sibling(cacheDir, filepath.Base(dir))); err != nil {
		return fail(err)
	}
	if err := fixModes(tmp); err != nil {
		return fail(err)
	}
	if err := writeManifest(tmp); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) && !notDir(err) {
			return fail(fmt.Errorf("trust cache: %w", err))
		}
		// Another process's entry (or a damaged one) is in the way.
		if _, err := verifyTrustDir(dir); err == nil {
			lock.Close()
			os.RemoveAll(tmp)
			return nil, errEntryRaced
		}
		aside, err := os.MkdirTemp(cacheDir, trustBuildPrefix+"damaged-")
		if err != nil {
			return fail(fmt.Errorf("trust cache: %w", err))
		}
		if err := os.Rename(dir, filepath.Join(aside, "entry")); err != nil {
			os.Remove(aside)
			return fail(fmt.Errorf("trust cache: move damaged entry aside: %w", err))
		}
		if err := os.Rename(tmp, dir); err != nil {
			return fail(errEntryRaced)
		}
	}
	return lock, nil
}

// writeTrustTree writes the hashed directory and the Java truststore into
// the existing directory dir, linking the hashed files another trust
// directory (reuse, or "") has the same.
func writeTrustTree(dir string, certs []bundleCert, reuse string) error {
	if err := os.Mkdir(filepath.Join(dir, TrustCertsDir), 0o755); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	if reuse != "" {
		reuse = filepath.Join(reuse, TrustCertsDir)
	}
	if err := writeHashedDir(filepath.Join(dir, TrustCertsDir), certs, reuse); err != nil {
		return err
	}
	return writeJavaStore(filepath.Join(dir, TrustJavaStore), certs)
}

// sibling returns another entry of cacheDir than name (the previous
// bundle's, usually: an ephemeral CA changes one root of ~145), or "". It is
// neither held nor checked: writeHashedDir links only files whose bytes it
// compared, and the new entry's manifest is made from what it holds.
func sibling(cacheDir, name string) string {
	ents, err := os.ReadDir(cacheDir)
	if err != nil {
		return ""
	}
	for _, e := range ents {
		if e.IsDir() && e.Name() != name && !strings.HasPrefix(e.Name(), ".") {
			return filepath.Join(cacheDir, e.Name())
		}
	}
	return ""
}

// fixModes makes the tree's modes 0755 (directories) and 0644 (files),
// whatever the umask was.
func fixModes(dir string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("trust cache: %w", err)
		}
		return nil
	})
}

// treeFiles lists the regular files below dir (relative, sorted), the
// manifest left out, after checking every entry's type, owner and mode.
func treeFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if err := ownedFile(p, fi, d.IsDir()); err != nil {
			return err
		}
		if rel, _ := filepath.Rel(dir, p); !d.IsDir() && rel != TrustManifest {
			files = append(files, rel)
		}
		return nil
	})
	sort.Strings(files)
	return files, err
}

func fileSum(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:]), nil
}

// writeManifest writes TrustManifest for the files below dir.
func writeManifest(dir string) error {
	files, err := treeFiles(dir)
	if err != nil {
		return err
	}
	var m bytes.Buffer
	for _, f := range files {
		s, err := fileSum(filepath.Join(dir, f))
		if err != nil {
			return fmt.Errorf("trust cache: %w", err)
		}
		fmt.Fprintf(&m, "%s  %s\n", s, f)
	}
	if err := os.WriteFile(filepath.Join(dir, TrustManifest), m.Bytes(), 0o644); err != nil {
		return fmt.Errorf("trust cache: %w", err)
	}
	return nil
}

// verifyTrustDir checks a cache entry: types, owners and modes of everything
// in it, exactly the manifest's files, each with the manifest's SHA-256. It
// returns how many certificates the hashed directory holds.
func verifyTrustDir(dir string) (int, error) {
	fi, err := os.Lstat(dir)
	if err != nil {
		return 0, err
	}
	if err := ownedFile(dir, fi, true); err != nil {
		return 0, err
	}
	mp := filepath.Join(dir, TrustManifest)
	if fi, err = os.Lstat(mp); err != nil {
		return 0, fmt.Errorf("trust cache: %w", err)
	}
	if err := ownedFile(mp, fi, false); err != nil {
		return 0, err
	}
	m, err := os.ReadFile(mp)
	if err != nil {
		return 0, fmt.Errorf("trust cache: %w", err)
	}
	files, err := treeFiles(dir)
	if err != nil {
		return 0, fmt.Errorf("trust cache: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(m))
	i, certs := 0, 0
	for ; sc.Scan(); i++ {
		want, rel, ok := strings.Cut(sc.Text(), "  ")
		if !ok || i >= len(files) || files[i] != rel {
			return 0, fmt.Errorf("trust cache: %s: manifest line %d does not match the files", dir, i+1)
		}
		got, err := fileSum(filepath.Join(dir, rel))
		if err != nil {
			return 0, fmt.Errorf("trust cache: %w", err)
		}
		if got != want {
			return 0, fmt.Errorf("trust cache: %s: %s changed since it was written", dir, rel)
		}
		if filepath.Dir(rel) == TrustCertsDir {
			certs++
		}
	}
	if i != len(files) || certs == 0 {
		return 0, fmt.Errorf("trust cache: %s: manifest lists %d files, the entry holds %d", dir, i, len(files))
	}
	return certs, nil
}

// startEviction removes, in the background, the entries of cacheDir other
// than keep that no process holds (a shared flock). The returned release
// drops lock (this process's hold on keep) after the removal finished.
func startEviction(cacheDir, keep string, lock *os.File) func() {
	done := make(chan struct{})
	go func() {
		defer close(done)
		entries, _ := os.ReadDir(cacheDir)
		for _, e := range entries {
			if e.Name() == keep {
				continue
			}
			p := filepath.Join(cacheDir, e.Name())
			f, err := os.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			if err != nil {
				continue
			}
			if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) == nil {
				os.RemoveAll(p)
			}
			f.Close()
		}
	}()
	return func() {
		<-done
		lock.Close()
	}
}
