package sandboxd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// The control channel between the executor and init: one SOCK_SEQPACKET
// socketpair, init's fd 3. Every message is one packet holding one JSON
// object; file descriptors ride along as SCM_RIGHTS. Packets keep message
// boundaries, so a message is never split or merged, and one larger than its
// bound is refused, never read in parts.
//
// The executor sends requests, each with a sequence number that init's one
// reply repeats:
//
//	config (once, first)      -> ready | setup_error
//	start  (once, [workspace tree fd], [jobs cgroup tasks fd]) -> ok | error
//	exec   (stdin, stdout, stderr fds) -> started {pid, session} | exec_error {code} | error
//	files  (stdin, stdout, stderr fds) -> started | error
//	signal                   -> ok | error
//
// and init sends one unsolicited event per job it started, exit {id, status,
// rusage}, when the job's process has been reaped. Anything else, a message
// out of order (an exec before start, a second start), a wrong number of fds,
// an unknown field or type, or a message over its bound, is an error that
// names it; init answers it with an error reply and runs nothing, and the
// executor treats a bad message from init as a broken sandbox and kills it.

const (
	// envStage marks a re-executed binary as one of the sandbox's stages
	// (stageInit or stageFiles). It is the only variable a stage's
	// environment holds.
	envStage   = "AIRLOCK_SANDBOXD_STAGE"
	stageInit  = "init"
	stageFiles = "files"

	// fdControl is init's end of the control socket.
	fdControl = 3
	// fdRootUserns is the user namespace the host view is idmapped through
	// (see hostview_linux.go), made once by the executor.
	fdRootUserns = 4

	// maxToInit bounds a message to init (a config with many mounts and
	// hidden paths, an exec with a large argv and environment); maxFromInit
	// bounds init's replies and events, which are small.
	maxToInit   = 1 << 20
	maxFromInit = 16 << 10
	// controlSndBuf is the executor end's send buffer: a seqpacket message
	// must fit in it whole.
	controlSndBuf = 2 * maxToInit
	// maxMessageFDs is the most fds one message to init carries (an exec's
	// stdio); messages from init carry at most islandFDs.
	maxMessageFDs = 3
	// islandFDs is how many files the island hook returns (the explicit,
	// transparent and DNS TCP listeners, the DNS UDP socket, the NFLOG
	// socket), carried by init's ready reply.
	islandFDs = 5
)

// Message types.
const (
	// executor -> init
	msgConfig = "config"
	msgStart  = "start"
	msgExec   = "exec"
	msgFiles  = "files"
	msgSignal = "signal"
	// init -> executor
	msgReady      = "ready"
	msgSetupError = "setup_error"
	msgOK         = "ok"
	msgStarted    = "started"
	msgExecError  = "exec_error"
	msgError      = "error"
	msgExit       = "exit"
)

// message is every packet on the control channel. Type says which one
// payload field is set.
type message struct {
	Type string `json:"type"`
	Seq  uint64 `json:"seq,omitempty"`

	Config  *initConfig    `json:"config,omitempty"`
	Start   *startRequest  `json:"start,omitempty"`
	Exec    *execRequest   `json:"exec,omitempty"`
	Files   *filesRequest  `json:"files,omitempty"`
	Signal  *signalRequest `json:"signal,omitempty"`
	Started *startedReply  `json:"started,omitempty"`
	Exit    *exitEvent     `json:"exit,omitempty"`

	// Error is why a request failed (setup_error, exec_error, error).
	Error string `json:"error,omitempty"`
	// Code is 127 (not found) or 126 (not executable) in an exec_error.
	Code int `json:"code,omitempty"`

	// fds are the files a rootless island's ready reply carried (owned by
	// whoever awaits the reply).
	fds []int
}

