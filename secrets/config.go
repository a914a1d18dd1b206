package secrets

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/airlock-dev/airlock/hostname"
)

// Defaults applied by New (and LoadFile) to zero fields.
const (
	DefaultPort           = 443
	DefaultHeader         = "Authorization"
	DefaultMode           = ModeDefault
	DefaultCommandTTL     = 5 * time.Minute
	DefaultCommandTimeout = 10 * time.Second
	DefaultRetryAfter     = 5 * time.Second
	DefaultMaxBodyScan    = 1 << 20
	// DefaultMaxBodyScanPerSandbox is the default Config.MaxBodyScanPerSandbox
	// (when it is larger than MaxBodyScan; else 8 times MaxBodyScan).
	DefaultMaxBodyScanPerSandbox = 8 << 20
	DefaultMaxCommandOutput      = 64 << 10
	// MinValueLength is the shortest value accepted from a source: shorter values
	// cannot be scrubbed from responses without mangling unrelated text.
	MinValueLength = 8
	// ValuePlaceholder is the one marker a template must contain.
	ValuePlaceholder = "{{value}}"
)

// Binding modes.
const (
	// ModeDefault strips the bound header (and the strip list) from the request
	// and sets the real credential. The sandbox needs nothing.
	ModeDefault = "default"
	// ModePlaceholder gives the sandbox a placeholder (via PlaceholderEnv); when
	// it appears in the bound header for the bound destination the header is
	// replaced by the real credential. Without it, the request passes untouched.
	ModePlaceholder = "placeholder"
	// ModeRequire is ModePlaceholder plus: a request to the bound host without
	// the placeholder in the bound header is denied.
	ModeRequire = "require"
)

// Config is the secrets file (secrets/DESIGN.md). docs/SECRETS.md and
// testdata/example.yaml have examples.
type Config struct {
	// FingerprintKeyFile names a file of at least 32 bytes keying the HMAC that
	// fingerprints values for the audit log. Empty: a random key per process
	// (fingerprints then only compare within one run).
	FingerprintKeyFile string `yaml:"fingerprint_key_file"`
	// MaxBodyScan is how many bytes of a request body are buffered and scanned
	// for placeholders before anything is forwarded. Longer bodies are scanned as
	// they stream and cut off before a placeholder would leave. Default 1 MiB.
	MaxBodyScan int64 `yaml:"max_body_scan"`
	// MaxBodyScanPerSandbox caps the request-body bytes one sandbox's scans
	// hold at once: bodies being read for a scan and scanned bodies not yet
	// sent on. A request whose scan would pass it is refused with a *BusyError
	// (HTTPStatus 429, nothing forwarded); other sandboxes are not affected.
	// It must be larger than MaxBodyScan (a scan holds up to MaxBodyScan+1
	// bytes). Default 8 MiB, or 8 times MaxBodyScan when that is larger.
	MaxBodyScanPerSandbox int64 `yaml:"max_body_scan_per_sandbox"`
	// Secrets lists where values come from.
	Secrets []SecretConfig `yaml:"secrets"`
	// Bindings say who may use which secret, where and how.
	Bindings []BindingConfig `yaml:"bindings"`
}

// SecretConfig is one secret. Exactly one of Env, File, Command is set.
type SecretConfig struct {
	// ID names the secret in bindings and audit records.
	ID string `yaml:"id"`
	// Env is a variable of the gateway's own environment, read on each use.
	Env string `yaml:"env"`
	// File is read when its size, mtime, ctime or inode changes; one trailing
	// newline is dropped.
	File string `yaml:"file"`
	// Command is run on the host (argv, no shell); stdout, trimmed, is the value.
	Command []string `yaml:"command"`
	// TTL is how long a command's value is reused. Default 5m. Command only.
	TTL time.Duration `yaml:"ttl"`
	// Timeout bounds one run of the command. Default 10s. Command only.
	Timeout time.Duration `yaml:"timeout"`
	// RetryAfter is how long a command failure is remembered before the command
	// is run again. Default 5s. Command only.
	RetryAfter time.Duration `yaml:"retry_after"`
}

// SandboxSelector matches a sandbox by id or by labels (every listed label must
// be equal). At least one of IDs, Labels is required.
type SandboxSelector struct {
	IDs    []string          `yaml:"ids"`
	Labels map[string]string `yaml:"labels"`
}

