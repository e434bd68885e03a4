#!/usr/bin/env bash
# FUSE performance of Curvine, compared in the same run with raw tmpfs and with a
# `bindfs --multithreaded` passthrough mount of a tmpfs directory (the FUSE floor):
#
#   fio, psync: seq write / seq read bs=1M (1 and 4 jobs), rand read / rand write 4k
#   (1 and 4 jobs); metadata: create, stat, remove of 10,000 files in one directory and
#   across 100 directories (Curvine vs bindfs).
#
# Usage: bench/fuse-bench.sh [--mnt DIR] [--seq-size 1G] [--rand-size 256M] [--runtime 8]
#                            [--only fio|meta] [--fuse-conf 'KEY = VALUE']
#   --mnt DIR   use an existing Curvine mount (default: start a local cluster with a MEM
#               tier in /dev/shm and mount it, via bin/local-cluster.sh and
#               bin/curvine-fuse.sh; everything started is stopped at the end).
#   --only      run only the fio part or only the metadata part.
#   --fuse-conf extra lines for the [fuse] section of the private cluster's conf, e.g.
#               'direct_io = true' (not with --mnt: that mount has its own conf).
# Needs root (mounts), fio, bindfs and python3. Binaries come from $CURVINE_BIN_DIR
# (default ${CARGO_TARGET_DIR:-target}/release): build curvine-server, curvine-fuse, cv.
set -euo pipefail

HERE="$(cd "$(dirname "$0")/.." && pwd)"
MNT=""
SEQ_SIZE="1G"
RAND_SIZE="256M"
RUNTIME=8
ONLY=""
FUSE_CONF=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mnt) MNT="$2"; shift 2 ;;
    --seq-size) SEQ_SIZE="$2"; shift 2 ;;
    --rand-size) RAND_SIZE="$2"; shift 2 ;;
    --runtime) RUNTIME="$2"; shift 2 ;;
    --only)
      case "$2" in fio|meta) ONLY="$2" ;; *) echo "--only takes fio or meta" >&2; exit 2 ;; esac
      shift 2 ;;
    --fuse-conf) FUSE_CONF="$2"; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "unknown argument $1" >&2; exit 2 ;;
  esac
done
for t in fio bindfs python3 fusermount3; do
  command -v "$t" >/dev/null || { echo "fuse-bench: $t is not installed" >&2; exit 1; }
done

WORK="$(mktemp -d /dev/shm/curvine-fuse-bench.XXXXXX)"
RAW="$WORK/raw"            # raw tmpfs
BSRC="$WORK/bindfs-src"    # tmpfs dir behind bindfs
BMNT="$WORK/bindfs-mnt"
mkdir -p "$RAW" "$BSRC" "$BMNT"
STARTED_CLUSTER=0
RESULTS="$WORK/results.tsv"
: >"$RESULTS"

