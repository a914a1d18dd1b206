package sandboxd

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestSandboxUserHasName: the sandbox uid has a name, a home and a group
// (ssh refuses to start without one: "No user exists for uid"), the root's
// own entries are kept, the hostname resolves to loopback from /etc/hosts
// (never a DNS query), and the host's /etc/passwd is not changed.
func TestSandboxUserHasName(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	before, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	res := mustRun(t, e, Spec{Argv: sh(`id -un; id -gn; getent passwd "$(id -u)" | cut -d: -f6; getent passwd root | cut -d: -f1,3; grep -c '^sandbox:' /etc/passwd; getent hosts "$(hostname)"`)})
	want := SandboxUser + "\n" + SandboxUser + "\n" + DefaultHome + "\nroot:0\n1\n127.0.1.1       " + DefaultHostname + "\n"
	if got := string(res.Stdout); got != want {
		t.Errorf("got %q, want %q (stderr %q)", got, want, res.Stderr)
	}
	after, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Errorf("the host's /etc/passwd changed")
	}
}

// TestIdentityFilesResolvedInsideTheRoot: a sandbox root whose /etc/passwd is
// an absolute symlink to a host path must not get that host file's content
// (init reads the root's file with every link resolved inside the root).
func TestIdentityFilesResolvedInsideTheRoot(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	secretDir := hostDir(t, 0o755)
	secret := filepath.Join(secretDir, "host-secret")
	if err := os.WriteFile(secret, []byte("alk-host-secret:x:0:0::/:/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	root := minimalRoot(t, map[string]string{"etc/passwd": secret, "etc/resolv.conf": "../run/r"})
	res, err := e.Run(t.Context(), Spec{Argv: sh("cat /etc/passwd; echo; id -un"), RootFS: root})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(res.Stdout)+string(res.Stderr), "alk-host-secret") {
		t.Fatalf("the sandbox saw the host file behind its root's /etc/passwd link: %q %q", res.Stdout, res.Stderr)
	}
}

func TestWithEntry(t *testing.T) {
	const line = "sandbox:x:100007:100007:airlock sandbox:/home/sandbox:/bin/sh"
	for _, tc := range []struct {
		name, cur, want string
	}{
		{"appended", "root:x:0:0::/root:/bin/sh\n", "root:x:0:0::/root:/bin/sh\n" + line + "\n"},
		{"no trailing newline", "root:x:0:0::/root:/bin/sh", "root:x:0:0::/root:/bin/sh\n" + line + "\n"},
		{"same name replaced", "sandbox:x:5:5::/:/bin/false\nbin:x:2:2::/:/bin/sh\n", "bin:x:2:2::/:/bin/sh\n" + line + "\n"},
		{"same uid replaced", "other:x:100007:1::/:/bin/sh\n", line + "\n"},
		{"empty", "", line + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(withEntry([]byte(tc.cur), line, strconv.Itoa(100007))); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

func TestWithHostname(t *testing.T) {
	for _, tc := range []struct {
		name, cur, want string
	}{
		{"added", "127.0.0.1\tlocalhost\n", "127.0.0.1\tlocalhost\n127.0.1.1\talk-box\n"},
		{"no trailing newline", "127.0.0.1 localhost", "127.0.0.1 localhost\n127.0.1.1\talk-box\n"},
		{"already mapped", "10.0.0.1 x alk-box\n", "10.0.0.1 x alk-box\n"},
		{"only in a comment", "# 10.0.0.1 alk-box\n", "# 10.0.0.1 alk-box\n127.0.1.1\talk-box\n"},
		{"empty", "", "127.0.1.1\talk-box\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(withHostname([]byte(tc.cur), "alk-box")); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
