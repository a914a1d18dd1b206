package sandboxd

import (
	"os"

	sib "github.com/airlock-dev/airlock/sibling"
)

// The init binary: each sandbox's init (and the files stage it starts) is
// cmd/airlock-init, a binary that links this package and the standard
// library only, when one from the same build lies beside the running
// executable. Starting it costs about 3 ms where re-executing the airlock
// binary costs 15-20 ms (a 39 MB image and ~280 package initializers, the
// gateway's, OPA's, the exporters'). The executor opens it once (New) and
// executes that open file through /proc/self/fd, so replacing the file on
// disk later changes nothing for a running executor. Without a usable one
// it re-executes its own binary with DefaultInitArgs, as before.

// InitBinary is the init binary's file name, looked for beside the running
// executable.
const InitBinary = "airlock-init"

// initFDMin is the lowest descriptor the open init binary is kept at: init
// is started with fds 0-4 replaced (spawn.go), so the file it is executed
// from must lie above them.
const initFDMin = 10

// openInit opens the init binary beside self (the running executable),
// checked by package sibling: a missing file is fs.ErrNotExist; any other
// refusal names the problem. The returned file is close-on-exec at a
// descriptor >= initFDMin.
func openInit(self string) (*os.File, error) {
	f, _, err := sib.Open(self, InitBinary, initFDMin)
	return f, err
}

// fdExe is the path that executes the open file f.
func fdExe(f *os.File) string { return sib.Exe(f) }
