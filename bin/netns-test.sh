#!/usr/bin/env bash
# Replicated masters on separate hosts: one network namespace per master, per worker and
# for the client, each with its own address on a veth pair to a bridge that lives in a
# namespace of its own (the host's network is not touched). Real curvine-server and cv
# processes run in them. The test writes through the remote data path with blocks placed
# on both worker hosts, then takes the leader's link down and checks that the cut-off
# leader acknowledges nothing, that the majority elects a leader and keeps every
# acknowledged write, and that the old leader rejoins as a follower with all of them
# once its link is back.
#   bin/netns-test.sh      as root; skips (exit 0, with a message) where namespaces
#                          cannot be created
#   NETNS_FAILOVERS=10 ... kill the leader this many times (default 2) under a metadata
#                          load (curvine-bench meta, 8 clients), restart it with its
#                          data each time, and print the time from each kill to the
#                          first acknowledged write (median, max)
#   NETNS_KEEP=1 ...       keep the work directory (logs, confs) afterwards
set -euo pipefail
source "$(dirname "$0")/common.sh"
need_bin curvine-server
need_bin cv
command -v jq >/dev/null || die "jq not found (bin/setup.sh with SETUP_TEST_TOOLS=1 installs it)"

tag="cvn$$"
hub="$tag-hub"
net=10.199.0
declare -A ip=([m1]=$net.11 [m2]=$net.12 [m3]=$net.13 [w1]=$net.21 [w2]=$net.22 [c]=$net.31)
nodes=(m1 m2 m3 w1 w2 c)
work="$(mktemp -d /tmp/curvine-netns.XXXXXX)"
pids=()
declare -A mpid