// initConfig is what init needs to build the sandbox up to the point where
// it could run commands; nothing in it depends on the sandbox's user.
type initConfig struct {
	Hostname  string   `json:"hostname"`
	RootFS    string   `json:"rootfs,omitempty"`
	CABundle  string   `json:"ca_bundle,omitempty"`
	TrustDir  string   `json:"trust_dir,omitempty"`
	Hidden    []string `json:"hidden,omitempty"`
	Home      string   `json:"home"`
	TmpSize   int64    `json:"tmp_size"`
	TmpInodes int64    `json:"tmp_inodes"`
	FreshNet  bool     `json:"fresh_net"`
	UID       int      `json:"uid"`
	GID       int      `json:"gid"`
	// WorkspaceDir gets an empty tmpfs owned by the sandbox uid; "" for none.
	WorkspaceDir string `json:"workspace_dir,omitempty"`
	// InitArgs follow the executable when init re-executes itself as the
	// files stage.
	InitArgs []string `json:"init_args"`
	// HostMountNS is the executor's mount namespace (device and inode of
	// /proc/self/ns/mnt); init refuses to touch mounts while it is still in it.
	HostMountNS [2]uint64 `json:"host_mount_ns"`
	// Mounts are the mount points of the host view init clones, relative to
	// the root, "" (the root itself) first, parents before children.
	Mounts []string `json:"mounts"`
	// JobsCgroup says the message's one fd is the v1 tasks file of the
	// cgroup init moves each job's thread into before it forks. It comes
	// with the config, not the start: the first job's thread is made and
	// moved while the sandbox waits in the pool (a v1 move after a quiet
	// spell waits for an RCU grace period, 10-15 ms here).
	JobsCgroup bool `json:"jobs_cgroup,omitempty"`
	// Rootless: init is root of a user namespace of its own (rootless.go);
	// its host view and workspace are plain read-only and read-write
	// clones, not idmapped.
	Rootless bool `json:"rootless,omitempty"`
	// Island is the spec init hands its island hook before anything else;
	// its ready reply carries the islandFDs files the hook returned.
	Island json.RawMessage `json:"island,omitempty"`
	// Workspace is the host directory a rootless init clones before it
	// leaves the host's root, attached at start (rootless only: an
	// unprivileged executor cannot clone a mount for it).
	Workspace string `json:"workspace,omitempty"`
	// HideHome are the invoking user's directories (home, runtime
	// directory) a rootless init covers with an empty tmpfs, keeping only
	// the way to Workspace when it lies inside one.
	HideHome []string `json:"hide_home,omitempty"`
}

// startRequest hands the sandbox to its user.
type startRequest struct {
	// TmpSize and TmpInodes are the user's; init remounts its tmpfs mounts
	// when they differ from the config's.
	TmpSize   int64 `json:"tmp_size"`
	TmpInodes int64 `json:"tmp_inodes"`
	// Workspace says a detached, idmapped mount tree (the one fd) is to be
	// attached at WorkspaceTarget.
	Workspace       bool   `json:"workspace,omitempty"`
	WorkspaceTarget string `json:"workspace_target,omitempty"`
	// Hidden are masked after the workspace is attached (hidden host paths
	// inside it, at their place under the target).
	Hidden []string `json:"hidden,omitempty"`
	// Cloned says the workspace is the tree init cloned at config
	// (initConfig.Workspace), not an fd.
	Cloned bool `json:"cloned,omitempty"`
	// HomeFiles are written into $HOME (StartSpec.HomeFiles).
	HomeFiles map[string][]byte `json:"home_files,omitempty"`
	// Rlimits of every job.
	NoFile uint64 `json:"nofile"`
	FSize  int64  `json:"fsize"`
	NProc  int64  `json:"nproc"`
}

