package e2e

import (
	"testing"

	"github.com/airlock-dev/airlock/audit"
)

// fetchJava is a Java client run by the single-file source launcher
// (`java Fetch.java`, which needs only the JRE's jdk.compiler module): it
// fetches its argument with HttpsURLConnection and the JVM's default trust,
// which JAVA_TOOL_OPTIONS points at airlock's truststore.
const fetchJava = `import java.net.URL;
import javax.net.ssl.HttpsURLConnection;

public class Fetch {
    public static void main(String[] args) throws Exception {
        HttpsURLConnection c = (HttpsURLConnection) new URL(args[0]).openConnection();
        c.setConnectTimeout(60000);
        c.setReadTimeout(60000);
        try {
            System.out.println("java_status=" + c.getResponseCode());
        } catch (javax.net.ssl.SSLException e) {
            System.out.println("java_tls_error=" + e.getClass().getSimpleName());
        }
    }
}
`

// TestRootJavaTrustsInterception: a Java client inside the sandbox fetches an
// intercepted HTTPS URL and gets 200 (the audit record has the method and
// path, so the gateway did terminate the TLS). The control run, with the
// truststore option taken away, fails TLS verification: Java's own cacerts
// do not hold airlock's CA, so the truststore is what made the difference.
func TestRootJavaTrustsInterception(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/java")
	script := `
set -e
mkdir -p /tmp/j && cd /tmp/j
cat > Fetch.java <<'JAVA'
` + fetchJava + `JAVA
java Fetch.java https://pypi.org/simple/
JAVA_TOOL_OPTIONS= java Fetch.java https://pypi.org/simple/ | sed 's/^java_/control_/'
`
	res := e.sh([]string{"--id", sandboxID("java"), "--env", "HOME=/tmp/j"}, script)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "java_status", "200", res)
	wantKV(t, m, "control_tls_error", "SSLHandshakeException", res)
	recs := e.records()
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET", path: "/simple/"})
}

// fetchPy fetches https://pypi.org/simple/ with Python's default context and
// prints <argv[1]>=<status> or <argv[1]>=verify_failed.
const fetchPy = `import ssl, sys, urllib.request
try:
    r = urllib.request.urlopen("https://pypi.org/simple/", timeout=60, context=ssl.create_default_context())
    print("%s=%d" % (sys.argv[1], r.status))
except Exception as e:
    print("%s=%s" % (sys.argv[1], "verify_failed" if "CERTIFICATE_VERIFY_FAILED" in str(e) else repr(e)))
`

// TestRootSSLCertDirOnly: OpenSSL-based clients that read SSL_CERT_DIR verify
// the intercepted connection with the hashed directory alone. SSL_CERT_FILE
// is pointed at an empty file, because the default file location is the
// merged bundle itself and would verify without the directory. The controls
// with an empty directory instead fail, so the directory is what made the
// difference.
func TestRootSSLCertDirOnly(t *testing.T) {
	e := newEnv(t, "")
	requireTool(t, "/usr/bin/python3")
	requireTool(t, "/usr/bin/openssl")
	res := e.sh([]string{"--id", sandboxID("certdir")}, `
cat > /tmp/fetch.py <<'PY'
`+fetchPy+`PY
echo "certdir=$SSL_CERT_DIR"
SSL_CERT_FILE=/dev/null /usr/bin/python3 /tmp/fetch.py python_dir
mkdir /tmp/empty
SSL_CERT_FILE=/dev/null SSL_CERT_DIR=/tmp/empty /usr/bin/python3 /tmp/fetch.py python_control
echo | openssl s_client -connect pypi.org:443 -servername pypi.org -verify_return_error -no-CAfile -no-CAstore -CApath "$SSL_CERT_DIR" >/dev/null 2>&1; echo "s_client_exit=$?"
echo | openssl s_client -connect pypi.org:443 -servername pypi.org -verify_return_error -no-CAfile -no-CAstore -CApath /tmp/empty >/dev/null 2>&1; echo "s_client_control_exit=$?"
`)
	wantCode(t, res, 0)
	m := kv(res.stdout)
	wantKV(t, m, "certdir", "/run/airlock-trust/certs", res)
	wantKV(t, m, "python_dir", "200", res)
	wantKV(t, m, "python_control", "verify_failed", res)
	wantKV(t, m, "s_client_exit", "0", res)
	if m["s_client_control_exit"] == "0" || m["s_client_control_exit"] == "" {
		t.Errorf("openssl s_client verified with an empty CApath\n%s", res)
	}
	recs := e.records()
	mustFind(t, recs, match{kind: audit.KindHTTP, decision: audit.DecisionAllow, host: "pypi.org", method: "GET", path: "/simple/"})
}
