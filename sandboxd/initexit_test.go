package sandboxd

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
)

// TestInitKilledIsNotLost pins a race an in-process run hit about once in
// twenty: the command exits, Run kills init (killInit), and the control
// channel's reader sees init go before Destroy marks the sandbox destroyed.
// That was logged at Error as "sandbox lost: init exited unexpectedly
// (signal: killed)" on a run that ended normally.
func TestInitKilledIsNotLost(t *testing.T) {
	for _, killed := range []bool{true, false} {
		var logs bytes.Buffer
		s := &Sandbox{
			lg:   slog.New(slog.NewTextHandler(&logs, nil)),
			gone: make(chan struct{}),
			dead: make(chan struct{}),
		}
		close(s.gone)
		if killed {
			s.killInit()
		}
		s.initExited()
		lost := strings.Contains(logs.String(), "sandbox lost")
		if lost == killed {
			t.Errorf("init killed by us %v: logged %q; want \"sandbox lost\" only when init died on its own", killed, logs.String())
		}
		if err := s.deadError(); !errors.Is(err, ErrSandboxGone) {
			t.Errorf("init killed by us %v: dead error %v, want ErrSandboxGone", killed, err)
		}
	}
}