// execRequest starts a command; its stdin, stdout and stderr are the three fds.
type execRequest struct {
	ID   string   `json:"id"`
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// filesRequest starts the files stage on the three fds: put reads a tar
// stream on stdin and writes the result on stdout, get writes a tar stream on
// stdout; both write a failure on stderr.
type filesRequest struct {
	ID string `json:"id"`
	filesJob
}

// filesJob is what the files stage is told (on its fd 3).
type filesJob struct {
	Op   string `json:"op"`   // filesPut or filesGet
	Root string `json:"root"` // filesRootWorkspace or filesRootHome
	// Path is relative to the root, cleaned, without "..": "" is the root.
	Path string `json:"path"`
	// MaxBytes bounds the file content put writes.
	MaxBytes int64 `json:"max_bytes,omitempty"`
	// Name is the top entry's name in get's archive (the path's last
	// component).
	Name string `json:"name,omitempty"`
}

// Files operations and roots.
const (
	filesPut           = "put"
	filesGet           = "get"
	filesRootWorkspace = "workspace"
	filesRootHome      = "home"
)

// signalRequest sends a signal to a job's process group.
type signalRequest struct {
	ID     string `json:"id"`
	Signal int    `json:"signal"`
}

// startedReply says a job's process runs: its pid in the sandbox and the
// audit session id every process it starts inherits (0 when the kernel could
// not give it one).
type startedReply struct {
	PID     int    `json:"pid"`
	Session uint32 `json:"session,omitempty"`
}

// exitEvent is how a job's process ended, from wait4.
type exitEvent struct {
	ID       string `json:"id"`
	Code     int    `json:"code,omitempty"`
	Signal   int    `json:"signal,omitempty"`
	UserUS   int64  `json:"user_us"`
	SystemUS int64  `json:"system_us"`
	MaxRSSKB int64  `json:"maxrss_kb"`
}

// channel is one end of the control socket.
type channel struct {
	conn    *net.UnixConn
	max     int // bound of incoming messages
	buf     []byte
	oob     []byte
	peer    string // who is at the other end, for errors
	maxSend int
	maxFDs  int // the most fds an incoming message carries
}

// newChannel wraps f (an end of a SOCK_SEQPACKET socketpair; f is closed:
// the channel holds a duplicate). maxRecv bounds incoming messages, maxSend
// outgoing ones.
func newChannel(f *os.File, maxRecv, maxSend int, peer string) (*channel, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("control socket: got a %T, want a unix socket", c)
	}
	maxFDs := maxMessageFDs
	if maxRecv == maxFromInit {
		maxFDs = islandFDs // the executor's end: a rootless island's ready reply
	}
	return &channel{conn: uc, max: maxRecv, maxSend: maxSend, peer: peer, maxFDs: maxFDs,
		buf: make([]byte, maxRecv+1), oob: make([]byte, unix.CmsgSpace(4*maxFDs))}, nil
}

func (c *channel) close() error { return c.conn.Close() }

// send writes m with fds attached. The fds stay the caller's.
func (c *channel) send(m *message, fds ...int) error {
	b, err := json.Marshal(m)
	if err != nil {
		return fmt.Errorf("encode %s message: %w", m.Type, err)
	}
	if len(b) > c.maxSend {
		return fmt.Errorf("%s message is %d bytes, more than the control channel's %d", m.Type, len(b), c.maxSend)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, oobn, err := c.conn.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("send %s message to %s: %w", m.Type, c.peer, err)
	}
	if n != len(b) || oobn != len(oob) {
		return fmt.Errorf("send %s message to %s: short write (%d of %d bytes)", m.Type, c.peer, n, len(b))
	}
	return nil
}

// badMessage is a message recv refused for its content (too large, too many
// fds, malformed): the channel itself still works.
type badMessage struct{ err error }

func (b *badMessage) Error() string { return b.err.Error() }
func (b *badMessage) Unwrap() error { return b.err }

