package netns

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/airlock-dev/airlock/identity"
)

// TestIslandSpecIsCreatesRuleset: the spec a rootless init builds its
// island from carries exactly the ruleset Create installs, the listeners'
// ports and an absolute iptables-restore.
func TestIslandSpecIsCreatesRuleset(t *testing.T) {
	m, err := New(Config{StateDir: t.TempDir(), ExplicitPort: 4128, NewFlowRate: 7}, testServerStub{}, nil, nil)
	if err != nil {
		t.Skipf("no iptables here: %v", err)
	}
	defer m.Close()
	b, err := m.IslandSpec()
	if err != nil {
		t.Fatal(err)
	}
	var s IslandSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if want := m.ruleSpec(false, Inbound{}).render(); s.Rules != want {
		t.Errorf("rules: got\n%s\nwant Create's\n%s", s.Rules, want)
	}
	if s.ExplicitPort != 4128 || s.TransparentPort != DefaultTransparentPort || s.DNSPort != DefaultDNSPort || s.Backend != m.Backend() {
		t.Errorf("got %+v, want the manager's ports and backend", s)
	}
	if !strings.HasPrefix(s.Restore, "/") || !strings.Contains(s.Restore, "restore") {
		t.Errorf("restore: got %q, want an absolute iptables-restore", s.Restore)
	}
}

// TestBuildIslandRefusesBadSpecs: BuildIsland touches nothing for a spec
// that does not parse strictly or names a bad backend, binary or port.
func TestBuildIslandRefusesBadSpecs(t *testing.T) {
	good := IslandSpec{IslandAddr: DefaultIslandAddr, ExplicitPort: 3128, TransparentPort: 15001, DNSPort: 53, NFLogGroup: 100,
		Backend: IPTablesNFT, Restore: "/usr/sbin/iptables-nft-restore", Rules: "*filter\nCOMMIT\n"}
	enc := func(f func(*IslandSpec)) []byte {
		s := good
		f(&s)
		b, _ := json.Marshal(s)
		return b
	}
	for _, tc := range []struct {
		name string
		spec []byte
		want string
	}{
		{"not json", []byte("{"), "island spec"},
		{"unknown field", []byte(`{"island_addr":"10.255.255.254/32","evil":1}`), "unknown field"},
		{"backend", enc(func(s *IslandSpec) { s.Backend = "auto" }), "backend"},
		{"relative restore", enc(func(s *IslandSpec) { s.Restore = "iptables-nft-restore" }), "absolute"},
		{"same ports", enc(func(s *IslandSpec) { s.DNSPort = 3128 }), "same as"},
		{"loopback island", enc(func(s *IslandSpec) { s.IslandAddr = "127.0.0.2/32" }), "island_addr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files, err := BuildIsland(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, %v; want an error containing %q", files, err, tc.want)
			}
		})
	}
}

// TestAdoptRefusesWrongFiles: Adopt serves nothing and keeps no sandbox for
// the wrong number of files or files that are not BuildIsland's sockets,
// and closes what it was given.
func TestAdoptRefusesWrongFiles(t *testing.T) {
	m, err := New(Config{StateDir: t.TempDir()}, testServerStub{}, nil, nil)
	if err != nil {
		t.Skipf("no iptables here: %v", err)
	}
	defer m.Close()
	sb := identity.Sandbox{ID: "alk-adopt"}
	if _, err := m.Adopt(t.Context(), sb, nil); err == nil || !strings.Contains(err.Error(), "want 5") {
		t.Errorf("no files: got %v, want a count error", err)
	}
	var files []*os.File
	for i := 0; i < islandFiles; i++ {
		f, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	if _, err := m.Adopt(t.Context(), sb, files); err == nil {
		t.Error("five /dev/null files: got nil, want an error")
	}
	if _, ok := m.Get(sb.ID); ok {
		t.Error("a refused adopt left its sandbox")
	}
	if _, err := files[0].Stat(); err == nil {
		t.Error("Adopt left a file it was given open")
	}
}
