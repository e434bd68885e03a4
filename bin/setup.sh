#!/usr/bin/env bash
# Install what building and testing Curvine needs on Debian, then build it in release.
#   bin/setup.sh            build packages + cargo build --release
#   SETUP_EXTRA="fio iperf3 bindfs" bin/setup.sh   also install these packages
set -euo pipefail
source "$(dirname "$0")/common.sh"

# clang/libclang: RocksDB's bindgen step; protobuf-compiler: tonic/prost code generation;
# libssl-dev: the under-stores' HTTP client (OpenDAL over reqwest) uses the system's TLS;
# fuse3: the FUSE mount; git and sqlite3: programs the FUSE tests run on the mount; a JDK (17+) and Maven: the Java client. A JDK or
# Maven already on the PATH (not from apt) is used as it is.
PACKAGES="clang libclang-dev protobuf-compiler pkg-config libssl-dev fuse3 libfuse3-dev git sqlite3 ${SETUP_EXTRA:-}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
# APT_OPTS: extra apt options (the set-up test points Dir::State::Lists at an empty dir)
read -r -a apt_opts <<<"${APT_OPTS:-}"
apt_refreshed=0
apt_refresh() {
  [ "$apt_refreshed" = 1 ] && return 0
  echo "setup: apt-get update"
  $SUDO apt-get "${apt_opts[@]}" update -qq || die "apt-get update failed"
  apt_refreshed=1
}
# apt_candidate PKG: sets `candidate` to the version apt would install, or nothing. An
# unknown candidate may only mean that the package lists are empty or stale (every fresh
# Debian image), so the lists are refreshed once and the question asked again.
apt_policy() { apt-cache "${apt_opts[@]}" policy "$1" 2>/dev/null | sed -n 's/^ *Candidate: *//p'; }
apt_candidate() {
  candidate="$(apt_policy "$1")"
  if [ -z "$candidate" ] || [ "$candidate" = "(none)" ]; then
    apt_refresh
    candidate="$(apt_policy "$1")"
  fi
  [ "$candidate" != "(none)" ] || candidate=""
}
# librocksdb-dev: the RocksDB the build links (7.8.3 on Debian 12; .cargo/config.toml),
# where the release has that version; elsewhere RocksDB's C++ is compiled (bin/common.sh)
apt_candidate librocksdb-dev
case "$candidate" in
  7.8.*) PACKAGES="$PACKAGES librocksdb-dev" ;;
  *) echo "setup: no librocksdb-dev 7.8 in this release's packages: RocksDB's C++ will be compiled" ;;
esac
command -v javac >/dev/null 2>&1 || PACKAGES="$PACKAGES openjdk-17-jdk-headless"
command -v mvn >/dev/null 2>&1 || PACKAGES="$PACKAGES maven"
# chromium, node and npm: the web console's browser test (bin/browser-test.sh), which
# only the tests need (bin/test.sh sets SETUP_TEST_TOOLS=1)
if [ "${SETUP_TEST_TOOLS:-0}" = 1 ]; then
  command -v chromium >/dev/null 2>&1 || PACKAGES="$PACKAGES chromium"
  command -v npm >/dev/null 2>&1 || PACKAGES="$PACKAGES nodejs npm"
  # iproute2 and jq: the multi-host test in network namespaces (bin/netns-test.sh)
  PACKAGES="$PACKAGES iproute2 jq"
fi

# SETUP_DRY_RUN=1: print the packages chosen and stop (bin/setup-test.sh)
if [ "${SETUP_DRY_RUN:-0}" = 1 ]; then
  echo "setup: packages: $PACKAGES"
  exit 0
fi

missing=()
for p in $PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  apt_refresh
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# the system's RocksDB may be there now
rocksdb_env

if ! command -v cargo >/dev/null 2>&1; then
  [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found: install a Rust toolchain (rustup, Rust >= 1.87) and rerun"

# Tools only the tests use (bin/test.sh sets SETUP_TEST_TOOLS=1), in ~/.cargo/bin:
# pjdfstest, the POSIX conformance suite bin/pjdfstest.sh runs on the FUSE mount (the
# crates.io Rust port of FreeBSD's suite), and s3s-fs, the S3 server on loopback that
# the under-store tests run against (its later versions need a newer Rust than 1.95).
if [ "${SETUP_TEST_TOOLS:-0}" = 1 ]; then
  PJDFSTEST_VERSION=0.2.2
  if ! "$HOME/.cargo/bin/pjdfstest" --version 2>/dev/null | grep -qx "pjdfstest $PJDFSTEST_VERSION"; then
    echo "setup: cargo install pjdfstest $PJDFSTEST_VERSION"
    cargo install --locked --version "$PJDFSTEST_VERSION" pjdfstest
  fi
  S3S_FS_VERSION=0.14.1
  if ! s3s_have="$(s3s-fs --version 2>/dev/null || "$HOME/.cargo/bin/s3s-fs" --version 2>/dev/null)" \
     || [ "${s3s_have##* }" != "$S3S_FS_VERSION" ]; then
    echo "setup: cargo install s3s-fs $S3S_FS_VERSION (test S3 server)"
    cargo install s3s-fs --locked --version "$S3S_FS_VERSION" --features binary
  fi
  # Azurite, Azure Blob's emulator from npm (about a minute, 360 MB in node_modules): the
  # azblob under-store test (curvine-server/tests/ufs_azblob.rs) starts it on loopback
  az=curvine-server/tests/azurite
  az_want="$(sed -n 's/.*"azurite": *"\(.*\)".*/\1/p' "$CURVINE_HOME/$az/package.json")"
  az_have="$(sed -n 's/^ *"version": *"\(.*\)".*/\1/p' "$CURVINE_HOME/$az/node_modules/azurite/package.json" 2>/dev/null | head -1 || true)"
  if [ "$az_have" != "$az_want" ] || [ ! -x "$CURVINE_HOME/$az/node_modules/.bin/azurite-blob" ]; then
    command -v npm >/dev/null 2>&1 || die "npm not found (apt-get install npm)"
    echo "setup: npm ci in $az (Azurite $az_want, test Azure Blob server)"
    (cd "$CURVINE_HOME/$az" && npm ci --prefer-offline --no-audit --no-fund --loglevel=error)
  fi
fi

if [ "${SETUP_NO_BUILD:-0}" != 1 ]; then
  if [ -n "${ROCKSDB_COMPILE:-}" ]; then
    echo "setup: cargo build --release (compiling RocksDB too: a cold build takes 15-25 minutes on 2 cores)"
  else
    echo "setup: cargo build --release (linking the system's RocksDB: a cold build takes about 7 minutes on 2 cores)"
  fi
  (cd "$CURVINE_HOME" && cargo build --release --workspace --bins)
fi
