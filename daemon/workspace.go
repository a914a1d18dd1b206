package daemon

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/api"
)

// openWorkspace opens the directory a create asks to bind, for the caller:
// the path is resolved once (symlinks followed), then the result is opened
// O_PATH with no symlink allowed anywhere in it, and the opened directory
// itself is checked: a directory, owned by the caller unless the caller is
// root. The executor binds exactly that open directory (/proc/self/fd/N),
// so swapping a symlink or a directory after the check binds nothing else.
func openWorkspace(path string, c caller) (*os.File, *api.Error) {
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
	return f, nil
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
