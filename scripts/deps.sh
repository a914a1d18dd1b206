#!/usr/bin/env bash
# Installs what airlock's tests, demo and benchmarks need on a fresh Debian
# machine with Go. Idempotent: it only calls apt-get for what is missing.
set -euo pipefail

need=()
have() { command -v "$1" >/dev/null 2>&1; }
have iptables || need+=(iptables)
have ip || need+=(iproute2)
have nsenter || need+=(util-linux)
have dig || need+=(dnsutils)
have dnsmasq || need+=(dnsmasq-base)
have curl || need+=(curl)
have git || need+=(git)
[ -x /usr/bin/python3 ] || need+=(python3)
# The e2e tests run pip, node and npm inside sandboxes, whose uid cannot read
# root's home: they must be the system ones.
/usr/bin/python3 -m pip --version >/dev/null 2>&1 || need+=(python3-pip)
# The Python client's tests (make test-python) run with Debian's pytest.
/usr/bin/python3 -c 'import pytest' >/dev/null 2>&1 || need+=(python3-pytest)
[ -x /usr/bin/node ] || need+=(nodejs)
have ping || need+=(iputils-ping)
have openssl || need+=(openssl)
# The e2e git-over-SSH test runs Debian's ssh in a sandbox and `sshd -i` (one per
# accepted connection, no daemon) in the fake internet.
have ssh && have ssh-keygen || need+=(openssh-client)
[ -x /usr/sbin/sshd ] || need+=(openssh-server)
# The e2e Java test runs `java Fetch.java` (the source launcher needs only the
# JRE's jdk.compiler module, which Debian's headless JRE ships); sandboxd's
# truststore test runs keytool from the same package.
[ -x /usr/bin/java ] && have keytool || need+=(default-jre-headless)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)
# The audit report's browser test (audit/report) opens the page in Debian's
# headless chromium.
have chromium || need+=(chromium)
# The CNI e2e test chains airlock-cni after Debian's reference bridge and
# host-local plugins, driven by libcni as a runtime would.
[ -x /usr/lib/cni/bridge ] && [ -x /usr/lib/cni/host-local ] || need+=(containernetworking-plugins)
# The e2e runc tests (test/runctest) start OCI containers with Debian's runc,
# their rootfs built from the static busybox (the dynamic busybox package
# provides /bin/busybox too, and cannot run in a rootfs without libraries).
have runc || need+=(runc)
# The image test (test/e2e TestRootImageServeAttach) unpacks the OCI layout
# test/ociimage writes with Debian's umoci, a reader independent of ours; the
# layout takes iptables' files from the host's package.
have umoci || need+=(umoci)
# The podman e2e test (TestRootPodmanCNI) runs airlock-cni under Debian's
# podman with its CNI backend, which invokes the chain itself.
have podman || need+=(podman)
# The Containerfile test (test/ociimage TestRootContainerfileBuild) builds it
# with Debian's buildah, offline.
have buildah || need+=(buildah)
# The containerd e2e test (TestRootContainerdCRI) runs airlock-cni under
# Debian's containerd, whose CRI plugin invokes the chain itself.
have containerd && have ctr || need+=(containerd)
# The e2e AWS test (TestRootAWSCLIPlaceholders) runs Debian's aws CLI in a
# sandbox holding placeholder credentials.
[ -x /usr/bin/aws ] || need+=(awscli)
dpkg-query -W -f '${Status}' busybox-static 2>/dev/null | grep -q 'ok installed' || need+=(busybox-static)

if [ ${#need[@]} -eq 0 ]; then
	echo "deps: every package airlock, its tests and the demo use is installed" >&2
else
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# Debian's npm depends on Debian's nodejs; a node from elsewhere (NodeSource
# bundles npm) can make it uninstallable, so it is tried on its own and a
# failure says what to do instead of aborting (only the e2e npm test needs it,
# and it fails naming /usr/bin/npm).
if [ ! -x /usr/bin/npm ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: warning: /usr/bin/npm is missing; install it as root" >&2
	elif ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null; }; then
		echo "deps: warning: could not install Debian's npm next to node $(node --version 2>/dev/null || echo '(none)'); install an npm for /usr/bin/node by hand" >&2
	fi
fi
# The e2e cargo test (TestRootCargoFetch) runs a toolchain's cargo against a
# fake sparse crates.io index, which needs cargo 1.68 or later (Debian
# bookworm's is older): rustup's minimal profile when no such cargo is found.
# The e2e apt test uses apt-get and dpkg-deb, which every Debian has.
cargo_ok() {
	local c v
	for c in "$(command -v cargo || true)" "$HOME/.cargo/bin/cargo" /usr/local/cargo/bin/cargo; do
		[ -n "$c" ] && [ -x "$c" ] || continue
		v=$("$c" --version 2>/dev/null | awk '{print $2}')
		[ "${v%%.*}" = 1 ] && [ "$(echo "$v" | cut -d. -f2)" -ge 68 ] && return 0
	done
	return 1
}
if ! cargo_ok; then
	echo "deps: installing a Rust toolchain (rustup, minimal profile) for the e2e cargo test" >&2
	curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --no-modify-path >/dev/null
fi
