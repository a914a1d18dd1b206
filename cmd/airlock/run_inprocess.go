//go:build !airlock_front

package main

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"os/user"
	"strconv"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/daemon"
	"github.com/airlock-dev/airlock/oplog"
	"github.com/airlock-dev/airlock/sandboxd"
)

// loadRunConfig applies the flags over the config file and validates the result.
func loadRunConfig(cmd *cobra.Command, o runOptions) (config.Config, error) {
	cfg, err := config.Load(o.config)
	if err != nil {
		return cfg, err
	}
	f := cmd.Flags()
	if o.policyDir != "" {
		cfg.Policy.Dir = o.policyDir
	}
	cfg.Policy.Allow = append(cfg.Policy.Allow, o.allow...)
	if len(o.presets) > 0 {
		cfg.Policy.Presets = o.presets
	}
	if o.mode != "" {
		cfg.Policy.Mode = o.mode
	}
	if o.secrets != "" {
		cfg.Secrets.File = o.secrets
	}
	if o.audit != "" {
		cfg.Audit.File = o.audit
	}
	if f.Changed("memory") {
		cfg.Limits.Memory = o.memory
	}
	if f.Changed("cpus") {
		cfg.Limits.CPUs = o.cpus
	}
	if f.Changed("pids") {
		cfg.Limits.Pids = o.pids
	}
	if f.Changed("timeout") {
		cfg.Limits.Timeout = o.timeout
	}
	if f.Changed("tmp-size") {
		cfg.Limits.TmpSize = o.tmpSize
	}
	if f.Changed("workspace") {
		cfg.Sandbox.Workspace = o.workspace
	}
	cfg.Sandbox.Env = append(cfg.Sandbox.Env, o.env...)
	labels, err := parseLabels(o.labels)
	if err != nil {
		return cfg, err
	}
	for k, v := range labels {
		if cfg.Sandbox.Labels == nil {
			cfg.Sandbox.Labels = map[string]string{}
		}
		cfg.Sandbox.Labels[k] = v
	}
	if cfg.Sandbox.Workspace, err = runWorkspace(cfg.Sandbox.Workspace); err != nil {
		return cfg, err
	}
	return cfg, cfg.Validate()
}

// invokingUser is the uid airlock run's records name as the sandbox's owner:
// the user sudo ran it for (SUDO_UID, else SUDO_USER) when it runs as root
// through sudo, else the real uid.
func invokingUser(uid int, getenv func(string) string) int {
	if uid != 0 {
		return uid
	}
	if n, err := strconv.ParseUint(getenv("SUDO_UID"), 10, 31); err == nil {
		return int(n)
	}
	if name := getenv("SUDO_USER"); name != "" {
		if u, err := user.Lookup(name); err == nil {
			if n, err := strconv.Atoi(u.Uid); err == nil {
				return n
			}
		}
	}
	return uid
}

// workspaceRefused is run's exit for a workspace daemon.CheckWorkspace
// refused (exit 2 with the fix), or could not resolve.
func workspaceRefused(err error) error {
	var we *daemon.WorkspaceError
	if errors.As(err, &we) {
		return &exitError{Code: 2, Msg: fmt.Sprintf("run: %v: %s", we, workspaceFix(we.Field))}
	}
	return &exitError{Code: 2, Msg: "run: " + err.Error()}
}

// workspaceFix is what to do about a refused workspace whose hidden path
// config field sets ("" for none).
func workspaceFix(field string) string {
	flag := map[string]string{"audit.file": "--audit", "secrets.file": "--secrets", "policy.dir": "--policy", "config": "--config"}[field]
	switch {
	case flag != "":
		return fmt.Sprintf("move it (%s PATH, outside the workspace) or run from another directory, or --workspace none", flag)
	case field != "":
		return fmt.Sprintf("change %s in the config or run from another directory, or --workspace none", field)
	}
	return "run from a project directory, or give --workspace DIR, or --workspace none"
}

// runInProcess is run with a gateway of its own (root, or rootless for
// another user): inProcess says why
// no daemon is used.
func runInProcess(cmd *cobra.Command, o runOptions, argv []string, inProcess error) error {
	cfg, err := loadRunConfig(cmd, o)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	var rootless *sandboxd.Rootless
	var missing []string // limit controllers a delegated cgroup lacks
	if os.Geteuid() != 0 {
		if rootless, err = rootlessMode(inProcess); err != nil {
			return err
		}
		missing = rootlessCgroup(rootless)
		if o.audit == "" {
			rootlessDefaults(&cfg)
		}
	}
	// Denials are in the summary and the audit log; stderr gets failures only,
	// unless -v asks for every decision.
	level := slog.LevelError
	if o.verbose {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
	// The gateway relays every connection of the command with two
	// descriptors: give it the hard limit.
	if _, err := daemon.RaiseNOFILE(); err != nil {
		logger.Warn("descriptor limit", oplog.ErrorKey, err)
	}

	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := daemon.Options{Config: cfg, ConfigPath: o.config, EphemeralCA: true, Logger: logger, Rootless: rootless, PolicyLate: true}
	if rootless != nil {
		opts.Executor = &sandboxd.Config{AllowMissingControllers: missing}
		rootlessNotice(cmd.ErrOrStderr(), rootless, missing)
	}
	if cfg.Sandbox.Workspace != "" {
		// Before New, which would create the audit log in a refused workspace.
		if err := daemon.CheckWorkspace(opts, cfg.Sandbox.Workspace); err != nil {
			return workspaceRefused(err)
		}
	}
	d, err := daemon.New(ctx, opts)
	if err != nil {
		return &exitError{Code: 2, Msg: err.Error()}
	}
	defer d.Close()

	res, err := d.Run(ctx, daemon.Task{
		ID:        o.id,
		Labels:    cfg.Sandbox.Labels,
		Owner:     invokingUser(os.Getuid(), os.Getenv),
		Argv:      argv,
		Env:       cfg.Sandbox.Env,
		Workspace: cfg.Sandbox.Workspace,
		Stdin:     os.Stdin,
		Stdout:    cmd.OutOrStdout(),
		Stderr:    cmd.ErrOrStderr(),
	})
	if err != nil {
		var ee *sandboxd.ExecError
		var we *daemon.WorkspaceError
		switch {
		case errors.As(err, &ee):
			// The command's stderr already says why, as a shell would.
			return &exitError{Code: ee.Code}
		case errors.As(err, &we):
			return workspaceRefused(err)
		}
		return &exitError{Code: exitSetupFailed, Msg: err.Error()}
	}
	if !o.quiet {
		w := cmd.ErrOrStderr()
		switch {
		case res.TimedOut:
			fmt.Fprintf(w, "airlock: timed out after %s; every process of the sandbox was killed\n", cfg.Limits.Timeout)
		case res.OOMKilled:
			fmt.Fprintf(w, "airlock: out of memory (limit %s); the sandbox was killed\n", cfg.Limits.Memory)
		case res.PidsLimitHit:
			fmt.Fprintf(w, "airlock: the process limit (%d) was hit\n", cfg.Limits.Pids)
		}
		if res.Truncated {
			fmt.Fprintln(w, "airlock: output was larger than the capture cap (the live output above is whole)")
		}
		d.Tally().WriteSummary(w, summaryRows)
		fmt.Fprintf(w, "airlock: exit %d, wall %s, cpu %s, peak memory %s, audit %s\n",
			res.ExitStatus(), res.Wall.Round(1e6), res.CPU.Round(1e6), config.Size(res.PeakMemory), cfg.Audit.File)
	}
	if code := res.ExitStatus(); code != 0 {
		return &exitError{Code: code}
	}
	return nil
}