// BindingConfig lets sandboxes use one secret for one destination.
type BindingConfig struct {
	// ID names the binding for the daemon API (attach.go). Optional; unique;
	// required with Attach.
	ID string `yaml:"id"`
	// Secret is the id of a SecretConfig.
	Secret string `yaml:"secret"`
	// Sandboxes selects who may use it. Optional with Attach.
	Sandboxes SandboxSelector `yaml:"sandboxes"`
	// Attach lets a caller of the daemon API attach this binding to a sandbox
	// it creates (CreateSandboxRequest.SecretBindings): root always, other
	// callers only when their uid is listed.
	Attach *AttachConfig `yaml:"attach"`
	// Host is an exact host, "*.domain" (one label) or "**.domain" (one or more),
	// optionally written "https://host[:port]". http:// is refused: secrets only
	// travel over verified TLS.
	Host string `yaml:"host"`
	// Port defaults to 443.
	Port int `yaml:"port"`
	// Methods limits the HTTP methods; empty means any.
	Methods []string `yaml:"methods"`
	// Paths are path prefixes matched on whole segments of the cleaned path
	// ("/repos" matches "/repos" and "/repos/x", not "/reposx"). Default ["/"].
	Paths []string `yaml:"paths"`
	// Header is the header the credential goes in. Default Authorization.
	Header string `yaml:"header"`
	// Template renders the header value; it contains {{value}} exactly once,
	// e.g. "Bearer {{value}}" or "token {{value}}". Set Template or BasicUser.
	Template string `yaml:"template"`
	// BasicUser makes the header "Basic base64(BasicUser:value)".
	BasicUser string `yaml:"basic_user"`
	// Mode is default, placeholder or require. Default "default".
	Mode string `yaml:"mode"`
	// PlaceholderEnv is the sandbox environment variable that carries the
	// placeholder. Required for placeholder and require modes only.
	PlaceholderEnv string `yaml:"placeholder_env"`
	// Strip lists further headers removed from matching requests, such as
	// Cookie or Proxy-Authorization. The bound Header is always removed.
	Strip []string `yaml:"strip"`
	// AWS makes this an AWS SigV4 binding (aws.go): the secret is the secret
	// access key and requests signed with the sandbox's placeholders are
	// re-signed with the real credentials.
	AWS *AWSConfig `yaml:"aws_sigv4"`
	// OAuth has the gateway mint the injected value as an OAuth 2.0 access
	// token (oauth.go): the secret is the client secret or refresh token.
	OAuth *OAuthConfig `yaml:"oauth"`
	// GitHubApp has the gateway mint the injected value as a GitHub App
	// installation token per sandbox (githubapp.go): the secret is the app's
	// private key (PEM).
	GitHubApp *GitHubAppConfig `yaml:"github_app"`
}

// LoadFile reads and validates a secrets file strictly: unknown fields, a
// second YAML document and invalid values are errors.
func LoadFile(path string) (Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("secrets: %w", err)
	}
	cfg, err := Parse(data)
	if err != nil {
		return Config{}, fmt.Errorf("secrets: %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes and validates a secrets file held in memory.
func Parse(data []byte) (Config, error) {
	var cfg Config
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&cfg); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, errors.New("empty secrets file")
		}
		return Config{}, fmt.Errorf("parse: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return Config{}, errors.New("parse: more than one YAML document")
	}
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

func (c *Config) applyDefaults() {
	if c.MaxBodyScan == 0 {
		c.MaxBodyScan = DefaultMaxBodyScan
	}
	if c.MaxBodyScanPerSandbox == 0 {
		c.MaxBodyScanPerSandbox = DefaultMaxBodyScanPerSandbox
		if c.MaxBodyScan > 0 && c.MaxBodyScanPerSandbox <= c.MaxBodyScan {
			c.MaxBodyScanPerSandbox = 8 * c.MaxBodyScan
		}
	}
	for i := range c.Secrets {
		s := &c.Secrets[i]
		if len(s.Command) > 0 {
			if s.TTL == 0 {
				s.TTL = DefaultCommandTTL
			}
			if s.Timeout == 0 {
				s.Timeout = DefaultCommandTimeout
			}
			if s.RetryAfter == 0 {
				s.RetryAfter = DefaultRetryAfter
			}
		}
	}
	for i := range c.Bindings {
		b := &c.Bindings[i]
		if b.Port == 0 {
			b.Port = DefaultPort
		}
		if b.Header == "" {
			b.Header = DefaultHeader
		}
		if b.Mode == "" {
			b.Mode = DefaultMode
			if b.AWS != nil {
				b.Mode = ModeRequire
			}
		}
		if len(b.Paths) == 0 {
			b.Paths = []string{"/"}
		}
		if b.OAuth != nil {
			b.OAuth.applyDefaults()
		}
		if b.GitHubApp != nil && b.GitHubApp.APIURL == "" {
			b.GitHubApp.APIURL = DefaultGitHubAPI
		}
		if b.AWS != nil && b.AWS.AssumeRole != nil {
			b.AWS.AssumeRole.applyDefaults(b.AWS.Region)
		}
	}
}

var (
	idRE     = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })
	envRE    = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`) })
	tokenRE  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$") })
	methodRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Z]+$`) })
)

