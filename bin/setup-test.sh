#!/usr/bin/env bash
# The set-up's package decision on a machine whose apt lists are empty (every fresh
# Debian image): librocksdb-dev must still be chosen, after a refresh of the lists,
# so the build links Debian's RocksDB instead of compiling it. apt works in a temporary
# state directory (no lists, nothing installed), the system's own is left alone.
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$CURVINE_HOME"
command -v apt-get >/dev/null 2>&1 || { echo "setup-test: no apt here, skipped"; exit 0; }
[ "$(. /etc/os-release && echo "${VERSION_CODENAME:-}")" = bookworm ] \
  || { echo "setup-test: not Debian 12 (no librocksdb-dev 7.8 to choose), skipped"; exit 0; }
tmp="$(mktemp -d)"; chmod 755 "$tmp"   # apt fetches as _apt
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
: >"$tmp/status"
opts="-o Dir::State::Lists=$tmp/lists -o Dir::State::status=$tmp/status -o Dir::Cache=$tmp/cache"
# the empty state really knows no candidate before the refresh
if apt-cache $opts policy librocksdb-dev 2>/dev/null | grep -q 'Candidate: 7\.8\.'; then
  echo "setup-test: FAILED: the empty list directory already knows librocksdb-dev" >&2; exit 1
fi
out="$(APT_OPTS="$opts" SETUP_DRY_RUN=1 bin/setup.sh)"
echo "$out"
grep -q '^setup: apt-get update$' <<<"$out" || { echo "setup-test: FAILED: the lists were not refreshed" >&2; exit 1; }
grep -Eq '^setup: packages: .*\blibrocksdb-dev\b' <<<"$out" \
  || { echo "setup-test: FAILED: librocksdb-dev not chosen on empty lists" >&2; exit 1; }
echo "setup-test: 1 passed, 0 failed"
