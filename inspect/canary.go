package inspect

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Canaries makes and recognizes canary credentials: format-valid decoys
// (an AWS key pair, a GitHub token, an OpenAI-style key) unique to each
// sandbox and bound to no host, so any request carrying one is exfiltration.
// A canary carries a keyed mark in its random part, so the scanner recognizes
// every canary of its key without a list of issued ones, in the case it was
// issued in. A path that folds case (a DNS name, a lowercasing proxy or
// tool) destroys the mark of a mixed-case canary, so Canaries also keeps the
// canaries For issued, by their lowercase form, for the most recent
// MaxIssuedSandboxes sandboxes: a lowercased candidate is one map lookup.
type Canaries struct {
	key []byte

	mu     sync.RWMutex
	issued map[string]issuedCanary // lowercase value -> as issued
	order  []string                // sandbox ids in issue order, oldest first
	byID   map[string][]string     // sandbox id -> its lowercase values
	gen    atomic.Uint64           // bumped whenever issued changes
}

// issuedCanary is one canary For issued: its rule id and its value.
type issuedCanary struct {
	id    string
	value string
}

// MaxIssuedSandboxes bounds the sandboxes whose canaries Canaries keeps for
// case-insensitive recognition (the oldest are forgotten first; their
// canaries are still recognized in their issued case).
const MaxIssuedSandboxes = 1 << 16

// NewCanaries returns the canary maker for key.
func NewCanaries(key []byte) *Canaries {
	return &Canaries{key: append([]byte(nil), key...), issued: map[string]issuedCanary{}, byID: map[string][]string{}}
}

// CanarySet is one sandbox's canaries: environment variables and files.
type CanarySet struct {
	// Env holds AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and friends; set
	// only those the platform has not set (Plant does this).
	Env map[string]string
	// Files maps paths relative to $HOME (".aws/credentials", ".netrc",
	// ".git-credentials", ...) to their contents.
	Files map[string][]byte
	// Values are the decoy secrets themselves, for tests.
	Values []string
}

// For returns sandboxID's canaries; the same id always gets the same ones.
func (c *Canaries) For(sandboxID string) CanarySet {
	return c.forSandbox(sandboxID)
}

// Environ returns env (KEY=value entries) with the set's variables added
// where env does not set them already: a platform's real credentials win.
func (cs CanarySet) Environ(env []string) []string {
	return cs.environ(env)
}

// Plant writes the set's files below home, creating directories (0700) as
// needed, each file 0600, and never replaces or follows an existing file: a
// user's real ~/.netrc stays. It returns the relative paths it wrote.
func (cs CanarySet) Plant(home string) ([]string, error) {
	return cs.plant(home)
}

// Canary alphabets and shapes.
const (
	awsIDAlphabet     = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	awsSecretAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
	base62Alphabet    = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	urlAlphabet       = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

	awsIDRandom, awsIDMark         = 8, 8   // after "AKIA": 16
	awsSecretRandom, awsSecretMark = 24, 16 // 40
	githubRandom, githubMark       = 18, 12 // after "ghp_": 30, then 6 of checksum
	openaiRandom, openaiMark       = 74, 24 // "sk-proj-" 74 "T3BlbkFJ" 74

	// netrcMachine is a host no tool contacts on its own, so a .netrc
	// canary is only ever sent by something that read the file.
	netrcMachine = "git.corp.internal"
	canaryUser   = "sandbox-ci"
)

// keyed returns n characters of alphabet derived from key and parts.
func keyed(key []byte, alphabet string, n int, parts ...string) string {
	var out []byte
	for ctr := uint32(0); len(out) < n; ctr++ {
		m := hmac.New(sha256.New, key)
		var c [4]byte
		binary.BigEndian.PutUint32(c[:], ctr)
		m.Write(c[:])
		for _, p := range parts {
			m.Write([]byte(p))
			m.Write([]byte{0})
		}
		for _, b := range m.Sum(nil) {
			if len(out) == n {
				break
			}
			out = append(out, alphabet[int(b)%len(alphabet)])
		}
	}
	return string(out)
}

// mark is the keyed mark of a canary's random part.
func (c *Canaries) mark(kind, random string, n int, alphabet string) string {
	return keyed(c.key, alphabet, n, "airlock-canary-mark/v1", kind, random)
}

func (c *Canaries) forSandbox(id string) CanarySet {
	cs := c.makeSet(id)
	c.remember(id, map[string]string{
		"canary:aws-access-key-id":     cs.Values[0],
		"canary:aws-secret-access-key": cs.Values[1],
		"canary:github-token":          cs.Values[2],
		"canary:openai-key":            cs.Values[3],
	})
	return cs
}

