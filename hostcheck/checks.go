package hostcheck

import (
	"bufio"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

var (
	rootModes     = []Mode{ModeRoot, ModeCNI}
	userModes     = []Mode{ModeRootless, ModeUserDaemon}
	allModes      = Modes
	linkGuardMode = []Mode{ModeCNI}
)

// checkPrivilege: root and cni need root; the user modes must not be root.
func checkPrivilege(h Host) Check {
	if h.EUID == 0 {
		c := Check{Name: "privilege", Status: StatusOK, Detail: "running as root: root and cni modes can be checked", Modes: rootModes}
		if h.UID < 0 {
			c.Detail += "; rootless checks skip (name the user: airlock doctor --user NAME)"
		}
		return c
	}
	return Check{Name: "privilege", Status: StatusFail, Detail: fmt.Sprintf("running as uid %d: root mode needs root", h.EUID),
		Fix: "use rootless mode (airlock run as yourself, airlock serve --user), or run as root", Modes: rootModes}
}

// checkKernel: the link-layer guard of an attached namespace is an
// nftables netdev egress chain (kernel 5.17+, CONFIG_NETFILTER_EGRESS) that
// reads meta rtclassid (CONFIG_IP_ROUTE_CLASSID).
func checkKernel(h Host) []Check {
	rel, ok := readTrim(filepath.Join(h.Proc, "sys/kernel/osrelease"))
	if !ok {
		return []Check{{Name: "kernel", Status: StatusWarn, Detail: "cannot read the kernel release", Modes: linkGuardMode}}
	}
	ver := Check{Name: "kernel", Status: StatusOK, Modes: linkGuardMode,
		Detail: rel + ": the link-layer guard's netdev egress hook (5.17+) is available"}
	if maj, min, ok := kernelVersion(rel); !ok {
		ver.Status, ver.Detail = StatusWarn, rel+": version not understood; the link-layer guard needs 5.17+"
	} else if maj < 5 || maj == 5 && min < 17 {
		ver.Status = StatusFail
		ver.Detail = fmt.Sprintf("%s: the link-layer guard of attached namespaces needs 5.17+ (netdev egress hook); attach is refused", rel)
		ver.Fix = "upgrade the kernel to 5.17 or later"
	}
	opts, src := kernelConfig(h, rel)
	cfg := Check{Name: "kernel.config", Modes: linkGuardMode}
	if opts == nil {
		cfg.Status = StatusWarn
		cfg.Detail = "no kernel config found (/proc/config.gz, /boot/config-" + rel + "): the guard's options are checked when a namespace is attached"
		return []Check{ver, cfg}
	}
	var missing []string
	for _, o := range []string{"CONFIG_NETFILTER_EGRESS", "CONFIG_IP_ROUTE_CLASSID", "CONFIG_NF_TABLES_NETDEV"} {
		if v := opts[o]; v != "y" && v != "m" {
			missing = append(missing, o)
		}
	}
	if len(missing) > 0 {
		cfg.Status = StatusFail
		cfg.Detail = src + " lacks " + strings.Join(missing, ", ") + ": the link-layer guard cannot be built"
		cfg.Fix = "a kernel built with " + strings.Join(missing, "=y, ") + "=y"
	} else {
		cfg.Status = StatusOK
		cfg.Detail = src + ": netdev egress, route classid and nftables netdev are built in"
	}
	return []Check{ver, cfg}
}

// kernelVersion parses "6.1.0-18-amd64" into 6, 1.
func kernelVersion(rel string) (int, int, bool) {
	parts := strings.SplitN(rel, ".", 3)
	if len(parts) < 2 {
		return 0, 0, false
	}
	maj, err1 := strconv.Atoi(parts[0])
	minStr := parts[1]
	if i := strings.IndexFunc(minStr, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		minStr = minStr[:i]
	}
	min, err2 := strconv.Atoi(minStr)
	return maj, min, err1 == nil && err2 == nil
}

// kernelConfig reads the running kernel's build options (/proc/config.gz,
// else /boot/config-REL), and names the source; nil when neither is there.
func kernelConfig(h Host, rel string) (map[string]string, string) {
	var r io.Reader
	src := filepath.Join(h.Proc, "config.gz")
	if f, err := os.Open(src); err == nil {
		defer f.Close()
		if zr, err := gzip.NewReader(f); err == nil {
			r = zr
		}
	}
	if r == nil {
		src = filepath.Join(h.Boot, "config-"+rel)
		f, err := os.Open(src)
		if err != nil {
			return nil, ""
		}
		defer f.Close()
		r = f
	}
	opts := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(r, 8<<20))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "CONFIG_") {
			opts[k] = v
		}
	}
	return opts, src
}

