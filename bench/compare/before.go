package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"time"
)

// errLacks marks a before build's failure that says it lacks the row's
// feature (a flag, a command or a config key it does not know): the row
// prints n/a for it instead of failing the run.
var errLacks = errors.New("the before build lacks this feature")

// lackMarks are what a build says when asked for something it does not have.
var lackMarks = []string{"unknown flag", "flag provided but not defined", "unknown command", "unknown shorthand flag",
	"not found in type", "unknown field"}

// lacking wraps a before subject's run: a failure whose output names an
// unknown flag, command or config field becomes errLacks.
func lacking(run func() ([]metric, string, error)) func() ([]metric, string, error) {
	if run == nil {
		return nil
	}
	return func() ([]metric, string, error) {
		got, out, err := run()
		if err == nil {
			return got, out, nil
		}
		if line := lackLine(out + "\n" + err.Error()); line != "" {
			return nil, out, fmt.Errorf("%w: %s", errLacks, line)
		}
		return got, out, err
	}
}

// lackLine is the first line of out that says something is unknown ("" for
// none).
func lackLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		low := strings.ToLower(l)
		for _, m := range lackMarks {
			if strings.Contains(low, m) {
				return strings.TrimSpace(tail(l, 200))
			}
		}
	}
	return ""
}

// twin makes the subject mk(bin) for this build and, with a before build,
// the same subject for it as Before (its failures for a missing feature
// print n/a). needs names flags of `airlock run` the subject uses that an
// older build may not have: one missing from the before build's help makes
// its cell n/a without running it.
func (e *env) twin(mk func(bin string) subject, needs ...string) subject {
	s := mk(e.bin)
	if e.before == "" {
		return s
	}
	b := mk(e.before)
	b.Name, b.Peer, b.Goals, b.Before = "before", false, nil, nil
	b.run = lacking(b.run)
	for _, f := range needs {
		if !e.beforeHas(f) {
			b.run, b.Note = nil, fmt.Sprintf("n/a: the before build's `airlock run` has no %s", f)
		}
	}
	s.Before = &b
	return s
}

// beforeHas says whether the before build's `airlock run --help` names flag.
func (e *env) beforeHas(flag string) bool {
	if e.beforeHelp == "" {
		out, _ := output(e.ctx, time.Minute, e.before, "run", "--help")
		e.beforeHelp = out + " "
	}
	return strings.Contains(e.beforeHelp, flag)
}

// ciUser is the unprivileged user of the rootless rows.
type ciUser struct{ name, uid, gid string }

func lookupUser(name string) (*ciUser, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("rootless user: %w (scripts/ci-user.sh creates alk-ci)", err)
	}
	if u.Uid == "0" || u.Gid == "0" {
		return nil, fmt.Errorf("rootless user %s is uid %s gid %s: it must not be root", name, u.Uid, u.Gid)
	}
	return &ciUser{name: name, uid: u.Uid, gid: u.Gid}, nil
}

// asUser is the command prefix that runs as the user with no other groups,
// no capabilities and a clean environment (as scripts/unpriv-tests.sh does).
func (u *ciUser) asUser(runtimeDir string) []string {
	return []string{"setpriv", "--reuid", u.uid, "--regid", u.gid, "--clear-groups", "--inh-caps=-all", "--", "env", "-i",
		"PATH=/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent", "XDG_RUNTIME_DIR=" + runtimeDir}
}

// rootlessDir is one build's copy for the rootless rows: the binaries the
// user may execute and directories the user owns.
type rootlessDir struct{ bin, audit, run, sock string }

// siblings are the binaries a build is made of: the front execs the core
// beside it, and both run the sandbox's init from beside themselves.
var siblings = []string{"airlock", "airlock-core", "airlock-init"}

// rootlessDirs copies each build (with whichever siblings it has) under the
// bench's directory, where the user can execute it, with an audit and a
// runtime directory the user owns (all removed with the directory).
func (e *env) rootlessDirs() error {
	if e.user == nil {
		return nil
	}
	e.rootless = map[string]rootlessDir{}
	builds := map[string]string{"after": e.bin}
	if e.before != "" {
		builds["before"] = e.before
	}
	for name, bin := range builds {
		dir := filepath.Join(e.dir, "rootless-"+name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		for i, sib := range siblings {
			src := filepath.Join(filepath.Dir(bin), sib)
			if i == 0 {
				src = bin
			}
			raw, err := os.ReadFile(src)
			if os.IsNotExist(err) && i > 0 {
				continue
			}
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, sib), raw, 0o755); err != nil {
				return err
			}
		}
		d := rootlessDir{bin: filepath.Join(dir, "airlock"), audit: filepath.Join(dir, "audit"), run: filepath.Join(dir, "run"),
			sock: filepath.Join(dir, "none.sock")}
		for _, p := range []string{d.audit, d.run} {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
			if out, err := exec.Command("chown", e.user.uid+":"+e.user.gid, p).CombinedOutput(); err != nil {
				return fmt.Errorf("chown %s: %v: %s", p, err, out)
			}
		}
		e.rootless[bin] = d
	}
	return nil
}