cleanup() {
  set +e
  if mountpoint -q "$BMNT"; then fusermount3 -u "$BMNT" || umount -l "$BMNT"; fi
  if [ "$STARTED_CLUSTER" = 1 ]; then
    "$HERE/bin/curvine-fuse.sh" stop --mnt-path "$MNT" >/dev/null
    "$HERE/bin/local-cluster.sh" stop >/dev/null
  fi
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

if [ -z "$MNT" ]; then
  # a private cluster: own ports, conf, run dir and MEM tier
  export CURVINE_RUN_DIR="$WORK/run"
  export CURVINE_CONF_FILE="$WORK/cluster.toml"
  MPORT=$(free_port); WPORT=$(free_port)
  MNT="$WORK/curvine-mnt"
  mkdir -p "$CURVINE_RUN_DIR" "$MNT" "$WORK/cv-mem"
  cat >"$CURVINE_CONF_FILE" <<EOF
[master]
hostname = "127.0.0.1"
rpc_port = $MPORT
web_port = 0
meta_dir = "$WORK/meta"
local_socket = "$WORK/master.sock"
storage_tier = "mem"
[worker]
hostname = "127.0.0.1"
data_port = $WPORT
web_port = 0
data_dir = ["[MEM:6GB]$WORK/cv-mem"]
scrub_rate = "0"
[client]
master_addrs = ["127.0.0.1:$MPORT"]
[fuse]
mnt_path = "$MNT"
web_port = 0
# files modified in place spill to tmpfs, next to the MEM tier (not to a disk /tmp)
spill_dir = "$WORK/spill"
$FUSE_CONF
[log]
level = "warn"
EOF
  STARTED_CLUSTER=1
  "$HERE/bin/local-cluster.sh" start >/dev/null
  "$HERE/bin/curvine-fuse.sh" start --mnt-path "$MNT" >/dev/null
fi
if [ -n "$FUSE_CONF" ] && [ "$STARTED_CLUSTER" = 0 ]; then
  echo "fuse-bench: --fuse-conf applies to the private cluster, not to --mnt" >&2; exit 2
fi
mountpoint -q "$MNT" || { echo "fuse-bench: nothing mounted at $MNT" >&2; exit 1; }
CVDIR="$MNT/fuse-bench.$$"
mkdir -p "$CVDIR"
bindfs --multithreaded "$BSRC" "$BMNT"

# fio_run TARGET_NAME DIR JOB_NAME RW BS JOBS SIZE [time_based]
# appends "test<TAB>target<TAB>MiB/s<TAB>IOPS" to $RESULTS
fio_run() {
  local target="$1" dir="$2" name="$3" rw="$4" bs="$5" jobs="$6" size="$7" timed="${8:-}"
  local extra=()
  if [ -n "$timed" ]; then extra=(--time_based --runtime="$RUNTIME"); fi
  local out
  out=$(fio --name="$name" --directory="$dir" --ioengine=psync --rw="$rw" --bs="$bs" \
    --numjobs="$jobs" --size="$size" --group_reporting --end_fsync=0 --fallocate=none \
    --output-format=terse --terse-version=3 "${extra[@]}" 2>"$WORK/fio.err") || {
    echo "fio $name on $target failed: $(tail -n 3 "$WORK/fio.err")" >&2; return 1; }
  # terse v3: read bw KiB/s = field 7, read iops = 8; write bw = 48, write iops = 49
  echo "$out" | awk -F';' -v t="$name" -v g="$target" -v rw="$rw" '
    { if (rw ~ /write/) { bw=$48; io=$49 } else { bw=$7; io=$8 }
      printf "%s\t%s\t%.1f\t%.0f\n", t, g, bw/1024, io }' >>"$RESULTS"
}

fio_suite() {
  local target="$1" dir="$2"
  local per4
  per4=$(python3 -c "import sys; s='$SEQ_SIZE'; u={'K':1<<10,'M':1<<20,'G':1<<30}; n=int(s[:-1])*u[s[-1]] if s[-1] in u else int(s); print(n//4)")
  local rper4
  rper4=$(python3 -c "import sys; s='$RAND_SIZE'; u={'K':1<<10,'M':1<<20,'G':1<<30}; n=int(s[:-1])*u[s[-1]] if s[-1] in u else int(s); print(n//4)")
  mkdir -p "$dir/seq1" "$dir/seq4" "$dir/rand1" "$dir/rand4"
  fio_run "$target" "$dir/seq1" seqwrite-1M-1j write 1M 1 "$SEQ_SIZE"
  fio_run "$target" "$dir/seq1" seqread-1M-1j read 1M 1 "$SEQ_SIZE"
  fio_run "$target" "$dir/seq4" seqwrite-1M-4j write 1M 4 "$per4"
  fio_run "$target" "$dir/seq4" seqread-1M-4j read 1M 4 "$per4"
  rm -rf "$dir/seq1" "$dir/seq4"
  # lay the files out sequentially, then random I/O inside them
  fio_run "$target" "$dir/rand1" layout-1j write 1M 1 "$RAND_SIZE"
  fio_run "$target" "$dir/rand4" layout-4j write 1M 4 "$rper4"
  fio_run "$target" "$dir/rand1" randread-4k-1j randread 4k 1 "$RAND_SIZE" timed
  fio_run "$target" "$dir/rand4" randread-4k-4j randread 4k 4 "$rper4" timed
  fio_run "$target" "$dir/rand1" randwrite-4k-1j randwrite 4k 1 "$RAND_SIZE" timed
  fio_run "$target" "$dir/rand4" randwrite-4k-4j randwrite 4k 4 "$rper4" timed
  rm -rf "$dir/rand1" "$dir/rand4"
}

# metadata: ops/s of create, stat, remove; appends like fio_run (MiB/s column = 0)
meta_suite() {
  local target="$1" dir="$2"
  python3 - "$target" "$dir" >>"$RESULTS" <<'PY'
import os, sys, time
target, base = sys.argv[1], sys.argv[2]
N = 10000
def run(label, paths, dirs):
    for d in dirs:
        os.mkdir(d)
    out = []
    t = time.perf_counter()
    for p in paths:
        os.close(os.open(p, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    out.append(("create", time.perf_counter() - t))
    t = time.perf_counter()
    for p in paths:
        os.stat(p)
    out.append(("stat", time.perf_counter() - t))
    t = time.perf_counter()
    for p in paths:
        os.unlink(p)
    out.append(("remove", time.perf_counter() - t))
    for d in dirs:
        os.rmdir(d)
    for op, secs in out:
        print(f"meta-{op}-{label}\t{target}\t0\t{N / secs:.0f}")
one = os.path.join(base, "meta-one")
run("1dir", [os.path.join(one, f"f{i}") for i in range(N)], [one])
many = [os.path.join(base, f"meta-d{j}") for j in range(100)]
run("100dirs", [os.path.join(many[i % 100], f"f{i}") for i in range(N)], many)
PY
}

echo "fuse-bench: seq $SEQ_SIZE, rand $RAND_SIZE for ${RUNTIME}s, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)" >&2
echo "fuse-bench: $("$HERE/bench/page-reporting.sh")" >&2
for target in tmpfs bindfs curvine; do
  [ "$ONLY" != meta ] || break
  case "$target" in
    tmpfs) dir="$RAW" ;;
    bindfs) dir="$BMNT/fio" ;;
    curvine) dir="$CVDIR/fio" ;;
  esac
  echo "fuse-bench: fio on $target" >&2
  mkdir -p "$dir"
  fio_suite "$target" "$dir"
