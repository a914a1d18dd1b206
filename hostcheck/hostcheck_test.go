package hostcheck

import (
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// fakeHost is a host whose /proc, /sys, /etc and /boot are a temp tree.
type fakeHost struct {
	t    *testing.T
	root string
	Host
}

func newFakeHost(t *testing.T) *fakeHost {
	root := t.TempDir()
	f := &fakeHost{t: t, root: root}
	f.Host = Host{
		Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys"),
		Etc: filepath.Join(root, "etc"), Boot: filepath.Join(root, "boot"),
		EUID: 1000, UID: os.Getuid(), GID: os.Getgid(), User: "alice", Self: true,
		LookPath:   func(string) (string, error) { return "", errors.New("not found") },
		Run:        func(context.Context, string, ...string) ([]byte, error) { return nil, errors.New("not run") },
		NoFile:     func() (uint64, uint64, error) { return 1024, 65536, nil },
		Writable:   func(string) error { return nil },
		TrustStore: filepath.Join(root, "etc/ssl/certs/ca-certificates.crt"),
		CNIDirs:    []string{filepath.Join(root, "opt/cni/bin")},
	}
	return f
}

// file writes rel (under the fake root) with content.
func (f *fakeHost) file(rel, content string) string {
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fakeHost) dir(rel string) string {
	p := filepath.Join(f.root, rel)
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
	return p
}

// wantStatus finds the check named name and compares its status and that
// its detail (and fix) mention each of want.
func wantStatus(t *testing.T, cs []Check, name string, st Status, want ...string) Check {
	t.Helper()
	for _, c := range cs {
		if c.Name != name {
			continue
		}
		if c.Status != st {
			t.Fatalf("%s: got %s (%s -> %s), want %s", name, c.Status, c.Detail, c.Fix, st)
		}
		for _, w := range want {
			if !strings.Contains(c.Detail+" -> "+c.Fix, w) {
				t.Fatalf("%s: got %q -> %q, want it to mention %q", name, c.Detail, c.Fix, w)
			}
		}
		return c
	}
	t.Fatalf("no check %s in %+v", name, cs)
	return Check{}
}

func TestUsernsSysctls(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		st    Status
		want  []string
	}{
		{"none readable", nil, StatusWarn, nil},
		{"allowed", map[string]string{"proc/sys/user/max_user_namespaces": "15000\n", "proc/sys/kernel/unprivileged_userns_clone": "1"}, StatusOK, []string{"max_user_namespaces=15000"}},
		{"debian switch off", map[string]string{"proc/sys/kernel/unprivileged_userns_clone": "0"}, StatusFail, []string{"sysctl -w kernel.unprivileged_userns_clone=1"}},
		{"no namespaces", map[string]string{"proc/sys/user/max_user_namespaces": "0"}, StatusFail, []string{"sysctl -w user.max_user_namespaces="}},
		{"apparmor", map[string]string{"proc/sys/user/max_user_namespaces": "100", "proc/sys/kernel/apparmor_restrict_unprivileged_userns": "1"}, StatusFail, []string{"kernel.apparmor_restrict_unprivileged_userns=0", "AppArmor profile"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			for p, c := range tc.files {
				f.file(p, c)
			}
			wantStatus(t, []Check{checkUsernsSysctls(f.Host.Defaults())}, "userns.sysctl", tc.st, tc.want...)
		})
	}
}

func TestKernel(t *testing.T) {
	full := "CONFIG_NETFILTER_EGRESS=y\nCONFIG_IP_ROUTE_CLASSID=y\nCONFIG_NF_TABLES_NETDEV=m\n"
	for _, tc := range []struct {
		name, rel, config string
		gz                bool
		ver, cfg          Status
		want              string
	}{
		{name: "5.16", rel: "5.16.20", config: full, ver: StatusFail, cfg: StatusOK, want: "built in"},
		{name: "5.17", rel: "5.17.0", config: full, ver: StatusOK, cfg: StatusOK},
		{name: "debian", rel: "6.1.0-18-amd64", config: full, gz: true, ver: StatusOK, cfg: StatusOK},
		{name: "garbage", rel: "vmlinuz", ver: StatusWarn, cfg: StatusWarn},
		{name: "no egress hook", rel: "6.6.0", config: "CONFIG_IP_ROUTE_CLASSID=y\n# CONFIG_NETFILTER_EGRESS is not set\nCONFIG_NF_TABLES_NETDEV=y\n", ver: StatusOK, cfg: StatusFail, want: "CONFIG_NETFILTER_EGRESS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.file("proc/sys/kernel/osrelease", tc.rel+"\n")
			switch {
			case tc.config == "":
			case tc.gz:
				p := f.file("proc/config.gz", "")
				out, err := os.Create(p)
				if err != nil {
					t.Fatal(err)
				}
				zw := gzip.NewWriter(out)
				zw.Write([]byte(tc.config))
				zw.Close()
				out.Close()
			default:
				f.file("boot/config-"+tc.rel, tc.config)
			}
			cs := checkKernel(f.Host.Defaults())
			if c := wantStatus(t, cs, "kernel", tc.ver); tc.ver == StatusFail && !strings.Contains(c.Detail, "5.17") {
				t.Fatalf("kernel: got %q, want it to name 5.17", c.Detail)
			}
			wantStatus(t, cs, "kernel.config", tc.cfg, tc.want)
		})
	}
}

