#!/usr/bin/env bash
# Masters and workers on this host from $CURVINE_CONF_FILE (default
# conf/curvine-cluster.toml: one master and one worker):
#   bin/local-cluster.sh start|stop|status
# With `master.peers` set (conf/curvine-ha-local.toml), one master per peer and
# $CURVINE_LOCAL_WORKERS workers (default 2), each given its own node id, ports and
# directories with `curvine-server --set` (the profile's header says how). `start`
# starts whichever is not running.
# Logs and pid files go to $CURVINE_RUN_DIR (default: run/ in the project).
set -euo pipefail
source "$(dirname "$0")/common.sh"

wait_workers() {
  need_bin cv
  for _ in $(seq 150); do
    if "$CURVINE_BIN_DIR/cv" --conf "$CURVINE_CONF_FILE" report 2>/dev/null | grep -q 'alive'; then
      "$CURVINE_BIN_DIR/cv" --conf "$CURVINE_CONF_FILE" report; return 0
    fi
    sleep 0.2
  done
  die "no live worker after 30 s; see $CURVINE_RUN_DIR/*.log"
}

# "ID PORT" of each entry of master.peers, one a line (nothing without peers).
peers() {
  conf_get master peers | tr -d '[] ' | tr ',' '\n' | sed -n 's/^\([0-9]*\)=.*:\([0-9]*\)$/\1 \2/p'
}

# worker_dirs N: the worker's data_dir with "/wN" appended to each path, as a TOML array.
worker_dirs() {
  local v; v=$(conf_get worker data_dir)
  v="${v#\[}"; v="${v%\]}"
  awk -v n="$1" -v v="$v" 'BEGIN {
    k = split(v, d, / *, */); out = "["
    for (i = 1; i <= k; i++) out = out (i > 1 ? ", " : "") "\"" d[i] "/w" n "\""
    print out "]" }'
}

# ha start|stop|status: every master of the peers and $CURVINE_LOCAL_WORKERS workers.
ha() {
  local web meta dport wweb n
  web=$(conf_get master web_port); meta=$(conf_get master meta_dir)
  dport=$(conf_get worker data_port); wweb=$(conf_get worker web_port)
  n="${CURVINE_LOCAL_WORKERS:-2}"
  case "$1" in
    start)
      while read -r id port; do
        daemon_start "master$id" master --set "master.node_id=$id" --set "master.rpc_port=$port" \
          --set "master.web_port=$(( web ? web + id - 1 : 0 ))" --set "master.meta_dir=$meta/$id"
      done < <(peers)
      for i in $(seq "$n"); do
        daemon_start "worker$i" worker --set "worker.data_port=$(( dport + i - 1 ))" \
          --set "worker.web_port=$(( wweb ? wweb + i - 1 : 0 ))" --set "worker.data_dir=$(worker_dirs "$i")"
      done
      wait_workers ;;
    stop)
      for i in $(seq "$n"); do daemon_stop "worker$i"; done
      while read -r id _; do daemon_stop "master$id"; done < <(peers) ;;
    status)
      while read -r id _; do daemon_status "master$id"; done < <(peers)
      for i in $(seq "$n"); do daemon_status "worker$i"; done ;;
  esac
}

case "${1:-}" in
  start|stop|status)
    if [ -n "$(peers)" ]; then ha "$1"; exit; fi ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac

case "$1" in
  start)
    daemon_start master master
    daemon_start worker worker
    wait_workers ;;
  stop)
    daemon_stop worker
    daemon_stop master ;;
  status)
    daemon_status master
    daemon_status worker ;;
esac
