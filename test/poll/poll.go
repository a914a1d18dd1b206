package poll

import (
	"testing"
	"time"
)

// Interval is how often a condition is checked.
const Interval = 10 * time.Millisecond

// Within checks cond every Interval until it holds (true) or limit passes
// (false).
func Within(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(Interval)
	}
	return true
}

// Until is Within that fails t, naming what it waited for, when limit passes
// before cond holds.
func Until(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(limit, cond) {
		t.Fatalf("timed out after %s waiting for %s", limit, what)
	}
}