func TestCgroup(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(f *fakeHost)
		st         Status
		delegation Status
		want       string
	}{
		{"none", func(*fakeHost) {}, StatusFail, StatusWarn, "mount cgroup2"},
		{"v1", func(f *fakeHost) {
			for _, c := range limitControllers {
				f.dir("sys/fs/cgroup/" + c)
			}
		}, StatusOK, StatusWarn, "cgroup v1"},
		{"hybrid", func(f *fakeHost) {
			for _, c := range limitControllers {
				f.dir("sys/fs/cgroup/" + c)
			}
			f.file("sys/fs/cgroup/unified/cgroup.controllers", "")
		}, StatusOK, StatusWarn, "hybrid"},
		{"v2 without pids", func(f *fakeHost) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory\n")
		}, StatusFail, StatusWarn, "pids"},
		{"v2, delegated", func(f *fakeHost) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n")
			f.file("proc/self/cgroup", "0::/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope\n")
			f.file("sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope/cgroup.controllers", "cpu memory pids\n")
			f.file("sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope/cgroup.subtree_control", "")
		}, StatusOK, StatusOK, "cgroup v2"},
		{"v2, delegated without cpu", func(f *fakeHost) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n")
			f.file("proc/self/cgroup", "0::/mine\n")
			f.file("sys/fs/cgroup/mine/cgroup.controllers", "memory pids\n")
			f.file("sys/fs/cgroup/mine/cgroup.subtree_control", "")
		}, StatusOK, StatusWarn, "cgroup v2"},
		{"v2, no cgroup of the user", func(f *fakeHost) {
			f.file("sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n")
		}, StatusOK, StatusWarn, "cgroup v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			tc.setup(f)
			cs := checkCgroup(f.Host.Defaults())
			wantStatus(t, cs, "cgroup", tc.st, tc.want)
			wantStatus(t, cs, "cgroup.delegation", tc.delegation)
		})
	}
	t.Run("another user's directory", func(t *testing.T) {
		f := newFakeHost(t)
		f.file("sys/fs/cgroup/cgroup.controllers", "cpu memory pids\n")
		f.Self, f.UID = false, os.Getuid()+1
		uid := itoa(f.UID)
		f.file("sys/fs/cgroup/user.slice/user-"+uid+".slice/user@"+uid+".service/cgroup.controllers", "cpu memory pids\n")
		f.file("sys/fs/cgroup/user.slice/user-"+uid+".slice/user@"+uid+".service/cgroup.subtree_control", "")
		wantStatus(t, checkCgroup(f.Host.Defaults()), "cgroup.delegation", StatusWarn, "not delegated", "rlimits")
	})
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestSubIDs(t *testing.T) {
	tools := func(string) (string, error) { return "/usr/bin/x", nil }
	for _, tc := range []struct {
		name   string
		look   func(string) (string, error)
		subuid string
		st     Status
		want   string
	}{
		{"no tools", nil, "alice:100000:65536\n", StatusWarn, "apt-get install uidmap"},
		{"no range", tools, "bob:100000:65536\n", StatusWarn, "usermod --add-subuids"},
		{"empty range", tools, "alice:100000:0\n", StatusWarn, "usermod"},
		{"by name", tools, "bob:1:2\nalice:100000:65536\n", StatusOK, "100000+65536"},
		{"by uid", tools, "UID:200000:65536\n", StatusOK, "200000+65536"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			if tc.look != nil {
				f.LookPath = tc.look
			}
			ranges := strings.ReplaceAll(tc.subuid, "UID", itoa(f.UID))
			f.file("etc/subuid", ranges)
			f.file("etc/subgid", ranges)
			wantStatus(t, []Check{checkSubIDs(f.Host.Defaults())}, "subuid", tc.st, tc.want)
		})
	}
}

