package sandboxd

import (
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestCgroupLimitRefused: a limit the kernel refuses to write (EINVAL out
// of range, EBUSY for memory under the cgroup's use) is a *LimitError
// naming the Limits field; any other write error is not.
func TestCgroupLimitRefused(t *testing.T) {
	tests := []struct {
		name, file string
		err        error
		want       string // the LimitError's Limit; "" for none
	}{
		{"memory busy", "memory.max", syscall.EBUSY, "memory"},
		{"cpu out of range", "cpu.max", syscall.EINVAL, "cpus"},
		{"pids out of range", "pids.max", syscall.EINVAL, "pids"},
		{"io out of range", "io.max", syscall.EINVAL, "io"},
		{"permission", "memory.max", syscall.EACCES, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, _, err := fakeV2(t, "cpu io memory pids", nil)
			if err != nil {
				t.Fatal(err)
			}
			cg := fakeCgroup(t, m, v2LimitFiles...)
			m.write = func(path, v string) error {
				if strings.HasSuffix(path, "/"+tt.file) {
					return &os.PathError{Op: "write", Path: path, Err: tt.err}
				}
				return writeFile(path, v)
			}
			_, err = cg.apply(Limits{Memory: 64 << 20, CPUs: 1, Pids: 100, IO: []IOLimit{{Device: "8:0", ReadBPS: 1}}})
			var le *LimitError
			got := ""
			if errors.As(err, &le) {
				got = le.Limit
			}
			if err == nil || got != tt.want || !errors.Is(err, tt.err) {
				t.Fatalf("got %v (limit %q), want an error wrapping %v naming limit %q", err, got, tt.err, tt.want)
			}
		})
	}
}
