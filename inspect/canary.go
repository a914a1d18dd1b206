package inspect

// Canaries makes and recognizes canary credentials: format-valid decoys
// (an AWS key pair, a GitHub token, an OpenAI-style key) unique to each
// sandbox and bound to no host, so any request carrying one is exfiltration.
// A canary carries a keyed mark in its random part, so the scanner recognizes
// every canary of its key without a list of issued ones.
type Canaries struct {
	key []byte
}

// NewCanaries returns the canary maker for key.
func NewCanaries(key []byte) *Canaries {
	return &Canaries{key: append([]byte(nil), key...)}
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
