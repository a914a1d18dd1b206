package secrets

import (
	"errors"
	"net/url"
	"strings"

	"github.com/airlock-dev/airlock/hostname"
)

// cleanPath checks an escaped request path and returns the decoded path a
// binding's prefixes are matched against. It refuses every spelling a server
// might resolve differently from us: dot segments, encoded dots, slashes,
// backslashes and percent signs, doubled slashes, NUL and control bytes,
// semicolon path parameters, and anything that does not decode.
func cleanPath(escaped string) (string, error) {
	if escaped == "" {
		return "/", nil
	}
	if escaped[0] != '/' {
		return "", errors.New("path does not start with /")
	}
	low := strings.ToLower(escaped)
	for _, bad := range []string{"%2e", "%2f", "%5c", "%25", "%00", "%3b"} {
		if strings.Contains(low, bad) {
			return "", errors.New("path contains the encoded byte " + bad)
		}
	}
	if strings.ContainsAny(escaped, "\\;") {
		return "", errors.New(`path contains '\' or ';'`)
	}
	p, err := url.PathUnescape(escaped)
	if err != nil {
		return "", errors.New("path does not decode")
	}
	if hasCtl(p) || strings.ContainsRune(p, '\uFFFD') {
		return "", errors.New("path contains a control or invalid byte")
	}
	if strings.Contains(p, "//") {
		return "", errors.New("path contains //")
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			return "", errors.New("path contains a dot segment")
		}
	}
	return p, nil
}

// pathHasPrefix matches whole segments: "/a" matches "/a" and "/a/b", not "/ab";
// "/a/" matches "/a/" and "/a/b".
func pathHasPrefix(p, prefix string) bool {
	if prefix == "/" || p == prefix {
		return true
	}
	if strings.HasSuffix(prefix, "/") {
		return strings.HasPrefix(p, prefix)
	}
	return strings.HasPrefix(p, prefix+"/")
}

// binding is a validated, compiled BindingConfig.
type binding struct {
	index      int
	id         string       // BindingConfig.ID, may be empty
	attachUIDs map[int]bool // non-nil: attachable by the API (attach.go)
	secret     *secret
	ids        map[string]bool
	labels     map[string]string
	host       string // normalized pattern
	port       int
	methods    map[string]bool
	paths      []string
	header     string // canonical
	template   string
	basicUser  string
	basic      bool
	mode       string
	env        string
	strip      []string // canonical
	aws        *awsBinding
	oauth      *OAuthConfig
	github     *GitHubAppConfig
	// oauthClientSecret holds the client secret of a refresh_token grant.
	oauthClientSecret *secret
}

func (b *binding) matchSandbox(sb Sandbox) bool {
	if sb.ID != "" && b.ids[sb.ID] {
		return true
	}
	if len(b.labels) == 0 {
		return false
	}
	for k, v := range b.labels {
		got, ok := sb.Labels[k]
		if !ok || got != v {
			return false
		}
	}
	return true
}

func (b *binding) matchDest(host string, port int) bool {
	return port == b.port && hostname.MatchPattern(b.host, host)
}

func (b *binding) matchMethodPath(method, cleaned string) bool {
	if len(b.methods) > 0 && !b.methods[method] {
		return false
	}
	for _, p := range b.paths {
		if pathHasPrefix(cleaned, p) {
			return true
		}
	}
	return false
}

func (b *binding) where() string { return "header:" + b.header }

// Sandbox identifies the sandbox a request came from, by the listener that
// accepted it. It has the same fields as policy.Sandbox, so the gateway passes
// secrets.Sandbox(in.Sandbox); secrets does not import policy (and so does not
// link the policy engine).
type Sandbox struct {
	ID     string
	Labels map[string]string
}
