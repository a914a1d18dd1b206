package export

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"time"
)

// Formats a sink encodes records in.
const (
	FormatJSONL  = "jsonl"  // the lines as written (a collected copy verifies)
	FormatOCSF   = "ocsf"   // OCSF 1.x JSON, one event per line
	FormatOTLP   = "otlp"   // OpenTelemetry logs over HTTP/protobuf or gRPC
	FormatSyslog = "syslog" // RFC 5424 over TCP (RFC 6587 octet counting) or TLS (RFC 5425)
)

// Defaults for Config's zero fields.
const (
	DefaultBatchSize     = 500
	DefaultFlushInterval = time.Second
	DefaultBackoffMin    = 500 * time.Millisecond
	DefaultBackoffMax    = time.Minute
	DefaultTimeout       = 10 * time.Second
)

// Config is one sink: where and how records are shipped, and how the
// Shipper batches and retries.
type Config struct {
	// Name identifies the sink in the state file, logs and metrics; it
	// defaults to Format. Two sinks of one log need different names.
	Name string
	// Format is one of FormatJSONL, FormatOCSF, FormatOTLP, FormatSyslog.
	Format string
	// Endpoint is where the records go:
	//   jsonl, ocsf: a file path (or file:///path) appended to and fsynced
	//     before a batch counts as shipped; "" or "-" is NewSink's stdout;
	//   otlp: http://host:port[/path] or https:// for OTLP/HTTP protobuf
	//     (path default /v1/logs), grpc://host:port (plaintext) or
	//     grpcs://host:port (TLS) for OTLP/gRPC;
	//   syslog: tcp://host:port or tls://host:port.
	Endpoint string
	// TLS trusts the collector of an https, grpcs or tls endpoint.
	TLS TLS
	// StateFile keeps the last acknowledged position (Shipper only); ""
	// means the audit file's name + "." + Name + StateSuffix.
	StateFile string
	// BatchSize is the most records sent in one request (DefaultBatchSize).
	BatchSize int
	// FlushInterval is how long a batch that is not full waits for more
	// records before it is sent (DefaultFlushInterval).
	FlushInterval time.Duration
	// BackoffMin and BackoffMax bound the exponential, jittered wait
	// between attempts to ship a batch the collector did not acknowledge.
	BackoffMin, BackoffMax time.Duration
	// Timeout bounds one attempt (DefaultTimeout).
	Timeout time.Duration
	// MaxAttempts, when positive, is how often a batch is tried before Run
	// gives up with an error (a one-off export); zero retries until the
	// context ends (a daemon).
	MaxAttempts int
	// Hostname is the syslog HOSTNAME of records without a node
	// (os.Hostname when empty); a record's node is its HOSTNAME.
	Hostname string
	// Version is airlock's version, stamped on OCSF and OTLP events.
	Version string
}

// TLS is how a sink trusts its collector.
type TLS struct {
	// CAFile is a PEM bundle of the CAs to trust instead of the system's.
	CAFile string
	// ServerName overrides the name checked in the collector's certificate.
	ServerName string
	// CertFile and KeyFile are a client certificate, for collectors that
	// require one.
	CertFile, KeyFile string
}

// withDefaults fills zero fields and validates, naming the bad field.
func (c Config) withDefaults() (Config, error) {
	if c.Name == "" {
		c.Name = c.Format
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.FlushInterval == 0 {
		c.FlushInterval = DefaultFlushInterval
	}
	if c.BackoffMin == 0 {
		c.BackoffMin = DefaultBackoffMin
	}
	if c.BackoffMax == 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	switch {
	case c.BatchSize < 1:
		return c, fmt.Errorf("export: batch_size: %d must be 1 or more", c.BatchSize)
	case c.FlushInterval < 0, c.BackoffMin < 0, c.Timeout < 0:
		return c, errors.New("export: flush_interval, backoff_min and timeout must not be negative")
	case c.BackoffMax < c.BackoffMin:
		return c, fmt.Errorf("export: backoff_max %v is below backoff_min %v", c.BackoffMax, c.BackoffMin)
	}
	_, _, err := c.endpoint()
	return c, err
}

// endpoint checks Endpoint against Format and returns its scheme and the
// rest (a file path, host:port or URL).
func (c Config) endpoint() (scheme, rest string, err error) {
	bad := func(want string) (string, string, error) {
		return "", "", fmt.Errorf("export: %s sink endpoint %q: want %s", c.Format, c.Endpoint, want)
	}
	switch c.Format {
	case FormatJSONL, FormatOCSF:
		if p, ok := strings.CutPrefix(c.Endpoint, "file://"); ok {
			return "file", p, nil
		}
		if strings.Contains(c.Endpoint, "://") {
			return bad("a file path, file:///path, or - for stdout")
		}
		return "file", c.Endpoint, nil
	case FormatOTLP, FormatSyslog:
		u, err := url.Parse(c.Endpoint)
		if err != nil || u.Host == "" {
			if c.Format == FormatOTLP {
				return bad("http://, https://, grpc:// or grpcs:// host:port")
			}
			return bad("tcp://host:port or tls://host:port")
		}
		ok := c.Format == FormatOTLP && (u.Scheme == "http" || u.Scheme == "https" || u.Scheme == "grpc" || u.Scheme == "grpcs") ||
			c.Format == FormatSyslog && (u.Scheme == "tcp" || u.Scheme == "tls")
		if !ok {
			if c.Format == FormatOTLP {
				return bad("http://, https://, grpc:// or grpcs:// host:port")
			}
			return bad("tcp://host:port or tls://host:port")
		}
		return u.Scheme, c.Endpoint, nil
	}
	return "", "", fmt.Errorf("export: format %q is not one of jsonl, ocsf, otlp, syslog", c.Format)
}

// tlsConfig builds the client TLS configuration from t.
func (t TLS) tlsConfig() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("export: tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("export: tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		cfg.RootCAs = pool
	}
	if (t.CertFile == "") != (t.KeyFile == "") {
		return nil, errors.New("export: tls cert_file and key_file go together")
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("export: tls client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
