package daemon

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/gateway"
	"github.com/airlock-dev/airlock/inspect"
	"github.com/airlock-dev/airlock/policy"
)

// inspectKeyFile is the key of content inspection's fingerprints and
// canaries, in the run directory (hidden from every sandbox): kept across
// restarts, so a canary planted before one is still recognized after it.
const inspectKeyFile = "inspect.key"

// warmDelay is how long Run's command runs before the scanner's rules
// (inspect.Scanner.Warm) and a lazy policy are compiled beside it: tens of
// milliseconds of CPU each, which a command that ends sooner without a
// connection never pays.
const warmDelay = 250 * time.Millisecond

// buildInspect builds the content scanner the gateway and the DNS filter
// share, unless inspect.enable is off.
func (d *Daemon) buildInspect(cfg config.Config) error {
	if !cfg.Inspect.On() {
		return nil
	}
	key, err := loadInspectKey(filepath.Join(d.runDir, inspectKeyFile))
	if err != nil {
		return err
	}
	sc, err := inspect.New(inspect.Config{Key: key, Disabled: cfg.Inspect.Disable, Window: time.Duration(cfg.Inspect.Window)})
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	d.scanner = sc
	if cfg.Inspect.CanariesOn() {
		d.canaries = sc.Canaries() // the scanner's own: it knows what For issued
	}
	return nil
}

// inspectGateway sets the gateway's inspection from the section.
func (d *Daemon) inspectGateway(gw *gateway.Config, cfg config.Config) {
	if d.scanner == nil {
		return
	}
	gw.Inspector = gateway.NewInspector(d.scanner)
	gw.InspectMaxBody = int64(cfg.Inspect.MaxBodyBytes)
}

// canaryPlant is sandbox id's canaries as sandboxd plants them: variables set
// only where nothing else sets them (a platform's real credentials win) and
// files written into the fresh $HOME, never replacing one. Nil when
// inspect.canaries is off.
func (d *Daemon) canaryPlant(id string) (env []string, files map[string][]byte) {
	if d.canaries == nil {
		return nil, nil
	}
	cs := d.canaries.For(id)
	return cs.EnvList(), cs.Files
}

// loadInspectKey reads the key at path, or makes one (32 random bytes, mode
// 0600) when there is none.
func loadInspectKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if err == nil {
		if len(key) < inspect.MinKeyBytes {
			return nil, fmt.Errorf("inspect: %s: %d bytes, want at least %d (delete it to make a new one)", path, len(key), inspect.MinKeyBytes)
		}
		return key, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return loadInspectKey(path) // another start made it first
	}
	if err != nil {
		return nil, fmt.Errorf("inspect: %w", err)
	}
	if _, err := f.Write(key); err != nil {
		f.Close()
		return nil, fmt.Errorf("inspect: %w", err)
	}
	return key, f.Close()
}

// scanName is the DNS filter's content inspection of a question's name, or
// nil when inspection is off.
func (d *Daemon) scanName() func(sb policy.Sandbox, name string) []policy.Finding {
	sc := d.scanner
	if sc == nil {
		return nil
	}
	return func(_ policy.Sandbox, name string) []policy.Finding {
		fs := sc.Scan("dns.qname", []byte(name))
		if len(fs) == 0 {
			return nil
		}
		out := make([]policy.Finding, len(fs))
		for i, f := range fs {
			out[i] = policy.Finding(f)
		}
		return out
	}
}
