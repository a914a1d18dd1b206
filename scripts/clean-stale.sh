#!/usr/bin/env bash
# Removes what a crashed airlock test run or gateway may have left: network
# namespaces, veths, cgroups and mounts named airlock-* or alk*. Safe to run at
# any time when no airlock is running on the machine.
set -u
for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^(airlock-|alk)'); do
	ip netns delete "$ns" 2>/dev/null || { umount "/run/netns/$ns" 2>/dev/null; rm -f "/run/netns/$ns"; }
done
for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E '^(airlock-|alk)'); do
	ip link delete "$l" 2>/dev/null
done
for root in /sys/fs/cgroup /sys/fs/cgroup/*; do
	[ -d "$root" ] || continue
	find "$root" -maxdepth 3 -depth -type d \( -name 'airlock-*' -o -name 'alk*' \) 2>/dev/null | while read -r d; do
		[ -f "$d/cgroup.kill" ] && echo 1 >"$d/cgroup.kill" 2>/dev/null
		rmdir "$d" 2>/dev/null
	done
done
exit 0
