package identity

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestAllowListCompiledOnce: the consumer's form of a list is built once,
// for the list and every copy of it (a decoded list included), and a zero
// AllowList still answers.
func TestAllowListCompiledOnce(t *testing.T) {
	a, err := NewAllowList([]string{"PyPI.org", "git.corp.example:22", "pypi.org"})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.Len(); got != 2 {
		t.Fatalf("Len: got %d, want 2 (normalized, without duplicates)", got)
	}
	builds := 0
	build := func(obj map[string]any) any { builds++; return len(obj) }
	cp := *a
	for _, l := range []*AllowList{a, a, &cp} {
		if got := l.Compiled(build); got != 2 {
			t.Errorf("Compiled: got %v, want 2 hosts", got)
		}
	}
	if builds != 1 {
		t.Errorf("built %d times, want once for the list and its copies", builds)
	}
	var decoded AllowList
	b, _ := json.Marshal(a)
	if err := json.Unmarshal(b, &decoded); err != nil {
		t.Fatal(err)
	}
	if decoded.Digest() != a.Digest() || decoded.Compiled(build) != 2 {
		t.Errorf("decoded list: digest or compiled form differ from the original")
	}
	var zero AllowList
	if got := zero.Compiled(build); got != 0 {
		t.Errorf("zero list: got %v, want 0 hosts", got)
	}
}

func TestNewAllowListNamesTheBadEntry(t *testing.T) {
	if _, err := NewAllowList([]string{"ok.example", "bad host"}); err == nil || !strings.Contains(err.Error(), `allow[1] "bad host"`) {
		t.Errorf("got %v, want an error naming allow[1]", err)
	}
}
