package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/test/fakenet"
)

// Names of the fake internet and the policy.
const (
	benchHost  = "bench.example.test" // allowed: tunnels pass through
	mitmHost   = "pypi.org"           // a registry: airlock intercepts it by default
	deniedName = "denied.example.test"
	smallBody  = "ok\n"
	maxBlob    = 1 << 30
)

// env is one run's fake internet, configs and peers.
type env struct {
	ctx       context.Context // cancelled by SIGINT/SIGTERM: commands get SIGTERM
	dir       string          // 0755 workspace of the sandboxes: loadclient, scripts, CA files
	bin       string          // airlock
	client    string          // loadclient
	net       *fakenet.Net
	host      *fakenet.Host
	caFile    string // the fake internet's CA
	config    string // airlock.yaml
	procs     procs
	squid     string // 127.0.0.1:port, no bump
	squidTLS  string // 127.0.0.1:port, ssl-bump every CONNECT
	squidCA   string // the CA squid mints leaves from
	squidPID  int
	dnsmasq   string
	unbound   string
	closeOnce sync.Once
	perfDir   string // set: every airlock run is recorded by perf here
	perfN     int
	hfN       int // hyperfine result files made
	// noInspect is config with content inspection off (inspect.enable).
	noInspect string
	// before is airlock built from the before revision ("" for none).
	before     string
	beforeHelp string // its `run --help`, read once
	// user runs the rootless rows (nil: none); rootless holds each build's
	// copy, made by rootlessDirs.
	user     *ciUser
	rootless map[string]rootlessDir
}

// close stops the peers and daemons (waiting for each), removes the fake
// internet and the workspace. It runs once; a concurrent caller (the signal
// handler and the failing run) waits until it is done.
func (e *env) close() {
	e.closeOnce.Do(func() {
		e.procs.stopAll()
		if e.net != nil {
			e.net.Close()
		}
		os.RemoveAll(e.dir)
	})
}

// newEnv makes the workspace, the fake internet and airlock's config.
func newEnv(ctx context.Context, bin, client string) (*env, error) {
	// /var/tmp, not /tmp: the workspace is bound at the same path inside the
	// sandbox, whose /tmp is its own tmpfs.
	dir, err := os.MkdirTemp("/var/tmp", "airlock-compare-")
	if err != nil {
		return &env{ctx: ctx}, err
	}
	e := &env{ctx: ctx, dir: dir, bin: bin, client: filepath.Join(dir, "loadclient"), caFile: filepath.Join(dir, "fakenet-ca.pem"),
		config: filepath.Join(dir, "airlock.yaml"), noInspect: filepath.Join(dir, "airlock-no-inspect.yaml")}
	if err := os.Chmod(dir, 0o755); err != nil {
		return e, err
	}
	raw, err := os.ReadFile(client)
	if err != nil {
		return e, err
	}
	if err := os.WriteFile(e.client, raw, 0o755); err != nil {
		return e, err
	}
	fakenet.CleanStale()
	if e.net, err = fakenet.New(); err != nil {
		return e, err
	}
	if e.host, err = e.net.AddHost([]string{benchHost, mitmHost}, http.HandlerFunc(origin)); err != nil {
		return e, err
	}
	if err := e.net.WriteCA(e.caFile); err != nil {
		return e, err
	}
	return e, e.writeAirlockConfig()
}

