package main

import (
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/api"
	"github.com/airlock-dev/airlock/client"
)

func newSandboxCpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy files or directories into or out of a sandbox (ID:PATH on one side)",
		Long: `cp copies SRC into the directory DST (created if missing), one side written
ID:PATH for a path in sandbox ID: ./src and ID:/workspace make /workspace/src;
ID:/workspace/out and ./results make ./results/out. A relative PATH is taken
from the sandbox's workspace, and ID: alone is the workspace. "-" as the local
side reads or writes a tar stream instead.

Paths in a sandbox must be in its workspace or $HOME; the daemon resolves them
inside the sandbox as its user and refuses '..', absolute tar entries and any
symlink on the way. Copied out, nothing is written outside DST: symlinks come
back as links (their targets unchanged), setuid and setgid bits are dropped.
Special files (fifos, sockets, devices) are refused.`,
		Example: `  airlock sandbox cp ./src sb-1a2b3c:/workspace
  airlock sandbox cp sb-1a2b3c:/workspace/dist ./build
  tar -C src -cf - . | airlock sandbox cp - sb-1a2b3c:/workspace/src`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return runSandboxCp(cmd, args[0], args[1]) },
	}
}

// cpSide is one argument of cp: a sandbox path or a local one.
type cpSide struct {
	id, path string // id is "" for the local side
}

// parseCpSide reads ID:PATH; a local path with a ':' in its first component
// must be written ./a:b.
func parseCpSide(arg string) cpSide {
	id, p, ok := strings.Cut(arg, ":")
	if !ok || id == "" || strings.Contains(id, "/") || strings.HasPrefix(arg, ".") {
		return cpSide{path: arg}
	}
	return cpSide{id: id, path: p}
}

func runSandboxCp(cmd *cobra.Command, srcArg, dstArg string) error {
	src, dst := parseCpSide(srcArg), parseCpSide(dstArg)
	switch {
	case src.id == "" && dst.id == "":
		return usageError("cp: one of SRC and DST must be ID:PATH")
	case src.id != "" && dst.id != "":
		return usageError("cp: only one of SRC and DST may be in a sandbox (copy through a local directory)")
	}
	c := newClient(cmd)
	defer c.Close()
	ctx := cmd.Context()
	remote := dst
	if src.id != "" {
		remote = src
	}
	p, err := sandboxPath(cmd, c, remote)
	if err != nil {
		return err
	}
	var res *api.FilesResult
	switch {
	case dst.id != "" && src.path == "-":
		res, err = c.PutFiles(ctx, dst.id, p, cmd.InOrStdin())
	case dst.id != "":
		res, err = c.CopyTo(ctx, dst.id, src.path, p)
	case dst.path == "-":
		err = getTar(cmd, c, src.id, p, cmd.OutOrStdout())
	default:
		res, err = c.CopyFrom(ctx, src.id, p, dst.path)
	}
	if err != nil {
		return apiFailure(err, exitFailed)
	}
	if res != nil {
		fmt.Fprintln(cmd.ErrOrStderr(), "airlock:", copiedLine(res.Files, res.Bytes))
	}
	return nil
}

// copiedLine says how much a copy moved: "copied 1 entry, 7 bytes".
func copiedLine(entries, bytes int64) string {
	return fmt.Sprintf("copied %s, %s", plural(entries, "entry", "entries"), plural(bytes, "byte", "bytes"))
}

// plural is n with the noun's singular or plural form.
func plural(n int64, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// sandboxPath makes a relative sandbox path absolute from the sandbox's
// workspace, which only the daemon knows.
func sandboxPath(cmd *cobra.Command, c *client.Client, s cpSide) (string, error) {
	if strings.HasPrefix(s.path, "/") {
		return s.path, nil
	}
	sb, err := c.GetSandbox(cmd.Context(), s.id)
	if err != nil {
		return "", apiFailure(err, exitFailed)
	}
	return path.Join(sb.WorkDir, s.path), nil
}

func getTar(cmd *cobra.Command, c *client.Client, id, p string, w io.Writer) error {
	r, err := c.GetFiles(cmd.Context(), id, p)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}