// recv reads one message and the fds that came with it (close-on-exec). On
// an error the fds are closed already; io.EOF means the peer closed its end,
// a *badMessage that this message was refused.
// The message is decoded strictly but not yet checked against its direction's
// rules (checkToInit, checkFromInit).
func (c *channel) recv() (*message, []int, error) {
	n, oobn, flags, _, err := c.conn.ReadMsgUnix(c.buf, c.oob)
	fds, ferr := parseRights(c.oob[:oobn])
	fail := func(err error) (*message, []int, error) {
		closeFDs(fds)
		return nil, nil, err
	}
	if err != nil {
		// A peer that died with data unread resets the connection.
		if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) || errors.Is(err, unix.ECONNRESET) {
			return fail(io.EOF)
		}
		return fail(fmt.Errorf("read from %s: %w", c.peer, err))
	}
	if n == 0 && oobn == 0 {
		return fail(io.EOF)
	}
	switch {
	case ferr != nil:
		return fail(&badMessage{fmt.Errorf("message from %s: %w", c.peer, ferr)})
	case flags&unix.MSG_CTRUNC != 0 || len(fds) > c.maxFDs: // padding may fit one more
		return fail(&badMessage{fmt.Errorf("message from %s carries more than %d file descriptors", c.peer, c.maxFDs)})
	case flags&unix.MSG_TRUNC != 0 || n > c.max:
		return fail(&badMessage{fmt.Errorf("message from %s is larger than %d bytes", c.peer, c.max)})
	}
	m, err := decodeMessage(c.buf[:n])
	if err != nil {
		return fail(&badMessage{fmt.Errorf("message from %s: %w", c.peer, err)})
	}
	return m, fds, nil
}

// decodeMessage decodes one JSON object strictly: unknown fields and
// trailing data are errors.
func decodeMessage(b []byte) (*message, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var m message
	if err := dec.Decode(&m); err != nil {
		return nil, fmt.Errorf("malformed message: %w", err)
	}
	if dec.More() {
		return nil, errors.New("malformed message: data after the JSON object")
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("malformed message: data after the JSON object")
	}
	return &m, nil
}

// parseRights returns the fds of SCM_RIGHTS messages in oob.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	scms, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("control data: %w", err)
	}
	var fds []int
	var bad error
	for _, scm := range scms {
		got, err := unix.ParseUnixRights(&scm)
		if err != nil {
			bad = fmt.Errorf("control data of type %d: %w", scm.Header.Type, err)
			continue
		}
		fds = append(fds, got...)
	}
	if bad != nil {
		closeFDs(fds)
		return nil, bad
	}
	return fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// payloads names the payload fields m has set.
func (m *message) payloads() []string {
	var out []string
	for _, p := range []struct {
		name string
		set  bool
	}{{"config", m.Config != nil}, {"start", m.Start != nil}, {"exec", m.Exec != nil}, {"files", m.Files != nil},
		{"signal", m.Signal != nil}, {"started", m.Started != nil}, {"exit", m.Exit != nil}} {
		if p.set {
			out = append(out, p.name)
		}
	}
	return out
}

// checkShape checks that m carries exactly the payload its type needs and
// the number of fds it must.
func checkShape(m *message, payload string, nfds, wantFDs int) error {
	got := m.payloads()
	switch {
	case payload == "" && len(got) > 0:
		return fmt.Errorf("%s message with unexpected payload %v", m.Type, got)
	case payload != "" && (len(got) != 1 || got[0] != payload):
		return fmt.Errorf("%s message with payload %v, want exactly %q", m.Type, got, payload)
	case nfds != wantFDs:
		return fmt.Errorf("%s message with %d file descriptors, want %d", m.Type, nfds, wantFDs)
	}
	return nil
}

