package sandboxd

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Bounds of StartSpec.HomeFiles.
const (
	maxHomeFiles     = 16
	maxHomeFileBytes = 64 << 10
)

// checkHomeFiles refuses names that are not clean paths below $HOME and
// sets past the bounds.
func checkHomeFiles(files map[string][]byte) error {
	if len(files) > maxHomeFiles {
		return fmt.Errorf("%d files, want at most %d", len(files), maxHomeFiles)
	}
	for name, b := range files {
		if name == "" || !filepath.IsLocal(name) || filepath.Clean(name) != name || strings.ContainsRune(name, 0) {
			return fmt.Errorf("%q: want a clean relative path below $HOME", name)
		}
		if len(b) > maxHomeFileBytes {
			return fmt.Errorf("%q: %d bytes, want at most %d", name, len(b), maxHomeFileBytes)
		}
	}
	return nil
}

// writeHomeFiles writes files below home, owned by uid:gid, 0600 (their
// new parents 0700). A file that exists, a parent that is not a plain
// directory, and anything inside the workspace are left alone: the
// workspace is the user's own directory, and a user's real ~/.netrc wins.
func writeHomeFiles(home, workspace string, uid, gid int, files map[string][]byte) error {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := filepath.Join(home, n)
		if workspace != "" && within(p, workspace) {
			continue
		}
		if err := writeHomeFile(home, n, uid, gid, files[n]); err != nil {
			return fmt.Errorf("home file %s: %w", n, err)
		}
	}
	return nil
}

func writeHomeFile(home, name string, uid, gid int, data []byte) error {
	dir := home
	for _, part := range strings.Split(filepath.Dir(name), string(filepath.Separator)) {
		if part == "." {
			continue
		}
		dir = filepath.Join(dir, part)
		st, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o700); err != nil {
				return err
			}
			if err := os.Lchown(dir, uid, gid); err != nil {
				return err
			}
		case err != nil:
			return err
		case !st.IsDir():
			return nil // a link or file where a directory would go: leave it
		}
	}
	f, err := os.OpenFile(filepath.Join(home, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := f.Chown(uid, gid); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
