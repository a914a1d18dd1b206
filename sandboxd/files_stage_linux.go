package sandboxd

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"sort"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The files stage: this binary re-executed by init (forkFiles) in the
// sandbox, as the sandbox uid with no capabilities, no_new_privs and the
// seccomp filter (openat2 allowed), real uid filesRealID. Its fds: 0 the tar
// stream in (put), 1 the tar stream out (get) or the result (put), 2 a
// failure as JSON, 3 the job, 4 the root (an O_PATH fd of the workspace or
// $HOME, opened by init before any of the sandbox's code ran). Every path
// below the root is resolved with openat2 and resolveBeneath; names come one
// component at a time from a directory fd it resolved the same way.

const (
	fdFilesJob  = 3
	fdFilesRoot = 4

	// resolveBeneath keeps a resolution below its directory fd: no `..`
	// above it, no absolute path, no symlink (and so no magic link) at all.
	resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS

	// maxFilesDepth bounds the directories a get descends (each holds an fd).
	maxFilesDepth = 128
	// maxLinkTarget bounds a symlink's target.
	maxLinkTarget = 4096
)

// filesErr is a failure of the files stage, reported on its stderr.
type filesErr struct {
	kind, entry string
	err         error
}

func (e *filesErr) Error() string { return e.err.Error() }

func refusedEntry(entry string, format string, args ...any) *filesErr {
	return &filesErr{kind: filesKindInvalid, entry: entry, err: fmt.Errorf(format, args...)}
}

// classify turns a syscall error on entry into a failure of the right kind.
func classify(entry, what string, err error) *filesErr {
	kind := filesKindFailed
	switch {
	case errors.Is(err, unix.ELOOP):
		return refusedEntry(entry, "%s: a symlink in the path (symlinks are never followed)", what)
	case errors.Is(err, unix.EXDEV):
		return refusedEntry(entry, "%s: the path leaves its root", what)
	case errors.Is(err, unix.ENOTDIR):
		return refusedEntry(entry, "%s: a component is not a directory", what)
	case errors.Is(err, unix.ENOENT):
		kind = filesKindNotFound
	case errors.Is(err, unix.ENOSPC), errors.Is(err, unix.EDQUOT), errors.Is(err, unix.EFBIG):
		kind = filesKindTooLarge
	}
	return &filesErr{kind: kind, entry: entry, err: fmt.Errorf("%s: %w", what, err)}
}

// runFilesStage is the files stage's main.
func runFilesStage() int {
	fail := func(e *filesErr) int {
		b, _ := json.Marshal(filesFailure{Kind: e.kind, Entry: e.entry, Error: e.err.Error()})
		_, _ = os.Stderr.Write(b)
		return 1
	}
	if os.Geteuid() == 0 || os.Getuid() != filesRealID {
		fmt.Fprintln(os.Stderr, "airlock: the files stage is started by a sandbox's init only")
		return 2
	}
	// A file over RLIMIT_FSIZE fails its write (EFBIG) instead of killing us.
	signal.Ignore(syscall.SIGXFSZ)
	job, err := readFilesJob()
	if err != nil {
		return fail(&filesErr{kind: filesKindFailed, err: err})
	}
	var st unix.Stat_t
	if err := unix.Fstat(fdFilesRoot, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fail(&filesErr{kind: filesKindFailed, err: fmt.Errorf("fd %d is not the root directory (%v)", fdFilesRoot, err)})
	}
	switch job.Op {
	case filesPut:
		res, ferr := putFiles(fdFilesRoot, job, os.Stdin)
		if ferr != nil {
			return fail(ferr)
		}
		b, _ := json.Marshal(res)
		_, _ = os.Stdout.Write(b)
	case filesGet:
		if ferr := getFiles(fdFilesRoot, job, os.Stdout); ferr != nil {
			return fail(ferr)
		}
	}
	return 0
}

// readFilesJob reads and checks the job init wrote on fd 3.
func readFilesJob() (*filesJob, error) {
	f := os.NewFile(fdFilesJob, "job")
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return nil, fmt.Errorf("read the job: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var job filesJob
	if err := dec.Decode(&job); err != nil {
		return nil, fmt.Errorf("the job: %w", err)
	}
	if err := job.check(); err != nil {
		return nil, err
	}
	return &job, nil
}

// openBeneath opens name below dir with resolveBeneath, retrying the EAGAIN
// a concurrent rename can cause.
func openBeneath(dir int, name string, flags int, mode uint32) (int, error) {
	how := unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Mode: uint64(mode), Resolve: resolveBeneath}
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dir, name, &how)
		if (errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR)) && i < 100 {
			continue
		}
		if errors.Is(err, unix.ENOSYS) {
			return -1, fmt.Errorf("openat2: kernel too old (need Linux >= 5.6): %w", err)
		}
		return fd, err
	}
}