// checkToInit checks a message the executor sent: its type, payload, fds and
// fields. Init runs nothing for a message that fails it.
func checkToInit(m *message, nfds int) error {
	if m.Seq == 0 {
		return fmt.Errorf("%q message without a sequence number", m.Type)
	}
	if m.Error != "" || m.Code != 0 {
		return fmt.Errorf("%s message with a reply's error fields", m.Type)
	}
	switch m.Type {
	case msgConfig:
		want := 0
		if m.Config != nil && m.Config.JobsCgroup {
			want++
		}
		if err := checkShape(m, "config", nfds, want); err != nil {
			return err
		}
		return m.Config.check()
	case msgStart:
		want := 0
		if m.Start != nil && m.Start.Workspace && !m.Start.Cloned {
			want++
		}
		if err := checkShape(m, "start", nfds, want); err != nil {
			return err
		}
		return m.Start.check()
	case msgExec:
		if err := checkShape(m, "exec", nfds, 3); err != nil {
			return err
		}
		return m.Exec.check()
	case msgFiles:
		if err := checkShape(m, "files", nfds, 3); err != nil {
			return err
		}
		return m.Files.check()
	case msgSignal:
		if err := checkShape(m, "signal", nfds, 0); err != nil {
			return err
		}
		if err := checkJobID(m.Signal.ID); err != nil {
			return err
		}
		if m.Signal.Signal < 1 || m.Signal.Signal > 64 {
			return fmt.Errorf("signal message: signal %d: want 1..64", m.Signal.Signal)
		}
		return nil
	}
	return fmt.Errorf("unknown message type %q", m.Type)
}

// checkFromInit checks a message init sent. init sends fds only with a
// rootless island's ready reply (islandFDs of them).
func checkFromInit(m *message, nfds int) error {
	if m.Type == msgReady && nfds == islandFDs {
		nfds = 0
	}
	if nfds != 0 {
		return fmt.Errorf("%q message with %d file descriptors, want none", m.Type, nfds)
	}
	needSeq := func() error {
		if m.Seq == 0 {
			return fmt.Errorf("%q reply without a sequence number", m.Type)
		}
		return nil
	}
	var payload string
	switch m.Type {
	case msgReady, msgOK:
		if err := needSeq(); err != nil {
			return err
		}
	case msgSetupError, msgError:
		if m.Type == msgSetupError {
			if err := needSeq(); err != nil {
				return err
			}
		}
		if m.Error == "" {
			return fmt.Errorf("%s message without an error", m.Type)
		}
	case msgStarted:
		if err := needSeq(); err != nil {
			return err
		}
		payload = "started"
	case msgExecError:
		if err := needSeq(); err != nil {
			return err
		}
		if m.Code != 126 && m.Code != 127 {
			return fmt.Errorf("exec_error message with code %d, want 126 or 127", m.Code)
		}
		if m.Error == "" {
			return errors.New("exec_error message without an error")
		}
	case msgExit:
		if m.Seq != 0 {
			return fmt.Errorf("exit event with a sequence number %d", m.Seq)
		}
		payload = "exit"
	default:
		return fmt.Errorf("unknown message type %q", m.Type)
	}
	if err := checkShape(m, payload, 0, 0); err != nil {
		return err
	}
	if m.Type != msgExecError && m.Code != 0 {
		return fmt.Errorf("%s message with a code", m.Type)
	}
	switch m.Type {
	case msgStarted:
		if m.Started.PID < 2 {
			return fmt.Errorf("started reply with pid %d", m.Started.PID)
		}
	case msgExit:
		return checkJobID(m.Exit.ID)
	}
	return nil
}

func (c *initConfig) check() error {
	if !filepath.IsAbs(c.Home) || filepath.Dir(c.Home) == "/" {
		return fmt.Errorf("config: home %q: want an absolute path below a top-level directory", c.Home)
	}
	if (c.UID < 1 || c.GID < 1) && !(c.Rootless && c.UID == 0 && c.GID == 0) {
		return fmt.Errorf("config: uid %d gid %d: want a sandbox uid and gid", c.UID, c.GID)
	}
	if c.TmpSize < 4096 || c.TmpInodes < 16 {
		return fmt.Errorf("config: tmp_size %d tmp_inodes %d: too small", c.TmpSize, c.TmpInodes)
	}
	for _, p := range append([]string{c.RootFS, c.CABundle, c.TrustDir, c.WorkspaceDir}, c.Hidden...) {
		if p != "" && !filepath.IsAbs(p) {
			return fmt.Errorf("config: path %q: want an absolute path", p)
		}
	}
	if len(c.Mounts) == 0 || c.Mounts[0] != "" {
		return errors.New("config: the mount list must start with the root (\"\")")
	}
	return nil
}