cleanup() {
  local rc=$?
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do
    for _ in $(seq 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$p" 2>/dev/null || true
  done
  for n in "${nodes[@]}" hub; do ip netns del "$tag-$n" 2>/dev/null || true; done
  rm -rf /dev/shm/"$tag"-*
  if [ "$rc" -ne 0 ]; then
    for f in "$work"/*.out "$work"/*/*.log; do
      [ -s "$f" ] && { echo "--- last lines of $f"; tail -n 15 "$f"; }
    done
  fi
  if [ "${NETNS_KEEP:-0}" = 1 ] || [ "$rc" -ne 0 ]; then
    echo "netns-test: work directory kept: $work"
  else
    rm -rf "$work"
  fi
  exit "$rc"
}
trap cleanup EXIT

if ! ip netns add "$hub" 2>"$work/netns.err"; then
  echo "netns-test: SKIP: cannot create network namespaces ($(head -1 "$work/netns.err"))"
  exit 0
fi
ip -n "$hub" link set lo up
ip -n "$hub" link add br0 type bridge
ip -n "$hub" link set br0 up
for n in "${nodes[@]}"; do
  ip netns add "$tag-$n"
  ip -n "$hub" link add "$n" type veth peer name eth0 netns "$tag-$n"
  ip -n "$hub" link set "$n" master br0 up
  ip -n "$tag-$n" link set lo up
  ip -n "$tag-$n" addr add "${ip[$n]}/24" dev eth0
  ip -n "$tag-$n" link set eth0 up
done

# --- configuration: one file per process, the cluster part shared ---------------------
masters="\"${ip[m1]}:8995\", \"${ip[m2]}:8995\", \"${ip[m3]}:8995\""
common() {
  cat <<EOF
[cluster]
name = "netns"
[master]
hostname = "$1"
peers = ["1=${ip[m1]}:8995", "2=${ip[m2]}:8995", "3=${ip[m3]}:8995"]
node_id = $2
meta_dir = "$work/$3/meta"
local_socket = ""
threads = 1
replicas = 2
block_size = "1MB"
[journal]
sync = true
[client]
master_addrs = [$masters]
rpc_timeout = "${4:-30s}"
connect_timeout = "1s"
retry_backoff = "100ms"
hostname = "$1"
[log]
level = "info"
dir = "$work/$3"
EOF
}
for i in 1 2 3; do common "${ip[m$i]}" "$i" "m$i" >"$work/m$i.toml"; done
for i in 1 2; do
  # the worker reports to the leader among the masters of master.peers
  common "${ip[w$i]}" 1 "w$i" >"$work/w$i.toml"
  cat >>"$work/w$i.toml" <<EOF
[worker]
hostname = "${ip[w$i]}"
data_dir = ["[MEM:256MB]/dev/shm/$tag-w$i", "[SSD:1GB]$work/w$i/ssd"]
heartbeat_interval = "500ms"
EOF
  # a long call timeout: the worker must leave a cut-off leader by its HTTP/2 pings
  # (answered within connect_timeout), long before a heartbeat call would time out
  sed -i 's/^rpc_timeout = .*/rpc_timeout = "300s"/' "$work/w$i.toml"
done
common "${ip[c]}" 1 c >"$work/c.toml"
# a client of one master only, with a short timeout, that reads a follower's state too
for i in 1 2 3; do
  common "${ip[c]}" 1 c 3s | sed "s|^master_addrs = .*|master_addrs = [\"${ip[m$i]}:8995\"]\nread_from_followers = true|" \
    >"$work/only-m$i.toml"
done

start() { # start NODE ROLE
  mkdir -p "$work/$1"
  ip netns exec "$tag-$1" "$CURVINE_BIN_DIR/curvine-server" "$2" --conf "$work/$1.toml" \
    >>"$work/$1.out" 2>&1 &
  pids+=($!)
  mpid[$1]=$!
}
cv_in() { # cv_in NODE CONF ARGS...: cv run in NODE's namespace
  local n="$1" c="$2"; shift 2
  ip netns exec "$tag-$n" "$CURVINE_BIN_DIR/cv" -q --conf "$work/$c.toml" "$@"
}

# The master that acknowledges a mutation now, reached from the client's namespace
# through a client of that master only; masters in $1 (a space-separated list) only.
leader_of() {
  local i
  for i in $1; do
    if cv_in c "only-m$i" fs mkdir -p / >/dev/null 2>&1; then echo "$i"; return 0; fi
  done
  return 1
}
wait_leader() { # wait_leader "1 2 3" SECONDS
  local deadline=$(( $(date +%s) + $2 )) l
  while [ "$(date +%s)" -lt "$deadline" ]; do
    if l=$(leader_of "$1"); then echo "$l"; return 0; fi
    sleep 0.2
  done
  die "no leader among masters $1 within $2 s"
}

for i in 1 2 3; do start "m$i" master; done
leader=$(wait_leader "1 2 3" 60)
echo "netns-test: master $leader (${ip[m$leader]}) leads"
for i in 1 2; do start "w$i" worker; done
wait_workers() {
  local deadline=$(( $(date +%s) + 60 ))
  until [ "$(cv_in c c report --json 2>/dev/null | jq '[.workers[] | select(.state == "alive")] | length')" = 2 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || die "the workers did not register within 60 s"
    sleep 0.2
  done
}
wait_workers
echo "netns-test: both workers registered"

# --- the data path across hosts: 2 replicas, one on each worker host, read remotely ---
head -c $((3 * 1024 * 1024 + 12345)) /dev/urandom >"$work/data.bin"
cv_in c c fs put "$work/data.bin" /data.bin
# the worker hosts of each block, one line per distinct set
hosts=$(cv_in c c fs blocks --json /data.bin \
  | jq -r '.[] | [.locations[].address | split(":")[0]] | unique | join(" ")' | sort -u)
[ "$hosts" = "${ip[w1]} ${ip[w2]}" ] || die "blocks of /data.bin are on [$hosts], not each on both worker hosts"
cv_in c c fs cat /data.bin | cmp - "$work/data.bin" || die "/data.bin reads back different bytes"
echo "netns-test: /data.bin written and read back over the network, blocks on both workers"

# ms from NS (date +%s%N) to the acknowledgement of the first write sent after it
first_ack_ms() { # first_ack_ms NS WHAT
  local deadline=$(( $(date +%s) + 30 )) first=""
  while [ -z "$first" ]; do
    first=$(awk -v t="$1" '$2 > t { print $3; exit }' "$work/ledger")
    [ -n "$first" ] || { [ "$(date +%s)" -lt "$deadline" ] || die "no write acknowledged within 30 s of $2"; sleep 0.05; }
  done
  echo $(( (first - $1) / 1000000 ))
}
# wait until the leader lists master ID with the whole log in one of ROLES (a jq test;
# `$all` is the whole listing)
wait_back() { # wait_back ID ROLES SECONDS
  local deadline=$(( $(date +%s) + $3 ))
  until cv_in c c admin masters --json 2>/dev/null \
      | jq -e --argjson id "$1" ". as \$all | .[] | select(.id == \$id and ($2) and .lag == 0)" >/dev/null; do
    [ "$(date +%s)" -lt "$deadline" ] || { cv_in c c admin masters || true; die "master $1 did not rejoin within $3 s"; }
    sleep 0.2
  done
}

# --- the partition ---------------------------------------------------------------------
# A writer in the client's namespace: one mkdir after another, each acknowledged one
# written to the ledger with the times it was sent and acknowledged (the directory
# names never repeat).
: >"$work/ledger"
(
  n=0
  while [ ! -e "$work/stop" ]; do
    n=$((n + 1))
    sent=$(date +%s%N)
    if cv_in c c fs mkdir "/acked-$n" >/dev/null 2>>"$work/writer.err"; then
      echo "/acked-$n $sent $(date +%s%N)" >>"$work/ledger"
    fi
  done
) &
writer=$!
pids+=("$writer")
until [ "$(wc -l <"$work/ledger")" -ge 20 ]; do sleep 0.1; done

others=$(for i in 1 2 3; do [ "$i" = "$leader" ] || printf '%s ' "$i"; done)
cut_ns=$(date +%s%N)
ip -n "$hub" link set "m$leader" down
echo "netns-test: link of master $leader down"

# the cut-off leader acknowledges nothing (a client on its own host, which still reaches it)
if cv_in "m$leader" "only-m$leader" fs mkdir /minority 2>"$work/minority.err"; then
  die "the cut-off master $leader acknowledged a mutation"
fi
echo "netns-test: cut-off master refused: $(head -1 "$work/minority.err")"

new=$(wait_leader "$others" 30)
[ "$new" != "$leader" ] || die "the cut-off master still leads"
ms=$(first_ack_ms "$cut_ns" "the cut")
echo "netns-test: master $new leads; first write sent after the cut acknowledged $ms ms after it"
# the workers register with the new leader, and the data written before the cut reads
wait_workers
cv_in c c fs cat /data.bin | cmp - "$work/data.bin" || die "/data.bin differs after the failover"
echo "netns-test: workers registered with master $new; /data.bin reads back"

# --- the link back -----------------------------------------------------------------------
ip -n "$hub" link set "m$leader" up
echo "netns-test: link of master $leader up"
# it answers as a follower: a mutation sent to it alone is refused
deadline=$(( $(date +%s) + 30 ))
while cv_in c "only-m$leader" fs mkdir -p / >/dev/null 2>&1; do
  [ "$(date +%s)" -lt "$deadline" ] || die "master $leader still acknowledges mutations"
  sleep 0.2
done
# and the leader lists it as a follower that holds the whole log
wait_back "$leader" '.role == "follower"' 30
echo "netns-test: master $leader is a follower again: $(cv_in c c admin masters --json | jq -c 'map({id, role, lag})')"
# --- leader kills under load ------------------------------------------------------------
need_bin curvine-bench
(
  r=0
  while [ ! -e "$work/stop" ]; do
    r=$((r + 1))
    ip netns exec "$tag-c" "$CURVINE_BIN_DIR/curvine-bench" --conf "$work/c.toml" --action meta \
      --dir "/load-$r" --client-threads 8 --file-num 4000 --stat-rounds 1 >>"$work/load.out" 2>&1 || true
  done
) &
pids+=($!)
gaps=()
for k in $(seq "${NETNS_FAILOVERS:-2}"); do
  l=$(wait_leader "1 2 3" 30)
  kill_ns=$(date +%s%N)
  kill -KILL "${mpid[m$l]}"
  wait "${mpid[m$l]}" 2>/dev/null || true
  ms=$(first_ack_ms "$kill_ns" "kill $k")
  gaps+=("$ms")
  start "m$l" master
  # back with the whole log before the next kill: a follower, or the leader again when
  # it came back before the others' election timeout (its vote still stands) and leads
  # them; a restarted leader believes it leads until it hears of the newer term, and
  # answers so meanwhile, with the others unreachable
  wait_back "$l" '.role == "follower" or (.role == "leader" and ($all | map(select(.role == "follower")) | length) == 2)' 60
  echo "netns-test: kill $k of the leader (master $l): first write sent after it acknowledged ${gaps[-1]} ms later; it rejoined"
done
sorted=$(printf '%s\n' "${gaps[@]}" | sort -n)
echo "netns-test: leader kills under load: ${#gaps[@]}, kill to the first acknowledged write sent after it: median $(echo "$sorted" | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }') ms, max $(echo "$sorted" | tail -1) ms"

n0=$(wc -l <"$work/ledger")
until [ "$(wc -l <"$work/ledger")" -ge $((n0 + 20)) ]; do sleep 0.1; done
touch "$work/stop"
wait "$writer" 2>/dev/null || true

# every acknowledged write is there, on the leader and on the rejoined master, and the
# refused one is not
cut -d' ' -f1 "$work/ledger" | sort >"$work/acked"
check_on() { # check_on CONF: the /acked-* directories CONF's masters list
  cv_in c "$1" fs ls / | awk '{ print $NF }' | sed -n 's|^\(/\)\{0,1\}\(acked-[0-9]*\)$|/\2|p' | sort >"$work/listed"
  local missing
  missing=$(comm -23 "$work/acked" "$work/listed" | wc -l)
  [ "$missing" = 0 ] || die "$missing acknowledged directories missing (conf $1): $(comm -23 "$work/acked" "$work/listed" | head -3 | tr '\n' ' ')"
  if cv_in c "$1" fs stat /minority >/dev/null 2>&1; then die "/minority exists (conf $1)"; fi
}
check_on c
deadline=$(( $(date +%s) + 30 ))
until check_on "only-m$leader" 2>/dev/null; do
  [ "$(date +%s)" -lt "$deadline" ] || check_on "only-m$leader"
  sleep 0.2
done
echo "netns-test: $(wc -l <"$work/acked") acknowledged writes on the leader and on the rejoined master; /minority nowhere"
echo "netns-test: passed"
