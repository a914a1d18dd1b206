// Package hostcheck is `airlock doctor`: it checks a host for what each way
// of running airlock needs and says, one line per check, what works and what
// to change. The modes are root (`airlock run` and `airlock serve` as root),
// rootless (`airlock run` as an ordinary user in a user namespace that owns
// the island), user-daemon (`airlock serve --user`) and cni (the CNI plugin
// and attach, through the root daemon). A check that fails for a mode says
// that mode does not work; a warning names something weaker or slower than it
// could be (no subordinate uids, no delegated cgroup: rlimits instead).
//
// Every input is injectable (Host: the procfs, sysfs and /etc roots, the
// user, the tool lookup, the command runner and the user-namespace probe), so
// each branch is tested on a fake host; ProbeUserns is the real probe: a
// child in a new user and network namespace that brings lo up and tries both
// iptables backends there (ProbeChild is that child's side).
//
// Entry points: Run, (Report).Text, (Report).Works, ProbeUserns, ProbeChild.
//
// hostcheck must never import: any other airlock package.
package hostcheck
