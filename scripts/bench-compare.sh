#!/usr/bin/env bash
# make bench-compare: airlock beside squid, dnsmasq, unbound, bubblewrap and
# unshare in one run (bench/compare). Installs the peers from Debian when
# missing, builds airlock and bench/loadclient, and writes the generated
# section of docs/BENCHMARKS.md and docs/bench/compare.json. BENCH_QUICK=1: a
# smoke run of a few minutes written under bin/bench-compare-quick/ instead.
# BENCH_BEFORE=<git rev>: also build that revision (from `git archive` into
# /tmp/alk-bench-before-*, removed after) and measure every airlock row with
# it too, the two builds alternating in the same rounds: a "before" column
# and after/before ratios. The rootless rows run as the unprivileged user
# AIRLOCK_CI_USER (default alk-ci, made when missing: scripts/ci-user.sh).
# Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench-compare: needs root (namespaces, airlock run, the peers)" >&2
	exit 1
fi

if [ -n "${BENCH_BEFORE:-}" ]; then
	rev=$(git rev-parse --verify --quiet "${BENCH_BEFORE}^{commit}") ||
		{ echo "bench-compare: BENCH_BEFORE=$BENCH_BEFORE is not a commit of this repository" >&2; exit 1; }
fi

need=()
have() { command -v "$1" >/dev/null 2>&1; }
# squid-openssl is Debian's squid built with OpenSSL: plain forward proxy and ssl-bump.
{ have squid && [ -x /usr/lib/squid/security_file_certgen ]; } || need+=(squid-openssl)
have dnsmasq || need+=(dnsmasq-base)
have unbound || need+=(unbound)
have bwrap || need+=(bubblewrap)
have wrk || need+=(wrk)
have dnsperf || need+=(dnsperf)
have hyperfine || need+=(hyperfine)
have unshare || need+=(util-linux)
if [ ${#need[@]} -gt 0 ]; then
	echo "bench-compare: installing ${need[*]}" >&2
	apt-get update -qq
	# Debian starts the services of unbound and squid on install; policy-rc.d
	# (if this machine has one) decides. The run uses its own instances on
	# loopback ports either way.
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

go=${GO:-go}
# build_airlock SRC OUT VERSION: the binaries of the tree at SRC into OUT,
# as that tree's make build makes them. A tree with the front/core split
# (cmd/airlock/front.go) gets the front, the core beside it (written after
# it: the front hands run in-process and serve to the core) and the
# sandbox's init; an older tree its one airlock (and airlock-init if it has
# one).
build_airlock() {
	local src=$1 out=$2 version=$3
	mkdir -p "$out"
	(
		cd "$src"
		if [ -f cmd/airlock/front.go ]; then
			CGO_ENABLED=0 $go build -trimpath -tags airlock_front -ldflags "-X main.version=$version" -o "$out/airlock" ./cmd/airlock
			CGO_ENABLED=0 $go build -trimpath -ldflags "-X main.version=$version" -o "$out/airlock-core" ./cmd/airlock
		else
			CGO_ENABLED=0 $go build -trimpath -ldflags "-X main.version=$version" -o "$out/airlock" ./cmd/airlock
		fi
		if [ -d cmd/airlock-init ]; then
			CGO_ENABLED=0 $go build -trimpath -ldflags "-X main.version=$version" -o "$out/airlock-init" ./cmd/airlock-init
		fi
	)
}
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
build_airlock "$PWD" "$PWD/bin" "$version"
CGO_ENABLED=0 $go build -trimpath -o bin/loadclient ./bench/loadclient
CGO_ENABLED=0 $go build -trimpath -o bin/bench-compare ./bench/compare

args=(-airlock "$PWD/bin/airlock" -loadclient "$PWD/bin/loadclient")
if [ -n "${BENCH_BEFORE:-}" ]; then
	short=$(git rev-parse --short "$rev")
	before=$(mktemp -d /tmp/alk-bench-before-XXXXXX)
	trap 'rm -rf "$before"' EXIT
	mkdir "$before/src"
	git archive "$rev" | tar -x -C "$before/src"
	echo "bench-compare: building the before build, $BENCH_BEFORE ($short), in $before" >&2
	build_airlock "$before/src" "$before/bin" "$(git describe --tags --always "$rev" 2>/dev/null || echo "$short")"
	rm -rf "$before/src"
	chmod 0755 "$before" "$before/bin"
	args+=(-before "$before/bin/airlock" -before-rev "$BENCH_BEFORE ($short)")
fi
# The rootless rows: airlock run and bubblewrap as an unprivileged user.
# shellcheck source=scripts/ci-user.sh
. scripts/ci-user.sh
user="${AIRLOCK_CI_USER:-alk-ci}"
ensure_ci_user "$user"
args+=(-rootless-user "$user")
if [ -n "${BENCH_QUICK:-}" ]; then
	mkdir -p bin/bench-compare-quick
	[ -f bin/bench-compare-quick/BENCHMARKS.md ] || printf '# bench-compare quick run\n' > bin/bench-compare-quick/BENCHMARKS.md
	args+=(-quick -doc bin/bench-compare-quick/BENCHMARKS.md -raw bin/bench-compare-quick/compare.json)
fi
# The driver removes its namespaces, processes and files on exit and on
# SIGINT/SIGTERM; its peers die with it (PDEATHSIG). Not exec'd: the before
# build is removed when it is done.
start=$(date +%s)
rc=0
./bin/bench-compare "${args[@]}" "$@" || rc=$?
echo "bench-compare: took $(($(date +%s) - start)) s (exit $rc)" >&2
exit $rc
