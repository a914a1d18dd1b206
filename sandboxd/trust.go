package sandboxd

import (
	"bytes"
	"crypto/sha1" //nolint:gosec // OpenSSL's subject hash is defined as SHA-1; it names files, it proves nothing.
	"crypto/x509"
	"encoding/asn1"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"unicode/utf16"
	"unicode/utf8"

	pkcs12 "software.sslmate.com/src/go-pkcs12"
)

// The trust directory: the merged bundle in the forms runtimes that do not
// read SystemCABundle want, written by WriteTrustDir (or kept between
// processes by OpenTrustDir, trustcache.go) and mounted read-only at
// SandboxTrustDir (Spec.TrustDir, PrepareSpec.TrustDir):
//
//	certs/<subject-hash>.<n>  one PEM certificate each, OpenSSL's c_rehash layout (SSL_CERT_DIR)
//	truststore.p12            a PKCS#12 Java truststore (JAVA_TOOL_OPTIONS)
const (
	// SandboxTrustDir is where the trust directory appears in the sandbox.
	SandboxTrustDir = "/run/airlock-trust"
	// TrustCertsDir is the hashed certificate directory below a trust directory.
	TrustCertsDir = "certs"
	// TrustJavaStore is the Java truststore below a trust directory.
	TrustJavaStore = "truststore.p12"
	// TrustStorePassword is the Java truststore's password. It guards nothing
	// (the store holds public certificates only); Java 17 needs one to check the
	// file's MAC and read its certificate bag, so it is the conventional one.
	TrustStorePassword = pkcs12.DefaultPassword
)

// TrustEnv is the environment that points the sandbox's runtimes at the trust
// directory, set when a trust directory is given.
func TrustEnv() []string {
	store := SandboxTrustDir + "/" + TrustJavaStore
	return []string{
		"SSL_CERT_DIR=" + SandboxTrustDir + "/" + TrustCertsDir,
		"JAVA_TOOL_OPTIONS=-Djavax.net.ssl.trustStore=" + store +
			" -Djavax.net.ssl.trustStoreType=PKCS12 -Djavax.net.ssl.trustStorePassword=" + TrustStorePassword,
	}
}

// WriteTrustDir replaces dir with a trust directory for the PEM bundle: the
// hashed directory and the Java truststore. It returns how many distinct
// certificates they hold; a CERTIFICATE block that does not parse is an error
// naming its position, as is a bundle without certificates.
func WriteTrustDir(dir string, bundle []byte) (int, error) {
	certs, err := parseBundle(bundle)
	if err != nil {
		return 0, err
	}
	if err := os.RemoveAll(dir); err != nil {
		return 0, fmt.Errorf("trust dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return 0, fmt.Errorf("trust dir: %w", err)
	}
	if err := writeTrustTree(dir, certs, ""); err != nil {
		return 0, err
	}
	return len(certs), nil
}

// bundleCert is one certificate of the bundle: its DER and its subject.
// Only the structure is parsed, so a root Go's x509 would refuse (a
// UniversalString name, a negative serial) is still carried over as OpenSSL and
// Java would read it.
type bundleCert struct {
	raw, rawSubject []byte
}

// parseBundle returns the bundle's certificates, duplicates dropped, in order.
func parseBundle(bundle []byte) ([]bundleCert, error) {
	var certs []bundleCert
	seen := map[string]bool{}
	for n, rest := 1, bundle; ; n++ {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		subject, err := certSubject(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("trust dir: pem block %d of the bundle: %w", n, err)
		}
		if !seen[string(b.Bytes)] {
			seen[string(b.Bytes)] = true
			certs = append(certs, bundleCert{raw: b.Bytes, rawSubject: subject})
		}
	}
	if len(certs) == 0 {
		return nil, errors.New("trust dir: the bundle holds no certificate")
	}
	return certs, nil
}

// certSubject returns the DER subject Name of a DER certificate (RFC 5280
// 4.1: the TBSCertificate's sixth field, after an optional version).
func certSubject(der []byte) ([]byte, error) {
	var cert struct {
		TBS    asn1.RawValue
		SigAlg asn1.RawValue
		Sig    asn1.BitString
	}
	if rest, err := asn1.Unmarshal(der, &cert); err != nil || len(rest) > 0 {
		return nil, fmt.Errorf("not a certificate (%v, %d trailing bytes)", err, len(rest))
	}
	var tbs struct {
		Version  int `asn1:"optional,explicit,default:0,tag:0"`
		Serial   asn1.RawValue
		SigAlg   asn1.RawValue
		Issuer   asn1.RawValue
		Validity asn1.RawValue
		Subject  asn1.RawValue
	}
	if _, err := asn1.UnmarshalWithParams(cert.TBS.FullBytes, &tbs, ""); err != nil {
		return nil, fmt.Errorf("not a certificate: %w", err)
	}
	if tbs.Subject.Tag != asn1.TagSequence || !tbs.Subject.IsCompound {
		return nil, errors.New("not a certificate: the subject is not a SEQUENCE")
	}
	if _, err := canonicalName(tbs.Subject.FullBytes); err != nil {
		return nil, fmt.Errorf("subject: %w", err)
	}
	return tbs.Subject.FullBytes, nil
}

// writeHashedDir writes each certificate to <subject-hash>.<n>, n counting
// up from 0 among certificates whose subjects hash alike.
//
// With reuse (another trust directory's hashed dir, "" for none) a file there
// with the same name and exactly the same bytes, owned by this user or root
// and writable by no one else, is hard-linked instead of written: creating
// ~145 files is most of the cost on a disk-backed /run, a link is not.
func writeHashedDir(dir string, certs []bundleCert, reuse string) error {
	next := map[uint32]int{}
	for _, c := range certs {
		h, err := SubjectHash(c.rawSubject)
		if err != nil {
			return fmt.Errorf("trust dir: %w", err)
		}
		name := fmt.Sprintf("%08x.%d", h, next[h])
		next[h]++
		data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.raw})
		if reuse != "" && linkSame(filepath.Join(reuse, name), filepath.Join(dir, name), data) {
			continue
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return fmt.Errorf("trust dir: %w", err)
		}
	}
	return nil
}

