package daemon

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/netns"
	"github.com/airlock-dev/airlock/policy"
	"github.com/airlock-dev/airlock/sandboxd"
)

// fakeExecutor runs sandboxes' commands as ordinary host processes of the
// test (each exec in its own process group), so the API's streaming, stdin,
// signals, timeouts and kills are exercised without root.
type fakeExecutor struct {
	t        testing.TB
	prepared atomic.Int64
	created  atomic.Int64
	// failPrepare makes Prepare fail (the pool's back-off).
	failPrepare atomic.Bool
	// startErr makes Start fail.
	startErr atomic.Pointer[error]
	// oomKills is what every sandbox's cgroup says at its end.
	oomKills atomic.Int64

	mu    sync.Mutex
	boxes []*fakeBox
}

func (e *fakeExecutor) Prepare(ctx context.Context, spec prepareSpec) (box, error) {
	if e.failPrepare.Load() {
		return nil, errors.New("fake: prepare refused")
	}
	e.prepared.Add(1)
	b := &fakeBox{e: e, spec: spec, done: make(chan struct{}), procs: map[*fakeProc]struct{}{}, files: map[string][]byte{}}
	e.mu.Lock()
	e.boxes = append(e.boxes, b)
	e.mu.Unlock()
	return b, nil
}

func (e *fakeExecutor) Create(ctx context.Context, ps prepareSpec, ss startSpec) (box, error) {
	b, err := e.Prepare(ctx, ps)
	if err != nil {
		return nil, err
	}
	e.created.Add(1)
	if err := b.Start(ctx, ss); err != nil {
		_, _ = b.Destroy(ctx)
		return nil, err
	}
	return b, nil
}

func (e *fakeExecutor) all() []*fakeBox {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]*fakeBox(nil), e.boxes...)
}

type fakeBox struct {
	e    *fakeExecutor
	spec prepareSpec
	done chan struct{}

	mu        sync.Mutex
	starts    int
	start     startSpec
	destroyed bool
	nextID    int
	procs     map[*fakeProc]struct{}
	files     map[string][]byte
}

func (b *fakeBox) Start(ctx context.Context, spec startSpec) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.starts++
	if b.starts > 1 {
		b.e.t.Errorf("fake sandbox started %d times (a pooled sandbox reused)", b.starts)
		return errors.New("fake: started twice")
	}
	if p := b.e.startErr.Load(); p != nil {
		return *p
	}
	b.start = spec
	return nil
}

func (b *fakeBox) Exec(ctx context.Context, x execSpec) (process, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	if b.destroyed {
		b.mu.Unlock()
		return nil, sandboxd.ErrSandboxGone
	}
	b.nextID++
	id := fmt.Sprintf("x%d", b.nextID)
	b.mu.Unlock()
	path, err := exec.LookPath(x.Argv[0])
	if err != nil {
		return nil, &execError{Msg: x.Argv[0] + ": command not found", Code: 127}
	}
	cmd := exec.Command(path, x.Argv[1:]...)
	cmd.Env = append(append(os.Environ(), b.start.Env...), x.Env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	outCap := x.OutputCap
	if outCap == 0 {
		outCap = 4 << 20
	}
	p := &fakeProc{b: b, id: id, cmd: cmd, t0: time.Now(), done: make(chan struct{}),
		out: &capped{cap: outCap}, errs: &capped{cap: outCap}}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = x.Stdin, liveWriter{x.Stdout, p.out}, liveWriter{x.Stderr, p.errs}
	if x.Stdin == nil {
		cmd.Stdin = strings.NewReader("")
	}
	// os/exec's stdin copier keeps Wait until its Read returns: the real
	// executor closes stdin when the command exits; so does this.
	cmd.WaitDelay = 100 * time.Millisecond
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.procs[p] = struct{}{}
	b.mu.Unlock()
	timeout := x.Timeout
	if timeout == 0 {
		timeout = b.start.Limits.Timeout
	}
	go p.supervise(ctx, timeout)
	return p, nil
}

// liveWriter keeps what it may and tees the rest to the live writer,
// ignoring its failures, as the executor's capture does.
type liveWriter struct {
	w io.Writer
	c *capped
}

func (l liveWriter) Write(p []byte) (int, error) {
	l.c.write(p)
	if l.w != nil {
		_, _ = l.w.Write(p)
	}
	return len(p), nil
}

type capped struct {
	cap       int64
	mu        sync.Mutex
	buf       []byte
	total     int64
	truncated bool
}

func (c *capped) write(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.total += int64(len(p))
	keep := min(int64(len(p)), c.cap-int64(len(c.buf)))
	if keep < int64(len(p)) {
		c.truncated = true
	}
	c.buf = append(c.buf, p[:keep]...)
}

func (b *fakeBox) Usage() (usage, error) {
	return usage{CPU: 5 * time.Millisecond, Memory: 1 << 20, PeakMemory: 2 << 20, Pids: 1}, nil
}

func (b *fakeBox) PutFiles(ctx context.Context, dir string, r io.Reader) (filesResult, error) {
	tr := tar.NewReader(r)
	var res filesResult
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return res, nil
		}
		if err != nil {
			return res, fmt.Errorf("put: %w: %v", sandboxd.ErrBadArchive, err)
		}
		if strings.Contains(h.Name, "..") || strings.HasPrefix(h.Name, "/") {
			return res, fmt.Errorf("put %s: %w", h.Name, sandboxd.ErrInvalidPath)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return res, err
		}
		b.mu.Lock()
		b.files[filepath.Join(dir, h.Name)] = data
		b.mu.Unlock()
		res.Files++
		res.Bytes += int64(len(data))
	}
}

