// Package sandboxd is the executor: it builds resource-limited sandboxes that
// live until destroyed, runs commands and moves files in them, and runs one
// command in a fresh one (Run). The airlock binary re-executes itself as each
// sandbox's init (PID 1 of new mount, PID, UTS, IPC and cgroup namespaces,
// joined to the sandbox's network namespace), which builds a read-only,
// idmapped view of the host with its own tmpfs /tmp, $HOME and workspace (or
// an idmapped host workspace), then starts each command from a fresh thread
// that has dropped to an unprivileged uid with no capabilities, no_new_privs,
// rlimits and a seccomp filter. The executor talks to init over a SEQPACKET
// control socket (JSON messages, stdio as SCM_RIGHTS). Cgroups v1 and v2 cap
// memory, CPU, processes and I/O; a timeout kills an exec and everything it
// started.
//
// Entry points: New, (*Executor).Prepare, Create and Run, the *Sandbox they
// return (Start, Exec, PutFiles, GetFiles, Usage, Destroy), and InitMain for
// the re-executed stages (cmd/airlock-init beside the running binary when it
// is from the same build, initexe.go, else `airlock __sandbox-init`; started
// by the executor only). It needs nothing from the network side but a
// namespace path. The processes, the filesystem view, seccomp and cgroups:
// sandboxd/DESIGN.md.
//
// sandboxd must never import: config, policy, secrets, gateway, dnsfilter,
// netns, daemon, cmd/airlock.
package sandboxd