func (c *Canaries) makeSet(id string) CanarySet {
	r := func(kind, alphabet string, n int) string {
		return keyed(c.key, alphabet, n, "airlock-canary/v1", kind, id)
	}
	idR := r("aws-id", awsIDAlphabet, awsIDRandom)
	awsID := "AKIA" + idR + c.mark("aws-id", idR, awsIDMark, awsIDAlphabet)
	secR := r("aws-secret", awsSecretAlphabet, awsSecretRandom)
	awsSecret := secR + c.mark("aws-secret", secR, awsSecretMark, awsSecretAlphabet)
	ghR := r("github", base62Alphabet, githubRandom)
	ghBody := ghR + c.mark("github", ghR, githubMark, base62Alphabet)
	github := "ghp_" + ghBody + githubChecksum(ghBody)
	oaR := r("openai", urlAlphabet, openaiRandom)
	openai := "sk-proj-" + oaR + "T3BlbkFJ" + c.mark("openai", oaR, openaiMark, urlAlphabet) + r("openai-tail", urlAlphabet, 74-openaiMark)
	return CanarySet{
		Env: map[string]string{
			"AWS_ACCESS_KEY_ID":     awsID,
			"AWS_SECRET_ACCESS_KEY": awsSecret,
		},
		Files: map[string][]byte{
			".aws/credentials":       []byte("[default]\naws_access_key_id = " + awsID + "\naws_secret_access_key = " + awsSecret + "\n"),
			".git-credentials":       []byte("https://" + canaryUser + ":" + github + "@github.com\n"),
			".netrc":                 []byte("machine " + netrcMachine + "\n  login " + canaryUser + "\n  password " + github + "\n"),
			".config/openai/api_key": []byte(openai + "\n"),
		},
		Values: []string{awsID, awsSecret, github, openai},
	}
}

// remember records id's canaries for case-insensitive recognition, once.
func (c *Canaries) remember(sandboxID string, values map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.byID[sandboxID]; ok {
		return
	}
	if len(c.order) >= MaxIssuedSandboxes {
		old := c.order[0]
		c.order = c.order[1:]
		for _, l := range c.byID[old] {
			delete(c.issued, l)
		}
		delete(c.byID, old)
	}
	var lows []string
	for id, v := range values {
		l := strings.ToLower(v)
		c.issued[l] = issuedCanary{id: id, value: v}
		lows = append(lows, l)
	}
	c.byID[sandboxID] = lows
	c.order = append(c.order, sandboxID)
	c.gen.Add(1)
}

// folded is the issued canary of rule id whose lowercase form is v's, if
// For issued one. v is at most a canary's length; the lookup allocates
// nothing.
func (c *Canaries) folded(id string, v []byte) ([]byte, bool) {
	var buf [maxCanaryLen]byte
	if len(v) > len(buf) {
		return nil, false
	}
	l := buf[:len(v)]
	for i, b := range v {
		l[i] = lower(b)
	}
	c.mu.RLock()
	ic, ok := c.issued[string(l)]
	c.mu.RUnlock()
	if !ok || ic.id != id {
		return nil, false
	}
	return []byte(ic.value), true
}

// maxCanaryLen is the longest canary (the OpenAI-style key).
const maxCanaryLen = 8 + openaiRandom + 8 + 74

// recognize reports whether v, matched by canary rule id, is a canary of
// this key, and returns it in the case it was issued in: by its keyed mark
// (in its own case, or upper case for an AWS key id), else by the issued
// set when a path lowercased or uppercased it.
func (c *Canaries) recognize(id string, v []byte) ([]byte, bool) {
	if cv := canonicalCanary(id, v); c.isCanary(id, cv) {
		return cv, true
	}
	return c.folded(id, v)
}

// githubChecksum is the 6-character base62 CRC-32 a GitHub token ends in.
func githubChecksum(body string) string {
	v := crc32.ChecksumIEEE([]byte(body))
	out := make([]byte, 6)
	for i := 5; i >= 0; i-- {
		out[i] = base62Alphabet[v%62]
		v /= 62
	}
	return string(out)
}

// canaryRules are the rules that recognize this package's canaries: a
// format match whose keyed mark checks out. The key comes from the scanner.
func canaryRules() []*rule {
	mk := func(id, expr string, kw ...string) *rule {
		return &rule{id: "canary:" + id, re: regexp.MustCompile(expr), keywords: kw, confidence: High,
			class: ClassCanary, reach: reach(expr, 512), secretGroup: 0}
	}
	return []*rule{
		// Case-insensitive: an AWS key id's alphabet has one case, so one
		// that reached a DNS name lowercased is still recognized
		// (canonicalCanary); the mixed-case ones are recognized folded by
		// the issued set (Canaries.folded).
		mk("aws-access-key-id", `(?i)AKIA[A-Z2-7]{16}`, "akia"),
		mk("github-token", `(?i)ghp_[0-9A-Z]{36}`, "ghp_"),
		mk("openai-key", `(?i)sk-proj-[A-Z0-9_-]{74}T3BlbkFJ[A-Z0-9_-]{74}`, "t3blbkfj"),
	}
}