// headers a binding may neither set nor strip: they frame the message.
var forbiddenHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Connection": true,
	"Upgrade": true, "Te": true, "Trailer": true, "Keep-Alive": true, "Accept-Encoding": true,
}

// Validate checks a Config after defaults and names the first bad field.
func (c *Config) Validate() error {
	if c.MaxBodyScan < 0 {
		return fmt.Errorf("max_body_scan: %d is negative", c.MaxBodyScan)
	}
	if c.MaxBodyScanPerSandbox <= c.MaxBodyScan {
		return fmt.Errorf("max_body_scan_per_sandbox: %d must be larger than max_body_scan (%d): a scan holds up to max_body_scan+1 bytes",
			c.MaxBodyScanPerSandbox, c.MaxBodyScan)
	}
	ids := map[string]bool{}
	for i, s := range c.Secrets {
		at := fmt.Sprintf("secrets[%d]", i)
		if !idRE().MatchString(s.ID) {
			return fmt.Errorf("%s.id: %q is not a valid id (letters, digits, . _ -, up to 64)", at, s.ID)
		}
		at = fmt.Sprintf("secrets[%d] (%s)", i, s.ID)
		if ids[s.ID] {
			return fmt.Errorf("%s.id: duplicate id %q", at, s.ID)
		}
		ids[s.ID] = true
		n := 0
		if s.Env != "" {
			n++
			if !envRE().MatchString(s.Env) {
				return fmt.Errorf("%s.env: %q is not a variable name", at, s.Env)
			}
		}
		if s.File != "" {
			n++
		}
		if len(s.Command) > 0 {
			n++
			if s.Command[0] == "" {
				return fmt.Errorf("%s.command: empty program name", at)
			}
			if s.TTL < 0 || s.Timeout <= 0 || s.RetryAfter < 0 {
				return fmt.Errorf("%s: ttl %v, timeout %v and retry_after %v must be positive", at, s.TTL, s.Timeout, s.RetryAfter)
			}
		} else if s.TTL != 0 || s.Timeout != 0 || s.RetryAfter != 0 {
			return fmt.Errorf("%s: ttl, timeout and retry_after apply to command sources only", at)
		}
		if n != 1 {
			return fmt.Errorf("%s: set exactly one of env, file, command (got %d)", at, n)
		}
	}
	bindingIDs := map[string]bool{}
	for i := range c.Bindings {
		if id := c.Bindings[i].ID; id != "" {
			if bindingIDs[id] {
				return fmt.Errorf("bindings[%d]: id: %q is used twice", i, id)
			}
			bindingIDs[id] = true
		}
		if err := c.Bindings[i].validate(ids); err != nil {
			return fmt.Errorf("bindings[%d] (secret %s): %w", i, c.Bindings[i].Secret, err)
		}
	}
	return nil
}

