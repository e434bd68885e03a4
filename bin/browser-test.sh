#!/usr/bin/env bash
# The web console in a real headless browser: Debian's chromium driven by playwright-core
# (from npm; no browser download) through a MiniCluster with a little data
# (curvine-server/examples/mini_cluster.rs). See curvine-server/tests/browser/.
#   bin/browser-test.sh                     run it
#   SCREENSHOTS=docs bin/browser-test.sh    also refresh the console screenshots in docs/
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$CURVINE_HOME"
CHROMIUM="${CHROMIUM:-/usr/bin/chromium}"
if [ ! -x "$CHROMIUM" ]; then
  echo "browser test SKIPPED: no $CHROMIUM (bin/setup.sh installs Debian's chromium)"
  exit 0
fi
if ! "$CHROMIUM" --headless --no-sandbox --disable-gpu --dump-dom about:blank >/dev/null 2>&1; then
  echo "browser test SKIPPED: $CHROMIUM cannot start headless here"
  exit 0
fi
command -v npm >/dev/null 2>&1 || die "npm not found (bin/setup.sh installs it)"
cargo build --release -p curvine-server --example mini_cluster -p curvine-client --bin cv
target="${CARGO_TARGET_DIR:-$CURVINE_HOME/target}/release"
dir=curvine-server/tests/browser
(cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
shots=""
[ -n "${SCREENSHOTS:-}" ] && shots="$(cd "$SCREENSHOTS" && pwd)"
MINI_CLUSTER="$target/examples/mini_cluster" CV="$target/cv" CHROMIUM="$CHROMIUM" \
  SCREENSHOTS="$shots" node "$dir/console.test.mjs"
