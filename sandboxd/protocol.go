package sandboxd

// Messages between the executor and init. Both travel as JSON over pipes: fd 3
// carries configuration in (the initConfig, later followed by goMessage once init
// is in its cgroup), fd 4 carries events out. fd 5 is a user namespace, not a
// pipe.

const (
	// envStage marks a re-executed binary as the sandbox's init (value
	// stageInit). It is the only variable init's environment holds.
	envStage  = "AIRLOCK_SANDBOXD_STAGE"
	stageInit = "init"

	// goMessage follows the initConfig on fd 3 when init is inside the sandbox's
	// cgroup: init builds the filesystem before it, starts the command only
	// after it.
	goMessage = "go"

	fdConfig = 3
	fdStatus = 4
	// fdRootUserns is the user namespace the host view is idmapped through
	// (see hostview_linux.go), made once by the executor.
	fdRootUserns = 5
)

// initConfig is what init needs to build the sandbox.
type initConfig struct {
	Hostname        string     `json:"hostname"`
	RootFS          string     `json:"rootfs,omitempty"`
	Workspace       string     `json:"workspace,omitempty"`
	WorkspaceTarget string     `json:"workspace_target,omitempty"`
	CABundle        string     `json:"ca_bundle,omitempty"`
	Hidden          []string   `json:"hidden,omitempty"`
	Home            string     `json:"home"`
	TmpSize         int64      `json:"tmp_size"`
	TmpInodes       int64      `json:"tmp_inodes"`
	FreshNet        bool       `json:"fresh_net"`
	Exec            execConfig `json:"exec"`
	// HostMountNS is the executor's mount namespace (device and inode of
	// /proc/self/ns/mnt); init refuses to touch mounts while it is still in it.
	HostMountNS [2]uint64 `json:"host_mount_ns"`
	// Mounts are the mount points of the host view init clones, relative to
	// the root, "" (the root itself) first, parents before children.
	Mounts []string `json:"mounts"`
}

// execConfig is what init's command thread needs to become the command.
type execConfig struct {
	Argv   []string `json:"argv"`
	Env    []string `json:"env"`
	Dir    string   `json:"dir"`
	UID    int      `json:"uid"`
	GID    int      `json:"gid"`
	NoFile uint64   `json:"nofile"`
	FSize  int64    `json:"fsize"`
	NProc  int64    `json:"nproc"`
}

// event is one line init writes on fd 4.
type event struct {
	Event  string `json:"event"` // started, exec_error, setup_error, exit
	Error  string `json:"error,omitempty"`
	Code   int    `json:"code,omitempty"`
	Signal int    `json:"signal,omitempty"`
}

// execError is why init's command thread could not start the command.
type execError struct {
	Stage string `json:"stage"` // setup or exec
	Error string `json:"error"`
	Code  int    `json:"code"`
}