func (b *BindingConfig) validate(ids map[string]bool) error {
	if !ids[b.Secret] {
		return fmt.Errorf("secret: %q is not a defined secret id", b.Secret)
	}
	if err := b.validateAttach(); err != nil {
		return err
	}
	if len(b.Sandboxes.IDs) == 0 && len(b.Sandboxes.Labels) == 0 && b.Attach == nil {
		return errors.New("sandboxes: set ids or labels, or attach (a binding never applies to every sandbox by default)")
	}
	for _, id := range b.Sandboxes.IDs {
		if id == "" {
			return errors.New("sandboxes.ids: empty id")
		}
	}
	if _, _, err := parseBindingHost(b.Host, b.Port); err != nil {
		return err
	}
	if b.Port < 1 || b.Port > 65535 {
		return fmt.Errorf("port: %d is not in 1..65535", b.Port)
	}
	for _, m := range b.Methods {
		if !methodRE().MatchString(m) {
			return fmt.Errorf("methods: %q is not an upper-case method name", m)
		}
	}
	for _, p := range b.Paths {
		if !strings.HasPrefix(p, "/") {
			return fmt.Errorf("paths: %q must start with /", p)
		}
		if _, err := cleanPath(p); err != nil {
			return fmt.Errorf("paths: %q: %w", p, err)
		}
	}
	if !tokenRE().MatchString(b.Header) || forbiddenHeaders[http.CanonicalHeaderKey(b.Header)] {
		return fmt.Errorf("header: %q is not a header a credential may be set in", b.Header)
	}
	for _, h := range b.Strip {
		if !tokenRE().MatchString(h) || forbiddenHeaders[http.CanonicalHeaderKey(h)] {
			return fmt.Errorf("strip: %q is not a header that may be stripped", h)
		}
	}
	n := 0
	for _, set := range []bool{b.AWS != nil, b.OAuth != nil, b.GitHubApp != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		return errors.New("aws_sigv4, oauth, github_app: set at most one")
	}
	if b.AWS != nil {
		return b.validateAWS(ids)
	}
	if b.OAuth != nil {
		if err := b.OAuth.validate(ids); err != nil {
			return err
		}
	}
	if b.GitHubApp != nil {
		if err := b.GitHubApp.validate(); err != nil {
			return err
		}
	}
	switch {
	case b.Template != "" && b.BasicUser != "":
		return errors.New("template and basic_user: set only one")
	case b.Template == "" && b.BasicUser == "":
		return errors.New(`template: set a template such as "Bearer {{value}}", or basic_user`)
	case b.Template != "":
		if strings.Count(b.Template, ValuePlaceholder) != 1 {
			return fmt.Errorf("template: %q must contain %s exactly once", b.Template, ValuePlaceholder)
		}
		rest := strings.Replace(b.Template, ValuePlaceholder, "", 1)
		if strings.Contains(rest, "{{") || strings.Contains(rest, "}}") {
			return fmt.Errorf("template: %q has a marker other than %s", b.Template, ValuePlaceholder)
		}
		if hasCtl(b.Template) {
			return fmt.Errorf("template: %q contains a control character", b.Template)
		}
	default:
		if strings.Contains(b.BasicUser, ":") || hasCtl(b.BasicUser) {
			return fmt.Errorf("basic_user: %q must not contain ':' or control characters", b.BasicUser)
		}
	}
	switch b.Mode {
	case ModeDefault:
		if b.PlaceholderEnv != "" {
			return errors.New("placeholder_env: only placeholder and require modes use a placeholder")
		}
	case ModePlaceholder, ModeRequire:
		if !envRE().MatchString(b.PlaceholderEnv) {
			return fmt.Errorf("placeholder_env: %q is not a variable name (required in %s mode)", b.PlaceholderEnv, b.Mode)
		}
	default:
		return fmt.Errorf("mode: %q is not one of default, placeholder, require", b.Mode)
	}
	return nil
}

// parseBindingHost accepts "host", "*.domain", "**.domain", "https://host" and
// "https://host:port" and returns the normalized pattern and the port.
func parseBindingHost(h string, port int) (string, int, error) {
	if h == "" {
		return "", 0, errors.New("host: empty")
	}
	if i := strings.Index(h, "://"); i >= 0 {
		scheme := strings.ToLower(h[:i])
		if scheme != "https" {
			return "", 0, fmt.Errorf("host: %q: only https destinations may carry a secret, not %s://", h, scheme)
		}
		h = strings.TrimSuffix(h[i+3:], "/")
		if strings.ContainsAny(h, "/?#@") {
			return "", 0, fmt.Errorf("host: %q: give a host, not a URL with a path, query or user", h)
		}
		if j := strings.LastIndexByte(h, ':'); j >= 0 && !strings.HasSuffix(h, "]") {
			p, err := hostname.ParsePort(h[j+1:])
			if err != nil {
				return "", 0, fmt.Errorf("host: %q: %w", h, err)
			}
			if port != DefaultPort && port != p {
				return "", 0, fmt.Errorf("host: %q names port %d but port is %d", h, p, port)
			}
			port, h = p, h[:j]
		}
	}
	pat, err := hostname.NormalizePattern(h)
	if err != nil {
		return "", 0, fmt.Errorf("host: %w", err)
	}
	return pat, port, nil
}

func hasCtl(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] == 0x7f {
			return true
		}
	}
	return false
}