// origin serves /small (3 bytes), /blob?size=N (N bytes of
// application/octet-stream, at most 1 GiB) and /sink (reads the request
// body, answers 3 bytes).
func origin(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/sink" {
		if _, err := io.Copy(io.Discard, r.Body); err != nil {
			http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
			return
		}
	}
	if r.URL.Path != "/blob" {
		w.Header().Set("Content-Length", strconv.Itoa(len(smallBody)))
		_, _ = w.Write([]byte(smallBody))
		return
	}
	size, err := strconv.Atoi(r.URL.Query().Get("size"))
	if err != nil || size < 0 || size > maxBlob {
		http.Error(w, "size: want 0..1GiB", http.StatusBadRequest)
		return
	}
	chunk := bytes.Repeat([]byte("airlock-compare-blob\n"), 64<<10/21+1)[:64<<10]
	w.Header().Set("Content-Length", strconv.Itoa(size))
	// A download, as a package or image blob is: not text a content scanner
	// reads (net/http would sniff this body as text/plain).
	w.Header().Set("Content-Type", "application/octet-stream")
	for sent := 0; sent < size; sent += len(chunk) {
		if _, err := w.Write(chunk[:min(len(chunk), size-sent)]); err != nil {
			return
		}
	}
}

// writeAirlockConfig: the bench policy (benchHost allowed on 80, 443 and its
// echo port 7, registries
// intercepted by default), the fake internet's DNS and CA, two CPUs for the
// sandbox (the host-side clients get two too) and the DNS filter's
// per-sandbox rate limit lifted (its default, 200 q/s, would be the number), and
// the sandbox's new-flow limit raised (its default, 500/s after a burst of 2000,
// would be the number of the new-connection-per-request measure: a connect past
// it waits a second for its SYN's retransmission).
func (e *env) writeAirlockConfig() error {
	state := filepath.Join(e.dir, "state")
	if err := os.MkdirAll(state, 0o700); err != nil {
		return err
	}
	cfg := fmt.Sprintf(`policy: {mode: enforce, allow: [%q, %q]}
dns: {upstreams: [%q], rate_limit: 1000000000, rate_burst: 1000000000}
upstream: {allow_cidrs: [%q], ca_file: %q}
audit: {file: %q}
ca: {cert: %q, key: %q}
limits: {memory: 1G, cpus: 2, pids: 512, timeout: 5m, new_flows: 100000, new_flow_burst: 100000}
`, benchHost, benchHost+":7", e.net.DNSAddr.String(), e.net.Subnet.String(), e.caFile, filepath.Join(state, "audit", "audit.jsonl"),
		filepath.Join(state, "ca", "ca.pem"), filepath.Join(state, "ca", "ca.key"))
	if err := os.WriteFile(e.config, []byte(cfg), 0o600); err != nil {
		return err
	}
	return os.WriteFile(e.noInspect, []byte(cfg+"inspect: {enable: false}\n"), 0o600)
}

// startSquid runs squid -N with two loopback ports: a plain forward proxy and
// one that bumps every CONNECT with leaves from its own CA, trusting the fake
// internet's CA upstream. Names resolve from a hosts file.
func (e *env) startSquid() error {
	dir := filepath.Join(e.dir, "squid")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	p1, err := freePort()
	if err != nil {
		return err
	}
	p2, err := freePort()
	if err != nil {
		return err
	}
	e.squid, e.squidTLS = fmt.Sprintf("127.0.0.1:%d", p1), fmt.Sprintf("127.0.0.1:%d", p2)
	e.squidCA = filepath.Join(e.dir, "squid-ca.pem")
	key := filepath.Join(dir, "ca.key")
	if err := writeCA("airlock-compare squid CA", e.squidCA, key); err != nil {
		return err
	}
	hosts := fmt.Sprintf("%s %s %s\n", e.host.IP, benchHost, mitmHost)
	if err := os.WriteFile(filepath.Join(dir, "hosts"), []byte(hosts), 0o644); err != nil {
		return err
	}
	ssldb := filepath.Join(dir, "ssl_db")
	if _, err := output(e.ctx, time.Minute, "/usr/lib/squid/security_file_certgen", "-c", "-s", ssldb, "-M", "16MB"); err != nil {
		return err
	}
	conf := fmt.Sprintf(`http_port %[1]s
http_port %[2]s ssl-bump generate-host-certificates=on dynamic_cert_mem_cache_size=16MB tls-cert=%[3]s tls-key=%[4]s
sslcrtd_program /usr/lib/squid/security_file_certgen -s %[5]s -M 16MB
sslcrtd_children 4
acl step1 at_step SslBump1
ssl_bump peek step1
ssl_bump bump all
tls_outgoing_options cafile=%[6]s
http_access allow all
cache deny all
hosts_file %[7]s/hosts
dns_nameservers %[8]s
access_log stdio:%[7]s/access.log
cache_log %[7]s/cache.log
pid_filename %[7]s/squid.pid
coredump_dir %[7]s
pinger_enable off
max_filedescriptors 8192
shutdown_lifetime 1 second
forwarded_for delete
via off
`, e.squid, e.squidTLS, e.squidCA, key, ssldb, e.caFile, dir, e.net.DNSAddr.Addr())
	confFile := filepath.Join(dir, "squid.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return err
	}
	if out, err := exec.Command("chown", "-R", "proxy:proxy", dir).CombinedOutput(); err != nil {
		return fmt.Errorf("chown squid dir: %v: %s", err, out)
	}
	cmd, err := e.procs.start(filepath.Join(e.dir, "squid.out"), "squid", "-N", "-f", confFile)
	if err != nil {
		return err
	}
	e.squidPID = cmd.Process.Pid
	for _, a := range []string{e.squid, e.squidTLS} {
		if err := waitTCP(a, 30*time.Second); err != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "cache.log"))
			return fmt.Errorf("squid: %w: %s", err, tail(string(log), 1500))
		}
	}
	return nil
}

