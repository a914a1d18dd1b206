package sandboxd

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	pkcs12 "software.sslmate.com/src/go-pkcs12"
)

// rawATV is one attribute of a hand-built name: tag is the value's universal tag.
type rawATV struct {
	oid asn1.ObjectIdentifier
	tag int
	val []byte
}

var (
	oidCN = asn1.ObjectIdentifier{2, 5, 4, 3}
	oidO  = asn1.ObjectIdentifier{2, 5, 4, 10}
	oidOU = asn1.ObjectIdentifier{2, 5, 4, 11}
	oidC  = asn1.ObjectIdentifier{2, 5, 4, 6}
	oidSN = asn1.ObjectIdentifier{2, 5, 4, 5}
)

func bmp(s string) []byte {
	var b []byte
	for _, u := range utf16.Encode([]rune(s)) {
		b = binary.BigEndian.AppendUint16(b, u)
	}
	return b
}

func universal(s string) []byte {
	var b []byte
	for _, r := range s {
		b = binary.BigEndian.AppendUint32(b, uint32(r))
	}
	return b
}

// rawName encodes a Name from RDNs of attributes, each value with its own tag.
func rawName(t testing.TB, rdns ...[]rawATV) []byte {
	t.Helper()
	var seq []asn1.RawValue
	for _, rdn := range rdns {
		var set []byte
		for _, a := range rdn {
			b, err := asn1.Marshal(struct {
				Type  asn1.ObjectIdentifier
				Value asn1.RawValue
			}{a.oid, asn1.RawValue{Class: asn1.ClassUniversal, Tag: a.tag, Bytes: a.val}})
			if err != nil {
				t.Fatal(err)
			}
			set = append(set, b...)
		}
		seq = append(seq, asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: set})
	}
	b, err := asn1.Marshal(seq)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// selfSigned makes a DER CA certificate whose subject (and issuer) is
// rawSubject; Go's x509 need not be able to parse it.
func selfSigned(t testing.TB, rawSubject []byte) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), RawSubject: rawSubject, NotBefore: time.Unix(0, 0),
		NotAfter: time.Unix(4e9, 0), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

// opensslHash is what `openssl x509 -hash -noout` prints for c.
func opensslHash(t *testing.T, der []byte) uint32 {
	t.Helper()
	cmd := exec.Command("openssl", "x509", "-hash", "-noout")
	cmd.Stdin = bytes.NewReader(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("openssl x509 -hash: %v", err)
	}
	h, err := strconv.ParseUint(strings.TrimSpace(string(out)), 16, 32)
	if err != nil {
		t.Fatalf("openssl printed %q: %v", out, err)
	}
	return uint32(h)
}

func needOpenSSL(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Skip("openssl not installed (scripts/deps.sh installs it)")
	}
}

// TestSubjectHashMatchesOpenSSL compares SubjectHash with openssl's own hash
// for names that exercise each rule of the canonical form.
func TestSubjectHashMatchesOpenSSL(t *testing.T) {
	needOpenSSL(t)
	tests := []struct {
		name string
		rdns [][]rawATV
	}{
		{"printable", [][]rawATV{{{oidC, asn1.TagPrintableString, []byte("DE")}}, {{oidCN, asn1.TagPrintableString, []byte("Airlock Test CA")}}}},
		{"case and whitespace", [][]rawATV{{{oidO, asn1.TagUTF8String, []byte("  Mixed\t CASE \n\n Org  ")}}, {{oidCN, asn1.TagPrintableString, []byte("A  B")}}}},
		{"same name folded", [][]rawATV{{{oidO, asn1.TagUTF8String, []byte("mixed case org")}}, {{oidCN, asn1.TagUTF8String, []byte("a b")}}}},
		{"utf8 non-ascii kept", [][]rawATV{{{oidCN, asn1.TagUTF8String, []byte("Ünïcödé Wurzel ÄÖ")}}}},
		{"bmpstring", [][]rawATV{{{oidCN, asn1.TagBMPString, bmp("BMP Ŵurzel CA")}}}},
		{"universalstring", [][]rawATV{{{oidCN, 28, universal("Universal CA 😀")}}}},
		{"ia5 and t61", [][]rawATV{{{oidOU, asn1.TagIA5String, []byte("IA5 Unit")}}, {{oidCN, asn1.TagT61String, []byte("T61 caf\xe9")}}}},
		{"numericstring kept", [][]rawATV{{{oidSN, 18, []byte("12 34")}}, {{oidCN, asn1.TagUTF8String, []byte("n")}}}},
		{"multi-valued rdn unsorted", [][]rawATV{{{oidOU, asn1.TagUTF8String, []byte("Zeta Unit")}, {oidCN, asn1.TagUTF8String, []byte("A")}}}},
		{"empty value", [][]rawATV{{{oidCN, asn1.TagUTF8String, []byte("   ")}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := rawName(t, tt.rdns...)
			got, err := SubjectHash(name)
			if err != nil {
				t.Fatal(err)
			}
			if want := opensslHash(t, selfSigned(t, name)); got != want {
				t.Errorf("got %08x, want %08x (openssl)", got, want)
			}
		})
	}
}

// TestSubjectHashSystemRoots compares SubjectHash with openssl for every
// certificate of the system bundle (real roots: PrintableString, UTF8String,
// BMPString and T61String names).
func TestSubjectHashSystemRoots(t *testing.T) {
	needOpenSSL(t)
	pemData, err := os.ReadFile(SystemCABundle)
	if err != nil {
		t.Skipf("no system bundle: %v", err)
	}
	certs, err := parseBundle(pemData)
	if err != nil {
		t.Fatal(err)
	}
	if len(certs) > 300 {
		certs = certs[:300]
	}
	for i, c := range certs {
		got, err := SubjectHash(c.rawSubject)
		if err != nil {
			t.Fatalf("certificate %d: %v", i, err)
		}
		if want := opensslHash(t, c.raw); got != want {
			t.Errorf("certificate %d: got %08x, want %08x (openssl)", i, got, want)
		}
	}
}

func bundleOf(certs ...[]byte) []byte {
	var b []byte
	for _, c := range certs {
		b = append(b, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c})...)
	}
	return b
}

