#!/usr/bin/env bash
# The main job: set up and build, start a local cluster from conf/curvine-cluster.toml,
# run curvine-bench fs.write then fs.read (printing GiB/s), then stop the cluster.
# KEEP_CLUSTER=1 leaves it running. Bench sizes: see bin/curvine-bench.sh.
set -euo pipefail
source "$(dirname "$0")/common.sh"
"$CURVINE_HOME/bin/setup.sh"
"$CURVINE_HOME/bin/local-cluster.sh" start
trap '[ "${KEEP_CLUSTER:-0}" = 1 ] || "$CURVINE_HOME/bin/local-cluster.sh" stop' EXIT
"$CURVINE_HOME/bin/curvine-bench.sh" fs.write
"$CURVINE_HOME/bin/curvine-bench.sh" fs.read
