package client

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/api"
)

// PutFiles extracts the tar stream r into directory dir of sandbox id (the
// workspace or $HOME, created if missing). The daemon refuses entries that
// would land outside it.
func (c *Client) PutFiles(ctx context.Context, id, dir string, r io.Reader) (*api.FilesResult, error) {
	body, stop := interruptible(ctx, r)
	defer stop()
	resp, err := c.do(ctx, request{method: http.MethodPut, path: sandboxPath(id, "files"),
		query: url.Values{"path": {dir}}, body: body, contentType: "application/x-tar"})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res api.FilesResult
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxErrorBody)).Decode(&res); err != nil {
		return nil, fmt.Errorf("put files %s: response: %w", dir, err)
	}
	return &res, nil
}

// GetFiles returns a tar stream of path (a file, a symlink or a directory
// with everything below it) in sandbox id; entries are named from path's last
// component. Close it when done.
func (c *Client) GetFiles(ctx context.Context, id, path string) (io.ReadCloser, error) {
	resp, err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(id, "files"),
		query: url.Values{"path": {path}}})
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// CopyTo copies the local file or directory src into directory dir of
// sandbox id (created if missing): src "./build" and dir "/workspace" make
// /workspace/build. Symlinks are copied as links, never followed; other
// special files are refused before anything is sent.
func (c *Client) CopyTo(ctx context.Context, id, src, dir string) (*api.FilesResult, error) {
	if _, err := os.Lstat(src); err != nil {
		return nil, fmt.Errorf("copy to %s: %w", dir, err)
	}
	if err := checkTree(src); err != nil {
		return nil, fmt.Errorf("copy to %s: %w", dir, err)
	}
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := WriteTar(pw, src)
		pw.CloseWithError(err)
		done <- err
	}()
	res, err := c.PutFiles(ctx, id, dir, pr)
	pr.CloseWithError(errors.New("upload ended"))
	terr := <-done
	if terr != nil && !errors.Is(terr, io.ErrClosedPipe) && err == nil {
		err = terr
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

// checkTree refuses a tree holding anything but regular files, directories
// and symlinks, naming the first, so an upload never stops half-way on it.
func checkTree(src string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if t := d.Type(); t&^(fs.ModeDir|fs.ModeSymlink) != 0 {
			return fmt.Errorf("%s: a %s cannot be copied (only files, directories and symlinks)", p, describeMode(t))
		}
		return nil
	})
}

func describeMode(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "fifo"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	}
	return "special file"
}

// WriteTar writes the local file or directory src as a tar stream to w, its
// entries named from src's last component (of its absolute path, so "."
// is the current directory's name); symlinks are stored as links.
func WriteTar(w io.Writer, src string) error {
	abs, err := filepath.Abs(src)
	if err != nil {
		return err
	}
	base := filepath.Base(abs)
	if base == string(filepath.Separator) {
		return errors.New("cannot copy / (name a directory below it)")
	}
	tw := tar.NewWriter(w)
	err = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		name := path.Join(base, filepath.ToSlash(rel))
		return writeEntry(tw, p, name)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func writeEntry(tw *tar.Writer, p, name string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	var link string
	if fi.Mode()&fs.ModeSymlink != 0 {
		if link, err = os.Readlink(p); err != nil {
			return err
		}
	}
	h, err := tar.FileInfoHeader(fi, link)
	if err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	h.Name = name
	if fi.IsDir() {
		h.Name += "/"
	}
	// Ownership is the sandbox's; the host's names and ids mean nothing there.
	h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
	if err := tw.WriteHeader(h); err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return nil
	}
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.CopyN(tw, f, h.Size); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	return nil
}

