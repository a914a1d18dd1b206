package ociimage

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
)

// packageFiles lists the paths a package installed (`dpkg-query -L`):
// directories and files alike, as dpkg recorded them.
func packageFiles(pkg string) ([]string, error) {
	out, err := dpkgQuery("-L", pkg)
	if err != nil {
		return nil, err
	}
	var paths []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "/") {
			paths = append(paths, l)
		}
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("package %s: dpkg lists no files", pkg)
	}
	return paths, nil
}

// Dependencies returns a package's Depends and Pre-Depends as groups of
// alternatives ("a | b" is one group), package names only (no versions or
// architectures).
func Dependencies(pkg string) ([][]string, error) {
	out, err := dpkgQuery("-W", "-f", "${Depends}, ${Pre-Depends}", pkg)
	if err != nil {
		return nil, err
	}
	var groups [][]string
	for _, g := range strings.Split(out, ",") {
		var alts []string
		for _, a := range strings.Split(g, "|") {
			name, _, _ := strings.Cut(strings.TrimSpace(a), " ")
			name, _, _ = strings.Cut(name, ":")
			if name != "" {
				alts = append(alts, name)
			}
		}
		if len(alts) > 0 {
			groups = append(groups, alts)
		}
	}
	return groups, nil
}

// Version is the installed version of a package.
func Version(pkg string) (string, error) {
	return dpkgQuery("-W", "-f", "${Version}", pkg)
}

func dpkgQuery(args ...string) (string, error) {
	cmd := exec.Command("dpkg-query", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("dpkg-query %s: %w: %s (is the package installed? scripts/deps.sh installs the image's)", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}
