#!/usr/bin/env bash
# The throughput goals of the core issue, each measured against its physical limit in the
# same round: fio (new pages) and curvine-bench on the MEM tier, iperf3 and curvine-bench
# over the loopback data plane, fio O_DIRECT and curvine-bench on the SSD tier. The
# limits swing with this VM's memory state (see bench/README.md), so each figure is
# paired with a limit measured seconds before it; the medians are printed at the end.
#   bench/goals.sh [ROUNDS=3]
# Needs a running cluster (bin/local-cluster.sh start, same CURVINE_CONF_FILE), fio and
# iperf3. GOALS="mem net ssd" picks the parts; TOTAL/JOBS/BS default to the curvine-bench
# shape (4200M in 2 jobs of 128k, 42 files of 100MB).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/../bin/common.sh"
source "$here/lib.sh"
need_bin curvine-bench
need_bin cv
ROUNDS="${1:-3}"; GOALS="${GOALS:-mem net ssd}"
TOTAL="${TOTAL:-4200M}"; JOBS="${JOBS:-2}"; BS="${BS:-128k}"
TMPFS_DIR="${TMPFS_DIR:-/dev/shm/curvine-limits}"
DISK_DIR="${DISK_DIR:-/var/tmp/curvine-limits}"
per_job=$(per_job_size "$TOTAL" "$JOBS")
rows=$(mktemp)
trap 'rm -f "$rows"; rm -rf "$TMPFS_DIR" "$DISK_DIR"' EXIT

# bench ACTION DIR [flags]: curvine-bench's GiB/s (the read also checks the checksums:
# a mismatch stops the script)
bench() {
  local out
  out=$("$CURVINE_HOME/bin/curvine-bench.sh" "$@") || { echo "$out" >&2; die "curvine-bench $1 $2 failed"; }
  echo "$out" | awk -v a="$1:" '$1 == a && $3 == "GiB/s" { print $2 }'
}
drop_caches() { sync; echo 3 > /proc/sys/vm/drop_caches 2>/dev/null || true; }
cv_rm() { "$CURVINE_BIN_DIR/cv" --conf "$CURVINE_CONF_FILE" fs rm -r "$1" >/dev/null; }
# row GOAL OURS LIMIT_NAME LIMIT GOAL_RATIO
row() {
  printf '  %-26s %6s GiB/s  %-22s %6s GiB/s  ratio %s (goal %s)\n' "$1" "$2" "$3" "$4" \
    "$(python3 -c "print(f'{$2/$4:.2f}')")" "$5"
  echo "$1|$2|$4|$5" >>"$rows"
}

echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r); $TOTAL in $JOBS jobs, $BS"
"$here/page-reporting.sh"
for r in $(seq "$ROUNDS"); do
  echo "round $r ($(date +%T))"
  if [[ " $GOALS " == *" mem "* ]]; then
    rm -rf "$TMPFS_DIR"; mkdir -p "$TMPFS_DIR"
    fw=$(fio_gibs tmpfs "$TMPFS_DIR" write 0 "$BS" "$per_job" "$JOBS" none)
    fr=$(fio_gibs tmpfs "$TMPFS_DIR" read 0 "$BS" "$per_job" "$JOBS")
    rm -rf "$TMPFS_DIR"
    w=$(bench fs.write /goals-mem); rd=$(bench fs.read /goals-mem)
    cv_rm /goals-mem
    row "fs.write MEM" "$w" "tmpfs write, new pages" "$fw" 0.6
    row "fs.read MEM" "$rd" "tmpfs read" "$fr" 0.6
  fi
  if [[ " $GOALS " == *" net "* ]]; then
    ip=$(iperf3_gibs "$JOBS")
    w=$(bench fs.write /goals-net --no-short-circuit true)
    rd=$(bench fs.read /goals-net --no-short-circuit true)
    cv_rm /goals-net
    row "fs.write data plane" "$w" "iperf3 loopback" "$ip" 0.4
    row "fs.read data plane" "$rd" "iperf3 loopback" "$ip" 0.6
  fi
  if [[ " $GOALS " == *" ssd "* ]]; then
    rm -rf "$DISK_DIR"; mkdir -p "$DISK_DIR"
    dw=$(fio_gibs disk "$DISK_DIR" write 1 1M "$per_job" "$JOBS")
    drop_caches
    dr=$(fio_gibs disk "$DISK_DIR" read 1 1M "$per_job" "$JOBS")
    rm -rf "$DISK_DIR"
    w=$(STORAGE_TYPE=ssd bench fs.write /goals-ssd)
    drop_caches
    rd=$(bench fs.read /goals-ssd)
    cv_rm /goals-ssd
    row "fs.write SSD" "$w" "disk O_DIRECT write" "$dw" 0.8
    row "fs.read SSD" "$rd" "disk O_DIRECT read" "$dr" 0.8
  fi
done
echo "medians over $ROUNDS rounds (ratio of each round, then the median):"
python3 - "$rows" <<'PY'
import statistics, sys
goals = {}
for line in open(sys.argv[1]):
    name, ours, limit, goal = line.strip().split("|")
    goals.setdefault(name, (float(goal), []))[1].append(float(ours) / float(limit))
for name, (goal, ratios) in goals.items():
    m = statistics.median(ratios)
    print(f"  {name:<26} ratio {m:.2f} (range {min(ratios):.2f}-{max(ratios):.2f}), goal {goal}: {'met' if m >= goal else 'NOT met'}")
PY
