package daemon

import (
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/sandboxd"
)

// filesPath checks the path query parameter of a files request: absolute,
// without '..', inside the sandbox's workspace or $HOME. The executor
// resolves it again inside the sandbox, as the sandbox's uid, refusing
// symlinks: this check only names the mistake early.
func (d *Daemon) filesPath(r *http.Request, sb *sandbox) (string, *api.Error) {
	q := r.URL.Query()["path"]
	if len(q) != 1 {
		return "", apiErr(api.CodeInvalidPath, "path", "path: give exactly one path query parameter (an absolute path in %s or %s)", sb.workDir, d.home)
	}
	p := q[0]
	if e := validateAbsPath("path", p); e != nil {
		return "", e
	}
	p = filepath.Clean(p)
	for _, root := range []string{sb.workDir, d.home} {
		if root != "" && (p == root || strings.HasPrefix(p, root+"/")) {
			return p, nil
		}
	}
	return "", apiErr(api.CodeInvalidPath, "path", "path: %.80q is outside the workspace (%s) and $HOME (%s)", p, sb.workDir, d.home)
}

// apiPutFiles is PUT /v1/sandboxes/{id}/files?path=DIR: a tar stream
// extracted under DIR.
func (d *Daemon) apiPutFiles(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	sb.touch()
	dir, e := d.filesPath(r, sb)
	if e != nil {
		writeError(w, e)
		return
	}
	limit := int64(d.cfg.Sandbox.MaxUpload)
	if r.ContentLength > limit {
		writeError(w, apiErr(api.CodeTooLarge, "", "upload of %d bytes is over sandbox.max_upload (%d)", r.ContentLength, limit))
		return
	}
	body := &boundedReader{r: r.Body, left: limit}
	res, err := sb.box.PutFiles(r.Context(), dir, body)
	if body.over {
		writeError(w, apiErr(api.CodeTooLarge, "", "upload is over sandbox.max_upload (%d bytes); what came before the limit may have been written", limit))
		return
	}
	if err != nil {
		writeError(w, filesError(sb.id, err))
		return
	}
	writeJSON(w, http.StatusOK, api.FilesResult{Files: res.Files, Bytes: res.Bytes})
}

// apiGetFiles is GET /v1/sandboxes/{id}/files?path=PATH: a tar stream of a
// file or directory.
func (d *Daemon) apiGetFiles(w http.ResponseWriter, r *http.Request) {
	sb, e := d.visible(r)
	if e != nil {
		writeError(w, e)
		return
	}
	sb.touch()
	p, e := d.filesPath(r, sb)
	if e != nil {
		writeError(w, e)
		return
	}
	lw := &lazyTar{w: w}
	err := sb.box.GetFiles(r.Context(), p, lw)
	switch {
	case err != nil && !lw.wrote:
		writeError(w, filesError(sb.id, err))
	case err != nil:
		// The tar stream is under way: cut the connection, so the client
		// sees a broken transfer, never a short archive that looks whole.
		panic(http.ErrAbortHandler)
	case !lw.wrote:
		lw.header()
	}
}

// filesError maps the executor's files errors.
func filesError(id string, err error) *api.Error {
	switch {
	case errors.Is(err, sandboxd.ErrInvalidPath):
		return apiErr(api.CodeInvalidPath, "path", "%v", err)
	case errors.Is(err, sandboxd.ErrNotFound):
		return apiErr(api.CodeNotFound, "path", "%v", err)
	case errors.Is(err, sandboxd.ErrTooLarge):
		return apiErr(api.CodeTooLarge, "", "%v", err)
	case errors.Is(err, sandboxd.ErrBadArchive):
		return apiErr(api.CodeBadRequest, "body", "%v", err)
	case errors.Is(err, sandboxd.ErrSandboxGone):
		return apiErr(api.CodeConflict, "", "sandbox %s has ended", id)
	}
	return apiErr(api.CodeInternal, "", "%v", err)
}

// boundedReader reads at most left bytes and remembers that the body went
// past them.
type boundedReader struct {
	r    io.Reader
	left int64
	over bool
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.left <= 0 {
		var one [1]byte
		for {
			n, err := b.r.Read(one[:])
			if n > 0 {
				b.over = true
				return 0, sandboxd.ErrTooLarge
			}
			if err != nil {
				return 0, err
			}
		}
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.r.Read(p)
	b.left -= int64(n)
	return n, err
}

// lazyTar sends the response header with the first byte, so an error before
// any byte is still a JSON error.
type lazyTar struct {
	w     http.ResponseWriter
	wrote bool
}

func (l *lazyTar) header() {
	l.w.Header().Set("Content-Type", "application/x-tar")
	l.w.WriteHeader(http.StatusOK)
	l.wrote = true
}

func (l *lazyTar) Write(p []byte) (int, error) {
	if !l.wrote {
		l.header()
	}
	return l.w.Write(p)
}