// linkSame hard-links src to dst when src is a regular file owned by this
// user or root, writable by no one else, holding exactly data.
func linkSame(src, dst string, data []byte) bool {
	fi, err := os.Lstat(src)
	if err != nil || ownedFile(src, fi, false) != nil || fi.Size() != int64(len(data)) {
		return false
	}
	if b, err := os.ReadFile(src); err != nil || !bytes.Equal(b, data) {
		return false
	}
	return os.Link(src, dst) == nil
}

// writeJavaStore writes the certificates as a PKCS#12 truststore: every cert
// bag carries Java's trusted-key-usage attribute, without which Java ignores
// a certificate that has no key.
func writeJavaStore(path string, certs []bundleCert) error {
	entries := make([]pkcs12.TrustStoreEntry, len(certs))
	for i, c := range certs {
		// The encoder reads only Raw: a certificate Go cannot parse fits too.
		entries[i] = pkcs12.TrustStoreEntry{Cert: &x509.Certificate{Raw: c.raw}, FriendlyName: fmt.Sprintf("airlock-%d", i)}
	}
	data, err := pkcs12.Modern.EncodeTrustStoreEntries(entries, TrustStorePassword)
	if err != nil {
		return fmt.Errorf("trust dir: java truststore: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("trust dir: %w", err)
	}
	return nil
}

// SubjectHash is OpenSSL's subject name hash (X509_NAME_hash, what
// `openssl x509 -hash` prints and c_rehash names files by) of a DER Name: the
// first four bytes, little-endian, of the SHA-1 of the name's canonical
// encoding. The canonical encoding is each RDN's SET, concatenated without
// the outer SEQUENCE, where every string value is re-encoded as a UTF8String
// with ASCII letters lowercased, leading and trailing whitespace removed and
// inner whitespace runs made one space.
func SubjectHash(rawName []byte) (uint32, error) {
	canon, err := canonicalName(rawName)
	if err != nil {
		return 0, err
	}
	sum := sha1.Sum(canon) //nolint:gosec // see import
	return binary.LittleEndian.Uint32(sum[:4]), nil
}

type attrTypeValue struct {
	Type  asn1.ObjectIdentifier
	Value asn1.RawValue
}

// rdnSET is one relative distinguished name (encoding/asn1 reads a slice type
// named ...SET as a SET OF).
type rdnSET []attrTypeValue

func canonicalName(rawName []byte) ([]byte, error) {
	var rdns []rdnSET
	rest, err := asn1.Unmarshal(rawName, &rdns)
	if err != nil {
		return nil, fmt.Errorf("parse name: %w", err)
	}
	if len(rest) > 0 {
		return nil, errors.New("parse name: trailing data")
	}
	var out []byte
	for _, rdn := range rdns {
		members := make([][]byte, 0, len(rdn))
		for _, atv := range rdn {
			m, err := canonicalATV(atv)
			if err != nil {
				return nil, err
			}
			members = append(members, m)
		}
		// DER orders a SET OF by its members' encodings.
		sort.Slice(members, func(i, j int) bool { return bytes.Compare(members[i], members[j]) < 0 })
		set, err := asn1.Marshal(asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagSet, IsCompound: true, Bytes: bytes.Join(members, nil)})
		if err != nil {
			return nil, fmt.Errorf("encode name: %w", err)
		}
		out = append(out, set...)
	}
	return out, nil
}

