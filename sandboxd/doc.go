// Package sandboxd is the executor: it builds resource-limited sandboxes that live
// until destroyed (Prepare, Start, Exec, PutFiles, GetFiles, Usage, Destroy), and
// runs one command in a fresh one (Run) (DESIGN.md section 6).
//
// The airlock binary re-executes itself (/proc/self/exe) as the sandbox's init in new
// mount, PID, UTS, IPC and cgroup namespaces, born inside the sandbox's network
// namespace. The parent spawns it from a locked OS thread that first setns()es into
// the network namespace (or the child gets a fresh one with only lo), with
// Pdeathsig=SIGKILL; the thread stays locked and alive until the child is gone and is
// then discarded, so neither the namespace nor the death signal leaks to other work.
//
// Two processes take part:
//
//  1. the executor (this package, in the host's airlock process) creates the cgroup,
//     reserves a uid, spawns init, makes the workspace's idmapped mount tree and
//     reads each exec's output from pipes it made;
//  2. init (InitMain, PID 1 of the sandbox) builds the filesystem view as root, then
//     starts each exec (and each files stage) from a fresh locked thread of its own
//     that first applies the rlimits, drops to the sandbox uid and gid (per-thread
//     setgroups/setresgid/setresuid), drops every capability, sets no_new_privs and
//     loads the seccomp filter: all per-thread state the forked command inherits and
//     keeps through execve, while init's other threads stay root. The thread is never
//     unlocked and exits with its goroutine. Init reaps every orphan and reports each
//     exec's exit; the sandbox ends when init does.
//
// (A separate re-executed "exec stage" process used to do the command's part; it
// cost a whole Go process start, ~7 ms, per sandbox.)
//
// The workspace is an idmapped mount (mount_setattr MOUNT_ATTR_IDMAP with a user
// namespace mapping the directory's owner to the sandbox uid), and the seccomp filter
// refuses setuid and setgid mode bits, so files the sandbox leaves there belong to
// the directory's owner and can never be a setuid binary of that owner.
//
// Init's fd 3 is a SOCK_SEQPACKET control socket (protocol.go): JSON messages, an
// exec's stdio fds as SCM_RIGHTS. Configuration never travels through the
// environment; the only environment variable init sees is the stage marker.
//
// sandboxd must never import gateway, dnsfilter, policy or netns: it only needs a
// network-namespace path. It imports audit for the record type.
package sandboxd
