#!/usr/bin/env bash
# Runs the gateway's attack tests (gateway/redteam*_test.go and the inspection
# corpus, corpus_test.go) as a dedicated unprivileged user, then the rootless
# end-to-end tests with airlock run by that user, so the attacks are
# refused, and their targets see nothing, with no root anywhere: the test
# binary is built once as root, then run by that user with setpriv. The user
# (AIRLOCK_CI_USER, default alk-ci) is created when missing (idempotent), with
# no sudo and in no admin group; a host where it cannot be made fails here,
# saying so, never skips.
set -euo pipefail
cd "$(dirname "$0")/.."
user="${AIRLOCK_CI_USER:-alk-ci}"
GO="${GO:-go}"

die() {
	echo "test-unpriv: $*" >&2
	exit 1
}

[ "$(id -u)" = 0 ] || die "must start as root: it creates the unprivileged user $user and switches to it (sudo make test-unpriv)"
command -v setpriv >/dev/null || die "setpriv is missing (apt-get install util-linux)"

# shellcheck source=scripts/ci-user.sh
. scripts/ci-user.sh
out=$(ensure_ci_user "$user" 2>&1) || die "$out (the attack tests must run as a user with no way to root)"
[ -z "$out" ] || echo "test-unpriv: $out"
uid=$(id -u "$user")
gid=$(id -g "$user")

dir=$(mktemp -d /tmp/alk-unpriv-XXXXXX)
trap 'rm -rf "$dir"' EXIT
chmod 0755 "$dir"

tests=$(grep -ho '^func Test[A-Za-z0-9_]*' gateway/redteam*_test.go gateway/corpus_test.go | sed 's/^func //' | sort -u | paste -sd'|' -)
[ -n "$tests" ] || die "found no attack tests in gateway/redteam*_test.go"
"$GO" test -c -o "$dir/gateway.test" ./gateway/

as_user() {
	(cd "$dir" && setpriv --reuid="$uid" --regid="$gid" --init-groups --inh-caps=-all --bounding-set=-all --no-new-privs -- \
		env -i PATH=/usr/local/bin:/usr/bin:/bin HOME="$dir" TMPDIR="$dir" "$@")
}
mkdir -p "$dir/tmp" && chown "$uid:$gid" "$dir/tmp" && chmod 0700 "$dir/tmp"
got=$(as_user id -u)
[ "$got" = "$uid" ] || die "setpriv ran the tests as uid $got, not $user's $uid"
n=$(echo "$tests" | tr '|' '\n' | wc -l)
echo "test-unpriv: $n gateway attack tests as $user (uid $uid, no capabilities, no_new_privs)"
rc=0
as_user env TMPDIR="$dir/tmp" ./gateway.test -test.run "^($tests)\$" -test.count=1 -test.timeout=15m -test.v >"$dir/log" 2>&1 || rc=$?
pass=$(grep -c '^--- PASS' "$dir/log" || true)
skip=$(grep -c '^--- SKIP' "$dir/log" || true)
fail=$(grep -c '^--- FAIL' "$dir/log" || true)
if [ "$rc" != 0 ] || [ "$fail" != 0 ]; then
	grep -v '^=== \(RUN\|PAUSE\|CONT\)' "$dir/log" | tail -80 >&2
	die "the attack tests FAILED as $user (exit $rc, $fail failed)"
fi
if [ "$skip" != 0 ]; then
	grep -A2 '^--- SKIP' "$dir/log" >&2
	die "$skip attack tests skipped as $user: each must run without root"
fi
grep -h 'rate' "$dir/log" | sed 's/^ */test-unpriv: /' | head -10 || true
echo "test-unpriv: ok: $pass attack tests passed as $user, none skipped"

# The rootless end-to-end tests: root sets up the fake internet, airlock runs
# as $user (airlock run, and serve --user with the Go and Python clients).
echo "test-unpriv: rootless e2e with airlock as $user"
AIRLOCK_CI_USER="$user" AIRLOCK_REQUIRE_ROOT_TESTS=1 "$GO" test -count=1 -timeout 15m \
	-run '^(TestRootRootless[A-Za-z]*|TestRootServeUser)$' ./test/e2e/ ||
	die "the rootless e2e tests FAILED with airlock as $user"