// canonicalATV encodes one attribute with its value canonicalized when it is
// one of the string types OpenSSL canonicalizes (others are kept as they are).
func canonicalATV(atv attrTypeValue) ([]byte, error) {
	v := atv.Value
	if v.Class == asn1.ClassUniversal {
		if s, ok, err := stringToUTF8(v.Tag, v.Bytes); err != nil {
			return nil, fmt.Errorf("name attribute %v: %w", atv.Type, err)
		} else if ok {
			v = asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagUTF8String, Bytes: canonicalString(s)}
		}
	}
	if v.Tag != atv.Value.Tag || v.Class != atv.Value.Class {
		v.FullBytes = nil
	}
	b, err := asn1.Marshal(struct {
		Type  asn1.ObjectIdentifier
		Value asn1.RawValue
	}{atv.Type, v})
	if err != nil {
		return nil, fmt.Errorf("encode name attribute %v: %w", atv.Type, err)
	}
	return b, nil
}

// stringToUTF8 converts a value of a canonicalized string type to UTF-8 the
// way OpenSSL's ASN1_STRING_to_UTF8 does (one-byte types as Latin-1); ok is
// false for other types.
func stringToUTF8(tag int, b []byte) (s []byte, ok bool, err error) {
	switch tag {
	case asn1.TagUTF8String:
		if !utf8.Valid(b) {
			return nil, false, errors.New("invalid UTF8String")
		}
		return b, true, nil
	case asn1.TagPrintableString, asn1.TagT61String, asn1.TagIA5String, 26 /* VisibleString */ :
		out := make([]byte, 0, len(b))
		for _, c := range b {
			out = utf8.AppendRune(out, rune(c))
		}
		return out, true, nil
	case asn1.TagBMPString:
		if len(b)%2 != 0 {
			return nil, false, errors.New("odd-length BMPString")
		}
		u := make([]uint16, len(b)/2)
		for i := range u {
			u[i] = binary.BigEndian.Uint16(b[2*i:])
		}
		return []byte(string(utf16.Decode(u))), true, nil
	case 28: // UniversalString
		if len(b)%4 != 0 {
			return nil, false, errors.New("bad-length UniversalString")
		}
		out := make([]byte, 0, len(b))
		for i := 0; i < len(b); i += 4 {
			r := rune(binary.BigEndian.Uint32(b[i:]))
			if !utf8.ValidRune(r) {
				return nil, false, errors.New("invalid UniversalString character")
			}
			out = utf8.AppendRune(out, r)
		}
		return out, true, nil
	}
	return nil, false, nil
}

// canonicalString trims ASCII whitespace, makes inner runs of it one space and
// lowercases ASCII letters; other bytes are kept.
func canonicalString(s []byte) []byte {
	s = bytes.TrimFunc(s, func(r rune) bool { return r < utf8.RuneSelf && isSpace(byte(r)) })
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case isSpace(c):
			out = append(out, ' ')
			for i+1 < len(s) && isSpace(s[i+1]) {
				i++
			}
		case 'A' <= c && c <= 'Z':
			out = append(out, c+'a'-'A')
		default:
			out = append(out, c)
		}
	}
	return out
}

// isSpace is C's isspace in the C locale, as OpenSSL's ossl_isspace.
func isSpace(c byte) bool {
	return c == ' ' || ('\t' <= c && c <= '\r')
}
