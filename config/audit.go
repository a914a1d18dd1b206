package config

import (
	"cmp"
	"fmt"
	"math"

	"github.com/airlock-dev/airlock/hostname"
)

// Audit defaults.
const (
	DefaultAuditFile     = "/var/log/airlock/audit.jsonl"
	DefaultAuditMaxSize  = 100 << 20
	DefaultAuditOverflow = "block"
	DefaultAuditMinFree  = 256 << 20
)

// Audit configures the audit log.
type Audit struct {
	File    string `yaml:"file"`
	MaxSize Size   `yaml:"max_size"`
	// SigningKey is the Ed25519 key that signs checkpoints; empty means File + ".key"
	// (created 0600 on first use).
	SigningKey string `yaml:"signing_key"`
	// Overflow is what happens when the writer's queue is full: block (the
	// default: requests wait for room) or deny (requests are refused at once,
	// and none leaves before room for its record is reserved).
	Overflow string `yaml:"overflow"`
	// MaxFiles and MaxBytes bound the rotated files kept (count, total size);
	// after a rotation the oldest beyond either are deleted, the newest always
	// kept. Zero keeps every file.
	MaxFiles int  `yaml:"max_files"`
	MaxBytes Size `yaml:"max_bytes"`
	// MinFree refuses new sandboxes (run, attach) while the audit file's
	// filesystem has less free space: a size (256M, the default) or a share of
	// the filesystem (1%); 0 turns the check off.
	MinFree FreeSpace `yaml:"min_free"`
	// GatewayRate (records/s) and GatewayBurst size each sandbox's budget of
	// individual records of refused gateway requests; past it they are counted
	// in summary records. Zero: 200/s, burst 1000.
	GatewayRate  float64 `yaml:"gateway_rate"`
	GatewayBurst int     `yaml:"gateway_burst"`
	// Node is stamped on every record (the record's "node"): the machine the
	// log belongs to, so the streams a cluster's log collector gathers from
	// many nodes stay apart. Empty means $NODE_NAME (a DaemonSet sets it from
	// the downward API), else the host name.
	Node string `yaml:"node"`
	// Export lists the sinks `airlock serve` ships the log to (package
	// audit/export; docs/AUDIT.md, "Audit export"). A jsonl sink with endpoint
	// "-" writes the lines to serve's stdout.
	Export []AuditExport `yaml:"export"`
}

// ExportTLS is how an audit.export sink trusts its collector: CAFile (PEM)
// instead of the system's CAs, ServerName to check, and an optional client
// certificate.
type ExportTLS struct {
	CAFile     string `yaml:"ca_file"`
	ServerName string `yaml:"server_name"`
	CertFile   string `yaml:"cert_file"`
	KeyFile    string `yaml:"key_file"`
}

// AuditExport is one sink of audit.export. Zero fields take audit/export's
// defaults; the endpoint's form is checked when serve starts the sink.
type AuditExport struct {
	// Name tells sinks apart (state file, metrics); default: Format.
	Name string `yaml:"name"`
	// Format is ocsf, otlp, syslog or jsonl.
	Format string `yaml:"format"`
	// Endpoint: a file (jsonl, ocsf) or "-" for stdout, http(s):// or
	// grpc(s):// (otlp), tcp:// or tls:// (syslog).
	Endpoint string    `yaml:"endpoint"`
	TLS      ExportTLS `yaml:"tls"`
	// StateFile keeps the last acknowledged seq; default
	// <audit.file>.<name>.export-state.
	StateFile     string   `yaml:"state_file"`
	BatchSize     int      `yaml:"batch_size"`
	FlushInterval Duration `yaml:"flush_interval"`
	BackoffMin    Duration `yaml:"backoff_min"`
	BackoffMax    Duration `yaml:"backoff_max"`
	Timeout       Duration `yaml:"timeout"`
}

func (a *Audit) applyDefaults() {
	a.File = cmp.Or(a.File, DefaultAuditFile)
	a.MaxSize = cmp.Or(a.MaxSize, DefaultAuditMaxSize)
	a.Overflow = cmp.Or(a.Overflow, DefaultAuditOverflow)
	if !a.MinFree.set {
		a.MinFree = FreeSpace{Bytes: DefaultAuditMinFree, set: true}
	}
}

func (a *Audit) validate() error {
	switch a.Overflow {
	case "block", "deny":
	default:
		return fmt.Errorf("audit.overflow: %q is not one of block, deny", a.Overflow)
	}
	switch {
	case a.MaxSize < 4096:
		return fmt.Errorf("audit.max_size: %s is below the 4096-byte minimum", a.MaxSize)
	case a.MaxFiles < 0:
		return fmt.Errorf("audit.max_files: %d must be 0 (keep every file) or more", a.MaxFiles)
	case a.MaxBytes < 0:
		return fmt.Errorf("audit.max_bytes: %s must be 0 (no bound) or more", a.MaxBytes)
	case !(a.GatewayRate >= 0) || math.IsInf(a.GatewayRate, 0):
		return fmt.Errorf("audit.gateway_rate: %v must be 0 (the default, 200/s) or a positive number of records per second", a.GatewayRate)
	case a.GatewayBurst < 0:
		return fmt.Errorf("audit.gateway_burst: %d must be 0 (the default, 1000) or more", a.GatewayBurst)
	case !ValidNodeName(a.Node):
		return fmt.Errorf("audit.node: %q is not a node name (at most 253 letters, digits, '-', '.' or '_'); leave it out for $NODE_NAME or the host name", a.Node)
	}
	return a.validateExport()
}

func (a *Audit) validateExport() error {
	names := map[string]bool{}
	stdout := false
	for i, e := range a.Export {
		switch e.Format {
		case "ocsf", "otlp", "syslog", "jsonl":
		default:
			return fmt.Errorf("audit.export[%d].format: %q is not one of ocsf, otlp, syslog, jsonl", i, e.Format)
		}
		name := e.Name
		name = cmp.Or(name, e.Format)
		switch {
		case e.Endpoint == "":
			return fmt.Errorf("audit.export[%d].endpoint: required (a file or - for stdout for jsonl and ocsf, http(s):// or grpc(s):// for otlp, tcp:// or tls:// for syslog)", i)
		case names[name]:
			return fmt.Errorf("audit.export[%d].name: %q is used by another sink (give each its own name)", i, name)
		case e.Endpoint == "-" && e.Format != "jsonl" && e.Format != "ocsf":
			return fmt.Errorf("audit.export[%d].endpoint: - (stdout) is for jsonl and ocsf, not %s", i, e.Format)
		case e.Endpoint == "-" && stdout:
			return fmt.Errorf("audit.export[%d].endpoint: - (stdout) is used by another sink (their lines would interleave)", i)
		case e.BatchSize < 0:
			return fmt.Errorf("audit.export[%d].batch_size: %d must be 0 (the default, 500) or more", i, e.BatchSize)
		}
		names[name] = true
		stdout = stdout || e.Endpoint == "-"
	}
	return nil
}

// ValidNodeName reports whether name may be audit.node: the audit writer's
// rule, hostname.ValidNode.
func ValidNodeName(name string) bool { return hostname.ValidNode(name) }