// mkdirAllBeneath walks rel below root one component at a time, making the
// missing directories, and returns an O_PATH fd of the last. A symlink or a
// non-directory on the way is refused.
func mkdirAllBeneath(root int, rel, entry string) (int, *filesErr) {
	cur, err := unix.Dup(root)
	if err != nil {
		return -1, classify(entry, "dup", err)
	}
	if rel == "" {
		return cur, nil
	}
	done := ""
	for _, c := range strings.Split(rel, "/") {
		done = path.Join(done, c)
		if err := unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, classify(entry, "mkdir "+done, err)
		}
		next, err := openBeneath(cur, c, unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(cur)
		if err != nil {
			return -1, classify(entry, done, err)
		}
		cur = next
	}
	return cur, nil
}

// entryName checks a tar entry's name: relative, no `..`, no NUL; "." (the
// target itself) comes back as "".
func entryName(n string) (string, *filesErr) {
	switch {
	case n == "" || strings.IndexByte(n, 0) >= 0:
		return "", refusedEntry(n, "an empty name or a NUL byte")
	case strings.HasPrefix(n, "/"):
		return "", refusedEntry(n, "an absolute name")
	}
	for _, c := range strings.Split(n, "/") {
		if c == ".." {
			return "", refusedEntry(n, "a `..` component")
		}
	}
	if c := path.Clean(n); c != "." {
		return c, nil
	}
	return "", nil
}

// putter extracts one tar stream.
type putter struct {
	base  int // O_PATH fd of the target directory
	max   int64
	res   FilesResult
	dirs  []dirMeta
	dirOf map[string]int // parent directory fds by name (O_PATH)
}

type dirMeta struct {
	name  string
	mode  uint32
	mtime time.Time
}

// putFiles extracts r below job.Path of root.
func putFiles(root int, job *filesJob, r io.Reader) (FilesResult, *filesErr) {
	base, ferr := mkdirAllBeneath(root, job.Path, "")
	if ferr != nil {
		return FilesResult{}, ferr
	}
	p := &putter{base: base, max: job.MaxBytes, dirOf: map[string]int{}}
	defer p.close()
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return p.res, &filesErr{kind: filesKindArchive, err: fmt.Errorf("read the tar stream: %w", err)}
		}
		if ferr := p.entry(hdr, tr); ferr != nil {
			return p.res, ferr
		}
	}
	// Directory modes and times last: writing into a directory changes its
	// mtime, and a read-only mode would stop what follows.
	for i := len(p.dirs) - 1; i >= 0; i-- {
		if ferr := p.finishDir(p.dirs[i]); ferr != nil {
			return p.res, ferr
		}
	}
	return p.res, nil
}

func (p *putter) close() {
	unix.Close(p.base)
	for _, fd := range p.dirOf {
		unix.Close(fd)
	}
}

// parent returns an O_PATH fd of the directory dir (below the target),
// making missing directories.
func (p *putter) parent(dir, entry string) (int, *filesErr) {
	if dir == "" {
		return p.base, nil
	}
	if fd, ok := p.dirOf[dir]; ok {
		return fd, nil
	}
	fd, ferr := mkdirAllBeneath(p.base, dir, entry)
	if ferr != nil {
		return -1, ferr
	}
	if len(p.dirOf) > 64 { // bounded: drop the cache, keep this one
		for _, old := range p.dirOf {
			unix.Close(old)
		}
		clear(p.dirOf)
	}
	p.dirOf[dir] = fd
	return fd, nil
}

// entry writes one tar entry.
func (p *putter) entry(hdr *tar.Header, tr io.Reader) *filesErr {
	name, ferr := entryName(hdr.Name)
	if ferr != nil {
		return ferr
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink:
	default:
		return refusedEntry(hdr.Name, "type %q is never written (only files, directories and symlinks)", hdr.Typeflag)
	}
	if name == "" {
		if hdr.Typeflag != tar.TypeDir {
			return refusedEntry(hdr.Name, "names the target directory itself")
		}
		return nil
	}
	dir, leaf := path.Split(name)
	pfd, ferr := p.parent(strings.TrimSuffix(dir, "/"), hdr.Name)
	if ferr != nil {
		return ferr
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		ferr = p.mkdir(pfd, leaf, name, hdr)
	case tar.TypeReg:
		ferr = p.writeFile(pfd, leaf, hdr, tr)
	default:
		ferr = p.symlink(pfd, leaf, hdr)
	}
	if ferr == nil {
		p.res.Files++
	}
	return ferr
}

