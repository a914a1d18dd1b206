package secrets

import (
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlock-dev/airlock/hostname"
	"github.com/airlock-dev/airlock/oplog"
)

// Temporary credentials: an AWS binding with assume_role has the gateway call
// STS AssumeRole with the binding's long-term key, per sandbox, and sign the
// sandbox's requests with the temporary credentials, refreshed before they
// expire. The call goes through the token client the gateway hands the
// Injector (SetTokenClient): its guarded dialer, its upstream roots.

// Assume-role defaults and bounds.
const (
	DefaultAssumeDuration = time.Hour
	MinAssumeDuration     = 15 * time.Minute
	MaxAssumeDuration     = 12 * time.Hour
	// AssumeRefreshBefore: temporary credentials are replaced once they have
	// less than this left.
	AssumeRefreshBefore = 5 * time.Minute
	// AssumeTimeout bounds one AssumeRole call.
	AssumeTimeout    = 15 * time.Second
	maxSTSResponse   = 64 << 10
	maxSessionPolicy = 2048
)

// AssumeRoleConfig makes an AWS binding sign with temporary credentials of a
// role, assumed by the gateway for each sandbox.
type AssumeRoleConfig struct {
	// RoleARN is the role to assume (arn:aws:iam::123456789012:role/agent).
	RoleARN string `yaml:"role_arn"`
	// Duration of each set of credentials, 15m to 12h. Default 1h.
	Duration time.Duration `yaml:"duration"`
	// STSHost is the STS endpoint, host[:port] (HTTPS). Default
	// sts.<region>.amazonaws.com.
	STSHost string `yaml:"sts_host"`
	// SessionPolicy is an IAM policy (JSON) that scopes the sandbox's
	// credentials down; {{label.NAME}} is replaced by the sandbox's label NAME
	// (JSON-escaped). A sandbox without a label the policy names is refused.
	SessionPolicy string `yaml:"session_policy"`
}

