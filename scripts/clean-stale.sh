#!/usr/bin/env bash
# Removes what a crashed airlock test run or gateway left behind: network
# namespaces, links, cgroups and mounts named airlock-* or alk*. It never
# touches one that belongs to a live process, so it is safe to run beside a
# test run or a daemon in progress:
#   - a name that carries a pid (airlock-p<pid>-..., airlock-pool-<pid>-...,
#     alk<pid in base 36>x...) is kept while that process runs;
#   - a namespace a live process is in, or holds open, is kept;
#   - a cgroup with a process in it is kept;
#   - a link or a mount whose name carries no pid is kept (only tests make
#     them, and they always name them with their pid);
#   - a namespace or cgroup whose name carries no pid (a daemon's sandbox,
#     airlock-sb-...) is kept until it is CLEAN_STALE_MIN_AGE seconds old
#     (default 600): a run in progress makes and removes its own well before.
#
# Usage: clean-stale.sh [--dry-run | --list | --check BEFORE]
#   --dry-run      print what would be removed, remove nothing
#   --list         print every airlock resource, one "kind name" a line
#   --check FILE   fail (exit 1) on any resource not in FILE (a --list made
#                  before the run) that no live process owns: what the run
#                  left behind. Removes nothing.
# --check ignores CLEAN_STALE_MIN_AGE: what the run made is young.
# CLEAN_STALE_MATCH=REGEX limits every mode to names matching REGEX (a test
# of this script uses it to touch only its own resources).
set -u
mode=clean
case "${1:-}" in
--dry-run) mode=dry ;;
--list) mode=list ;;
--check)
	mode=check
	before=${2:?--check needs the file --list wrote before the run}
	;;
"") ;;
-h | --help)
	sed -n '2,/^set -u/p' "$0" | sed '$d; s/^# \{0,1\}//'
	exit 0
	;;
*)
	echo "clean-stale.sh: unknown argument $1 (want --dry-run, --list or --check FILE)" >&2
	exit 2
	;;
esac

alive() { [ "$1" = $$ ] || kill -0 "$1" 2>/dev/null || [ -d "/proc/$1" ]; }

# user_process PID: alive and not a kernel thread (whose cmdline is empty): a
# wrong split of an alk name often lands on a low pid, a kernel thread's.
# (/proc files report size 0: read one byte.)
user_process() { alive "$1" && [ -n "$(head -c1 "/proc/$1/cmdline" 2>/dev/null | tr '\0' x)" ]; }