func (p *putter) mkdir(pfd int, leaf, name string, hdr *tar.Header) *filesErr {
	if err := unix.Mkdirat(pfd, leaf, 0o700); err != nil && !errors.Is(err, unix.EEXIST) {
		return classify(hdr.Name, "mkdir", err)
	}
	// Whatever is there now must be a directory, reached without a symlink.
	fd, err := openBeneath(pfd, leaf, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return classify(hdr.Name, "open the directory", err)
	}
	unix.Close(fd)
	p.dirs = append(p.dirs, dirMeta{name: name, mode: uint32(hdr.Mode) & 0o1777, mtime: hdr.ModTime})
	return nil
}

// replaceable removes what is at leaf so a file or link can be made there: a
// directory is refused.
func replaceable(pfd int, leaf, entry string) *filesErr {
	var st unix.Stat_t
	err := unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case err != nil:
		return classify(entry, "stat", err)
	case st.Mode&unix.S_IFMT == unix.S_IFDIR:
		return refusedEntry(entry, "a directory is in the way")
	}
	if err := unix.Unlinkat(pfd, leaf, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return classify(entry, "replace", err)
	}
	return nil
}

func (p *putter) writeFile(pfd int, leaf string, hdr *tar.Header, tr io.Reader) *filesErr {
	if hdr.Size < 0 || p.res.Bytes+hdr.Size > p.max {
		return &filesErr{kind: filesKindTooLarge, entry: hdr.Name,
			err: fmt.Errorf("%d bytes would bring the upload past its %d byte limit", hdr.Size, p.max)}
	}
	if ferr := replaceable(pfd, leaf, hdr.Name); ferr != nil {
		return ferr
	}
	// O_EXCL: a name swapped in meanwhile (a symlink, a hard link) is never
	// written through.
	fd, err := openBeneath(pfd, leaf, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return classify(hdr.Name, "create", err)
	}
	f := os.NewFile(uintptr(fd), leaf)
	defer f.Close()
	n, err := io.CopyN(f, tr, hdr.Size)
	p.res.Bytes += n
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return &filesErr{kind: filesKindArchive, entry: hdr.Name, err: fmt.Errorf("the tar stream ends inside the file: %w", err)}
		}
		return classify(hdr.Name, "write", err)
	}
	// setuid, setgid and sticky bits are cleared.
	if err := unix.Fchmod(fd, uint32(hdr.Mode)&0o777); err != nil {
		return classify(hdr.Name, "chmod", err)
	}
	if err := setTimes(fd, "", unix.AT_EMPTY_PATH, hdr.ModTime); err != nil {
		return classify(hdr.Name, "set times", err)
	}
	return nil
}

func (p *putter) symlink(pfd int, leaf string, hdr *tar.Header) *filesErr {
	if hdr.Linkname == "" || len(hdr.Linkname) > maxLinkTarget || strings.IndexByte(hdr.Linkname, 0) >= 0 {
		return refusedEntry(hdr.Name, "a symlink target of %d bytes", len(hdr.Linkname))
	}
	if ferr := replaceable(pfd, leaf, hdr.Name); ferr != nil {
		return ferr
	}
	if err := unix.Symlinkat(hdr.Linkname, pfd, leaf); err != nil {
		return classify(hdr.Name, "symlink", err)
	}
	if err := setTimes(pfd, leaf, unix.AT_SYMLINK_NOFOLLOW, hdr.ModTime); err != nil {
		return classify(hdr.Name, "set times", err)
	}
	return nil
}

