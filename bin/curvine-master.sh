#!/usr/bin/env bash
# Start or stop the master: bin/curvine-master.sh start|stop|status
set -euo pipefail
source "$(dirname "$0")/common.sh"
case "${1:-}" in
  start) daemon_start master master ;;
  stop) daemon_stop master ;;
  status) daemon_status master ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
