// Package runctest runs real OCI containers for the whole-system tests: it
// builds a bundle in a test's directory (a rootfs from Debian's busybox-static
// with one symlink per applet, and a config.json written from the
// runtime-spec types), runs it detached with Debian's runc under a state root
// of its own, or only creates it so a test can set up its network before the
// process begins (as a platform does), runs commands in it with `runc exec`,
// and at the test's end kills and deletes the container and removes its
// cgroup directories (cgroup v1 hierarchies and v2 alike). Container ids and
// cgroups are named alk-runc-<pid>-<n>.
//
// Entry points: Start, (*Container).Begin, (*Container).Exec, (*Container).Pid.
//
// test/runctest must never import: any other airlock package.
package runctest