// canonicalCanary is v, matched by canary rule id, in the case it was
// issued in, where its format allows recovering it: an AWS access key id
// is upper case whatever a DNS name or a case-folding path made of it.
func canonicalCanary(id string, v []byte) []byte {
	if id == "canary:aws-access-key-id" {
		return bytes.ToUpper(v)
	}
	return v
}

// isCanary reports whether value, matched by canary rule id, carries this
// key's mark.
func (c *Canaries) isCanary(id string, v []byte) bool {
	s := string(v)
	switch id {
	case "canary:aws-access-key-id":
		if len(s) != 20 {
			return false
		}
		r := s[4 : 4+awsIDRandom]
		return hmac.Equal([]byte(s[4+awsIDRandom:]), []byte(c.mark("aws-id", r, awsIDMark, awsIDAlphabet)))
	case "canary:github-token":
		if len(s) != 40 {
			return false
		}
		r := s[4 : 4+githubRandom]
		return hmac.Equal([]byte(s[4+githubRandom:4+githubRandom+githubMark]), []byte(c.mark("github", r, githubMark, base62Alphabet)))
	case "canary:openai-key":
		if len(s) != 8+74+8+74 {
			return false
		}
		r := s[8 : 8+openaiRandom]
		m := s[8+74+8 : 8+74+8+openaiMark]
		return hmac.Equal([]byte(m), []byte(c.mark("openai", r, openaiMark, urlAlphabet)))
	case "canary:aws-secret-access-key":
		if len(s) != awsSecretRandom+awsSecretMark {
			return false
		}
		return hmac.Equal([]byte(s[awsSecretRandom:]), []byte(c.mark("aws-secret", s[:awsSecretRandom], awsSecretMark, awsSecretAlphabet)))
	}
	return false
}

func (cs CanarySet) environ(env []string) []string {
	set := map[string]bool{}
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		set[k] = true
	}
	out := append([]string(nil), env...)
	var keys []string
	for k := range cs.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !set[k] {
			out = append(out, k+"="+cs.Env[k])
		}
	}
	return out
}

func (cs CanarySet) plant(home string) ([]string, error) {
	if !filepath.IsAbs(home) {
		return nil, fmt.Errorf("inspect: plant canaries: home %q is not an absolute path", home)
	}
	var names []string
	for name := range cs.Files {
		names = append(names, name)
	}
	sort.Strings(names)
	var wrote []string
	for _, name := range names {
		ok, err := plantFile(home, name, cs.Files[name])
		if err != nil {
			return wrote, err
		}
		if ok {
			wrote = append(wrote, name)
		}
	}
	return wrote, nil
}

// plantFile creates home/name (0600, parents 0700) unless it or any parent
// is already something other than a plain directory: nothing existing is
// replaced or followed.
func plantFile(home, name string, data []byte) (bool, error) {
	if filepath.IsAbs(name) || !filepath.IsLocal(name) {
		return false, fmt.Errorf("inspect: plant canaries: %q is not a path below home", name)
	}
	dir := home
	parts := strings.Split(filepath.ToSlash(filepath.Dir(name)), "/")
	for _, p := range parts {
		if p == "." {
			continue
		}
		dir = filepath.Join(dir, p)
		st, err := os.Lstat(dir)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			if err := os.Mkdir(dir, 0o700); err != nil {
				return false, fmt.Errorf("inspect: plant canaries: %w", err)
			}
		case err != nil:
			return false, fmt.Errorf("inspect: plant canaries: %w", err)
		case !st.IsDir():
			return false, nil // a user's file or link where a directory would go: leave it
		}
	}
	f, err := os.OpenFile(filepath.Join(home, name), os.O_WRONLY|os.O_CREATE|os.O_EXCL|noFollow, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("inspect: plant canaries: %w", err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return false, fmt.Errorf("inspect: plant canaries: %w", err)
	}
	return true, f.Close()
}

// EnvList is the set's variables as sorted KEY=value entries, for a
// sandbox's default environment (set only where the platform has not).
func (cs CanarySet) EnvList() []string {
	return cs.environ(nil)
}

// mixedCase reports whether b has both an upper- and a lowercase letter, as
// a random base64 secret does (a hex digest does not): the HMAC check runs
// only then.
func mixedCase(b []byte) bool {
	up, low := false, false
	for _, c := range b {
		up = up || 'A' <= c && c <= 'Z'
		low = low || 'a' <= c && c <= 'z'
	}
	return up && low
}
