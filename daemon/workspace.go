package daemon

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
)

// openWorkspace opens the directory a create asks to bind, for the caller:
// the path is resolved once (symlinks followed), then the result is opened
// O_PATH with no symlink allowed anywhere in it, and the opened directory
// itself is checked: a directory, owned by the caller unless the caller is
// root. The executor binds exactly that open directory (/proc/self/fd/N),
// so swapping a symlink or a directory after the check binds nothing else.
func openWorkspace(path string, c caller, hidden []hiddenPath) (*os.File, *api.Error) {
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, workspaceErr(path, err)
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, real, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return nil, workspaceErr(path, err)
	}
	f := os.NewFile(uintptr(fd), real)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, workspaceErr(path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		f.Close()
		return nil, apiErr(api.CodeInvalidField, "workspace", "workspace: %.80q is not a directory", path)
	}
	if !c.root() && int(st.Uid) != c.uid {
		f.Close()
		return nil, apiErr(api.CodeForbidden, "workspace", "workspace: %.80q is owned by uid %d; you (uid %d) may bind only a directory you own", path, st.Uid, c.uid)
	}
	if we := checkWorkspace(path, real, hidden); we != nil {
		f.Close()
		return nil, apiErr(api.CodeForbidden, "workspace", "workspace: %.80q %s", path, we.Problem)
	}
	return f, nil
}

// hiddenPath is a path hidden from every sandbox and what it holds.
type hiddenPath struct {
	path  string // absolute
	what  string // "the audit log"
	file  string // when path is the directory of what: the file itself
	field string // the config field that sets it ("" for none)
}

// WorkspaceError is a workspace airlock will not bind: the host's root, the
// home of root, or a directory that is, holds or lies inside a path hidden
// from every sandbox (the audit log, the secrets file, the CA key, airlock's
// state). A hidden path further down a workspace is masked instead.
type WorkspaceError struct {
	Workspace string // the directory asked for
	// Problem says why, naming the file: "holds the audit log /p/audit.jsonl".
	Problem string
	// Field is the config field that placed the hidden path ("audit.file"),
	// "" when none does.
	Field string
}

func (e *WorkspaceError) Error() string {
	return fmt.Sprintf("the workspace %s %s", e.Workspace, e.Problem)
}

// CheckWorkspace returns a *WorkspaceError when dir may not be bound as the
// workspace of a sandbox of a daemon New would build from o (checkWorkspace),
// or an error when dir cannot be resolved. It builds nothing, so a caller
// can refuse before New writes anything (Run checks again).
func CheckWorkspace(o Options, dir string) error {
	return workspaceRefusal(dir, namedHidden(o, o.Config, ""))
}

// workspaceRefusal is checkWorkspace on dir resolved.
func workspaceRefusal(dir string, hidden []hiddenPath) error {
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return fmt.Errorf("workspace %s: %w", dir, err)
	}
	if we := checkWorkspace(dir, real, hidden); we != nil {
		return we
	}
	return nil
}

// checkWorkspace refuses workspace dir, resolved to real, when it is / or
// the home of root, or is, holds or lies inside a hidden path (or what the
// hidden path resolves to).
func checkWorkspace(dir, real string, hidden []hiddenPath) *WorkspaceError {
	refuse := func(field, format string, args ...any) *WorkspaceError {
		return &WorkspaceError{Workspace: dir, Problem: fmt.Sprintf(format, args...), Field: field}
	}
	if real == "/" {
		return refuse("", "is the host's root directory")
	}
	if home := rootHome(); real == home {
		return refuse("", "is the home directory of root")
	}
	for _, h := range hidden {
		for _, p := range hiddenForms(h.path) {
			switch {
			case !within(real, p):
			case real == p && h.file != "":
				return refuse(h.field, "holds %s %s, which sandboxes must never see", h.what, h.file)
			case real == p:
				return refuse(h.field, "is %s, which sandboxes must never see", h.what)
			case h.file != "":
				return refuse(h.field, "lies inside %s, the directory of %s %s, which sandboxes must never see", h.path, h.what, h.file)
			default:
				return refuse(h.field, "lies inside %s, %s, which sandboxes must never see", h.path, h.what)
			}
		}
	}
	return nil
}

// hiddenForms are p and, when different, what it resolves to.
func hiddenForms(p string) []string {
	if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
		return []string{p, r}
	}
	return []string{p}
}

// within reports whether p is base or lies below it.
func within(p, base string) bool {
	return p == base || base == "/" || strings.HasPrefix(p, base+"/")
}

// rootHome is the home directory of uid 0 (/root when it cannot be read).
func rootHome() string {
	if u, err := user.LookupId("0"); err == nil && u.HomeDir != "" {
		return filepath.Clean(u.HomeDir)
	}
	return "/root"
}

func workspaceErr(path string, err error) *api.Error {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return apiErr(api.CodeInvalidField, "workspace", "workspace: %.80q does not exist", path)
	case errors.Is(err, unix.ENOTDIR):
		return apiErr(api.CodeInvalidField, "workspace", "workspace: %.80q is not a directory", path)
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV):
		return apiErr(api.CodeInvalidField, "workspace", "workspace: %.80q changed while it was opened (a symlink appeared in it); try again", path)
	case errors.Is(err, os.ErrPermission):
		return apiErr(api.CodeForbidden, "workspace", "workspace: %.80q: %v", path, err)
	}
	return apiErr(api.CodeInvalidField, "workspace", "workspace: %.80q: %v", path, err)
}

// fdPath names an open file for the executor, which opens it once.
func fdPath(f *os.File) string { return "/proc/self/fd/" + strconv.Itoa(int(f.Fd())) }
