#!/usr/bin/env bash
# Start or stop the worker: bin/curvine-worker.sh start|stop|status
set -euo pipefail
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  start) daemon_start worker worker ;;
  stop) daemon_stop worker ;;
  status) daemon_status worker ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