// CopyFrom copies src (a file, symlink or directory) of sandbox id into the
// local directory dir (created if missing): src "/workspace/out" and dir
// "./results" make ./results/out. Nothing is written outside dir: entries
// with absolute or ".." names and entries other than files, directories and
// symlinks are refused, and no write follows a symlink out of dir (os.Root).
// Symlinks are made as links with their target unchanged, so one may point
// anywhere on this machine; an existing file or link is replaced, a directory
// never.
func (c *Client) CopyFrom(ctx context.Context, id, src, dir string) (*api.FilesResult, error) {
	body, err := c.GetFiles(ctx, id, src)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	res, err := ExtractTar(body, dir)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		return res, fmt.Errorf("copy from %s: %w", src, err)
	}
	return res, nil
}

// ExtractTar extracts the tar stream r into the local directory dir (created
// if missing) under the rules of CopyFrom, and counts what it wrote. On an
// error, what was written before it stays.
func ExtractTar(r io.Reader, dir string) (*api.FilesResult, error) {
	res := &api.FilesResult{}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return res, err
	}
	defer root.Close()
	x := extractor{root: root, res: res}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return res, fmt.Errorf("tar: %w", err)
		}
		if err := x.entry(h, tr); err != nil {
			return res, fmt.Errorf("entry %s: %w", h.Name, err)
		}
	}
	return res, x.finishDirs()
}

// extractor writes entries below root.
type extractor struct {
	root *os.Root
	res  *api.FilesResult
	dirs []*tar.Header // modes and times applied last, deepest first
}

func (x *extractor) entry(h *tar.Header, r io.Reader) error {
	name, err := localName(h.Name)
	if err != nil {
		return err
	}
	if d := path.Dir(name); d != "." {
		if err := x.root.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	perm := fs.FileMode(h.Mode) & fs.ModePerm // setuid, setgid and sticky cleared
	switch h.Typeflag {
	case tar.TypeDir:
		if err := x.root.MkdirAll(name, 0o700); err != nil {
			return err
		}
		hc := *h
		hc.Name = name
		x.dirs = append(x.dirs, &hc)
	case tar.TypeReg:
		if err := x.replace(name); err != nil {
			return err
		}
		f, err := x.root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
		if err != nil {
			return err
		}
		n, err := io.Copy(f, r)
		x.res.Bytes += n
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		if err := x.root.Chmod(name, perm); err != nil {
			return err
		}
		_ = x.root.Chtimes(name, h.ModTime, h.ModTime)
	case tar.TypeSymlink:
		if err := x.replace(name); err != nil {
			return err
		}
		if err := x.root.Symlink(h.Linkname, name); err != nil {
			return err
		}
	default:
		return fmt.Errorf("type %q refused (only files, directories and symlinks)", h.Typeflag)
	}
	x.res.Files++
	return nil
}

// replace removes what is at name so a file or link can take its place; a
// directory is never replaced by a file.
func (x *extractor) replace(name string) error {
	fi, err := x.root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return errors.New("a directory is in the way")
	}
	return x.root.Remove(name)
}

// finishDirs gives directories their modes and times once nothing more is
// written into them.
func (x *extractor) finishDirs() error {
	for i := len(x.dirs) - 1; i >= 0; i-- {
		h := x.dirs[i]
		if err := x.root.Chmod(h.Name, fs.FileMode(h.Mode)&fs.ModePerm); err != nil {
			return fmt.Errorf("entry %s: %w", h.Name, err)
		}
		_ = x.root.Chtimes(h.Name, h.ModTime, h.ModTime)
	}
	return nil
}

// localName is a tar entry's name as a relative path that stays inside the
// extraction root, or an error naming why it would not.
func localName(name string) (string, error) {
	n := strings.TrimSuffix(name, "/")
	switch {
	case n == "":
		return "", errors.New("empty name")
	case strings.HasPrefix(n, "/"):
		return "", errors.New("an absolute name")
	}
	for _, part := range strings.Split(n, "/") {
		if part == ".." {
			return "", errors.New("a `..` component")
		}
	}
	c := path.Clean(n)
	if c == "." || !filepath.IsLocal(c) {
		return "", errors.New("not a local name")
	}
	return c, nil
}
