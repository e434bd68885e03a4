#!/usr/bin/env bash
# bin/metrics-cost.sh [ROUNDS]: what recording metrics costs on the hot paths.
# Runs bin/curvine-bench.sh fs.write, fs.read and meta against the local cluster
# (bin/local-cluster.sh, $CURVINE_CONF_FILE) with metrics recorded and with
# `web.metrics = false` (the same binaries: every update on the request paths of the
# master, the worker and the client is skipped, clock readings included), alternating
# ON and OFF for ROUNDS rounds (default 3), the cluster restarted for each. Prints each
# figure's median with metrics on and off and their ratio (on / off; the goal is
# >= 0.97). The bench's settings come from the environment as for curvine-bench.sh
# (THREADS, FILE_NUM, FILE_SIZE, ...; META_FILES: files of the meta bench, 20000).
# The cluster is left stopped.
set -euo pipefail
source "$(dirname "$0")/common.sh"
ROUNDS="${1:-3}"
need_bin curvine-server
need_bin curvine-bench
need_bin cv
grep -q '^metrics = true' "$CURVINE_CONF_FILE" ||
  die "$CURVINE_CONF_FILE must say 'metrics = true' in [web] (the OFF conf is made from it)"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sed 's/^metrics = true/metrics = false/' "$CURVINE_CONF_FILE" >"$work/off.toml"
cp "$CURVINE_CONF_FILE" "$work/on.toml"

# one_round MODE: restart the cluster with MODE's conf and append its figures to
# $work/MODE.txt as "name value" lines.
one_round() {
  local mode="$1" out
  export CURVINE_CONF_FILE="$work/$mode.toml"
  "$CURVINE_HOME/bin/local-cluster.sh" stop >/dev/null
  "$CURVINE_HOME/bin/local-cluster.sh" start >/dev/null
  out=$("$CURVINE_HOME/bin/curvine-bench.sh" fs.write /metrics-cost) || die "fs.write failed: $out"
  out+=$'\n'$("$CURVINE_HOME/bin/curvine-bench.sh" fs.read /metrics-cost) || die "fs.read failed"
  out+=$'\n'$(FILE_NUM="${META_FILES:-20000}" "$CURVINE_HOME/bin/curvine-bench.sh" meta /metrics-cost) ||
    die "meta failed"
  local figures
  figures=$(echo "$out" | awk '
    $1 ~ /^fs\.(write|read):$/ && $3 == "GiB/s" { sub(":", "", $1); print $1, $2 }
    $1 ~ /^meta\.[a-z]+:$/ && $NF == "ops/s" { sub(":", "", $1); print $1, $(NF-1) }
  ')
  echo "$figures" >>"$work/$mode.txt"
  echo "round $r $mode: $(echo "$figures" | tr '\n' ' ')" >&2
}

for r in $(seq "$ROUNDS"); do
  one_round on
  one_round off
done
export CURVINE_CONF_FILE="$work/on.toml"
"$CURVINE_HOME/bin/local-cluster.sh" stop >/dev/null

# median of each figure per mode, then on / off
awk '
  FNR == 1 { mode = (FILENAME ~ /on\.txt$/) ? "on" : "off" }
  { v[mode, $1, ++n[mode, $1]] = $2; names[$1] = 1 }
  function median(m, k,   c, i, j, t, a) {
    c = n[m, k]
    for (i = 1; i <= c; i++) a[i] = v[m, k, i]
    for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
  }
  END {
    printf "%-12s %12s %12s %8s\n", "figure", "metrics on", "metrics off", "on/off"
    for (k in names) {
      on = median("on", k); off = median("off", k)
      printf "%-12s %12s %12s %8.3f\n", k, on, off, (off > 0 ? on / off : 0)
    }
  }' "$work/on.txt" "$work/off.txt" | sort
