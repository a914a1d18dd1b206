package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlock-dev/airlock/policy"
)

// Rootless mode (Options.Rootless): the same parts, assembled by an
// ordinary user. The executor clones each sandbox's init into a user and
// network namespace of its own; init builds the island there from the
// manager's spec (netns.BuildIsland, through the airlock binary's init
// hook) and hands back the listeners, which the manager adopts and the
// gateway and DNS filter serve from this process, dialing upstream from
// the user's own namespace. Policy, audit, secrets and inspection are
// unchanged. This process is made non-dumpable: a sandbox running as the
// same user must not read its memory or open its /proc files.

// RootlessRunDir is where a rootless airlock keeps its run directories:
// $XDG_RUNTIME_DIR/airlock, else airlock-<uid> in the temporary directory.
func RootlessRunDir() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "airlock")
	}
	return filepath.Join(os.TempDir(), "airlock-"+strconv.Itoa(os.Getuid()))
}

// guardRootless makes this process non-dumpable in rootless mode and
// makes sure the run directory's parent is the user's alone.
func (d *Daemon) guardRootless(o Options) error {
	if d.rootless == nil {
		return nil
	}
	if o.NoExecutor {
		return errRootlessOnly
	}
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("rootless: prctl dumpable: %w", err)
	}
	parent := filepath.Dir(d.runDir)
	if err := os.MkdirAll(parent, 0o700); err != nil {
		return fmt.Errorf("rootless: run directory %s: %w", parent, err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(parent, &st); err != nil {
		return fmt.Errorf("rootless: run directory %s: %w", parent, err)
	}
	if int(st.Uid) != os.Getuid() || st.Mode&0o077 != 0 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("rootless: run directory %s must be a directory of yours with mode 0700 (owner %d, mode %o)",
			parent, st.Uid, st.Mode&0o7777)
	}
	return nil
}

// rootlessIsland is the island spec Run's sandbox init builds and the hook
// that adopts what it built.
func (d *Daemon) rootlessIsland(ctx context.Context, sb policy.Sandbox) ([]byte, func([]*os.File) error, error) {
	spec, err := d.netns.IslandSpec()
	if err != nil {
		return nil, nil, err
	}
	return spec, func(files []*os.File) error {
		if _, err := d.netns.Adopt(ctx, sb, files); err != nil {
			return fmt.Errorf("sandbox network: %w", err)
		}
		return nil
	}, nil
}

// buildRootless is build for a rootless daemon (serve --user): the
// sandbox's init is born in its own user and network namespace, builds the
// island there and hands the listeners back, which are served before
// Create returns. (A pooled one, rootless_pool.go, was built so ahead.)
func (d *Daemon) buildRootless(ctx context.Context, psb policy.Sandbox, ss startSpec) (box, error) {
	ps := d.prepareSpec("")
	var err error
	if ps.Island, ps.OnIsland, err = d.rootlessIsland(ctx, psb); err != nil {
		return nil, err
	}
	b, err := d.exe.Create(ctx, ps, ss)
	if err != nil {
		if _, served := d.netns.Get(psb.ID); served {
			d.undoBuild(psb.ID, nil)
		}
		return nil, err
	}
	return b, nil
}

// errRootlessOnly is what a rootless daemon answers for what needs root.
var errRootlessOnly = errors.New("rootless: attaching a namespace made by someone else needs root")
