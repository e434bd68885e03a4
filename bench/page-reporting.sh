#!/usr/bin/env bash
# Prints whether this machine is a VM that hands freed memory back to its host (virtio
# balloon free page reporting). There, the first touch of a page the host took back is
# slow, so anything that allocates fresh memory (tmpfs writes, page-cache fills of FUSE
# reads) runs slower after a run that freed gigabytes; see bench/README.md.
set -euo pipefail
reporting=no
for f in /sys/bus/virtio/drivers/virtio_balloon/*/features; do
  [ -r "$f" ] || continue
  # feature bit 5: VIRTIO_BALLOON_F_REPORTING (the file lists bits from 0, left to right)
  [ "$(cut -c6 "$f")" = 1 ] && reporting=yes
done
if [ "$reporting" = yes ]; then
  order=$(cat /sys/module/page_reporting/parameters/page_reporting_order 2>/dev/null || echo "?")
  echo "free page reporting: on (order $order): freed memory goes back to the host"
else
  echo "free page reporting: off"
fi
