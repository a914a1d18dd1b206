package ociimage

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// Entry is one path of the image.
type Entry struct {
	Path string      // absolute, cleaned
	Mode fs.FileMode // type and permission bits
	Src  string      // a regular file's content comes from this host file...
	Data []byte      // ... or is this
	Link string      // a symlink's target
}

// Tree is the image's file system.
type Tree struct {
	entries map[string]*Entry
}

// Assemble collects the image's files: those of Packages from the host's
// dpkg database (directories and the ExcludedDirs left out), the busybox
// links, the CA bundle, /etc/passwd and /etc/group, Dirs, and Binaries from
// binDir. A file a package lists that is missing on the host is an error.
func Assemble(binDir string) (*Tree, error) {
	t := &Tree{entries: map[string]*Entry{}}
	for _, pkg := range Packages {
		if err := t.addPackage(pkg); err != nil {
			return nil, err
		}
	}
	for _, a := range BusyboxLinks {
		t.add(&Entry{Path: "/bin/" + a, Mode: fs.ModeSymlink | 0o777, Link: "busybox"})
	}
	if err := t.addFile(CABundle, CABundle, 0o644); err != nil {
		return nil, fmt.Errorf("%w (Debian's ca-certificates makes it)", err)
	}
	t.add(&Entry{Path: "/etc/passwd", Mode: 0o644, Data: []byte(passwd)})
	t.add(&Entry{Path: "/etc/group", Mode: 0o644, Data: []byte(group)})
	for d, mode := range Dirs {
		t.add(&Entry{Path: d, Mode: fs.ModeDir | mode})
	}
	for name, dst := range Binaries {
		if err := t.addFile(filepath.Join(binDir, name), dst, 0o755); err != nil {
			return nil, fmt.Errorf("%w (make build writes it)", err)
		}
	}
	t.addParents()
	return t, nil
}

func (t *Tree) add(e *Entry) { t.entries[e.Path] = e }

// addFile adds the regular file src at dst.
func (t *Tree) addFile(src, dst string, mode fs.FileMode) error {
	st, err := os.Stat(src)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", src)
	}
	t.add(&Entry{Path: dst, Mode: mode, Src: src})
	return nil
}

// addPackage adds a package's files and symlinks at the paths dpkg lists.
// A listed path that is a directory on the host (following symlinks: on a
// merged-/usr host /bin is a link to usr/bin) becomes a directory only when
// something is put in it.
func (t *Tree) addPackage(pkg string) error {
	paths, err := packageFiles(pkg)
	if err != nil {
		return err
	}
	for _, p := range paths {
		if excluded(p) {
			continue
		}
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("package %s: %w", pkg, err)
		}
		if st.IsDir() {
			continue
		}
		lst, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("package %s: %w", pkg, err)
		}
		e := &Entry{Path: path.Clean(p), Mode: lst.Mode() & (fs.ModeType | fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)}
		switch {
		case lst.Mode()&fs.ModeSymlink != 0:
			if e.Link, err = os.Readlink(p); err != nil {
				return fmt.Errorf("package %s: %w", pkg, err)
			}
		case lst.Mode().IsRegular():
			e.Src = p
		default:
			return fmt.Errorf("package %s: %s is neither a file, a symlink nor a directory", pkg, p)
		}
		t.add(e)
	}
	return nil
}

// excluded reports whether p is under ExcludedDirs, but not a copyright file.
func excluded(p string) bool {
	if strings.HasPrefix(p, "/usr/share/doc/") && path.Base(p) == "copyright" {
		return false
	}
	for _, d := range ExcludedDirs {
		if strings.HasPrefix(p+"/", d) {
			return true
		}
	}
	return false
}

// addParents adds every missing parent directory, 0755.
func (t *Tree) addParents() {
	for p := range t.entries {
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := t.entries[d]; !ok {
				t.entries[d] = &Entry{Path: d, Mode: fs.ModeDir | 0o755}
			}
		}
	}
}

// Entries returns the entries sorted by path, parents before children.
func (t *Tree) Entries() []*Entry {
	out := make([]*Entry, 0, len(t.entries))
	for _, e := range t.entries {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b *Entry) int { return strings.Compare(a.Path, b.Path) })
	return out
}

// Lookup returns the entry at p, or nil.
func (t *Tree) Lookup(p string) *Entry { return t.entries[p] }

// open returns a regular entry's content.
func (e *Entry) open() (io.ReadCloser, int64, error) {
	if e.Src == "" {
		return io.NopCloser(strings.NewReader(string(e.Data))), int64(len(e.Data)), nil
	}
	f, err := os.Open(e.Src)
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, err
	}
	return f, st.Size(), nil
}

// WriteDir writes the tree under root, which must be empty or missing
// (the Containerfile's assembly stage writes /rootfs and copies it whole
// into the final image).
func (t *Tree) WriteDir(root string) error {
	if ents, err := os.ReadDir(root); err == nil && len(ents) > 0 {
		return fmt.Errorf("%s: not empty", root)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	for _, e := range t.Entries() {
		if err := e.writeUnder(root); err != nil {
			return fmt.Errorf("%s: %w", e.Path, err)
		}
	}
	return nil
}

func (e *Entry) writeUnder(root string) error {
	dst := filepath.Join(root, e.Path)
	switch {
	case e.Mode.IsDir():
		if err := os.Mkdir(dst, 0o700); err != nil {
			return err
		}
		return os.Chmod(dst, e.Mode&(fs.ModePerm|fs.ModeSticky))
	case e.Mode&fs.ModeSymlink != 0:
		return os.Symlink(e.Link, dst)
	}
	r, _, err := e.open()
	if err != nil {
		return err
	}
	defer r.Close()
	f, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Chmod(dst, e.Mode&(fs.ModePerm|fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
}
