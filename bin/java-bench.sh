#!/usr/bin/env bash
# bin/java-bench.sh ACTION [DIR] [extra flags]   (ACTION: fs.write | fs.read | fuse.write | fuse.read)
# java-bench (io.curvine.bench.CurvineBenchV2) through the Hadoop FileSystem API (fs.*)
# or a FUSE mount (fuse.*, DIR is the mounted directory). Same defaults, files and
# manifest as bin/curvine-bench.sh, so the two can be compared on the same data.
# Environment: THREADS, BUF_SIZE, FILE_SIZE, FILE_NUM, CHECKSUM, CLEAR_DIR, DIRECT,
# JAVA_OPTS, CURVINE_JAVA_JAR, HADOOP_CLASSPATH. The master comes from client.master_addrs
# of $CURVINE_CONF_FILE (override with -Dfs.cv.master_addrs=... in JAVA_OPTS).
set -euo pipefail
source "$(dirname "$0")/common.sh"
ACTION="${1:?usage: $0 fs.write|fs.read|fuse.write|fuse.read [DIR] [extra flags]}"
DIR="${2:-/curvine-bench}"
shift $(( $# >= 2 ? 2 : 1 ))
case "$ACTION" in
  fuse.*)
    # a fuse.* run on an unmounted directory would time the local disk instead
    d="$DIR"; while [ ! -e "$d" ]; do d="$(dirname "$d")"; done
    if [ "$(stat -f -c %t "$d")" != 65735546 ]; then
      echo "$0: $DIR is not on a FUSE mount (bin/curvine-fuse.sh start mounts one)" >&2
      exit 1
    fi ;;
esac

JAVA_DIR="$CURVINE_HOME/java"
JAR="${CURVINE_JAVA_JAR:-$(ls "$JAVA_DIR"/target/curvine-hadoop-*.jar 2>/dev/null | head -n1 || true)}"
if [ -z "$JAR" ] || [ ! -f "$JAR" ]; then
  echo "building the Java client jar (mvn package)..." >&2
  (cd "$JAVA_DIR" && mvn -q -B -DskipTests package) >&2
  JAR="$(ls "$JAVA_DIR"/target/curvine-hadoop-*.jar | head -n1)"
fi
# Hadoop's jars: `hadoop classpath` when Hadoop is installed, else Maven's copy.
if [ -z "${HADOOP_CLASSPATH:-}" ]; then
  if command -v hadoop >/dev/null 2>&1; then
    HADOOP_CLASSPATH="$(hadoop classpath)"
  else
    CP_FILE="$JAVA_DIR/target/classpath.txt"
    if [ ! -s "$CP_FILE" ]; then
      (cd "$JAVA_DIR" && mvn -q -B dependency:build-classpath -Dmdep.includeScope=compile \
        -Dmdep.outputFile="$CP_FILE") >&2
    fi
    HADOOP_CLASSPATH="$(cat "$CP_FILE")"
  fi
fi
MASTERS="$(conf_get client master_addrs | tr -d '[] ' )"
exec java -Dfs.cv.master_addrs="${MASTERS:-127.0.0.1:8995}" ${JAVA_OPTS:-} \
  -cp "$JAR:$HADOOP_CLASSPATH:$CURVINE_HOME/etc" \
  io.curvine.bench.CurvineBenchV2 \
  -action "$ACTION" \
  -dataDir "$DIR" \
  -threads "${THREADS:-2}" \
  -bufferSize "${BUF_SIZE:-128KB}" \
  -fileSize "${FILE_SIZE:-100MB}" \
  -fileNum "${FILE_NUM:-42}" \
  -checksum "${CHECKSUM:-true}" \
  -clearDir "${CLEAR_DIR:-false}" \
  -direct "${DIRECT:-true}" \
  "$@"