func (b *fakeBox) GetFiles(ctx context.Context, path string, w io.Writer) error {
	b.mu.Lock()
	data, ok := b.files[path]
	b.mu.Unlock()
	if !ok {
		return fmt.Errorf("get %s: %w", path, sandboxd.ErrNotFound)
	}
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Name: filepath.Base(path), Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	return tw.Close()
}

// Kill is Destroy: the fake has nothing to tear down after its processes.
func (b *fakeBox) Kill(ctx context.Context) (usage, error) { return b.Destroy(ctx) }

func (b *fakeBox) Destroy(ctx context.Context) (usage, error) {
	b.mu.Lock()
	already := b.destroyed
	b.destroyed = true
	procs := make([]*fakeProc, 0, len(b.procs))
	for p := range b.procs {
		procs = append(procs, p)
	}
	b.mu.Unlock()
	for _, p := range procs {
		p.gone.Store(true)
		p.kill()
		<-p.done
	}
	if !already {
		close(b.done)
	}
	return usage{CPU: 7 * time.Millisecond, PeakMemory: 3 << 20, OOMKills: b.e.oomKills.Load()}, nil
}

func (b *fakeBox) Done() <-chan struct{} { return b.done }

func (b *fakeBox) WorkDir() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.start.WorkspaceTarget != "" {
		return b.start.WorkspaceTarget
	}
	return "/workspace"
}

// die kills the sandbox as if its init had died.
func (b *fakeBox) die() { _, _ = b.Destroy(context.Background()) }

func (b *fakeBox) running() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.procs)
}

type fakeProc struct {
	b    *fakeBox
	id   string
	cmd  *exec.Cmd
	t0   time.Time
	gone atomic.Bool // the sandbox was destroyed under it
	done chan struct{}
	out  *capped
	errs *capped
	res  *execResult
	err  error
}

func (p *fakeProc) ID() string { return p.id }
func (p *fakeProc) PID() int   { return p.cmd.Process.Pid }

func (p *fakeProc) Signal(sig syscall.Signal) error {
	select {
	case <-p.done:
		return os.ErrProcessDone
	default:
	}
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

func (p *fakeProc) Wait() (*execResult, error) {
	<-p.done
	return p.res, p.err
}

func (p *fakeProc) kill() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

func (p *fakeProc) supervise(ctx context.Context, timeout time.Duration) {
	waited := make(chan error, 1)
	go func() { waited <- p.cmd.Wait() }()
	var timer <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		timer = t.C
	}
	var timedOut bool
	var ctxErr error
	ctxDone := ctx.Done()
	var werr error
loop:
	for {
		select {
		case werr = <-waited:
			break loop
		case <-timer:
			timer, timedOut = nil, true
			p.kill()
		case <-ctxDone:
			ctxDone, ctxErr = nil, ctx.Err()
			p.kill()
		}
	}
	_ = werr
	// The whole group goes with the command, as the executor's session kill.
	p.kill()
	res := &execResult{ID: p.id, Wall: time.Since(p.t0), TimedOut: timedOut,
		Stdout: p.out.buf, Stderr: p.errs.buf, StdoutBytes: p.out.total, StderrBytes: p.errs.total,
		Truncated: p.out.truncated || p.errs.truncated}
	if ws, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		if ws.Signaled() {
			res.Signal = int(ws.Signal())
		} else {
			res.ExitCode = ws.ExitStatus()
		}
	}
	p.res = res
	switch {
	case p.gone.Load():
		p.err = sandboxd.ErrSandboxGone
	case ctxErr != nil:
		p.err = ctxErr
	}
	p.b.mu.Lock()
	delete(p.b.procs, p)
	p.b.mu.Unlock()
	close(p.done)
}

