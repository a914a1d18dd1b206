# shellcheck shell=bash
# Sourced by scripts/unpriv-tests.sh and scripts/bench-compare.sh:
# ensure_ci_user USER makes USER (alk-ci by default in both) when missing, as
# a system user with a home, no login shell, no sudo and in no admin group
# (idempotent), and fails naming the problem when it cannot, or when the
# user it finds could reach root. It prints nothing when the user is fine.
ensure_ci_user() {
	local user=$1 out uid gid g
	# A system user: no subordinate id ranges of its own, so the rootless
	# e2e tests choose them (withSubIDs) and run both ways.
	if ! id -u "$user" >/dev/null 2>&1; then
		if ! out=$(useradd --system --create-home --home-dir "/var/lib/$user" --shell /usr/sbin/nologin --user-group \
			--comment "airlock CI unprivileged test user" "$user" 2>&1); then
			echo "CANNOT CREATE the unprivileged user $user: $out
Create it (useradd --user-group $user) or name an existing unprivileged user in AIRLOCK_CI_USER." >&2
			return 1
		fi
		echo "created the unprivileged user $user (uid $(id -u "$user"))" >&2
	fi
	uid=$(id -u "$user")
	gid=$(id -g "$user")
	if [ "$uid" = 0 ] || [ "$gid" = 0 ]; then
		echo "$user is uid $uid gid $gid: it must not be root" >&2
		return 1
	fi
	for g in $(id -Gn "$user"); do
		case "$g" in
		root | sudo | wheel | admin | adm | disk | docker | lxd)
			echo "$user is in group $g: it must have no way to root (gpasswd -d $user $g)" >&2
			return 1
			;;
		esac
	done
	if command -v sudo >/dev/null && sudo -n -l -U "$user" 2>/dev/null | grep -q "may run the following"; then
		echo "$user has sudo rights: it must have no way to root" >&2
		return 1
	fi
}
