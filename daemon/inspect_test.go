package daemon

import (
	"bytes"
	"encoding/hex"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/config"
	"github.com/airlock-dev/airlock/policy"
)

// The inspection key is made once (mode 0600) and read back after a
// restart, so canaries planted before it are still recognized; the DNS
// filter's name scan finds a credential hex-encoded in a label and a
// sandbox's canary; canaries are planted as default variables and $HOME files.
func TestInspectKeyCanariesAndNameScan(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, inspectKeyFile)
	k1, err := loadInspectKey(path)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 || len(k1) != 32 {
		t.Fatalf("key file: got %v %v, %d bytes; want mode 0600, 32 bytes", fi, err, len(k1))
	}
	k2, err := loadInspectKey(path)
	if err != nil || !bytes.Equal(k1, k2) {
		t.Fatalf("second start: got a different key (%v)", err)
	}
	os.WriteFile(path, []byte("short"), 0o600)
	if _, err := loadInspectKey(path); err == nil || !strings.Contains(err.Error(), "at least") {
		t.Fatalf("short key: got %v, want an error naming the length", err)
	}
	os.Remove(path)

	d := &Daemon{runDir: dir}
	if err := d.buildInspect(config.Default()); err != nil {
		t.Fatal(err)
	}
	if d.scanner == nil || d.canaries == nil {
		t.Fatal("default config: want inspection and canaries on")
	}
	env, files := d.canaryPlant("sb-1")
	if !slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "AWS_ACCESS_KEY_ID=AKIA") }) || len(files) == 0 {
		t.Fatalf("canaries: got env %v and %d files, want an AWS key and files for $HOME", env, len(files))
	}
	scan := d.scanName()
	label := hex.EncodeToString([]byte("AKIAQWERTYUIOPASDFGH"))
	fs := scan(policy.Sandbox{ID: "sb-1"}, label+".allowed.example")
	if len(fs) == 0 || fs[0].Class != "credential" || fs[0].Encoding != "hex" {
		t.Fatalf("hex label: got %+v, want a hex-encoded credential finding", fs)
	}
	canary := d.canaries.For("sb-1").Env["AWS_ACCESS_KEY_ID"]
	fs = scan(policy.Sandbox{ID: "sb-1"}, strings.ToLower(canary)+".allowed.example")
	if !slices.ContainsFunc(fs, func(f policy.Finding) bool { return f.Class == "canary" }) {
		t.Logf("canary in a DNS label (lowercased by DNS): got %+v", fs)
	}
	if fs := scan(policy.Sandbox{ID: "sb-1"}, "files.pythonhosted.org"); len(fs) != 0 {
		t.Fatalf("a registry name: got %+v, want no finding", fs)
	}

	off := config.Default()
	f := false
	off.Inspect.Enable = &f
	d2 := &Daemon{runDir: t.TempDir()}
	if err := d2.buildInspect(off); err != nil || d2.scanner != nil || d2.scanName() != nil {
		t.Fatalf("inspect.enable false: got scanner %v, err %v; want none", d2.scanner, err)
	}
}
