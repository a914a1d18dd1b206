package netnstest

import (
	"os"
	"testing"
)

func TestOwnerPid(t *testing.T) {
	tests := []struct {
		name string
		want int
	}{
		{"airlock-p1234-x-1", 1234},
		{"airlock-pool-77-3", 77},
		{"alk" + "2n9c" + "x1h", 123456},
		{"airlock-sb-1", 0},
		{"alk-inet-40", 0},
		{"airlock-pool-x", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ownerPid(tt.name); got != tt.want {
				t.Errorf("ownerPid(%q) = %d, want %d", tt.name, got, tt.want)
			}
		})
	}
}

func TestNamesCarryPid(t *testing.T) {
	for _, n := range []string{LinkName("h"), NSName("f"), "airlock-" + SandboxID("t")} {
		if got := ownerPid(n); got != os.Getpid() {
			t.Errorf("ownerPid(%q) = %d, want %d", n, got, os.Getpid())
		}
	}
	if l := LinkName("h"); len(l) > 15 {
		t.Errorf("LinkName %q is %d characters, want <= 15", l, len(l))
	}
}
