package daemon

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

func TestTextMappings(t *testing.T) {
	const exe = "/usr/bin/airlock-core"
	smaps := `00400000-014a5000 r-xp 00000000 fd:00 123 /usr/bin/airlock-core
Size:              17044 kB
Rss:               15252 kB
Anonymous:             0 kB
014a5000-02ae7000 r--p 010a5000 fd:00 123 /usr/bin/airlock-core
Rss:               17992 kB
Anonymous:             0 kB
02ae7000-02cc2000 rw-p 026e7000 fd:00 123 /usr/bin/airlock-core
Anonymous:           224 kB
03000000-03001000 r--p 02900000 fd:00 123 /usr/bin/airlock-core
Anonymous:             4 kB
04000000-04001000 r--p 00000000 fd:00 124 /usr/bin/airlock-core (deleted)
Anonymous:             0 kB
05000000-05001000 r--s 00000000 fd:00 123 /usr/bin/airlock-core
Anonymous:             0 kB
06000000-06001000 r--p 00000000 fd:00 125 /usr/lib/other.so
Anonymous:             0 kB
07000000-07001000 r--p 00000000 fd:00 123 /usr/bin/airlock-core
Rss:                   4 kB
2df2a2000000-2df2bc400000 rw-p 00000000 00:00 0
Anonymous:        327576 kB
`
	got := textMappings([]byte(smaps), exe)
	want := []mapping{{0x400000, 0x14a5000}, {0x14a5000, 0x2ae7000}}
	if len(got) != len(want) {
		t.Fatalf("got %x, want %x", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("mapping %d: got %x, want %x", i, got[i], want[i])
		}
	}
}

// TestReleaseText drops this test binary's read-only pages from its
// resident set, and the process runs on (the pages map again from the
// page cache).
func TestReleaseText(t *testing.T) {
	before := rssFileKB(t)
	n, err := releaseText()
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKB(t)
	if n == 0 || after >= before {
		t.Fatalf("got %d bytes advised, file-backed RSS %d -> %d kB, want some released", n, before, after)
	}
	// Code and read-only data that were dropped still work.
	if s := strconv.Itoa(12345) + strings.Repeat("x", 2); s != "12345xx" {
		t.Fatalf("got %q", s)
	}
	t.Logf("advised %d MiB, file-backed RSS %d -> %d kB", n>>20, before, after)
}

func rssFileKB(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Skip("no RssFile in /proc/self/status")
	return 0
}