// checkUsernsSysctls reads the switches distributions use to restrict
// unprivileged user namespaces.
func checkUsernsSysctls(h Host) Check {
	c := Check{Name: "userns.sysctl", Modes: userModes}
	var bad, fixes, seen []string
	if v, ok := readTrim(filepath.Join(h.Proc, "sys/kernel/unprivileged_userns_clone")); ok {
		seen = append(seen, "kernel.unprivileged_userns_clone="+v)
		if v == "0" {
			bad = append(bad, "kernel.unprivileged_userns_clone is 0")
			fixes = append(fixes, "sysctl -w kernel.unprivileged_userns_clone=1")
		}
	}
	if v, ok := readTrim(filepath.Join(h.Proc, "sys/user/max_user_namespaces")); ok {
		seen = append(seen, "user.max_user_namespaces="+v)
		if n, err := strconv.Atoi(v); err == nil && n == 0 {
			bad = append(bad, "user.max_user_namespaces is 0")
			fixes = append(fixes, "sysctl -w user.max_user_namespaces=15000")
		}
	}
	if v, ok := readTrim(filepath.Join(h.Proc, "sys/kernel/apparmor_restrict_unprivileged_userns")); ok {
		seen = append(seen, "kernel.apparmor_restrict_unprivileged_userns="+v)
		if v == "1" {
			bad = append(bad, "AppArmor restricts unprivileged user namespaces")
			fixes = append(fixes, "sysctl -w kernel.apparmor_restrict_unprivileged_userns=0 (or an AppArmor profile granting airlock `userns,`)")
		}
	}
	switch {
	case len(bad) > 0:
		c.Status = StatusFail
		c.Detail = strings.Join(bad, "; ")
		c.Fix = strings.Join(fixes, "; ") + "; persist it in /etc/sysctl.d/"
	case len(seen) == 0:
		c.Status = StatusWarn
		c.Detail = "none of the user-namespace sysctls is readable"
	default:
		c.Status = StatusOK
		c.Detail = strings.Join(seen, ", ")
	}
	return c
}

