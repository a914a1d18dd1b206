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
have ping || need+=(iputils-ping)
have openssl || need+=(openssl)
[ -f /etc/ssl/certs/ca-certificates.crt ] || need+=(ca-certificates)

if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then
		echo "deps: missing ${need[*]}; run as root or install them" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}" >&2
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