func TestProbeResults(t *testing.T) {
	for _, tc := range []struct {
		name    string
		res     ProbeResult
		err     error
		ns, ipt Status
		want    string
	}{
		{"refused", ProbeResult{Err: "fork/exec: operation not permitted"}, nil, StatusFail, StatusSkip, "operation not permitted"},
		{"could not run", ProbeResult{}, errors.New("exit status 1"), StatusFail, StatusSkip, "exit status 1"},
		{"lo refused", ProbeResult{LoErr: "lo up: permission denied", IPTables: map[string]string{"nft": ""}}, nil, StatusFail, StatusOK, "lo up"},
		{"no iptables inside", ProbeResult{Lo: true, IPTables: map[string]string{"legacy": "exit status 3", "nft": "exit status 1"}}, nil, StatusOK, StatusFail, "brought lo up"},
		{"none installed", ProbeResult{Lo: true, IPTables: map[string]string{}}, nil, StatusOK, StatusFail, "brought lo up"},
		{"nft only", ProbeResult{Lo: true, IPTables: map[string]string{"legacy": "exit status 3", "nft": ""}}, nil, StatusOK, StatusOK, "brought lo up"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.Probe = func(context.Context) (ProbeResult, error) { return tc.res, tc.err }
			cs := checkProbe(context.Background(), f.Host.Defaults())
			wantStatus(t, cs, "userns.probe", tc.ns, tc.want)
			wantStatus(t, cs, "iptables.userns", tc.ipt)
		})
	}
}

func TestIPTables(t *testing.T) {
	installed := func(string) (string, error) { return "/usr/sbin/x", nil }
	for _, tc := range []struct {
		name string
		euid int
		look func(string) (string, error)
		run  func(context.Context, string, ...string) ([]byte, error)
		st   Status
		want string
	}{
		{"none installed", 0, nil, nil, StatusFail, "apt-get install iptables"},
		{"user: installed", 1000, installed, nil, StatusOK, "tried as root"},
		{"root: none loads", 0, installed, nil, StatusFail, "modprobe"},
		{"root: nft only", 0, installed, func(_ context.Context, name string, _ ...string) ([]byte, error) {
			if name == "iptables-nft" {
				return nil, nil
			}
			return []byte("can't initialize iptables table `filter'\n"), errors.New("exit status 3")
		}, StatusOK, "auto uses nft"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			f.EUID = tc.euid
			if tc.look != nil {
				f.LookPath = tc.look
			}
			if tc.run != nil {
				f.Run = tc.run
			}
			wantStatus(t, []Check{checkIPTables(context.Background(), f.Host.Defaults())}, "iptables", tc.st, tc.want)
		})
	}
}

