// Package sandboxd is the executor: it runs one command in a fresh,
// resource-limited sandbox and reports how it ended. The airlock binary
// re-executes itself as the sandbox's init (PID 1 of new mount, PID, UTS, IPC
// and cgroup namespaces, joined to the sandbox's network namespace), which
// builds a read-only, idmapped view of the host with its own tmpfs /tmp and
// $HOME and an idmapped workspace, then starts the command from a thread that
// has dropped to an unprivileged uid with no capabilities, no_new_privs,
// rlimits and a seccomp filter. Cgroups v1 and v2 cap memory, CPU, processes
// and I/O; a timeout kills the whole tree.
//
// Entry points: New, (*Executor).Run, and InitMain for the re-executed init
// (`airlock __sandbox-init`, started by the executor only). It needs nothing
// from the network side but a namespace path. The processes, the filesystem
// view, seccomp and cgroups: docs/ARCHITECTURE.md, "Executor".
//
// sandboxd must never import: config, policy, secrets, gateway, dnsfilter,
// netns, daemon, cmd/airlock.
package sandboxd
