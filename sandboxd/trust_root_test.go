package sandboxd

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// caAndLeaf makes a CA and a leaf for name signed by it, both DER.
func caAndLeaf(t *testing.T, name string) (ca, leaf []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "airlock trust test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	if ca, err = x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey); err != nil {
		t.Fatal(err)
	}
	leafKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leafTmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: name}, DNSNames: []string{name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if leaf, err = x509.CreateCertificate(rand.Reader, leafTmpl, caTmpl, &leafKey.PublicKey, caKey); err != nil {
		t.Fatal(err)
	}
	return ca, leaf
}

// TestTrustDirInSandbox: the trust directory is mounted at SandboxTrustDir,
// the environment points runtimes at it, openssl verifies a leaf with only
// the hashed directory (no bundle), and the sandbox can neither change the
// files nor add any beside them.
func TestTrustDirInSandbox(t *testing.T) {
	needOpenSSL(t)
	e, _ := newTestExecutor(t, nil)
	ca, leaf := caAndLeaf(t, "trust.airlock.test")
	d := hostDir(t, 0o755)
	bundle := filepath.Join(d, "bundle.pem")
	if err := os.WriteFile(bundle, bundleOf(ca), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "leaf.pem"), bundleOf(leaf), 0o644); err != nil {
		t.Fatal(err)
	}
	trust := filepath.Join(d, "trust")
	if _, err := WriteTrustDir(trust, bundleOf(ca)); err != nil {
		t.Fatal(err)
	}
	// World-writable on the host: only the read-only mount keeps the sandbox out.
	if err := filepath.WalkDir(trust, func(p string, de os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := os.FileMode(0o666)
		if de.IsDir() {
			mode = 0o777
		}
		return os.Chmod(p, mode)
	}); err != nil {
		t.Fatal(err)
	}
	store, err := os.ReadFile(filepath.Join(trust, TrustJavaStore))
	if err != nil {
		t.Fatal(err)
	}
	script := `env | grep -E '^(SSL_CERT_DIR|JAVA_TOOL_OPTIONS|AWS_CA_BUNDLE|DENO_CERT)=' | sort
openssl verify -no-CAfile -no-CAstore -CApath "$SSL_CERT_DIR" ` + d + `/leaf.pem 2>&1
for c in "touch $SSL_CERT_DIR/extra.0" "rm -f $SSL_CERT_DIR/*.0" "cp /dev/null /run/airlock-trust/truststore.p12" "mkdir /run/airlock-trust2" "mkdir $SSL_CERT_DIR/sub"; do
  if sh -c "$c" 2>/dev/null; then echo "WROTE: $c"; fi
done
ls /run/airlock-trust /run/airlock-trust/certs | wc -l`
	res := mustRun(t, e, Spec{Argv: sh(script), CABundle: bundle, TrustDir: trust})
	out := string(res.Stdout)
	for _, want := range []string{
		"SSL_CERT_DIR=" + SandboxTrustDir + "/certs\n",
		"JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore=" + SandboxTrustDir + "/truststore.p12 -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=changeit\n",
		"AWS_CA_BUNDLE=" + SystemCABundle + "\n", "DENO_CERT=" + SystemCABundle + "\n",
		d + "/leaf.pem: OK\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("sandbox output lacks %q:\n%s%s", want, out, res.Stderr)
		}
	}
	if strings.Contains(out, "WROTE") {
		t.Errorf("the sandbox wrote to the trust directory:\n%s", out)
	}
	after, err := os.ReadFile(filepath.Join(trust, TrustJavaStore))
	if err != nil || !bytes.Equal(after, store) {
		t.Errorf("truststore changed on the host (err %v)", err)
	}
	entries, err := os.ReadDir(filepath.Join(trust, TrustCertsDir))
	if err != nil || len(entries) != 1 {
		t.Errorf("got %d hashed files on the host (err %v), want 1", len(entries), err)
	}
}

// TestTrustDirAbsentWithoutSpec: no TrustDir, no trust variables and nothing
// at SandboxTrustDir (the bundle variables alone stay as before).
func TestTrustDirAbsentWithoutSpec(t *testing.T) {
	e, _ := newTestExecutor(t, nil)
	res := mustRun(t, e, Spec{Argv: sh(`env | grep -cE '^(SSL_CERT_DIR|JAVA_TOOL_OPTIONS)='; ls -d /run/airlock-trust 2>&1 | grep -c 'No such'`)})
	if got := string(res.Stdout); got != "0\n1\n" {
		t.Errorf("got %q, want no trust variables and no %s", got, SandboxTrustDir)
	}
}
