package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestCLI(t *testing.T) {
	tests := []struct {
		args        []string
		code        int
		out, errOut string
	}{
		{[]string{"--help"}, 0, "CNI_COMMAND=ADD|DEL|CHECK|VERSION", ""},
		{[]string{"-h"}, 0, `"type": "airlock-cni"`, ""},
		{[]string{"version"}, 0, "airlock-cni dev", ""},
		{[]string{"add"}, 2, "", `unknown argument "add"`},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if code := cli(tc.args, &out, &errOut); code != tc.code {
				t.Errorf("got exit %d, want %d", code, tc.code)
			}
			if !strings.Contains(out.String(), tc.out) || !strings.Contains(errOut.String(), tc.errOut) {
				t.Errorf("got stdout %q, stderr %q; want %q and %q in them", out.String(), errOut.String(), tc.out, tc.errOut)
			}
		})
	}
}
