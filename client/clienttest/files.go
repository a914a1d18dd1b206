package clienttest

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

// resolve maps an absolute path inside sb (its WorkDir or Home, no `..`, no
// symlink on the way) to the host path standing for it. field names the
// request field in the error.
func resolve(sb *sandbox, p, field string) (string, *api.Error) {
	bad := func(why string) *api.Error {
		code := api.CodeInvalidPath
		if field != "path" {
			code = api.CodeInvalidField
		}
		return &api.Error{Code: code, Field: field, Message: fmt.Sprintf("%s %q: %s", field, p, why)}
	}
	if !strings.HasPrefix(p, "/") {
		return "", bad("want an absolute path")
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", bad("a `..` component")
		}
	}
	p = path.Clean(p)
	var base, rel string
	switch {
	case p == sb.WorkDir || strings.HasPrefix(p, strings.TrimSuffix(sb.WorkDir, "/")+"/"):
		base, rel = sb.workspace, strings.TrimPrefix(strings.TrimPrefix(p, sb.WorkDir), "/")
	case p == Home || strings.HasPrefix(p, Home+"/"):
		base, rel = filepath.Join(sb.root, "home"), strings.TrimPrefix(strings.TrimPrefix(p, Home), "/")
	default:
		return "", bad("outside " + sb.WorkDir + " or " + Home)
	}
	if rel == "" {
		return base, nil
	}
	// Every component but the last must not be a symlink.
	parts := strings.Split(rel, "/")
	cur := base
	for _, part := range parts[:len(parts)-1] {
		cur = filepath.Join(cur, part)
		if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return "", bad("symlink in the path")
		}
	}
	return filepath.Join(base, rel), nil
}

func (s *Server) putFiles(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	dir, e := resolve(sb, r.URL.Query().Get("path"), "path")
	if e != nil {
		writeErr(w, e)
		return
	}
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		writeErr(w, &api.Error{Code: api.CodeInvalidPath, Field: "path", Message: "path: symlink in the path"})
		return
	}
	res, err := extract(r.Body, dir)
	if err != nil {
		writeErr(w, &api.Error{Code: api.CodeInvalidPath, Field: "path", Message: err.Error()})
		return
	}
	writeJSON(w, 200, res)
}

// extract is the fake's own extraction: names checked, no symlink followed
// on the way to an entry, only files, directories and symlinks.
func extract(r io.Reader, dir string) (api.FilesResult, error) {
	var res api.FilesResult
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return res, err
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("archive: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if strings.HasPrefix(name, "/") || !filepath.IsLocal(name) {
			return res, fmt.Errorf("entry %s: path refused", h.Name)
		}
		target := filepath.Join(dir, name)
		for cur := filepath.Dir(target); cur != dir && strings.HasPrefix(cur, dir); cur = filepath.Dir(cur) {
			if fi, err := os.Lstat(cur); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				return res, fmt.Errorf("entry %s: path refused: symlink", h.Name)
			}
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return res, err
		}
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(target, fs.FileMode(h.Mode)&fs.ModePerm|0o700)
		case tar.TypeReg:
			_ = os.Remove(target)
			var f *os.File
			if f, err = os.OpenFile(target, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(h.Mode)&fs.ModePerm); err == nil {
				var n int64
				n, err = io.Copy(f, tr)
				res.Bytes += n
				f.Close()
			}
		case tar.TypeSymlink:
			_ = os.Remove(target)
			err = os.Symlink(h.Linkname, target)
		default:
			err = fmt.Errorf("type %q", h.Typeflag)
		}
		if err != nil {
			return res, fmt.Errorf("entry %s: path refused: %w", h.Name, err)
		}
		res.Files++
	}
}

func (s *Server) getFiles(w http.ResponseWriter, r *http.Request) {
	sb := s.lookup(w, r)
	if sb == nil {
		return
	}
	p, e := resolve(sb, r.URL.Query().Get("path"), "path")
	if e != nil {
		writeErr(w, e)
		return
	}
	if _, err := os.Lstat(p); err != nil {
		writeErr(w, &api.Error{Code: api.CodeNotFound, Field: "path", Message: "path: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/x-tar")
	_ = client.WriteTar(w, p)
}
