#!/usr/bin/env bash
# Mount or unmount Curvine with FUSE: bin/curvine-fuse.sh start|stop|status [curvine-fuse args...]
# The mount point is fuse.mnt_path of the conf (or --mnt-path DIR among the extra args).
set -euo pipefail
source "$(dirname "$0")/common.sh"

NAME=fuse
PIDF="$CURVINE_RUN_DIR/$NAME.pid"
LOG="$CURVINE_RUN_DIR/$NAME.log"

mnt_path() {
  local prev=""
  for a in "$@"; do
    if [ "$prev" = "--mnt-path" ]; then echo "$a"; return; fi
    prev="$a"
  done
  conf_get fuse mnt_path
}

is_mounted() { grep -qs " $(realpath -m "$1") .* - fuse" /proc/self/mountinfo; }

start() {
  mkdir -p "$CURVINE_RUN_DIR"
  local mnt; mnt=$(mnt_path "$@")
  [ -n "$mnt" ] || die "no mount point: set fuse.mnt_path or pass --mnt-path DIR"
  if pid_alive "$PIDF"; then
    # one daemon per run dir: it may serve another mount point
    is_mounted "$mnt" || die "$NAME already running (pid $(cat "$PIDF")) but $mnt is not mounted; it serves another mount point (bin/curvine-fuse.sh stop first)"
    echo "$NAME already running (pid $(cat "$PIDF")), mounted at $mnt"; return 0
  fi
  need_bin curvine-fuse
  local args=(--conf "$CURVINE_CONF_FILE")
  case " $* " in *" --mnt-path "*) ;; *) args+=(--mnt-path "$mnt") ;; esac
  # the daemon replaces a stale mount (from a crash) itself
  nohup "$CURVINE_BIN_DIR/curvine-fuse" "${args[@]}" "$@" >>"$LOG" 2>&1 &
  echo $! >"$PIDF"
  for _ in $(seq 100); do
    if is_mounted "$mnt"; then echo "$NAME started (pid $(cat "$PIDF")), mounted at $mnt, log $LOG"; return 0; fi
    if ! pid_alive "$PIDF"; then break; fi
    sleep 0.1
  done
  echo "$NAME failed to mount $mnt; last lines of $LOG:" >&2; tail -n 20 "$LOG" >&2
  if pid_alive "$PIDF"; then kill -TERM "$(cat "$PIDF")" || true; fi
  rm -f "$PIDF"; return 1
}

stop() {
  local mnt; mnt=$(mnt_path "$@")
  if pid_alive "$PIDF"; then
    local pid; pid=$(cat "$PIDF")
    kill -TERM "$pid"
    for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then echo "$NAME did not stop in 30 s, killing"; kill -KILL "$pid"; fi
    echo "$NAME stopped"
  else
    echo "$NAME not running"
  fi
  rm -f "$PIDF"
  # a mount left by a killed daemon
  if [ -n "$mnt" ] && is_mounted "$mnt"; then
    fusermount3 -uz "$mnt" 2>/dev/null || umount -l "$mnt" || true
    echo "detached $mnt"
  fi
}

cmd="${1:-}"; shift || true
case "$cmd" in
  start) start "$@" ;;
  stop) stop "$@" ;;
  status) daemon_status "$NAME" ;;
  *) echo "usage: $0 start|stop|status [--mnt-path DIR] [--fs-path /sub] [--read-only]" >&2; exit 2 ;;
esac