# owned NAME: true when NAME carries the pid of a live process. For alk<pid36>x
# every split at an "x" is tried (a base-36 pid may itself hold an x), and any
# live candidate keeps the resource.
owned() {
	local n=$1 rest p
	if [[ $n =~ ^airlock-(p|pool-)([0-9]+)- ]]; then
		alive "${BASH_REMATCH[2]}"
		return
	fi
	if [[ $n =~ ^alk([0-9a-z]+x) ]]; then
		rest=${BASH_REMATCH[1]}
		p=""
		while [[ $rest == *x* ]]; do
			p+=${rest%%x*}
			rest=${rest#*x}
			if [ -n "$p" ] && user_process $((36#$p)); then
				return 0
			fi
			p+=x
		done
	fi
	return 1
}

# has_pid NAME: true when NAME carries a pid at all.
has_pid() { [[ $1 =~ ^airlock-(p|pool-)[0-9]+- || $1 =~ ^alk[0-9a-z]+x ]]; }

airlock_name() {
	[[ $1 == airlock-* || $1 == alk* ]] || return 1
	[ -z "${CLEAN_STALE_MATCH:-}" ] || [[ $1 =~ $CLEAN_STALE_MATCH ]]
}

# Inodes of the network namespaces live processes are in or hold open.
declare -A inuse=()
while read -r l; do
	l=${l#net:[}
	inuse[${l%]}]=1
done < <(find /proc/[0-9]*/ns/net /proc/[0-9]*/fd -maxdepth 1 -lname 'net:\[*' -printf '%l\n' 2>/dev/null)

# The resources, one "kind name" a line.
list() {
	local ns l d m
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
		airlock_name "$ns" && echo "netns $ns"
	done
	for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1); do
		airlock_name "$l" && echo "link $l"
	done
	for root in /sys/fs/cgroup /sys/fs/cgroup/*; do
		[ -d "$root" ] || continue
		find "$root" -maxdepth 3 -depth -type d \( -name 'airlock-*' -o -name 'alk*' \) 2>/dev/null
	done | awk '!seen[$0]++' | while read -r d; do
		airlock_name "${d##*/}" && echo "cgroup $d"
	done
	awk '{print $5}' /proc/self/mountinfo 2>/dev/null | while read -r m; do
		[[ $m == /run/netns/* ]] && continue
		airlock_name "${m##*/}" && echo "mount $m"
	done
	return 0
}

# young KIND NAME: true when a resource without a pid in its name is younger
# than CLEAN_STALE_MIN_AGE seconds (its inode's change time: when the
# namespace or the cgroup directory was made).
young() {
	local kind=$1 name=$2 path made
	has_pid "${name##*/}" && return 1
	case $kind in
	netns) path=/run/netns/$name ;;
	cgroup) path=$name ;;
	*) return 1 ;;
	esac
	made=$(stat -L -c %Z "$path" 2>/dev/null) || return 1
	[ $(($(date +%s) - made)) -lt "${CLEAN_STALE_MIN_AGE:-600}" ]
}

# in_use KIND NAME: true when a live process owns the resource.
in_use() {
	local kind=$1 name=$2 base ino
	base=${name##*/}
	owned "$base" && return 0
	case $kind in
	netns)
		ino=$(stat -L -c %i "/run/netns/$name" 2>/dev/null) || return 1
		[ -n "${inuse[$ino]:-}" ]
		;;
	cgroup)
		# cgroupfs files report size 0: read one byte instead.
		[ -n "$(head -c1 "$name/cgroup.procs" 2>/dev/null)" ] && return 0
		grep -qs '^populated 1' "$name/cgroup.events"
		;;
	link | mount)
		! has_pid "$base"
		;;
	*) return 1 ;;
	esac
}

remove() {
	local kind=$1 name=$2
	if [ "$mode" = dry ]; then
		echo "would remove $kind $name"
		return
	fi
	case $kind in
	netns) ip netns delete "$name" 2>/dev/null || { umount "/run/netns/$name" 2>/dev/null; rm -f "/run/netns/$name"; } ;;
	link) ip link delete "$name" 2>/dev/null ;;
	cgroup) rmdir "$name" 2>/dev/null ;;
	mount) umount -l "$name" 2>/dev/null ;;
	esac
}

case $mode in
list)
	list
	exit 0
	;;
check)
	# What is new since the list and owned by no live process, twice,
	# CLEAN_STALE_GRACE seconds apart (default 5): another run in progress
	# beside this one makes and removes resources without a pid in their
	# name all the time; a leak stays.
	candidates() {
		while read -r kind name; do
			grep -qxF "$kind $name" "$before" && continue
			in_use "$kind" "$name" && continue
			echo "$kind $name"
		done < <(list)
	}
	first=$(candidates)
	if [ -n "$first" ]; then
		sleep "${CLEAN_STALE_GRACE:-5}"
		first=$(comm -12 <(echo "$first" | sort) <(candidates | sort))
	fi
	if [ -n "$first" ]; then
		echo "$first" | sed 's/^/leftover: /; s/$/ (created during the run, owned by no live process)/' >&2
		echo "clean-stale.sh --check: $(echo "$first" | wc -l) airlock resources left behind by the run; a test's t.Cleanup must remove what it creates" >&2
		exit 1
	fi
	exit 0
	;;
esac

while read -r kind name; do
	in_use "$kind" "$name" && continue
	young "$kind" "$name" && continue
	remove "$kind" "$name"
done < <(list)
exit 0
