#!/usr/bin/env bash
# One master and one worker on this host from conf/curvine-cluster.toml:
#   bin/local-cluster.sh start|stop|status
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

case "${1:-}" in
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
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
