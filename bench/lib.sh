# Helpers for the bench/ scripts that measure the machine (fio, iperf3); sourced, not run.

for t in fio iperf3 python3; do
  command -v $t >/dev/null || { echo "$(basename "$0"): $t not found (SETUP_EXTRA=\"fio iperf3\" bin/setup.sh installs it)" >&2; exit 1; }
done

# bytes per job of TOTAL (like 4200M) split over JOBS
per_job_size() {
  python3 -c "
import re
m=re.fullmatch(r'(\d+)([KMG]?)', '$1'.upper()); n=int(m.group(1))*{'':1,'K':1<<10,'M':1<<20,'G':1<<30}[m.group(2)]
print(n//$2)"
}

# fio_gibs NAME DIR RW DIRECT BS SIZE_PER_JOB JOBS [FALLOCATE]: psync, GiB/s of all jobs:
# their bytes over the longest job's time, as curvine-bench counts (the sum of each job's
# own rate would overstate it whenever one job finishes early)
fio_gibs() {
  local out; out=$(mktemp)
  fio --name="$1" --directory="$2" --rw="$3" --direct="$4" --bs="$5" --size="$6" \
      --numjobs="$7" --ioengine=psync --group_reporting=0 --end_fsync=0 \
      --fallocate="${8:-native}" --output-format=json --output="$out" >/dev/null
  python3 -c "
import json
j=json.load(open('$out')); k='$3'
b=sum(job[k]['io_bytes'] for job in j['jobs']); ms=max(job[k]['runtime'] for job in j['jobs'])
print(f\"{b/(ms/1000)/2**30:.2f}\")"
  rm -f "$out"
}

# iperf3_gibs STREAMS: loopback TCP, 5 s, GiB/s received. The client retries until the
# server listens (iperf3 -J can exit 0 with only an error in its JSON when it came too
# early); the server is stopped afterwards.
iperf3_gibs() {
  local port=$(( 20000 + RANDOM % 20000 )) srv out gibs=""
  iperf3 -s -p "$port" -B 127.0.0.1 >/dev/null 2>&1 &
  srv=$!
  out=$(mktemp)
  for _ in $(seq 50); do
    iperf3 -c 127.0.0.1 -p "$port" -t 5 -P "$1" -J >"$out" 2>/dev/null || true
    if gibs=$(python3 -c "
import json,sys
try: print(f\"{json.load(open('$out'))['end']['sum_received']['bits_per_second']/8/2**30:.2f}\")
except Exception: sys.exit(1)" 2>/dev/null); then break; fi
    sleep 0.1
  done
  kill "$srv" 2>/dev/null || true
  wait "$srv" 2>/dev/null || true
  rm -f "$out"
  [ -n "$gibs" ] || { echo "$(basename "$0"): iperf3 over loopback failed 50 times" >&2; return 1; }
  echo "$gibs"
}
