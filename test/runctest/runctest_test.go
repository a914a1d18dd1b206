package runctest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-dev/airlock/test/roottest"
)

func TestCheckStatic(t *testing.T) {
	text := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(text, []byte("#!/bin/sh\n"+strings.Repeat("echo not an ELF file\n", 8)), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{"a dynamic binary", "/bin/bash", "dynamically linked"},
		{"not an ELF file", text, "bad magic"},
		{"missing", filepath.Join(t.TempDir(), "none"), "no such file"},
	}
	if _, err := os.Stat(Busybox); err == nil {
		tests = append(tests, struct{ name, path, wantErr string }{"Debian's busybox-static", Busybox, ""})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkStatic(tt.path)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("got %v, want no error", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

// The container must not be able to undo an attach: no capability that could
// change its namespace's rules or forge packets past them.
func TestSpecHoldsNoNetworkCapabilities(t *testing.T) {
	c := &Container{ID: "alk-runc-1-1", Cgroup: "/alk-runc-1-1"}
	s := c.spec(Options{NetNS: "/run/netns/alk-pod"})
	caps := s.Process.Capabilities
	for _, set := range [][]string{caps.Bounding, caps.Effective, caps.Permitted, caps.Inheritable, caps.Ambient} {
		for _, bad := range []string{"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_SYS_ADMIN"} {
			if slices.Contains(set, bad) {
				t.Errorf("spec grants %s", bad)
			}
		}
	}
	if !s.Process.NoNewPrivileges {
		t.Errorf("got NoNewPrivileges false, want true")
	}
	i := slices.IndexFunc(s.Linux.Namespaces, func(n specs.LinuxNamespace) bool { return n.Type == specs.NetworkNamespace })
	if i < 0 || s.Linux.Namespaces[i].Path != "/run/netns/alk-pod" {
		t.Errorf("network namespace %+v, want path /run/netns/alk-pod", s.Linux.Namespaces)
	}
	if s.Linux.CgroupsPath != "/alk-runc-1-1" {
		t.Errorf("got cgroupsPath %q, want /alk-runc-1-1", s.Linux.CgroupsPath)
	}
}

// TestStartExecRemove runs a real container: exec works in it, it has its
// cgroups, and when its test ends the process and cgroups are gone.
func TestStartExecRemove(t *testing.T) {
	roottest.Require(t)
	var c *Container
	var pid int
	t.Run("container", func(t *testing.T) {
		c = Start(t, Options{Files: map[string]string{"etc/motd": "alk\n"}})
		pid = c.Pid()
		if r := c.Exec([]string{"ALK=1"}, "sh", "-c", "cat /etc/motd; echo $ALK; hostname"); r.Code != 0 || r.Stdout != "alk\n1\n"+c.ID+"\n" {
			t.Errorf("exec: %s", r)
		}
		if r := c.Exec(nil, "sh", "-c", "exit 3"); r.Code != 3 {
			t.Errorf("got exit %d, want 3", r.Code)
		}
		if len(c.CgroupDirs()) == 0 {
			t.Errorf("no cgroup directory %s", c.Cgroup)
		}
	})
	// Dead is gone or a zombie its new parent (the host's init) has not
	// reaped yet.
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(b), ") Z ") {
		t.Errorf("container process %d still runs after its test: %s", pid, b)
	}
	if dirs := c.CgroupDirs(); len(dirs) != 0 {
		t.Errorf("cgroup directories left: %v", dirs)
	}
}
