package sandboxd

import (
	"debug/buildinfo"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// The init binary: each sandbox's init (and the files stage it starts) is
// cmd/airlock-init, a binary that links this package, netns (a rootless
// island) and the standard library, when one from the same build lies beside
// the running executable. Starting it costs about 2 ms where re-executing
// airlock-core costs about 10 ms (a 41 MB image and ~290 package
// initializers, the gateway's, OPA's, the exporters'). The executor opens it
// once (New) and executes that open file through /proc/self/fd, so replacing
// the file on disk later changes nothing for a running executor. Without a
// usable one it re-executes its own binary with DefaultInitArgs.

// InitBinary is the init binary's file name, looked for beside the running
// executable.
const InitBinary = "airlock-init"

// initFDMin is the lowest descriptor the open init binary is kept at: init
// is started with fds 0-4 replaced (spawn.go), so the file it is executed
// from must lie above them.
const initFDMin = 10

// openInit opens the init binary beside self (the running executable),
// checked as OpenSibling checks. The returned file is close-on-exec at a
// descriptor >= initFDMin.
func openInit(self string) (*os.File, error) {
	f, _, err := OpenSibling(self, InitBinary, initFDMin)
	return f, err
}

// OpenSibling opens the binary name beside self (the running executable)
// and checks it before anyone executes it: a regular, executable file owned
// by root or this user that no one else may write, from the same build as
// this process (buildinfo, returned). A missing file is fs.ErrNotExist; any
// other refusal names the file and the problem. The returned file is
// close-on-exec at a descriptor >= minFD; execute it through FDExe, never
// by its path again. The executor opens airlock-init with it, the airlock
// front airlock-core.
func OpenSibling(self, name string, minFD int) (*os.File, *debug.BuildInfo, error) {
	path := filepath.Join(filepath.Dir(self), name)
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	if fd < minFD {
		hi, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, minFD)
		unix.Close(fd)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: move above fd %d: %w", path, minFD, err)
		}
		fd = hi
	}
	f := os.NewFile(uintptr(fd), path)
	bi, err := checkSibling(f, self)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, bi, nil
}

// checkSibling is OpenSibling's test of the open file f beside self.
func checkSibling(f *os.File, self string) (*debug.BuildInfo, error) {
	path := f.Name()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("%s: not an executable regular file (%s)", path, fi.Mode())
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || (int(st.Uid) != os.Geteuid() && st.Uid != 0) {
		return nil, fmt.Errorf("%s: not owned by root or this user", path)
	}
	if fi.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("%s: writable by group or others (mode %v)", path, fi.Mode().Perm())
	}
	theirs, err := buildinfo.Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: read its build information: %w", path, err)
	}
	ours, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, fmt.Errorf("%s: this binary has no build information to compare its with", path)
	}
	if err := sameBuild(ours, theirs); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if modified(ours) {
		// The same revision with local changes says nothing about the
		// protocol: take the sibling only when it was written with or after
		// this one (make build writes the siblings after airlock).
		sf, err := os.Stat(self)
		if err != nil {
			return nil, err
		}
		if fi.ModTime().Before(sf.ModTime()) {
			return nil, fmt.Errorf("%s: older than %s, built from a modified tree: rebuild both (make build)", path, self)
		}
	}
	return theirs, nil
}

// sameBuild fails unless the two binaries come from the same Go release, main
// module version and source revision (the vcs settings Go stamps).
func sameBuild(ours, theirs *debug.BuildInfo) error {
	if ours.GoVersion != theirs.GoVersion {
		return fmt.Errorf("built with %s, this binary with %s", theirs.GoVersion, ours.GoVersion)
	}
	if ours.Main.Version != theirs.Main.Version {
		return fmt.Errorf("module version %q, this binary's %q", theirs.Main.Version, ours.Main.Version)
	}
	for _, k := range []string{"vcs.revision", "vcs.time", "vcs.modified"} {
		if a, b := setting(ours, k), setting(theirs, k); a != b {
			return fmt.Errorf("%s %q, this binary's %q", k, b, a)
		}
	}
	return nil
}

// modified reports whether bi comes from a tree with local changes, or from
// one without version control information.
func modified(bi *debug.BuildInfo) bool {
	return setting(bi, "vcs.revision") == "" || setting(bi, "vcs.modified") == "true"
}

func setting(bi *debug.BuildInfo, key string) string {
	for _, s := range bi.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

// FDExe is the path that executes the open file f.
func FDExe(f *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
}