// checkProbe makes a user and network namespace as the user and reports
// it, lo and each iptables backend inside it.
func checkProbe(ctx context.Context, h Host) []Check {
	ns := Check{Name: "userns.probe", Modes: userModes, needed: true}
	ipt := Check{Name: "iptables.userns", Modes: []Mode{ModeRootless, ModeUserDaemon}}
	switch {
	case h.UID < 0:
		ns.Status, ns.Detail = StatusSkip, "no user named (airlock doctor --user NAME as root)"
		ipt.Status, ipt.Detail = StatusSkip, ns.Detail
		return []Check{ns, ipt}
	case h.Probe == nil:
		ns.Status, ns.Detail = StatusSkip, "probe not run"
		ipt.Status, ipt.Detail = StatusSkip, ns.Detail
		return []Check{ns, ipt}
	}
	res, err := h.Probe(ctx)
	who := fmt.Sprintf("uid %d", h.UID)
	if err == nil && res.Err != "" {
		err = fmt.Errorf("%s", res.Err)
	}
	if err != nil {
		ns.Status = StatusFail
		ns.Detail = who + " could not make a user and network namespace: " + err.Error()
		ns.Fix = "see userns.sysctl; in a container, run it with user namespaces allowed (seccomp and AppArmor profiles)"
		ipt.Status, ipt.Detail = StatusSkip, "no namespace to try it in"
		return []Check{ns, ipt}
	}
	if !res.Lo {
		ns.Status = StatusFail
		ns.Detail = who + " made a user and network namespace but could not bring lo up: " + res.LoErr
		ns.Fix = "the kernel refuses network setup inside a user namespace: check LSM policy (AppArmor, SELinux)"
	} else {
		ns.Status, ns.Detail = StatusOK, who+" made a user namespace owning a network namespace and brought lo up"
	}
	var works, fails []string
	for _, b := range []string{"legacy", "nft"} {
		e, tried := res.IPTables[b]
		switch {
		case !tried:
		case e == "":
			works = append(works, b)
		default:
			fails = append(fails, b+": "+e)
		}
	}
	switch {
	case len(works) > 0:
		ipt.Status = StatusOK
		ipt.Detail = "inside the user namespace: " + strings.Join(works, " and ") + " work"
		if len(fails) > 0 {
			ipt.Detail += " (" + strings.Join(fails, "; ") + ")"
		}
	case len(fails) > 0:
		ipt.Status = StatusFail
		ipt.Detail = "no iptables backend works inside the user namespace: " + strings.Join(fails, "; ")
		ipt.Fix = "install iptables (apt-get install iptables); nf_tables or ip_tables must be loadable (modprobe it as root once)"
	default:
		ipt.Status = StatusFail
		ipt.Detail = "no iptables is installed"
		ipt.Fix = "apt-get install iptables"
	}
	return []Check{ns, ipt}
}

