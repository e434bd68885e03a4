#!/usr/bin/env bash
# Every test suite: set up, lint, the Rust tests (unit + MiniCluster integration), then
# the Java client's tests (JNI tests and Hadoop's FileSystem contract tests under Maven,
# against a real cluster the tests start).
#   LINT=0 bin/test.sh    skip fmt/clippy
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$CURVINE_HOME"
SETUP_NO_BUILD=1 bin/setup.sh
start=$(date +%s)
if [ "${LINT:-1}" = 1 ]; then
  echo "== cargo fmt --check"
  cargo fmt --all -- --check
  echo "== cargo clippy"
  cargo clippy --release --workspace --all-targets -- -D warnings
fi
echo "== Rust tests"
cargo test --release --workspace --features curvine-server/fault-injection --no-fail-fast
echo "== Web console in a headless browser"
bin/browser-test.sh
echo "== Java tests"
cargo build --release -p curvine-jni -p curvine-server
(cd java && mvn -B -ntp test)
echo "== every Hadoop contract suite ran"
java/check-contract-suites.sh
echo "== all suites passed in $(( $(date +%s) - start )) s"