// finishDir sets a directory's mode (setuid and setgid cleared) and times.
func (p *putter) finishDir(d dirMeta) *filesErr {
	fd, err := openBeneath(p.base, d.name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return classify(d.name, "open the directory", err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, d.mode); err != nil {
		return classify(d.name, "chmod", err)
	}
	if err := setTimes(fd, "", unix.AT_EMPTY_PATH, d.mtime); err != nil {
		return classify(d.name, "set times", err)
	}
	return nil
}

func setTimes(dirfd int, name string, flags int, mtime time.Time) error {
	ts := unix.NsecToTimespec(mtime.UnixNano())
	return unix.UtimesNanoAt(dirfd, name, []unix.Timespec{ts, ts}, flags)
}

// getter writes one tar stream.
type getter struct {
	tw *tar.Writer
}

// getFiles writes job.Path of root, as job.Name, to w.
func getFiles(root int, job *filesJob, w io.Writer) *filesErr {
	g := &getter{tw: tar.NewWriter(w)}
	var ferr *filesErr
	if job.Path == "" {
		fd, err := openBeneath(root, ".", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return classify(job.Name, "open", err)
		}
		ferr = g.dir(fd, job.Name, 0)
	} else {
		dir, leaf := path.Split(job.Path)
		var pfd int
		var err error
		if dir == "" {
			pfd, err = unix.Dup(root)
		} else {
			pfd, err = openBeneath(root, strings.TrimSuffix(dir, "/"), unix.O_PATH|unix.O_DIRECTORY, 0)
		}
		if err != nil {
			return classify(job.Name, "open "+dir, err)
		}
		ferr = g.entry(pfd, leaf, job.Name, 0)
		unix.Close(pfd)
	}
	if ferr != nil {
		return ferr
	}
	if err := g.tw.Close(); err != nil {
		return &filesErr{kind: filesKindFailed, err: fmt.Errorf("write the tar stream: %w", err)}
	}
	return nil
}

// entry writes leaf (of the directory pfd) as name: a directory and what is
// below it, a regular file, a symlink; other types are left out.
func (g *getter) entry(pfd int, leaf, name string, depth int) *filesErr {
	var st unix.Stat_t
	if err := unix.Fstatat(pfd, leaf, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		if errors.Is(err, unix.ENOENT) && depth > 0 {
			return nil // gone meanwhile
		}
		return classify(name, "stat", err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := openBeneath(pfd, leaf, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			return classify(name, "open", err)
		}
		return g.dir(fd, name, depth)
	case unix.S_IFREG:
		return g.file(pfd, leaf, name)
	case unix.S_IFLNK:
		buf := make([]byte, maxLinkTarget+1)
		n, err := unix.Readlinkat(pfd, leaf, buf)
		if err != nil {
			return classify(name, "readlink", err)
		}
		return g.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: string(buf[:n]), Mode: 0o777, ModTime: mtime(&st)})
	}
	return nil // fifo, socket, device: not copied
}

// dir writes directory fd (which it closes) and its entries.
func (g *getter) dir(fd int, name string, depth int) *filesErr {
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	if depth >= maxFilesDepth {
		return &filesErr{kind: filesKindFailed, entry: name, err: fmt.Errorf("more than %d directories deep", maxFilesDepth)}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return classify(name, "stat", err)
	}
	if ferr := g.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: int64(st.Mode & 0o1777), ModTime: mtime(&st)}); ferr != nil {
		return ferr
	}
	names, err := f.Readdirnames(-1)
	if err != nil {
		return classify(name, "list", err)
	}
	sort.Strings(names)
	for _, n := range names {
		if ferr := g.entry(fd, n, name+"/"+n, depth+1); ferr != nil {
			return ferr
		}
	}
	return nil
}

// file writes a regular file, opened without following a link and without
// blocking (a fifo swapped in is not waited on), and checked again by fstat.
func (g *getter) file(pfd int, leaf, name string) *filesErr {
	fd, err := openBeneath(pfd, leaf, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return classify(name, "open", err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return classify(name, "stat", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil // swapped meanwhile
	}
	if ferr := g.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: st.Size, Mode: int64(st.Mode & 0o777), ModTime: mtime(&st)}); ferr != nil {
		return ferr
	}
	n, err := io.CopyN(g.tw, f, st.Size)
	if err != nil && !errors.Is(err, io.EOF) {
		return classify(name, "read", err)
	}
	if n < st.Size { // it shrank meanwhile: keep the archive well-formed
		if _, err := io.CopyN(g.tw, zeros{}, st.Size-n); err != nil {
			return &filesErr{kind: filesKindFailed, entry: name, err: err}
		}
	}
	return nil
}

func (g *getter) header(h *tar.Header) *filesErr {
	h.Format = tar.FormatPAX
	if err := g.tw.WriteHeader(h); err != nil {
		return &filesErr{kind: filesKindFailed, entry: h.Name, err: fmt.Errorf("write the tar stream: %w", err)}
	}
	return nil
}

func mtime(st *unix.Stat_t) time.Time { return time.Unix(st.Mtim.Sec, st.Mtim.Nsec) }

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
