#!/usr/bin/env python3
"""Small probes of a FUSE mount, for bench/README.md.

  fuse-probe.py rtt DIR [N]          mean time of one request the daemon answers alone
                                     (getxattr security.capability), N calls
  fuse-probe.py small DIR [N] [SIZE] write N files of SIZE bytes, drop the kernel's
                                     caches (root), then time reading each file whole
"""
import os
import sys
import time


def rtt(d, n):
    p = os.path.join(d, "fuse-probe-rtt")
    open(p, "w").close()
    try:
        for rep in range(2):
            t = time.perf_counter()
            for _ in range(n):
                try:
                    os.getxattr(p, "security.capability")
                except OSError:
                    pass
            print(f"rtt {rep}: {(time.perf_counter() - t) / n * 1e6:.1f} us per request")
    finally:
        os.unlink(p)


def small(d, n, size):
    base = os.path.join(d, "fuse-probe-small")
    os.makedirs(base, exist_ok=True)
    data = os.urandom(size)
    for i in range(n):
        with open(f"{base}/s{i}", "wb") as f:
            f.write(data)
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")
    t = time.perf_counter()
    for i in range(n):
        with open(f"{base}/s{i}", "rb") as f:
            if len(f.read()) != size:
                sys.exit(f"{base}/s{i}: short read")
    dt = time.perf_counter() - t
    print(f"small: {n / dt:.0f} files/s ({dt / n * 1e6:.0f} us per file of {size} B)")
    for i in range(n):
        os.unlink(f"{base}/s{i}")
    os.rmdir(base)


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("rtt", "small"):
        sys.exit(__doc__)
    d = sys.argv[2]
    if sys.argv[1] == "rtt":
        rtt(d, int(sys.argv[3]) if len(sys.argv) > 3 else 20000)
    else:
        n = int(sys.argv[3]) if len(sys.argv) > 3 else 3000
        size = int(sys.argv[4]) if len(sys.argv) > 4 else 65536
        small(d, n, size)


if __name__ == "__main__":
    main()
