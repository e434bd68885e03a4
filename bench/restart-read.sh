#!/usr/bin/env bash
# Reads right after a master restart: a master and a worker (the shipped profile's
# timing: worker heartbeat 3 s, worker_lost_timeout 30 s) as processes on free ports
# in a temp dir; a file of two blocks is written, then ROUNDS times the master is
# killed (kill -9) and started again at once, and `cv fs cat` of the file is run
# until one succeeds. Prints per round the time from the kill to the master serving,
# to the first good read (its bytes checked), and the reads that failed before it.
#   bench/restart-read.sh [ROUNDS]      (default 5)
# CURVINE_BIN_DIR picks the binaries (curvine-server, cv), e.g. those of another build.
set -euo pipefail
source "$(dirname "$0")/../bin/common.sh"
need_bin curvine-server
need_bin cv
rounds="${1:-5}"
dir=$(mktemp -d /var/tmp/curvine-restart-read.XXXXXX)
pids=()
cleanup() {
  exec 2>/dev/null   # no "Killed" lines from the shell
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
mport=$(port); wport=$(port)
conf="$dir/conf.toml"
cat >"$conf" <<EOF
[master]
hostname = "127.0.0.1"
rpc_port = $mport
web_port = 0
meta_dir = "$dir/meta"
block_size = "8MB"
[worker]
hostname = "127.0.0.1"
data_port = $wport
web_port = 0
data_dir = ["[SSD:1GB]$dir/ssd"]
heartbeat_interval = "3s"
[client]
hostname = "127.0.0.1"
master_addrs = ["127.0.0.1:$mport"]
[log]
level = "error"
EOF
cv() { "$CURVINE_BIN_DIR/cv" --conf "$conf" "$@"; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
started=
start() {
  "$CURVINE_BIN_DIR/curvine-server" "$1" --conf "$conf" >>"$dir/$1.log" 2>&1 &
  started=$!
  pids+=("$started")
}
serving() { cv fs ls / >/dev/null 2>&1; }
start master; master=$started
start worker
until serving; do sleep 0.05; done
head -c $((9 << 20)) /dev/urandom >"$dir/file"
until cv fs put "$dir/file" /two-blocks >/dev/null 2>&1; do sleep 0.2; done
want=$(md5sum <"$dir/file")
echo "round  master serving  first good read  failed reads before it"
for r in $(seq 1 "$rounds"); do
  # the kill lands anywhere in the worker's 3 s heartbeat period, as in production
  # (the last round's read ended just after its registration, where the period starts)
  sleep "$((RANDOM % 3)).$((RANDOM % 10))"
  kill -9 "$master"
  wait "$master" 2>/dev/null || true
  t0=$(now_ms)
  start master; master=$started
  until serving; do sleep 0.01; done
  up=$(( $(now_ms) - t0 ))
  failed=0
  until got=$(cv fs cat /two-blocks 2>/dev/null | md5sum) && [ "$got" = "$want" ]; do
    failed=$((failed + 1))
    [ $(( $(now_ms) - t0 )) -lt 60000 ] || die "no good read within 60 s"
  done
  printf "%5d  %11d ms  %12d ms  %d\n" "$r" "$up" "$(( $(now_ms) - t0 ))" "$failed"
done
