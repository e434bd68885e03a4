#!/usr/bin/env bash
# pjdfstest, the POSIX conformance suite, on a real FUSE mount of the default conf:
# a master, a worker and curvine-fuse started for the run (in a temp dir, on free ports,
# so a running cluster is left alone), pjdfstest run as root with etc/pjdfstest.toml.
# Fails on any failed case.
#   bin/pjdfstest.sh                 the whole suite
#   bin/pjdfstest.sh chmod rename    only cases whose name contains one of the words
#   PJDFSTEST_FUSE_CONF='writeback_cache = true' bin/pjdfstest.sh   another kind of mount
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$CURVINE_HOME"

[ "$(id -u)" -eq 0 ] || die "pjdfstest needs root (it switches users and makes device files)"
[ -e /dev/fuse ] || die "no /dev/fuse"
PJDFSTEST="${PJDFSTEST:-$(command -v pjdfstest || echo "$HOME/.cargo/bin/pjdfstest")}"
[ -x "$PJDFSTEST" ] || die "pjdfstest not found: run bin/setup.sh"
for b in curvine-server curvine-fuse cv; do need_bin "$b"; done

W=$(mktemp -d /var/tmp/curvine-pjdfstest.XXXXXX)
chmod 755 "$W"   # the cases switch to other users, who must reach the mount point
SHM="/dev/shm/$(basename "$W")"
MNT="$W/mnt"
PIDS=()
cleanup() {
  local rc=$?
  if grep -qs " $MNT .* - fuse" /proc/self/mountinfo; then
    fusermount3 -uz "$MNT" 2>/dev/null || umount -l "$MNT" || true
  fi
  local i
  for (( i=${#PIDS[@]}-1; i>=0; i-- )); do
    kill -TERM "${PIDS[$i]}" 2>/dev/null || true
    wait "${PIDS[$i]}" 2>/dev/null || true
  done
  if [ "$rc" -ne 0 ] && [ -d "$W" ]; then
    for l in "$W"/*.log; do echo "--- last lines of $l" >&2; tail -n 20 "$l" >&2; done
  fi
  rm -rf "$W" "$SHM"
  exit "$rc"
}
trap cleanup EXIT

# two free TCP ports (the master's and the worker's): nothing listens on them
free_port() {
  local p
  for p in $(shuf -i 20000-45000 -n 100); do
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && [ "$p" != "${MPORT:-}" ]; then
      echo "$p"; return 0
    fi
  done
  die "no free port"
}
MPORT=$(free_port)
WPORT=$(free_port)

# the default conf, with its directories and ports moved into the run's own
CONF="$W/cluster.toml"
sed -e "s#/var/tmp/curvine#$W#g" -e "s#/dev/shm/curvine#$SHM#g" \
    -e "s#^rpc_port = 8995#rpc_port = $MPORT#" -e "s#^data_port = 8997#data_port = $WPORT#" \
    -e "s#127.0.0.1:8995#127.0.0.1:$MPORT#" -e "s#^mnt_path = .*#mnt_path = \"$MNT\"#" \
    conf/curvine-cluster.toml >"$CONF"
if [ -n "${PJDFSTEST_FUSE_CONF:-}" ]; then
  # its `key = value` lines (newline-separated) replace those of [fuse]
  awk -v extra="$PJDFSTEST_FUSE_CONF" '
    BEGIN { n = split(extra, lines, "\n"); for (i = 1; i <= n; i++) { split(lines[i], kv, "="); k = kv[1]; gsub(/[ \t]/, "", k); keys[k] = 1 } }
    /^\[/ { in_fuse = ($0 == "[fuse]") }
    { k = $0; sub(/[ \t]*=.*/, "", k) }
    in_fuse && (k in keys) { next }
    { print }
    $0 == "[fuse]" { print extra }
  ' "$CONF" >"$CONF.new"
  mv "$CONF.new" "$CONF"
fi
mkdir -p "$MNT"

"$CURVINE_BIN_DIR/curvine-server" master --conf "$CONF" >"$W/master.log" 2>&1 & PIDS+=($!)
"$CURVINE_BIN_DIR/curvine-server" worker --conf "$CONF" >"$W/worker.log" 2>&1 & PIDS+=($!)
deadline=$((SECONDS + 60))
until "$CURVINE_BIN_DIR/cv" --conf "$CONF" report 2>/dev/null | grep -q alive; do
  [ $SECONDS -lt $deadline ] || die "no live worker after 60 s"
  sleep 0.2
done
"$CURVINE_BIN_DIR/curvine-fuse" --conf "$CONF" --mnt-path "$MNT" >"$W/fuse.log" 2>&1 & PIDS+=($!)
deadline=$((SECONDS + 30))
until grep -qs " $MNT .* - fuse" /proc/self/mountinfo; do
  [ $SECONDS -lt $deadline ] || die "curvine-fuse did not mount $MNT in 30 s"
  kill -0 "${PIDS[2]}" 2>/dev/null || die "curvine-fuse exited"
  sleep 0.1
done

# a second file system for the EXDEV cases
mkdir -p "$W/other"
# The EROFS cases remount the mount read-only and back with mount(8), which for a FUSE
# mount would run mount.fuse, and that would run the mount's source ("curvine") as its
# program: `mount -i` (no helper) has the kernel remount it.
mkdir -p "$W/bin"
printf '#!/bin/sh\nexec %s -i "$@"\n' "$(command -v mount)" >"$W/bin/mount"
chmod +x "$W/bin/mount"
# pjdfstest 0.2.2 leaks a descriptor open for writing in two cases
# (posix_fallocate::affected_only_create_flags, ftruncate::affected_create_flags_only),
# after which the kernel refuses every read-only remount (EBUSY) in that process, on
# any file system. So the EROFS cases run first, in a pjdfstest of their own, and the
# second run, of everything else, skips them.
sed 's/^allow_remount = true/allow_remount = false/' etc/pjdfstest.toml >"$W/no-remount.toml"
run_pjdfstest() {
  PATH="$W/bin:$PATH" NO_COLOR=1 RUST_BACKTRACE=0 "$PJDFSTEST" -c "$1" -p "$MNT" -s "$W/other" "${@:2}"
}

echo "== pjdfstest on $MNT ${PJDFSTEST_FUSE_CONF:+($PJDFSTEST_FUSE_CONF)}"
start=$SECONDS
set +e
status=0
if [ $# -eq 0 ] || printf '%s\n' "$@" | grep -q erofs; then
  run_pjdfstest etc/pjdfstest.toml erofs >"$W/erofs.out" 2>&1 || status=1
fi
run_pjdfstest "$W/no-remount.toml" "$@" >"$W/pjdfstest.out" 2>&1 || status=1
set -e
# failures with their messages, skips with their reasons (the EROFS cases of the second
# run ran in the first), the summaries
grep -v -E ' ok$' "$W/erofs.out" 2>/dev/null || true
grep -v -E ' ok$' "$W/pjdfstest.out" | grep -v -E '^(.*::erofs_[a-z_]+ +skipped|	Remounts \(allow_remount\) are not allowed.*)$' || true
echo "== pjdfstest took $((SECONDS - start)) s"
if [ "$status" -ne 0 ]; then
  echo "pjdfstest: failed cases:" >&2
  cat "$W"/*.out | grep -E ' FAILED' >&2 || true
  exit 1
fi