// fakeNetwork hands out namespaces that are only names.
type fakeNetwork struct {
	mu        sync.Mutex
	taken     int
	discarded int
	created   map[string]bool
	torn      map[string]int
	fromPool  map[string]bool
	policies  map[string]policy.Sandbox // what each sandbox is served with
	// gate, when set, holds every Teardown until it is closed; tearErr
	// makes Teardown fail.
	gate    chan struct{}
	tearErr error
	// createFromErr makes CreateFrom fail.
	createFromErr error
}

// holdTeardowns makes every Teardown wait until the returned func is called.
func (n *fakeNetwork) holdTeardowns() (release func()) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.gate = make(chan struct{})
	return sync.OnceFunc(func() { close(n.gate) })
}

func newFakeNetwork() *fakeNetwork {
	return &fakeNetwork{created: map[string]bool{}, torn: map[string]int{}, fromPool: map[string]bool{}, policies: map[string]policy.Sandbox{}}
}

type fakePooledNet struct {
	n      *fakeNetwork
	path   string
	used   atomic.Bool
	broken atomic.Bool // as if removed from outside: Check fails
}

func (p *fakePooledNet) Path() string { return p.path }
func (p *fakePooledNet) Check() error {
	if p.broken.Load() {
		return errors.New("fake: pooled namespace removed")
	}
	return nil
}
func (p *fakePooledNet) Discard() error {
	p.n.mu.Lock()
	p.n.discarded++
	p.n.mu.Unlock()
	return nil
}

func (n *fakeNetwork) TakePooled(ctx context.Context) (pooledNet, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.taken++
	return &fakePooledNet{n: n, path: fmt.Sprintf("/run/netns/alk-fake-pool-%d", n.taken)}, nil
}

func (n *fakeNetwork) CreateFrom(ctx context.Context, sb policy.Sandbox, p pooledNet) (*netns.Sandbox, error) {
	fp := p.(*fakePooledNet)
	if fp.used.Swap(true) {
		return nil, errors.New("fake: pooled namespace handed out twice")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.createFromErr != nil {
		n.discarded++ // used up either way
		return nil, n.createFromErr
	}
	n.created[sb.ID], n.fromPool[sb.ID], n.policies[sb.ID] = true, true, sb
	return &netns.Sandbox{ID: sb.ID, Labels: sb.Labels, Path: fp.path}, nil
}

func (n *fakeNetwork) Create(ctx context.Context, sb policy.Sandbox) (*netns.Sandbox, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.created[sb.ID], n.policies[sb.ID] = true, sb
	return &netns.Sandbox{ID: sb.ID, Labels: sb.Labels, Path: "/run/netns/airlock-" + sb.ID}, nil
}

func (n *fakeNetwork) Teardown(ctx context.Context, id string) error {
	n.mu.Lock()
	gate := n.gate
	n.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.torn[id]++
	return n.tearErr
}

func (n *fakeNetwork) Update(sb policy.Sandbox) (int, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.policies[sb.ID]; !ok || n.torn[sb.ID] > 0 {
		return 0, errors.New("fake: sandbox not served")
	}
	n.policies[sb.ID] = sb
	return 0, nil
}

func (n *fakeNetwork) policy(id string) (policy.Sandbox, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	sb, ok := n.policies[id]
	return sb, ok
}

func (n *fakeNetwork) tornDown(id string) int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.torn[id]
}

var (
	_ executor  = (*fakeExecutor)(nil)
	_ box       = (*fakeBox)(nil)
	_ process   = (*fakeProc)(nil)
	_ network   = (*fakeNetwork)(nil)
	_ pooledNet = (*fakePooledNet)(nil)
	_           = bytes.MinRead
)

func (b *fakeBox) isDestroyed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.destroyed
}
