#!/usr/bin/env bash
# bin/curvine-bench.sh ACTION [DIR]   (ACTION: fs.write | fs.read | meta | fuse.write | fuse.read)
# fuse.* actions use plain file I/O under the FUSE mount (fuse.mnt_path of the conf,
# mounted by bin/curvine-fuse.sh when it is not yet); DIR is then relative to the mount.
# Defaults are scaled to a 2-core machine: 2 client threads, 42 files of 100MB (4.1 GiB).
# Override with the environment: THREADS, BUF_SIZE, FILE_SIZE, FILE_NUM, STORAGE_TYPE,
# CHECKSUM, and pass extra curvine-bench flags after DIR.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ACTION="${1:?usage: $0 fs.write|fs.read|meta [DIR] [extra flags]}"
DIR="${2:-/curvine-bench}"
shift $(( $# >= 2 ? 2 : 1 ))
need_bin curvine-bench
case "$ACTION" in
  fuse.*)
    MNT="$(conf_get fuse mnt_path)"
    grep -qs " $(realpath -m "$MNT") .* - fuse" /proc/self/mountinfo || "$CURVINE_HOME/bin/curvine-fuse.sh" start
    DIR="$MNT/${DIR#/}" ;;
esac
exec "$CURVINE_BIN_DIR/curvine-bench" \
  --action "$ACTION" \
  --dir "$DIR" \
  --conf "$CURVINE_CONF_FILE" \
  --checksum "${CHECKSUM:-true}" \
  --client-threads "${THREADS:-2}" \
  --buf-size "${BUF_SIZE:-128KB}" \
  --file-size "${FILE_SIZE:-100MB}" \
  --file-num "${FILE_NUM:-42}" \
  ${STORAGE_TYPE:+--storage-type "$STORAGE_TYPE"} \
  "$@"
