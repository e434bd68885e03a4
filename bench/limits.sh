#!/usr/bin/env bash
# Physical limits of this machine, measured the way curvine-bench runs, for the ratios in
# bench/README.md: fio sequential write/read on tmpfs and on the disk directory (O_DIRECT)
# with the same total size and parallelism, and iperf3 over loopback.
#   bench/limits.sh [TOTAL_SIZE=4200M] [JOBS=2] [BS=128k]
# Needs fio, iperf3 and python3 (SETUP_EXTRA="fio iperf3" bin/setup.sh installs them).
# bench/goals.sh pairs these limits with curvine-bench runs, round by round.
set -euo pipefail
TOTAL="${1:-4200M}"; JOBS="${2:-2}"; BS="${3:-128k}"
TMPFS_DIR="${TMPFS_DIR:-/dev/shm/curvine-limits}"
DISK_DIR="${DISK_DIR:-/var/tmp/curvine-limits}"
source "$(dirname "$0")/lib.sh"
per_job=$(per_job_size "$TOTAL" "$JOBS")

mkdir -p "$TMPFS_DIR" "$DISK_DIR"
echo "machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, kernel $(uname -r)"
echo "total $TOTAL in $JOBS jobs, bs $BS"
"$(dirname "$0")/page-reporting.sh"
# fio preallocates a file before it times the writes, so its tmpfs write overwrites pages
# that already exist; a block file is new, and its writes allocate the pages (as dd to a
# new file does). Both are printed.
echo "tmpfs write:          $(fio_gibs tmpfs "$TMPFS_DIR" write 0 "$BS" "$per_job" "$JOBS") GiB/s (preallocated)"
echo "tmpfs read:           $(fio_gibs tmpfs "$TMPFS_DIR" read 0 "$BS" "$per_job" "$JOBS") GiB/s"
rm -rf "$TMPFS_DIR"; mkdir -p "$TMPFS_DIR"
echo "tmpfs write, new:     $(fio_gibs tmpfs "$TMPFS_DIR" write 0 "$BS" "$per_job" "$JOBS" none) GiB/s (pages allocated by the writes)"
rm -rf "$TMPFS_DIR"
echo "disk O_DIRECT write:  $(fio_gibs disk "$DISK_DIR" write 1 1M "$per_job" "$JOBS") GiB/s"
echo "disk O_DIRECT read:   $(fio_gibs disk "$DISK_DIR" read 1 1M "$per_job" "$JOBS") GiB/s"
rm -rf "$DISK_DIR"
echo "loopback iperf3:      $(iperf3_gibs "$JOBS") GiB/s ($JOBS streams)"