var (
	roleARNRE = sync.OnceValue(func() *regexp.Regexp {
		return regexp.MustCompile(`^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$`)
	})
	labelRefRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\{\{label\.([A-Za-z0-9._/-]{1,63})\}\}`) })
	sessionNameR = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`[^A-Za-z0-9+=,.@_-]`) })
)

func (a *AssumeRoleConfig) applyDefaults(region string) {
	if a.Duration == 0 {
		a.Duration = DefaultAssumeDuration
	}
	if a.STSHost == "" && region != "" {
		a.STSHost = "sts." + region + ".amazonaws.com"
	}
}

func (a *AssumeRoleConfig) validate() error {
	if !roleARNRE().MatchString(a.RoleARN) {
		return fmt.Errorf("aws_sigv4.assume_role.role_arn: %q is not a role ARN", a.RoleARN)
	}
	if a.Duration < MinAssumeDuration || a.Duration > MaxAssumeDuration {
		return fmt.Errorf("aws_sigv4.assume_role.duration: %v is not in %v..%v", a.Duration, MinAssumeDuration, MaxAssumeDuration)
	}
	if _, _, err := hostname.SplitHostPort(a.STSHost, 443); err != nil || strings.ContainsAny(a.STSHost, "/?#@") {
		return fmt.Errorf("aws_sigv4.assume_role.sts_host: %q is not a host[:port]", a.STSHost)
	}
	if a.SessionPolicy != "" {
		sample := labelRefRE().ReplaceAllString(a.SessionPolicy, "x")
		if !json.Valid([]byte(sample)) {
			return errors.New("aws_sigv4.assume_role.session_policy: not valid JSON (with each {{label.NAME}} replaced)")
		}
		if len(sample) > maxSessionPolicy {
			return fmt.Errorf("aws_sigv4.assume_role.session_policy: longer than %d bytes", maxSessionPolicy)
		}
	}
	return nil
}

// TokenClient is what the Injector sends its own token requests with; the
// gateway's is built on its guarded dialer (gateway.(*Gateway).TokenClient).
type TokenClient interface {
	Do(*http.Request) (*http.Response, error)
}

// SetTokenClient gives the Injector the client for its own calls to token
// endpoints. Without one, bindings that need a token fail (503).
func (in *Injector) SetTokenClient(c TokenClient) {
	in.mu.Lock()
	in.tokens = c
	in.mu.Unlock()
}

// awsCreds is one set of credentials a request is signed with.
type awsCreds struct {
	keyID, secret, token string
	expires              time.Time // zero: long-term
}

// assumeCache holds temporary credentials per binding and sandbox, and makes
// one AssumeRole call at a time per key.
type assumeCache = mintCache[assumeEntry]

type assumeEntry struct {
	mu    sync.Mutex // held during a call
	creds *awsCreds
}

// assumed returns the sandbox's temporary credentials for b, calling
// AssumeRole with the long-term ones when there are none or they expire
// within AssumeRefreshBefore.
func (in *Injector) assumed(ctx context.Context, sb Sandbox, b *binding, long awsCreds) (*awsCreds, error) {
	e := in.assume.entry(tokenKey{b.index, sb.ID})
	e.mu.Lock()
	defer e.mu.Unlock()
	if c := e.creds; c != nil && in.now().Add(AssumeRefreshBefore).Before(c.expires) {
		return c, nil
	}
	c, err := in.assumeRole(ctx, sb, b, long)
	if err != nil {
		in.log.Error("assume role failed", oplog.SandboxKey, sb.ID, "secret", b.secret.cfg.ID,
			"binding", b.index, oplog.ErrorKey, err)
		e := fmt.Errorf("bindings[%d] (secret %s): assume role %s: %w", b.index, b.secret.cfg.ID, b.aws.assume.RoleARN, err)
		return nil, &UnavailableError{SecretID: b.secret.cfg.ID, Err: e, Note: e.Error()}
	}
	e.creds = c
	in.log.Info("assumed role", oplog.SandboxKey, sb.ID, "secret", b.secret.cfg.ID, "binding", b.index,
		"expires", c.expires.UTC().Format(time.RFC3339))
	return c, nil
}

// sessionPolicy renders the binding's policy for a sandbox.
func sessionPolicy(tmpl string, sb Sandbox) (string, error) {
	var missing string
	out := labelRefRE().ReplaceAllStringFunc(tmpl, func(m string) string {
		name := labelRefRE().FindStringSubmatch(m)[1]
		v, ok := sb.Labels[name]
		if !ok {
			missing = name
			return ""
		}
		j, _ := json.Marshal(v)
		return string(j[1 : len(j)-1])
	})
	if missing != "" {
		return "", fmt.Errorf("session policy names label %q, which the sandbox does not have", missing)
	}
	return out, nil
}

// sessionName is "airlock-" and the sandbox id, in the characters STS takes.
func sessionName(sandbox string) string {
	n := "airlock-" + sessionNameR().ReplaceAllString(sandbox, "_")
	if len(n) > 64 {
		n = n[:64]
	}
	return n
}

// assumeRole makes one signed AssumeRole call.
func (in *Injector) assumeRole(ctx context.Context, sb Sandbox, b *binding, long awsCreds) (*awsCreds, error) {
	in.mu.Lock()
	client := in.tokens
	in.mu.Unlock()
	if client == nil {
		return nil, errors.New("the gateway gave the secrets injector no token client")
	}
	a := b.aws.assume
	form := url.Values{
		"Action": {"AssumeRole"}, "Version": {"2011-06-15"}, "RoleArn": {a.RoleARN},
		"RoleSessionName": {sessionName(sb.ID)}, "DurationSeconds": {strconv.Itoa(int(a.Duration / time.Second))},
	}
	if a.SessionPolicy != "" {
		p, err := sessionPolicy(a.SessionPolicy, sb)
		if err != nil {
			return nil, err
		}
		form.Set("Policy", p)
	}
	body := form.Encode()
	ctx, cancel := context.WithTimeout(ctx, AssumeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "https://"+a.STSHost+"/", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded; charset=utf-8")
	signSTS(req, []byte(body), long, b.aws.region, in.now())
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("sts: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxSTSResponse+1))
	if err != nil {
		return nil, fmt.Errorf("sts: reading the answer: %w", err)
	}
	if len(raw) > maxSTSResponse {
		return nil, fmt.Errorf("sts: answer longer than %d bytes", maxSTSResponse)
	}
	return parseAssumeRole(resp.StatusCode, raw)
}

// signSTS signs an STS query-protocol POST with long-term credentials.
func signSTS(req *http.Request, body []byte, c awsCreds, region string, now time.Time) {
	amzDate := now.UTC().Format(sigv4TimeFormat)
	req.Header.Set("X-Amz-Date", amzDate)
	signed := []string{"content-type", "host", "x-amz-date"}
	if c.token != "" {
		req.Header.Set("X-Amz-Security-Token", c.token)
		signed = append(signed, "x-amz-security-token")
	}
	scope := sigv4Scope{date: amzDate[:8], region: region, service: "sts"}
	sr := &sigv4Request{method: req.Method, escapedPath: "/", host: req.URL.Host, header: req.Header,
		signedHeaders: signed, payloadHash: sha256Hex(body)}
	sig, _ := sr.signature(c.secret, scope, amzDate) // every signed header is set above
	req.Header.Set("Authorization", sigv4Algorithm+" Credential="+c.keyID+"/"+scope.String()+
		", SignedHeaders="+strings.Join(signed, ";")+", Signature="+sig)
}

// parseAssumeRole reads an AssumeRole answer: the credentials, or the
// error STS named (its code and message; they never carry a key).
func parseAssumeRole(status int, raw []byte) (*awsCreds, error) {
	if status != http.StatusOK {
		var e struct {
			Code    string `xml:"Error>Code"`
			Message string `xml:"Error>Message"`
		}
		_ = xml.Unmarshal(raw, &e)
		if e.Code == "" {
			return nil, fmt.Errorf("sts answered %d", status)
		}
		return nil, fmt.Errorf("sts answered %d %s: %.200s", status, e.Code, e.Message)
	}
	var r struct {
		Creds struct {
			KeyID      string `xml:"AccessKeyId"`
			Secret     string `xml:"SecretAccessKey"`
			Token      string `xml:"SessionToken"`
			Expiration string `xml:"Expiration"`
		} `xml:"AssumeRoleResult>Credentials"`
	}
	if err := xml.Unmarshal(raw, &r); err != nil {
		return nil, errors.New("sts: the answer is not AssumeRole XML")
	}
	c := r.Creds
	exp, err := time.Parse(time.RFC3339, c.Expiration)
	if err != nil || c.KeyID == "" || len(c.Secret) < MinValueLength || c.Token == "" {
		return nil, errors.New("sts: the answer lacks credentials or their expiration")
	}
	return &awsCreds{keyID: c.KeyID, secret: c.Secret, token: c.Token, expires: exp}, nil
}
