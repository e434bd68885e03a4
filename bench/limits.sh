#!/usr/bin/env bash
# Physical limits of this machine, measured the way curvine-bench runs, for the ratios in
# bench/README.md: fio sequential write/read on tmpfs and on the disk directory (O_DIRECT)
# with the same total size and parallelism, and iperf3 over loopback.
#   bench/limits.sh [TOTAL_SIZE=4200M] [JOBS=2] [BS=128k]
# Needs fio, iperf3 and python3 (SETUP_EXTRA="fio iperf3" bin/setup.sh installs them).
set -euo pipefail
TOTAL="${1:-4200M}"; JOBS="${2:-2}"; BS="${3:-128k}"
TMPFS_DIR="${TMPFS_DIR:-/dev/shm/curvine-limits}"
DISK_DIR="${DISK_DIR:-/var/tmp/curvine-limits}"
for t in fio iperf3 python3; do command -v $t >/dev/null || { echo "limits.sh: $t not found" >&2; exit 1; }; done

per_job=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)([KMG]?)', '$TOTAL'.upper()); n=int(m.group(1))*{'':1,'K':1<<10,'M':1<<20,'G':1<<30}[m.group(2)]
print(n//$JOBS)")

gib() { python3 -c "
import json,sys
j=json.load(open('$1')); k='$2'
bw=sum(job[k]['bw_bytes'] for job in j['jobs'])
print(f'{bw/2**30:.2f}')"; }

run_fio() { # name dir rw direct bs [fallocate]
  local out; out=$(mktemp)
  fio --name="$1" --directory="$2" --rw="$3" --direct="$4" --bs="$5" --size="$per_job" \
      --numjobs="$JOBS" --ioengine=psync --group_reporting=0 --end_fsync=0 \
      --fallocate="${6:-native}" --output-format=json --output="$out" >/dev/null
  gib "$out" "$([ "$3" = write ] && echo write || echo read)"; rm -f "$out"
}

mkdir -p "$TMPFS_DIR" "$DISK_DIR"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r)"
echo "total $TOTAL in $JOBS jobs, bs $BS"
"$(dirname "$0")/page-reporting.sh"
# fio preallocates a file before it times the writes, so its tmpfs write overwrites pages
# that already exist; a block file is new, and its writes allocate the pages (as dd to a
# new file does). Both are printed.
echo "tmpfs write:          $(run_fio tmpfs "$TMPFS_DIR" write 0 "$BS") GiB/s (preallocated)"
echo "tmpfs read:           $(run_fio tmpfs "$TMPFS_DIR" read 0 "$BS") GiB/s"
rm -rf "$TMPFS_DIR"; mkdir -p "$TMPFS_DIR"
echo "tmpfs write, new:     $(run_fio tmpfs "$TMPFS_DIR" write 0 "$BS" none) GiB/s (pages allocated by the writes)"
rm -rf "$TMPFS_DIR"
echo "disk O_DIRECT write:  $(run_fio disk "$DISK_DIR" write 1 1M) GiB/s"
echo "disk O_DIRECT read:   $(run_fio disk "$DISK_DIR" read 1 1M) GiB/s"
rm -rf "$DISK_DIR"

port=$(( 20000 + RANDOM % 20000 ))
# The client retries until the server listens; the server is stopped afterwards.
iperf3 -s -p "$port" -B 127.0.0.1 >/dev/null 2>&1 &
srv=$!
out=$(mktemp)
# iperf3 -J can exit 0 with only an error in its JSON (a client that came too early):
# a run counts once the JSON has the received total
rate() {
  python3 -c "
import json,sys
try: print(f\"{json.load(open('$out'))['end']['sum_received']['bits_per_second']/8/2**30:.2f}\")
except Exception: sys.exit(1)" 2>/dev/null
}
gibs=""
for _ in $(seq 50); do
  iperf3 -c 127.0.0.1 -p "$port" -t 5 -P "$JOBS" -J >"$out" 2>/dev/null || true
  if gibs=$(rate); then break; fi
  sleep 0.1
done
kill "$srv" 2>/dev/null || true
wait "$srv" 2>/dev/null || true
rm -f "$out"
[ -n "$gibs" ] || { echo "limits.sh: iperf3 over loopback failed 50 times" >&2; exit 1; }
echo "loopback iperf3:      $gibs GiB/s ($JOBS streams)"
