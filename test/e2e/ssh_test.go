package e2e

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-dev/airlock/audit"
	"github.com/airlock-dev/airlock/test/fakenet"
	"github.com/airlock-dev/airlock/test/tcptest"
)

// sshServer is Debian's sshd in the fake internet: the test accepts on
// host:22 there (counting connections) and runs `sshd -i` on each, which
// serves one key whose forced command is git-upload-pack of the fixture
// repository, so a client can clone and do nothing else.
type sshServer struct {
	conns   atomic.Int64
	hostPub string // the host key, "ssh-ed25519 AAAA..."
	userKey string // the client's private key (OpenSSH PEM)

	mu  sync.Mutex
	log bytes.Buffer // sshd's stderr
}

func startSSHD(t *testing.T, h *fakenet.Host) *sshServer {
	t.Helper()
	for _, p := range []string{"/usr/sbin/sshd", "/usr/bin/ssh", "/usr/bin/ssh-keygen"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("%s is missing (scripts/deps.sh installs openssh-server and openssh-client): %v", p, err)
		}
	}
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil { // sshd's privilege separation directory
		t.Fatal(err)
	}
	dir := t.TempDir()
	keygen := func(name string) {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alk-e2e", "-f", filepath.Join(dir, name)).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
	}
	keygen("host_key")
	keygen("user_key")
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	s := &sshServer{hostPub: strings.Join(strings.Fields(read("host_key.pub"))[:2], " "), userKey: read("user_key")}
	repo := filepath.Join(w.gitDir, "repos", gitRepoPath)
	auth := fmt.Sprintf("restrict,command=\"git-upload-pack '%s'\" %s", repo, read("user_key.pub"))
	if err := os.WriteFile(filepath.Join(dir, "authorized_keys"), []byte(auth), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`HostKey %s
AuthorizedKeysFile %s
PermitRootLogin forced-commands-only
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
LogLevel VERBOSE
`, filepath.Join(dir, "host_key"), filepath.Join(dir, "authorized_keys"))
	cfgFile := filepath.Join(dir, "sshd_config")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	l, err := w.net.Listen(h, 22)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		defer s.mu.Unlock()
		if t.Failed() {
			t.Logf("sshd log:\n%s", s.log.String())
		}
	})
	go tcptest.Serve(l, func(c net.Conn) {
		s.conns.Add(1)
		s.serve(c, cfgFile)
	})
	return s
}

// serve runs `sshd -i` on c, bounded in time.
func (s *sshServer) serve(c net.Conn, cfgFile string) {
	f, err := c.(*net.TCPConn).File()
	if err != nil {
		return
	}
	defer f.Close()
	var stderr bytes.Buffer
	cmd := exec.Command("/usr/sbin/sshd", "-i", "-e", "-f", cfgFile)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = f, f, &stderr
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		stderr.WriteString(err.Error())
	} else {
		t := time.AfterFunc(2*time.Minute, func() { _ = cmd.Process.Kill() })
		_ = cmd.Wait()
		t.Stop()
	}
	s.mu.Lock()
	s.log.Write(stderr.Bytes())
	s.mu.Unlock()
}

// TestRootGitCloneOverSSH: git over SSH from inside `airlock
// run`: Debian's ssh and git clone git@github.com:... from an sshd in the fake
// internet, allowed by name and port (--allow github.com:22), decided as kind
// tcp by the name the sandbox resolved. The same clone from a name the policy
// does not allow (its DNS answer is refused), from that name's address typed
// in directly (an address the sandbox never got from the filter), and from an
// allowed registry on a port no rule opens are refused, and those targets,
// each running its own sshd, see zero connections.
func TestRootGitCloneOverSSH(t *testing.T) {
	e := newEnv(t, "")
	gh, evil, pypi := startSSHD(t, w.github), startSSHD(t, w.evil), startSSHD(t, w.pypi)
	script := strings.NewReplacer("KEY", gh.userKey, "HOSTPUB", gh.hostPub, "EVILIP", w.evil.IP.String(),
		"REPO", gitRepoPath, "FILE", gitFile).Replace(`
mkdir -p ~/.ssh && chmod 700 ~/.ssh
cat > ~/.ssh/id_ed25519 <<'EOF'
KEYEOF
chmod 600 ~/.ssh/id_ed25519
for h in github.com evil.example pypi.org EVILIP; do echo "$h HOSTPUB"; done > ~/.ssh/known_hosts
export GIT_SSH_COMMAND='ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=20'
git clone -q root@github.com:REPO tiny; echo "clone_exit=$?"
echo "content=$(cat tiny/FILE)"
echo "whoami=$(whoami)"
for t in evil:evil.example evilip:EVILIP pypi:pypi.org; do
  git clone -q "root@${t#*:}:REPO" "${t%%:*}" 2>&1 | tail -1
  echo "${t%%:*}_cloned=$(test -d "${t%%:*}" && echo yes || echo no)"
done
`)
	// Every sshd has its own host key; known_hosts names github.com's for all,
	// which is enough: the denied ones must never get as far as a key exchange.
	res := e.sh([]string{"--id", sandboxID("ssh"), "--allow", "github.com:22"}, script)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "clone_exit", "0", res)
	wantKV(t, m, "content", strings.TrimSpace(gitContent), res)
	wantKV(t, m, "whoami", "sandbox", res)
	for _, k := range []string{"evil_cloned", "evilip_cloned", "pypi_cloned"} {
		wantKV(t, m, k, "no", res)
	}
	if n := gh.conns.Load(); n != 1 {
		t.Errorf("github.com:22 got %d connections, want 1", n)
	}
	for name, s := range map[string]*sshServer{"evil.example": evil, "pypi.org": pypi} {
		if n := s.conns.Load(); n != 0 {
			t.Errorf("%s:22 got %d connections, want 0", name, n)
		}
	}

	recs := e.records()
	if got := recAt(recs, audit.KindTCP, audit.DecisionAllow, "github.com", 22); len(got) != 1 || got[0].IP != w.github.IP.String() {
		t.Errorf("ssh to github.com:22: got %v, want one tcp allow dialed at %s\n%s", got, w.github.IP, dump(recs))
	}
	mustFind(t, recs, match{kind: audit.KindDNS, decision: audit.DecisionDeny, qname: "evil.example"})
	mustDenyWith(t, recs, audit.KindTCP, "pypi.org", 22, "port_not_allowed")
	mustNotFind(t, recs, match{decision: audit.DecisionAllow, host: "evil.example"})
	// ssh looks up the sandbox's own hostname: /etc/hosts answers it.
	mustNotFind(t, recs, match{kind: audit.KindDNS, qname: "sandbox"})
	if n := len(find(recs, match{kind: audit.KindTCP, decision: audit.DecisionDeny})); n < 2 {
		t.Errorf("got %d tcp denials, want at least 2 (the typed-in address and pypi.org:22)\n%s", n, dump(recs))
	}
}
