#!/usr/bin/env bash
# Restart the local cluster on the data it holds and measure the worker's registration:
# the time to register (with its block report), the slowest `cv fs touch` of those run
# every 200 ms meanwhile, and the peak RSS (VmHWM) of master and worker 2 s after the
# worker registered. Fill the cluster first, e.g. a million 4 KiB files:
#   THREADS=8 FILE_SIZE=4KB BUF_SIZE=4KB FILE_NUM=1000000 bin/curvine-bench.sh fs.write /sf
#   bench/restart.sh [TOUCHES]      (TOUCHES: default 150, one every 200 ms)
set -euo pipefail
source "$(dirname "$0")/../bin/common.sh"
cd "$CURVINE_HOME"
need_bin curvine-server
need_bin cv
hwm() { awk '/VmHWM/{print $2/1024 " MiB"}' "/proc/$(cat "$CURVINE_RUN_DIR/$1.pid")/status"; }
bin/local-cluster.sh stop >/dev/null 2>&1 || true
log="$CURVINE_RUN_DIR/worker.log"
mkdir -p "$CURVINE_RUN_DIR"
touch "$log"
from=$(( $(wc -l <"$log") + 1 ))   # this start's lines only
registered() { tail -n "+$from" "$log" | grep -h "registered with the master"; }
bin/curvine-master.sh start >/dev/null
touches=$(mktemp)
trap 'rm -f "$touches"' EXIT
( for i in $(seq 1 "${1:-150}"); do
    s=$(date +%s%N)
    "$CURVINE_BIN_DIR/cv" --conf "$CURVINE_CONF_FILE" fs touch "/restart-touch-$i" >/dev/null 2>&1 || echo "touch $i failed" >&2
    echo $(( ($(date +%s%N) - s) / 1000000 ))
    sleep 0.2
  done ) >"$touches" &
toucher=$!
t0=$(date +%s%N)
bin/curvine-worker.sh start >/dev/null
deadline=$(( $(date +%s) + 600 ))
until registered >/dev/null; do
  [ "$(date +%s)" -lt "$deadline" ] || die "the worker did not register within 600 s"
  sleep 0.1
done
echo "worker start to registered: $(( ($(date +%s%N) - t0) / 1000000 )) ms"
registered | tail -1 | sed 's/.*INFO [^ ]* //'
sleep 2
echo "master VmHWM=$(hwm master) worker VmHWM=$(hwm worker)"
wait "$toucher"
echo "slowest touch: $(sort -n "$touches" | tail -1) ms"
