#!/usr/bin/env bash
# Every test suite: set up, lint, the Rust tests (unit + MiniCluster integration),
# pjdfstest (POSIX conformance) on a FUSE mount, three masters and two workers in
# network namespaces, the web console in a browser, then the Java client's tests (JNI
# tests and Hadoop's FileSystem contract tests under Maven, against a real cluster the
# tests start).
#   LINT=0 bin/test.sh    skip fmt, clippy and rustdoc
set -euo pipefail
source "$(dirname "$0")/common.sh"
cd "$CURVINE_HOME"
SETUP_NO_BUILD=1 SETUP_TEST_TOOLS=1 bin/setup.sh
echo "== the set-up on empty package lists"
bin/setup-test.sh
rocksdb_env   # the set-up may have installed the system's RocksDB
start=$(date +%s)
# The optional under-stores are linted and tested too (their unit tests, and the azblob
# mount against Azurite): all three share one set of dependency builds, which the later
# plain builds do not reuse (about 3 CPU-minutes more on a cold target dir, none on a
# warm one)
UFS_FEATURES=curvine-server/ufs-webhdfs,curvine-server/ufs-gcs,curvine-server/ufs-azblob
if [ "${LINT:-1}" = 1 ]; then
  echo "== cargo fmt --check"
  cargo fmt --all -- --check
  echo "== cargo clippy"
  cargo clippy --release --workspace --all-targets --features "$UFS_FEATURES" -- -D warnings
  echo "== cargo doc"
  # --release: the build scripts' output (RocksDB's C++) is shared with the builds above
  RUSTDOCFLAGS=-Dwarnings cargo doc --release --no-deps --workspace
fi
echo "== Rust tests"
cargo test --release --workspace --features "curvine-server/fault-injection,$UFS_FEATURES" --no-fail-fast
echo "== pjdfstest on the FUSE mount"
# the release binaries the scripts below run (the test build above makes test
# executables, not these; netns-test.sh also runs curvine-bench)
cargo build --release --workspace --bins
bin/pjdfstest.sh
PJDFSTEST_FUSE_CONF='writeback_cache = true' bin/pjdfstest.sh
echo "== Replicated masters on separate hosts (network namespaces)"
bin/netns-test.sh
echo "== Web console in a headless browser"
bin/browser-test.sh
echo "== Java tests"
cargo build --release -p curvine-jni -p curvine-server -p curvine-client
(cd java && mvn -B -ntp test)
echo "== every Hadoop contract suite ran"
java/check-contract-suites.sh
echo "== all suites passed in $(( $(date +%s) - start )) s"