// startDnsmasq runs dnsmasq as a forwarding cache of the fake internet's DNS
// on a loopback port, answering deniedName with NXDOMAIN itself.
func (e *env) startDnsmasq() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	e.dnsmasq = fmt.Sprintf("127.0.0.1:%d", port)
	_, err = e.procs.start(filepath.Join(e.dir, "dnsmasq.out"), "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--listen-address=127.0.0.1", "--bind-interfaces", "--port="+strconv.Itoa(port), "--no-resolv", "--no-hosts",
		"--server="+e.net.DNSAddr.Addr().String(), "--cache-size=10000", "--address=/"+deniedName+"/",
		"--pid-file="+filepath.Join(e.dir, "dnsmasq.pid"), "--user=root")
	if err != nil {
		return err
	}
	return waitTCP(e.dnsmasq, 20*time.Second)
}

// startUnbound runs unbound (two threads, no DNSSEC validation) as a
// forwarding cache of the fake internet's DNS, deniedName always NXDOMAIN.
func (e *env) startUnbound() error {
	port, err := freePort()
	if err != nil {
		return err
	}
	e.unbound = fmt.Sprintf("127.0.0.1:%d", port)
	dir := filepath.Join(e.dir, "unbound")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := fmt.Sprintf(`server:
  interface: 127.0.0.1
  port: %d
  do-daemonize: no
  username: ""
  chroot: ""
  directory: %q
  pidfile: %q
  use-syslog: no
  verbosity: 0
  num-threads: 2
  do-ip6: no
  access-control: 127.0.0.0/8 allow
  module-config: "iterator"
  local-zone: "test." nodefault
  local-zone: "%s." always_nxdomain
  msg-cache-size: 16m
  rrset-cache-size: 32m
  so-reuseport: yes
forward-zone:
  name: "."
  forward-addr: %s@53
`, port, dir, filepath.Join(dir, "unbound.pid"), deniedName, e.net.DNSAddr.Addr())
	confFile := filepath.Join(dir, "unbound.conf")
	if err := os.WriteFile(confFile, []byte(conf), 0o644); err != nil {
		return err
	}
	if _, err := e.procs.start(filepath.Join(e.dir, "unbound.out"), "unbound", "-d", "-c", confFile); err != nil {
		return err
	}
	return waitTCP(e.unbound, 20*time.Second)
}

// writeCA writes a self-signed ECDSA CA certificate and its key.
func writeCA(cn, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return err
	}
	return os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600)
}