func TestSmallChecks(t *testing.T) {
	f := newFakeHost(t)
	h := f.Host.Defaults()
	wantStatus(t, []Check{checkTrustStore(h)}, "trust.store", StatusWarn, "ca-certificates")
	f.file("etc/ssl/certs/ca-certificates.crt", "-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
	wantStatus(t, []Check{checkTrustStore(h)}, "trust.store", StatusOK, "1 certificates")

	wantStatus(t, []Check{checkNoFile(h)}, "nofile", StatusOK, "hard 65536")
	h.NoFile = func() (uint64, uint64, error) { return 1024, 1024, nil }
	wantStatus(t, []Check{checkNoFile(h)}, "nofile", StatusWarn, "LimitNOFILE")

	wantStatus(t, []Check{checkCNI(h)}, "cni.plugin", StatusFail, "install -m 0755 airlock-cni")
	p := f.file("opt/cni/bin/airlock-cni", "#!/bin/sh\n")
	if err := os.Chmod(p, 0o755); err != nil {
		t.Fatal(err)
	}
	wantStatus(t, []Check{checkCNI(h)}, "cni.plugin", StatusOK, p)

	h.EUID, h.AuditDir, h.UserAuditDir = 0, filepath.Join(f.root, "var/log/airlock"), filepath.Join(f.root, "home/.local/state/airlock/audit")
	f.dir("home")
	cs := checkAuditDirs(h)
	wantStatus(t, cs, "audit.dir", StatusOK, "will be created")
	wantStatus(t, cs, "audit.dir.user", StatusOK, "under "+filepath.Join(f.root, "home"))
	f.file("var/log/airlock", "a file")
	h.Writable = func(string) error { return errors.New("permission denied") }
	cs = checkAuditDirs(h)
	wantStatus(t, cs, "audit.dir", StatusFail, "not a directory")
	wantStatus(t, cs, "audit.dir.user", StatusFail, "permission denied")
}

// TestReportModes: a failing check stops exactly its modes, the probe not
// run leaves the user modes unchecked, and the text has one line per check
// and one for the modes.
func TestReportModes(t *testing.T) {
	f := newFakeHost(t)
	f.file("proc/sys/user/max_user_namespaces", "0")
	f.Probe = func(context.Context) (ProbeResult, error) { return ProbeResult{Err: "operation not permitted"}, nil }
	r := Run(context.Background(), f.Host, ModeRootless)
	if r.OK || r.Works[ModeRootless] || r.Works[ModeUserDaemon] || r.Works[ModeRoot] {
		t.Fatalf("got works %v ok %v, want none to work", r.Works, r.OK)
	}
	text := r.Text()
	if got, want := strings.Count(text, "\n"), len(r.Checks)+1; got != want {
		t.Fatalf("got %d lines, want %d:\n%s", got, want, text)
	}
	if !strings.Contains(text, "[rootless: does not work (userns.sysctl, userns.probe)]") {
		t.Fatalf("modes line: %s", text)
	}

	f = newFakeHost(t)
	f.EUID, f.UID, f.Self = 0, -1, false
	r = Run(context.Background(), f.Host, ModeRootless)
	if r.OK || len(r.Unchecked) != 2 {
		t.Fatalf("as root without a user: got ok %v unchecked %v, want not ok, 2 unchecked", r.OK, r.Unchecked)
	}
	if !strings.Contains(r.Text(), "[rootless: not checked]") {
		t.Fatalf("modes line: %s", r.Text())
	}
	if _, err := ParseMode("laptop"); err == nil || !strings.Contains(err.Error(), "rootless") {
		t.Fatalf("ParseMode: got %v, want an error naming the modes", err)
	}
}

// TestRuntimeDir refuses what serve --user would refuse.
func TestRuntimeDir(t *testing.T) {
	for _, tc := range []struct {
		name string
		mode os.FileMode
		uid  func(int) int
		make bool
		st   Status
		want string
	}{
		{"private", 0o700, nil, true, StatusOK, "yours and private"},
		{"world writable", 0o777, nil, true, StatusFail, "chmod 0700"},
		{"another user's", 0o700, func(u int) int { return u + 1 }, true, StatusFail, "owned by uid"},
		{"missing", 0, nil, false, StatusFail, "XDG_RUNTIME_DIR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeHost(t)
			dir := filepath.Join(f.root, "run/user/x")
			if tc.make {
				f.dir("run/user/x")
				if err := os.Chmod(dir, tc.mode); err != nil {
					t.Fatal(err)
				}
			}
			if tc.uid != nil {
				f.UID = tc.uid(f.UID)
			}
			f.UserRuntimeDir = dir
			wantStatus(t, []Check{checkRuntimeDir(f.Host.Defaults())}, "runtime.dir", tc.st, tc.want)
		})
	}
}

// TestSubIDHelpers: a newuidmap that is neither setuid root nor capable
// cannot map a range.
func TestSubIDHelpers(t *testing.T) {
	f := newFakeHost(t)
	plain := f.file("usr/bin/newuidmap", "#!/bin/sh\n")
	f.LookPath = func(name string) (string, error) { return filepath.Join(f.root, "usr/bin", name), nil }
	f.file("usr/bin/newgidmap", "#!/bin/sh\n")
	f.file("etc/subuid", "alice:100000:65536\n")
	f.file("etc/subgid", "alice:100000:65536\n")
	wantStatus(t, []Check{checkSubIDs(f.Host.Defaults())}, "subuid", StatusWarn, "neither setuid", plain)
	if os.Geteuid() == 0 {
		for _, n := range []string{"newuidmap", "newgidmap"} {
			if err := os.Chmod(filepath.Join(f.root, "usr/bin", n), 0o755|os.ModeSetuid); err != nil {
				t.Fatal(err)
			}
		}
		wantStatus(t, []Check{checkSubIDs(f.Host.Defaults())}, "subuid", StatusOK, "100000+65536")
	}
}
