#!/usr/bin/env bash
# Peak RSS (VmHWM) of the master and worker of a running local cluster after creating
# N empty files, for N in the arguments (default: 1000 100000). Uses the meta action of
# curvine-bench with 8 clients; the cluster must be started by bin/local-cluster.sh.
# META_DIRS=D spreads each run's files over D directories.
#   bench/rss.sh [N ...]
set -euo pipefail
source "$(dirname "$0")/../bin/common.sh"
hwm() { awk '/VmHWM/{print $2/1024 " MiB"}' "/proc/$(cat "$CURVINE_RUN_DIR/$1.pid")/status"; }
for n in "${@:-1000 100000}"; do
  for m in $n; do
    "$CURVINE_BIN_DIR/curvine-bench" --conf "$CURVINE_CONF_FILE" --action meta \
      --dir "/rss-$m" --client-threads 8 --file-num "$m" \
      --meta-dirs "${META_DIRS:-0}" | sed 's/^/  /'
    echo "files=$m master VmHWM=$(hwm master) worker VmHWM=$(hwm worker)"
  done
done
