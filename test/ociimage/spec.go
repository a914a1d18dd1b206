package ociimage

import (
	"io/fs"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Packages are the Debian packages whose files the image holds: iptables
// (netns execs iptables-legacy-restore/-save and iptables-nft-restore/-save
// in each attached namespace; nothing else of the daemon execs a program)
// and everything it depends on, and busybox-static for the install-cni init
// container's sh, cp, chmod and mv. The Containerfile's PACKAGES must name
// the same ones (TestContainerfileMatches), and the list must be closed
// under Depends and Pre-Depends (TestPackagesClosed).
var Packages = []string{
	"busybox-static",
	"gcc-12-base",
	"iptables",
	"libc6",
	"libgcc-s1",
	"libip4tc2",
	"libip6tc2",
	"libmnl0",
	"libnetfilter-conntrack3",
	"libnfnetlink0",
	"libnftnl11",
	"libxtables12",
	"netbase",
}

// BusyboxLinks are the applets the init container runs, linked to
// /bin/busybox; nothing else in the image is a shell tool.
var BusyboxLinks = []string{"sh", "cp", "chmod", "mv"}

// CABundle is the system trust store: Go's TLS client reads it for the
// upstream's certificates, and the executor builds sandboxes' trust stores
// from it. It is made by ca-certificates' maintainer script, not shipped in
// a package, so the image takes the file itself (from the host, or from the
// Containerfile's stage that installed ca-certificates).
const CABundle = "/etc/ssl/certs/ca-certificates.crt"

// Binaries are where airlock's own binaries go, by the name `make build`
// gives them in bin/.
var Binaries = map[string]string{
	"airlock":      "/usr/local/bin/airlock",
	"airlock-core": "/usr/local/bin/airlock-core", // beside airlock: the commands that run the gateway
	"airlock-init": "/usr/local/bin/airlock-init", // beside airlock: the sandboxes' init
	"airlock-cni":  "/usr/local/bin/airlock-cni",
}

// Dirs are the empty directories the image must hold: the executor's mount
// points (the root filesystem is read-only in the DaemonSet) and /tmp.
var Dirs = map[string]fs.FileMode{
	"/home/sandbox": 0o755,
	"/workspace":    0o755,
	"/tmp":          0o777 | fs.ModeSticky,
}

// NonRootUID is the image's default user: a command run from the image
// without a pod spec (airlock policy eval, airlock audit verify) has no
// privilege. `airlock serve` and the install-cni init container need root
// and say so in the DaemonSet (runAsUser: 0).
const NonRootUID = 65532

// Users are /etc/passwd and /etc/group: root, and the default user.
const (
	passwd = "root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/nonexistent:/bin/sh\n"
	group  = "root:x:0:\nnonroot:x:65532:\n"
)

// Config is the image's run configuration; the Containerfile's USER, ENV
// and ENTRYPOINT say the same (TestContainerfileMatches).
func Config() ocispec.ImageConfig {
	return ocispec.ImageConfig{
		User:       "65532:65532",
		Env:        []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"},
		Entrypoint: []string{"/usr/local/bin/airlock"},
		Cmd:        []string{"--help"},
	}
}

// ExcludedDirs are the documentation trees the image leaves out, as
// Debian's slim images do (dpkg path-exclude), except each package's
// copyright file.
var ExcludedDirs = []string{
	"/usr/share/doc/",
	"/usr/share/man/",
	"/usr/share/info/",
	"/usr/share/locale/",
	"/usr/share/lintian/",
	"/usr/share/linda/",
	"/usr/share/groff/",
	"/usr/share/bug/",
}
