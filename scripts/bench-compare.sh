#!/usr/bin/env bash
# make bench-compare: airlock beside squid, dnsmasq, unbound, bubblewrap and
# unshare in one run (bench/compare). Installs the peers from Debian when
# missing, builds airlock and bench/loadclient, and writes the generated
# section of docs/BENCHMARKS.md and docs/bench/compare.json. BENCH_QUICK=1: a
# ~2-minute smoke run written under bin/bench-compare-quick/ instead. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "$(id -u)" != 0 ]; then
	echo "bench-compare: needs root (namespaces, airlock run, the peers)" >&2
	exit 1
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
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
CGO_ENABLED=0 $go build -trimpath -tags airlock_front -ldflags "-X main.version=$version" -o bin/airlock ./cmd/airlock
# The core and the sandbox init beside it (written after it, as make build
# does): the front hands run in-process and serve to the core, which runs
# sandboxes' init from airlock-init.
CGO_ENABLED=0 $go build -trimpath -ldflags "-X main.version=$version" -o bin/airlock-core ./cmd/airlock
CGO_ENABLED=0 $go build -trimpath -ldflags "-X main.version=$version" -o bin/airlock-init ./cmd/airlock-init
CGO_ENABLED=0 $go build -trimpath -o bin/loadclient ./bench/loadclient
CGO_ENABLED=0 $go build -trimpath -o bin/bench-compare ./bench/compare

args=(-airlock "$PWD/bin/airlock" -loadclient "$PWD/bin/loadclient")
if [ -n "${BENCH_QUICK:-}" ]; then
	mkdir -p bin/bench-compare-quick
	[ -f bin/bench-compare-quick/BENCHMARKS.md ] || printf '# bench-compare quick run\n' > bin/bench-compare-quick/BENCHMARKS.md
	args+=(-quick -doc bin/bench-compare-quick/BENCHMARKS.md -raw bin/bench-compare-quick/compare.json)
fi
# The driver removes its namespaces, processes and files on exit and on
# SIGINT/SIGTERM; its peers die with it (PDEATHSIG).
exec ./bin/bench-compare "${args[@]}" "$@"