// checkSubIDs: with newuidmap and a subordinate range, the sandbox gets a uid
// other than the gateway's; without, the same uid guarded by a non-dumpable
// gateway, a pid namespace and seccomp.
func checkSubIDs(h Host) Check {
	c := Check{Name: "subuid", Modes: userModes}
	if h.UID < 0 {
		c.Status, c.Detail = StatusSkip, "no user named"
		return c
	}
	var missing []string
	for _, t := range []string{"newuidmap", "newgidmap"} {
		if _, err := h.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	uidR := subIDRange(filepath.Join(h.Etc, "subuid"), h.User, h.UID)
	gidR := subIDRange(filepath.Join(h.Etc, "subgid"), h.User, h.UID)
	var unprivileged []string
	if len(missing) == 0 {
		for _, t := range []string{"newuidmap", "newgidmap"} {
			if p, _ := h.LookPath(t); !setIDHelper(p) {
				unprivileged = append(unprivileged, p)
			}
		}
	}
	switch {
	case len(missing) > 0:
		c.Status = StatusWarn
		c.Detail = strings.Join(missing, " and ") + " not installed: the sandbox runs as your own uid (kept from the gateway by no_new_privs, a non-dumpable gateway, a pid namespace and seccomp)"
		c.Fix = "apt-get install uidmap, for a separate sandbox uid"
	case len(unprivileged) > 0:
		c.Status = StatusWarn
		c.Detail = "neither setuid root nor given file capabilities: " + strings.Join(unprivileged, ", ") + ": no subordinate range can be mapped, so the sandbox runs as your own uid"
		c.Fix = "apt-get install --reinstall uidmap (or chmod u+s " + strings.Join(unprivileged, " ") + ")"
	case uidR == "" || gidR == "":
		c.Status = StatusWarn
		c.Detail = fmt.Sprintf("no range for %s in %s/subuid and subgid: the sandbox runs as your own uid", userName(h), h.Etc)
		c.Fix = fmt.Sprintf("usermod --add-subuids 100000-165535 --add-subgids 100000-165535 %s", userName(h))
	default:
		c.Status = StatusOK
		c.Detail = fmt.Sprintf("newuidmap, newgidmap and ranges %s (uid), %s (gid): the sandbox gets a uid of its own", uidR, gidR)
	}
	return c
}

// setIDHelper reports whether path can act for another uid: setuid root, or
// file capabilities (security.capability). An unknown path counts as able
// (a fake host's).
func setIDHelper(path string) bool {
	fi, err := os.Stat(path)
	if err != nil {
		return true
	}
	if fi.Mode()&os.ModeSetuid != 0 && ownerOf(fi) == 0 {
		return true
	}
	n, err := unix.Getxattr(path, "security.capability", nil)
	return err == nil && n > 0
}

// checkRuntimeDir: serve --user keeps its socket under the user's runtime
// directory, which must be the user's and writable by nobody else (the
// daemon refuses it otherwise).
func checkRuntimeDir(h Host) Check {
	c := Check{Name: "runtime.dir", Modes: []Mode{ModeUserDaemon}}
	dir := h.UserRuntimeDir
	switch {
	case dir == "":
		c.Status, c.Detail = StatusSkip, "no user named"
		return c
	case !h.Self:
		c.Status, c.Detail = StatusSkip, dir+": checked as the user"
		return c
	}
	fi, err := os.Lstat(dir)
	switch {
	case err != nil:
		c.Status = StatusFail
		c.Detail = dir + ": " + err.Error() + ": serve --user has nowhere for its socket"
		c.Fix = "log in through a session that makes it (systemd-logind: loginctl enable-linger " + userName(h) + "), or set XDG_RUNTIME_DIR to a directory of yours with mode 0700"
	case fi.Mode()&os.ModeSymlink != 0 || !fi.IsDir():
		c.Status, c.Detail = StatusFail, dir+" is not a directory"
		c.Fix = "set XDG_RUNTIME_DIR to a directory of yours with mode 0700"
	case ownerOf(fi) != h.UID:
		c.Status = StatusFail
		c.Detail = fmt.Sprintf("%s is owned by uid %d, not by uid %d: serve --user refuses it", dir, ownerOf(fi), h.UID)
		c.Fix = "set XDG_RUNTIME_DIR to a directory of yours with mode 0700"
	case fi.Mode().Perm()&0o022 != 0:
		c.Status = StatusFail
		c.Detail = fmt.Sprintf("%s is mode %04o, writable by others: serve --user refuses it", dir, fi.Mode().Perm())
		c.Fix = "chmod 0700 " + dir
	default:
		c.Status, c.Detail = StatusOK, dir+" is yours and private: the socket goes in "+filepath.Join(dir, "airlock")
	}
	return c
}

func userName(h Host) string {
	if h.User != "" {
		return h.User
	}
	return strconv.Itoa(h.UID)
}

// subIDRange returns "start+count" of the first range of user (by name or
// uid) in an /etc/subuid-style file, "" when none.
func subIDRange(path, user string, uid int) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(fs) != 3 || (fs[0] != user && fs[0] != strconv.Itoa(uid)) {
			continue
		}
		if n, err := strconv.Atoi(fs[2]); err != nil || n <= 0 {
			continue
		}
		return fs[1] + "+" + fs[2]
	}
	return ""
}

// checkNoFile: the API's connection caps and the gateway's listeners come
// out of RLIMIT_NOFILE; serve raises the soft limit to the hard one.
func checkNoFile(h Host) Check {
	c := Check{Name: "nofile", Modes: allModes}
	soft, hard, err := h.NoFile()
	if err != nil {
		c.Status, c.Detail = StatusWarn, "getrlimit: "+err.Error()
		return c
	}
	c.Detail = fmt.Sprintf("RLIMIT_NOFILE soft %d, hard %d (airlock raises soft to hard)", soft, hard)
	c.Status = StatusOK
	if hard < 4096 {
		c.Status = StatusWarn
		c.Detail += ": few connections fit"
		c.Fix = "raise the hard limit (LimitNOFILE=65536 in the unit, or /etc/security/limits.conf)"
	}
	return c
}

