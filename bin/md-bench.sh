#!/usr/bin/env bash
# Metadata speed through the mount, mdtest-like: create (open O_CREAT|O_EXCL + close),
# stat and remove of empty files by PROCS processes, each FILES files, through a
# Curvine FUSE mount and through a `bindfs --multithreaded` passthrough over tmpfs,
# one after the other for every case, so both see the same machine load.
#   sudo bin/md-bench.sh            (root: it mounts; installs bindfs when missing)
# Cases: PROCS="2 8" x DIRS="unique 1 100" (unique: one directory per process, as
# `mdtest -u`; 1: all in one directory; 100: spread over 100), FILES=1000, and the
# master with journal.sync = true, then false (SYNC="true false").
# It starts its own master, worker and mount from conf/curvine-cluster.toml with data
# under a temp directory, on the conf's ports: no other local cluster may be running.
set -euo pipefail
source "$(dirname "$0")/common.sh"
FILES="${FILES:-1000}"
PROCS="${PROCS:-2 8}"
DIRS="${DIRS:-unique 1 100}"
SYNC="${SYNC:-true false}"

[ "$(id -u)" = 0 ] || die "run as root: the benchmark mounts FUSE, tmpfs and bindfs"
command -v bindfs >/dev/null || apt-get install -y --no-install-recommends bindfs >/dev/null
need_bin curvine-bench
need_bin curvine-server
need_bin curvine-fuse
if (exec 3<>/dev/tcp/127.0.0.1/"$(conf_get master rpc_port)") 2>/dev/null; then
  die "port $(conf_get master rpc_port) is in use: stop the local cluster first (bin/local-cluster.sh stop)"
fi

TMP="$(mktemp -d /var/tmp/md-bench.XXXXXX)"
SHM="/dev/shm/$(basename "$TMP")"
BASE_CONF="$CURVINE_CONF_FILE"
export CURVINE_RUN_DIR="$TMP/run" CURVINE_CONF_FILE="$TMP/conf.toml"
cleanup() {
  set +e
  "$CURVINE_HOME/bin/curvine-fuse.sh" stop >/dev/null 2>&1
  "$CURVINE_HOME/bin/local-cluster.sh" stop >/dev/null 2>&1
  for m in "$TMP/bind" "$TMP/tmpfs"; do
    mountpoint -q "$m" && umount "$m"
  done
  rm -rf "$TMP" "$SHM"
}
trap cleanup EXIT
mkdir -p "$TMP/cv" "$TMP/tmpfs" "$TMP/bind"
mount -t tmpfs -o size=1G tmpfs "$TMP/tmpfs"
bindfs --multithreaded "$TMP/tmpfs" "$TMP/bind"

# one case: "create stat remove" rates (ops/s) of curvine-bench md
md() {
  local dir="$1" procs="$2" dirs="$3"
  [ "$dirs" = unique ] && dirs="$procs"
  "$CURVINE_BIN_DIR/curvine-bench" --action md --dir "$dir" --client-threads "$procs" \
    --file-num "$FILES" --meta-dirs "$dirs" |
    awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "ops/s") r[$1] = $i }
         END { printf "%s %s %s\n", r["md.create:"], r["md.stat:"], r["md.remove:"] }'
}

printf '%-6s %-5s %-6s | %-26s | %-26s\n' sync procs dirs \
  "curvine create/stat/remove" "bindfs create/stat/remove"
for sync in $SYNC; do
  sed -e "s#/var/tmp/curvine#$TMP/data#g" -e "s#/dev/shm/curvine#$SHM#g" -e "s#^mnt_path = .*#mnt_path = \"$TMP/cv\"#" \
    -e "s#^sync = .*#sync = $sync#" "$BASE_CONF" >"$CURVINE_CONF_FILE"
  "$CURVINE_HOME/bin/local-cluster.sh" start >/dev/null
  "$CURVINE_HOME/bin/curvine-fuse.sh" start >/dev/null
  # warm both (connections, the master's caches) before the first timed case
  FILES=$(( FILES / 10 + 1 )) md "$TMP/cv" 2 1 >/dev/null
  FILES=$(( FILES / 10 + 1 )) md "$TMP/bind" 2 1 >/dev/null
  for procs in $PROCS; do
    for dirs in $DIRS; do
      read -r cc cs cr < <(md "$TMP/cv" "$procs" "$dirs")
      read -r bc bs br < <(md "$TMP/bind" "$procs" "$dirs")
      printf '%-6s %-5s %-6s | %8s %8s %8s | %8s %8s %8s\n' \
        "$sync" "$procs" "$dirs" "$cc" "$cs" "$cr" "$bc" "$bs" "$br"
    done
  done
  "$CURVINE_HOME/bin/curvine-fuse.sh" stop >/dev/null
  "$CURVINE_HOME/bin/local-cluster.sh" stop >/dev/null
  rm -rf "$TMP/data" "$SHM"
done
