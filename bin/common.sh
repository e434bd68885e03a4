# Shared settings for the bin/ scripts; sourced, not run.
CURVINE_HOME="${CURVINE_HOME:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}"
CURVINE_CONF_FILE="${CURVINE_CONF_FILE:-$CURVINE_HOME/conf/curvine-cluster.toml}"
CURVINE_BIN_DIR="${CURVINE_BIN_DIR:-${CARGO_TARGET_DIR:-$CURVINE_HOME/target}/release}"
CURVINE_RUN_DIR="${CURVINE_RUN_DIR:-$CURVINE_HOME/run}"
export CURVINE_HOME CURVINE_CONF_FILE CURVINE_BIN_DIR CURVINE_RUN_DIR

die() { echo "$(basename "$0"): $*" >&2; exit 1; }

# RocksDB: the build links the system's 7.8 (Debian 12's librocksdb-dev, see
# .cargo/config.toml). Without it (another distribution or release), it compiles the
# one in the crate instead. ROCKSDB_COMPILE or ROCKSDB_LIB_DIR set by the caller wins.
# Called again once bin/setup.sh has installed the package.
rocksdb_env() {
  if [ "${CURVINE_ROCKSDB_COMPILE:-}" = auto ]; then
    unset ROCKSDB_COMPILE ROCKSDB_INCLUDE_DIR CURVINE_ROCKSDB_COMPILE
  fi
  if [ -n "${ROCKSDB_COMPILE:-}" ]; then
    export ROCKSDB_INCLUDE_DIR="${ROCKSDB_INCLUDE_DIR:-rocksdb/include}"   # its own header
    return 0
  fi
  [ -n "${ROCKSDB_LIB_DIR:-}" ] && return 0
  local v=/usr/include/rocksdb/version.h
  if ! { grep -qx '#define ROCKSDB_MAJOR 7' "$v" && grep -qx '#define ROCKSDB_MINOR 8' "$v"; } 2>/dev/null; then
    export ROCKSDB_COMPILE=1 ROCKSDB_INCLUDE_DIR=rocksdb/include CURVINE_ROCKSDB_COMPILE=auto
  fi
}
rocksdb_env

need_bin() {
  [ -x "$CURVINE_BIN_DIR/$1" ] || die "$CURVINE_BIN_DIR/$1 not found: run bin/setup.sh (or cargo build --release) first"
}

# Read "key = value" from a [section] of the TOML conf (simple values only).
conf_get() {
  local section="$1" key="$2"
  awk -v s="[$section]" -v k="$key" '
    /^\[/ { in_s = ($0 == s) }
    in_s && $1 == k { sub(/^[^=]*=[ \t]*/, ""); gsub(/"/, ""); sub(/[ \t]*#.*$/, ""); print; exit }
  ' "$CURVINE_CONF_FILE"
}

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

# daemon_start NAME ARGS...: run curvine-server ARGS in the background with log and pid files.
daemon_start() {
  local name="$1"; shift
  local pidf="$CURVINE_RUN_DIR/$name.pid" log="$CURVINE_RUN_DIR/$name.log"
  mkdir -p "$CURVINE_RUN_DIR"
  if pid_alive "$pidf"; then echo "$name already running (pid $(cat "$pidf"))"; return 0; fi
  need_bin curvine-server
  nohup "$CURVINE_BIN_DIR/curvine-server" "$@" --conf "$CURVINE_CONF_FILE" >>"$log" 2>&1 &
  echo $! >"$pidf"
  sleep 0.3
  if ! pid_alive "$pidf"; then
    echo "$name failed to start; last lines of $log:" >&2; tail -n 20 "$log" >&2; return 1
  fi
  echo "$name started (pid $(cat "$pidf")), log $log"
}

# daemon_stop NAME: SIGTERM, wait up to 30 s, then SIGKILL.
daemon_stop() {
  local name="$1" pidf="$CURVINE_RUN_DIR/$1.pid"
  if ! pid_alive "$pidf"; then echo "$name not running"; rm -f "$pidf"; return 0; fi
  local pid; pid=$(cat "$pidf")
  kill -TERM "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then echo "$name did not stop in 30 s, killing"; kill -KILL "$pid"; fi
  rm -f "$pidf"; echo "$name stopped"
}

daemon_status() {
  local pidf="$CURVINE_RUN_DIR/$1.pid"
  if pid_alive "$pidf"; then echo "$1: running (pid $(cat "$pidf"))"; else echo "$1: stopped"; fi
}