// checkTrustStore: sandboxes get the system roots with the interception CA.
func checkTrustStore(h Host) Check {
	c := Check{Name: "trust.store", Modes: allModes}
	b, err := os.ReadFile(h.TrustStore)
	switch {
	case err != nil:
		c.Status = StatusWarn
		c.Detail = h.TrustStore + ": " + err.Error() + ": sandboxes trust only airlock's CA and upstream.ca_file"
		c.Fix = "apt-get install ca-certificates"
	case !strings.Contains(string(b), "BEGIN CERTIFICATE"):
		c.Status = StatusWarn
		c.Detail = h.TrustStore + " holds no certificate"
		c.Fix = "update-ca-certificates"
	default:
		c.Status = StatusOK
		c.Detail = fmt.Sprintf("%s: %d certificates", h.TrustStore, strings.Count(string(b), "BEGIN CERTIFICATE"))
	}
	return c
}

// checkAuditDirs: the audit log's directory must exist or be creatable by
// whoever runs the daemon.
func checkAuditDirs(h Host) []Check {
	root := Check{Name: "audit.dir", Modes: rootModes}
	switch {
	case h.AuditDir == "":
		root.Status, root.Detail = StatusSkip, "no audit directory given"
	case h.EUID != 0:
		root.Status, root.Detail = StatusSkip, h.AuditDir+": checked as root"
	default:
		root = dirCheck(root, h, h.AuditDir)
	}
	user := Check{Name: "audit.dir.user", Modes: []Mode{ModeUserDaemon}}
	switch {
	case h.UserAuditDir == "":
		user.Status, user.Detail = StatusSkip, "no user named"
	case !h.Self:
		user.Status, user.Detail = StatusSkip, h.UserAuditDir+": checked as the user"
	default:
		user = dirCheck(user, h, h.UserAuditDir)
	}
	return []Check{root, user}
}

// dirCheck reports whether dir, or the nearest directory above it that
// exists, takes new files.
func dirCheck(c Check, h Host, dir string) Check {
	at := dir
	for {
		fi, err := os.Stat(at)
		if err == nil {
			if !fi.IsDir() {
				c.Status = StatusFail
				c.Detail = at + " is not a directory"
				c.Fix = "move it away, or set audit.file elsewhere"
				return c
			}
			break
		}
		parent := filepath.Dir(at)
		if parent == at {
			break
		}
		at = parent
	}
	if err := h.Writable(at); err != nil {
		c.Status = StatusFail
		c.Detail = fmt.Sprintf("%s: cannot create it (%s: %v)", dir, at, err)
		c.Fix = "create it writable for the daemon's user, or set audit.file elsewhere"
		return c
	}
	c.Status = StatusOK
	if at == dir {
		c.Detail = dir + " is writable"
	} else {
		c.Detail = dir + " will be created (under " + at + ")"
	}
	return c
}

// checkCNI: a runtime finds airlock-cni in its plugin directories.
func checkCNI(h Host) Check {
	c := Check{Name: "cni.plugin", Modes: []Mode{ModeCNI}}
	for _, d := range h.CNIDirs {
		p := filepath.Join(d, "airlock-cni")
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			c.Status, c.Detail = StatusOK, p+" is installed"
			return c
		}
	}
	c.Status = StatusFail
	c.Detail = "airlock-cni is in none of " + strings.Join(h.CNIDirs, ", ")
	c.Fix = "install -m 0755 airlock-cni /opt/cni/bin/ (make build writes it), see docs/KUBERNETES.md"
	return c
}

// ownerOf is a file's owner uid (-1 when unknown).
func ownerOf(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}