done
for target in bindfs curvine; do
  [ "$ONLY" != fio ] || break
  case "$target" in
    bindfs) dir="$BMNT" ;;
    curvine) dir="$CVDIR" ;;
  esac
  echo "fuse-bench: metadata on $target" >&2
  meta_suite "$target" "$dir"
done
rm -rf "$CVDIR"

python3 - "$RESULTS" <<'PY'
import sys
rows = {}
order = []
for line in open(sys.argv[1]):
    test, target, mibs, iops = line.rstrip("\n").split("\t")
    if test.startswith("layout"):
        continue
    if test not in rows:
        rows[test] = {}
        order.append(test)
    rows[test][target] = (float(mibs), float(iops))
def val(test, target):
    r = rows[test].get(target)
    if r is None:
        return None
    return r[0] if test.startswith("seq") else r[1]
unit = lambda t: "MiB/s" if t.startswith("seq") else ("ops/s" if t.startswith("meta") else "IOPS")
fmt = lambda v: "-" if v is None else f"{v:,.0f}"
ratio = lambda a, b: "-" if a is None or not b else f"{a / b:.2f}"
print(f"{'test':<22}{'unit':>6}{'tmpfs':>12}{'bindfs':>12}{'curvine':>12}{'cv/tmpfs':>10}{'cv/bindfs':>10}")
for t in order:
    tm, bf, cv = val(t, "tmpfs"), val(t, "bindfs"), val(t, "curvine")
    print(f"{t:<22}{unit(t):>6}{fmt(tm):>12}{fmt(bf):>12}{fmt(cv):>12}{ratio(cv, tm):>10}{ratio(cv, bf):>10}")
print("targets: seq 1M write/read >= 0.35 x tmpfs; 4k rand read/write >= 1.0 x bindfs;")
print("         metadata create/remove >= 0.5 x bindfs, stat >= 1.0 x bindfs")
PY
