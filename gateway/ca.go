package gateway

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"
)

// CA file names inside the directory given to InitCA.
const (
	CACertFileName = "ca.pem"
	CAKeyFileName  = "ca.key"
	// DefaultCAValidity is how long a CA made by InitCA is valid.
	DefaultCAValidity = 5 * 365 * 24 * time.Hour
)

// ErrCAExists is returned by InitCA when a CA is already there and force is false.
var ErrCAExists = errors.New("ca already exists")

// CA is the interception certificate authority: an ECDSA P-256 key and its
// self-signed certificate. The key never leaves the gateway process.
type CA struct {
	Cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// CAInfo describes a CA for `airlock ca show`.
type CAInfo struct {
	Subject     string
	Fingerprint string // hex SHA-256 of the DER certificate, colon-separated
	NotBefore   time.Time
	NotAfter    time.Time
	PEM         string
}

// InitCA makes a new CA in dir: ca.key (mode 0600) and ca.pem (mode 0644). It
// refuses to replace an existing file unless force is set.
func InitCA(dir string, force bool, now time.Time) (certPath, keyPath string, err error) {
	return initCA(dir, force, now, true)
}

// InitEphemeralCA is InitCA(dir, true, now) for a CA that lives only as long
// as this process (airlock run's, in a run directory removed at its exit):
// its files are not synced to disk, which cost two fsyncs of every run's
// start (tens of milliseconds on a busy disk) for files no crash needs.
func InitEphemeralCA(dir string, now time.Time) (certPath, keyPath string, err error) {
	return initCA(dir, true, now, false)
}

func initCA(dir string, force bool, now time.Time, durable bool) (certPath, keyPath string, err error) {
	certPath = filepath.Join(dir, CACertFileName)
	keyPath = filepath.Join(dir, CAKeyFileName)
	if !force {
		for _, p := range []string{certPath, keyPath} {
			if _, err := os.Lstat(p); err == nil {
				return "", "", fmt.Errorf("%w: %s (use --force to replace it)", ErrCAExists, p)
			} else if !errors.Is(err, os.ErrNotExist) {
				return "", "", fmt.Errorf("ca init: %w", err)
			}
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", fmt.Errorf("ca init: %w", err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", fmt.Errorf("ca init: generate key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return "", "", err
	}
	host, _ := os.Hostname()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "airlock interception CA (" + host + ")", Organization: []string{"airlock"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(DefaultCAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLen:            0,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return "", "", fmt.Errorf("ca init: create certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", fmt.Errorf("ca init: marshal key: %w", err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	if err := writeFileAtomic(keyPath, keyPEM, 0o600, durable); err != nil {
		return "", "", err
	}
	if err := writeFileAtomic(certPath, certPEM, 0o644, durable); err != nil {
		return "", "", err
	}
	return certPath, keyPath, nil
}

// writeFileAtomic writes data to path through a temporary file renamed
// into place, synced first when durable.
func writeFileAtomic(path string, data []byte, mode os.FileMode, durable bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".airlock-ca-*")
	if err != nil {
		return fmt.Errorf("ca init: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return fmt.Errorf("ca init: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("ca init: write %s: %w", path, err)
	}
	if durable {
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("ca init: sync %s: %w", path, err)
		}
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("ca init: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("ca init: %w", err)
	}
	return nil
}

func randomSerial() (*big.Int, error) {
	s, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("serial: %w", err)
	}
	return s.Add(s, big.NewInt(1)), nil
}

// LoadCA reads a CA made by InitCA. The key must be ECDSA P-256, match the
// certificate, and not be readable by group or others.
func LoadCA(certFile, keyFile string) (*CA, error) {
	cert, err := LoadCACert(certFile)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(keyFile)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("ca key %s: mode %v is readable by others; want 0600", keyFile, st.Mode().Perm())
	}
	b, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("ca key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "PRIVATE KEY" {
		return nil, fmt.Errorf("ca key %s: no PEM PRIVATE KEY block", keyFile)
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca key %s: %w", keyFile, err)
	}
	key, ok := k.(*ecdsa.PrivateKey)
	if !ok || key.Curve != elliptic.P256() {
		return nil, fmt.Errorf("ca key %s: not an ECDSA P-256 key", keyFile)
	}
	pub, ok := cert.PublicKey.(*ecdsa.PublicKey)
	if !ok || !pub.Equal(&key.PublicKey) {
		return nil, fmt.Errorf("ca %s and %s: key does not match certificate", certFile, keyFile)
	}
	return &CA{Cert: cert, key: key}, nil
}

// LoadCACert reads and checks a CA certificate (no key needed: `airlock ca show`).
func LoadCACert(certFile string) (*x509.Certificate, error) {
	b, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("ca cert: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil || blk.Type != "CERTIFICATE" {
		return nil, fmt.Errorf("ca cert %s: no PEM CERTIFICATE block", certFile)
	}
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("ca cert %s: %w", certFile, err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("ca cert %s: not a CA certificate", certFile)
	}
	return cert, nil
}

// Describe returns what `airlock ca show` prints.
func Describe(cert *x509.Certificate) CAInfo {
	sum := sha256.Sum256(cert.Raw)
	hexs := hex.EncodeToString(sum[:])
	fp := make([]byte, 0, len(hexs)*3/2)
	for i := 0; i < len(hexs); i += 2 {
		if i > 0 {
			fp = append(fp, ':')
		}
		fp = append(fp, hexs[i], hexs[i+1])
	}
	return CAInfo{
		Subject:     cert.Subject.String(),
		Fingerprint: string(fp),
		NotBefore:   cert.NotBefore,
		NotAfter:    cert.NotAfter,
		PEM:         string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})),
	}
}

// leafCache mints leaf certificates for allowed names and keeps them in a
// bounded LRU; concurrent requests for one name share one signing.
type leafCache struct {
	ca    *CA
	ttl   time.Duration
	cache *lru.Cache[string, *tls.Certificate]
	group singleflight.Group
	now   func() time.Time
}

func newLeafCache(ca *CA, ttl time.Duration, size int) (*leafCache, error) {
	c, err := lru.New[string, *tls.Certificate](size)
	if err != nil {
		return nil, fmt.Errorf("gateway: leaf_cache_size %d: %w", size, err)
	}
	return &leafCache{ca: ca, ttl: ttl, cache: c, now: time.Now}, nil
}

// get returns a leaf for host (a normalized name or canonical IP), minting it if
// needed. Leaves are re-minted when less than a quarter of their life is left.
func (l *leafCache) get(host string) (*tls.Certificate, error) {
	now := l.now()
	if c, ok := l.cache.Get(host); ok && now.Add(l.ttl/4).Before(c.Leaf.NotAfter) {
		return c, nil
	}
	v, err, _ := l.group.Do(host, func() (any, error) {
		if c, ok := l.cache.Get(host); ok && now.Add(l.ttl/4).Before(c.Leaf.NotAfter) {
			return c, nil
		}
		c, err := l.mint(host, now)
		if err != nil {
			return nil, err
		}
		l.cache.Add(host, c)
		return c, nil
	})
	if err != nil {
		return nil, err
	}
	return v.(*tls.Certificate), nil
}

func (l *leafCache) mint(host string, now time.Time) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("mint leaf: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	notAfter := now.Add(l.ttl)
	if notAfter.After(l.ca.Cert.NotAfter) {
		notAfter = l.ca.Cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: host},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, l.ca.Cert, &key.PublicKey, l.ca.key)
	if err != nil {
		return nil, fmt.Errorf("mint leaf for %s: %w", host, err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("mint leaf for %s: %w", host, err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, l.ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}