// TestWriteTrustDir checks the layout: one file per distinct certificate,
// named by openssl's hash with .0/.1 for a shared subject, and a truststore
// that parses back to the same certificates, each marked trusted for Java. A
// root Go's x509 refuses (a UniversalString name) is carried over too.
func TestWriteTrustDir(t *testing.T) {
	needOpenSSL(t)
	a := selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Airlock A")}}))
	b1 := selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Airlock B")}}))
	b2 := selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagPrintableString, []byte(" airlock  b ")}}))
	bundle := append(bundleOf(a, b1, a), []byte("-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n")...)
	odd := selfSigned(t, rawName(t, []rawATV{{oidCN, 28, universal("Universal Root")}}))
	if _, err := x509.ParseCertificate(odd); err == nil {
		t.Fatal("test setup: Go parses a UniversalString name now; pick another oddity")
	}
	bundle = append(bundle, bundleOf(b2, odd)...)
	dir := filepath.Join(t.TempDir(), "trust")
	if err := os.MkdirAll(filepath.Join(dir, "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	n, err := WriteTrustDir(dir, bundle)
	if err != nil {
		t.Fatal(err)
	}
	if n != 4 {
		t.Errorf("got %d certificates, want 4 (a duplicate dropped)", n)
	}
	if _, err := os.Stat(filepath.Join(dir, "stale")); !os.IsNotExist(err) {
		t.Errorf("stale entry survived: %v", err)
	}
	ha, hb := opensslHash(t, a), opensslHash(t, b1)
	if hb2 := opensslHash(t, b2); hb2 != hb {
		t.Fatalf("test setup: %08x != %08x, want a shared subject hash", hb2, hb)
	}
	want := map[string][]byte{fmt.Sprintf("%08x.0", ha): a, fmt.Sprintf("%08x.0", hb): b1, fmt.Sprintf("%08x.1", hb): b2,
		fmt.Sprintf("%08x.0", opensslHash(t, odd)): odd}
	entries, err := os.ReadDir(filepath.Join(dir, TrustCertsDir))
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(want) {
		t.Errorf("got %d files, want %d", len(entries), len(want))
	}
	for name, c := range want {
		data, err := os.ReadFile(filepath.Join(dir, TrustCertsDir, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if blk, _ := pem.Decode(data); blk == nil || !bytes.Equal(blk.Bytes, c) {
			t.Errorf("%s: got another certificate", name)
		}
	}
	// DecodeTrustStore parses what it reads, so the store is checked with
	// Go-parseable roots only; keytool reads the odd one below.
	dir2 := filepath.Join(t.TempDir(), "trust")
	if _, err := WriteTrustDir(dir2, bundleOf(a, b1, b2)); err != nil {
		t.Fatal(err)
	}
	store, err := os.ReadFile(filepath.Join(dir2, TrustJavaStore))
	if err != nil {
		t.Fatal(err)
	}
	got, err := pkcs12.DecodeTrustStore(store, TrustStorePassword)
	if err != nil {
		t.Fatalf("decode truststore: %v", err)
	}
	if len(got) != 3 || !bytes.Equal(got[0].Raw, a) || !bytes.Equal(got[1].Raw, b1) || !bytes.Equal(got[2].Raw, b2) {
		t.Errorf("got %d certificates back, want a, b1, b2 in order", len(got))
	}
}

// TestJavaTrustStoreKeytool has Java's keytool read the truststore: every
// certificate must be a trustedCertEntry (Java ignores keyless certificates
// without the trusted-key-usage attribute).
func TestJavaTrustStoreKeytool(t *testing.T) {
	if _, err := exec.LookPath("keytool"); err != nil {
		t.Skip("keytool not installed (scripts/deps.sh installs default-jre-headless)")
	}
	a := selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("Airlock A")}}))
	b := selfSigned(t, rawName(t, []rawATV{{oidCN, 28, universal("Universal Root")}}))
	dir := filepath.Join(t.TempDir(), "trust")
	if _, err := WriteTrustDir(dir, bundleOf(a, b)); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("keytool", "-list", "-keystore", filepath.Join(dir, TrustJavaStore),
		"-storetype", "PKCS12", "-storepass", TrustStorePassword).CombinedOutput()
	if err != nil {
		t.Fatalf("keytool: %v\n%s", err, out)
	}
	if got := strings.Count(string(out), "trustedCertEntry"); got != 2 {
		t.Errorf("got %d trustedCertEntry, want 2:\n%s", got, out)
	}
}

func TestWriteTrustDirBadBundle(t *testing.T) {
	good := selfSigned(t, rawName(t, []rawATV{{oidCN, asn1.TagUTF8String, []byte("ok")}}))
	tests := []struct {
		name, bundle, want string
	}{
		{"empty", "", "holds no certificate"},
		{"only a key", "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n", "holds no certificate"},
		{"garbage certificate", string(bundleOf(good)) + "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", "pem block 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := WriteTrustDir(filepath.Join(t.TempDir(), "trust"), []byte(tt.bundle))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
