package secrets

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
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
)

// GitHub App installation tokens: the gateway holds the app's private key,
// signs a short RS256 JWT, and asks GitHub for an installation token scoped to
// the repositories the binding names for the sandbox. Each sandbox gets its
// own token (the audit log and GitHub both tell sandboxes apart); Forget
// revokes a sandbox's tokens.

// DefaultGitHubAPI is GitHubAppConfig.APIURL's default.
const DefaultGitHubAPI = "https://api.github.com"

// GitHubAppConfig makes a binding inject an installation token of a GitHub
// App. The binding's secret is the app's private key: its PEM file (PKCS#1 or
// #8) base64-encoded on one line (`base64 -w0 key.pem`), as a secret value
// holds no newline.
type GitHubAppConfig struct {
	// AppID is the app's id (the JWT's issuer).
	AppID int64 `yaml:"app_id"`
	// InstallationID is the installation tokens are minted for.
	InstallationID int64 `yaml:"installation_id"`
	// APIURL is the API root. Default https://api.github.com (GitHub
	// Enterprise: https://HOST/api/v3).
	APIURL string `yaml:"api_url"`
	// Repositories limits each token to these repository names (without the
	// owner); {{label.NAME}} is replaced by the sandbox's label NAME. Empty:
	// every repository of the installation.
	Repositories []string `yaml:"repositories"`
	// Permissions narrows the token's permissions ({contents: read}).
	// Empty: the installation's.
	Permissions map[string]string `yaml:"permissions"`
}

var repoNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9._-]{1,100}$`) })

func (g *GitHubAppConfig) validate() error {
	u, err := url.Parse(g.APIURL)
	switch {
	case g.AppID <= 0:
		return errors.New("github_app.app_id: required")
	case g.InstallationID <= 0:
		return errors.New("github_app.installation_id: required")
	case err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("github_app.api_url: %q is not an https URL", g.APIURL)
	}
	for _, r := range g.Repositories {
		if !repoNameRE().MatchString(labelRefRE().ReplaceAllString(r, "x")) {
			return fmt.Errorf("github_app.repositories: %q is not a repository name", r)
		}
	}
	for k, v := range g.Permissions {
		if !repoNameRE().MatchString(k) || (v != "read" && v != "write" && v != "admin") {
			return fmt.Errorf("github_app.permissions: %s: %s is not read, write or admin", k, v)
		}
	}
	return nil
}

func (b *binding) tokenURL() string {
	if b.github != nil {
		return strings.TrimSuffix(b.github.APIURL, "/") + "/app/installations/" +
			strconv.FormatInt(b.github.InstallationID, 10) + "/access_tokens"
	}
	return b.oauth.TokenURL
}

// githubRepos renders the binding's repositories for a sandbox.
func githubRepos(g *GitHubAppConfig, sb Sandbox) ([]string, error) {
	var out []string
	for _, r := range g.Repositories {
		var missing string
		name := labelRefRE().ReplaceAllStringFunc(r, func(m string) string {
			l := labelRefRE().FindStringSubmatch(m)[1]
			v, ok := sb.Labels[l]
			if !ok {
				missing = l
			}
			return v
		})
		if missing != "" {
			return nil, fmt.Errorf("repositories name label %q, which the sandbox does not have", missing)
		}
		if !repoNameRE().MatchString(name) {
			return nil, fmt.Errorf("repository %q (from the sandbox's labels) is not a repository name", name)
		}
		out = append(out, name)
	}
	return out, nil
}

// githubJWT signs the app's JWT: issued a minute ago (clock skew), valid
// nine minutes.
func githubJWT(value string, appID int64, now time.Time) (string, error) {
	// A secret value holds no newline: the PEM comes base64-encoded on one line.
	pemKey, err := base64.StdEncoding.DecodeString(strings.TrimSpace(value))
	if err != nil {
		return "", errors.New("the app's private key is not base64 of a PEM file (base64 -w0 key.pem)")
	}
	blk, _ := pem.Decode(pemKey)
	if blk == nil {
		return "", errors.New("the app's private key is not PEM")
	}
	var key *rsa.PrivateKey
	if k, err := x509.ParsePKCS1PrivateKey(blk.Bytes); err == nil {
		key = k
	} else if k, err := x509.ParsePKCS8PrivateKey(blk.Bytes); err == nil {
		rk, ok := k.(*rsa.PrivateKey)
		if !ok {
			return "", errors.New("the app's private key is not RSA")
		}
		key = rk
	} else {
		return "", errors.New("the app's private key does not parse (PKCS#1 or PKCS#8 RSA)")
	}
	enc := base64.RawURLEncoding
	head := enc.EncodeToString([]byte(`{"alg":"RS256","typ":"JWT"}`))
	claims, _ := json.Marshal(map[string]any{
		"iat": now.Add(-time.Minute).Unix(), "exp": now.Add(9 * time.Minute).Unix(), "iss": strconv.FormatInt(appID, 10),
	})
	signing := head + "." + enc.EncodeToString(claims)
	sum := sha256.Sum256([]byte(signing))
	sig, err := rsa.SignPKCS1v15(rand.Reader, key, crypto.SHA256, sum[:])
	if err != nil {
		return "", fmt.Errorf("signing the app's JWT: %w", err)
	}
	return signing + "." + enc.EncodeToString(sig), nil
}

// mintGitHub asks for an installation token for sb.
func (in *Injector) mintGitHub(ctx context.Context, sb Sandbox, b *binding, v *version) (*oauthToken, error) {
	in.mu.Lock()
	client := in.tokens
	in.mu.Unlock()
	if client == nil {
		return nil, errors.New("the gateway gave the secrets injector no token client")
	}
	g := b.github
	repos, err := githubRepos(g, sb)
	if err != nil {
		return nil, err
	}
	jwt, err := githubJWT(v.value.reveal(), g.AppID, in.now())
	if err != nil {
		return nil, err
	}
	body := map[string]any{}
	if len(repos) > 0 {
		body["repositories"] = repos
	}
	if len(g.Permissions) > 0 {
		body["permissions"] = g.Permissions
	}
	raw, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, AssumeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.tokenURL(), bytes.NewReader(raw))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+jwt)
	req.Header.Set("Accept", "application/vnd.github+json")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("github: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenResponse+1))
	if err != nil || len(out) > maxTokenResponse {
		return nil, errors.New("github: answer unreadable or longer than 64 KiB")
	}
	var r struct {
		Token     string `json:"token"`
		ExpiresAt string `json:"expires_at"`
	}
	_ = json.Unmarshal(out, &r)
	if resp.StatusCode != http.StatusCreated || len(r.Token) < MinValueLength || hasCtl(r.Token) {
		return nil, fmt.Errorf("github answered %d without an installation token", resp.StatusCode)
	}
	exp, err := time.Parse(time.RFC3339, r.ExpiresAt)
	if err != nil {
		exp = in.now().Add(DefaultOAuthLifetime)
	}
	return &oauthToken{access: r.Token, expires: exp, scrub: newScrubber(append(CanaryForms(r.Token), CanaryForms(jwt)...)),
		revoke: strings.TrimSuffix(g.APIURL, "/") + "/installation/token"}, nil
}
