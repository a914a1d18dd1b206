package poll

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 3 {
			time.Sleep(time.Millisecond)
			n.Add(1)
		}
	}()
	Until(t, 5*time.Second, "three increments", func() bool { return n.Load() == 3 })
	if got := n.Load(); got != 3 {
		t.Fatalf("got %d, want 3", got)
	}
}

// fakeT records a Fatalf instead of ending the test.
type fakeT struct {
	testing.TB
	failed bool
	msg    string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = true
	f.msg = format
	panic(f)
}

func TestUntilFailsAtTheLimit(t *testing.T) {
	ft := &fakeT{TB: t}
	func() {
		defer func() {
			if r := recover(); r != nil && r != any(ft) {
				panic(r)
			}
		}()
		Until(ft, 30*time.Millisecond, "never", func() bool { return false })
	}()
	if !ft.failed {
		t.Fatal("got no failure for a condition that never holds, want one")
	}
}

func TestWithinReportsTheLimit(t *testing.T) {
	if Within(20*time.Millisecond, func() bool { return false }) {
		t.Fatal("got true for a condition that never holds, want false")
	}
	if !Within(time.Second, func() bool { return true }) {
		t.Fatal("got false for a condition that holds, want true")
	}
}