func (s *startRequest) check() error {
	if s.TmpSize < 4096 || s.TmpInodes < 16 {
		return fmt.Errorf("start: tmp_size %d tmp_inodes %d: too small", s.TmpSize, s.TmpInodes)
	}
	if err := checkHomeFiles(s.HomeFiles); err != nil {
		return fmt.Errorf("start: home_files: %w", err)
	}
	if s.Workspace && !filepath.IsAbs(s.WorkspaceTarget) {
		return fmt.Errorf("start: workspace_target %q: want an absolute path", s.WorkspaceTarget)
	}
	if !s.Workspace && (s.WorkspaceTarget != "" || len(s.Hidden) > 0) {
		return errors.New("start: workspace_target or hidden without a workspace")
	}
	for _, h := range s.Hidden {
		if !filepath.IsAbs(h) {
			return fmt.Errorf("start: hidden %q: want an absolute path", h)
		}
	}
	if s.NoFile < 16 || s.FSize < 1 || s.NProc < 1 {
		return fmt.Errorf("start: rlimits nofile %d fsize %d nproc %d: too small", s.NoFile, s.FSize, s.NProc)
	}
	return nil
}

func (x *execRequest) check() error {
	if err := checkJobID(x.ID); err != nil {
		return err
	}
	if len(x.Argv) == 0 || x.Argv[0] == "" {
		return fmt.Errorf("exec %s: empty argv", x.ID)
	}
	for _, e := range x.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			return fmt.Errorf("exec %s: env entry %q: want KEY=VALUE", x.ID, e)
		}
	}
	if !filepath.IsAbs(x.Dir) {
		return fmt.Errorf("exec %s: dir %q: want an absolute path", x.ID, x.Dir)
	}
	for _, s := range append(append([]string{x.Dir}, x.Argv...), x.Env...) {
		if strings.IndexByte(s, 0) >= 0 {
			return fmt.Errorf("exec %s: a NUL byte in argv, env or dir", x.ID)
		}
	}
	return nil
}

func (f *filesRequest) check() error {
	if err := checkJobID(f.ID); err != nil {
		return err
	}
	return f.filesJob.check()
}

func (f *filesJob) check() error {
	if f.Op != filesPut && f.Op != filesGet {
		return fmt.Errorf("files: op %q: want put or get", f.Op)
	}
	if f.Root != filesRootWorkspace && f.Root != filesRootHome {
		return fmt.Errorf("files: root %q: want workspace or home", f.Root)
	}
	if f.MaxBytes < 0 {
		return fmt.Errorf("files: max_bytes %d", f.MaxBytes)
	}
	if f.Op == filesGet && (f.Name == "" || f.Name == "." || f.Name == ".." || strings.ContainsAny(f.Name, "/\x00")) {
		return fmt.Errorf("files: name %q: want one path component", f.Name)
	}
	return checkRelPath(f.Path)
}

// checkRelPath accepts "" (the root) or a clean relative path without ".."
// components or NUL bytes.
func checkRelPath(p string) error {
	if p == "" {
		return nil
	}
	if len(p) > 4096 {
		return fmt.Errorf("files: path of %d bytes, want at most 4096", len(p))
	}
	if filepath.IsAbs(p) || filepath.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return fmt.Errorf("files: path %q: want a clean relative path", p)
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." || c == "." {
			return fmt.Errorf("files: path %q: %q component", p, c)
		}
	}
	return nil
}

// checkJobID accepts the ids the executor makes: 1-32 letters and digits.
func checkJobID(id string) error {
	if id == "" || len(id) > 32 {
		return fmt.Errorf("job id %q: want 1-32 letters and digits", id)
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Errorf("job id %q: want 1-32 letters and digits", id)
		}
	}
	return nil
}
