#!/usr/bin/env python3
"""fabkv-sparse as a new user would write it: one GET every GAP us from the Python client.

The issue-39 pattern (docs/results/quiet-2026-11-29.md): `fabkv.Client` with its defaults
(it spins while it waits for an answer: docs/client.md, "Waiting"), a sleep through the gap, the
GET timed from after the client woke. CORE pins the client (-1: wherever the scheduler puts it,
as a user's script runs). Prints "p50_us=..." like fabkv-sparse.

    PYTHONPATH=build/python scripts/python-sparse.py HOST:PORT PROVIDER PROTOCOL GAP_US COUNT [CORE]
"""
import os
import sys
import time

import fabkv


def main() -> None:
    server, provider, protocol = sys.argv[1], sys.argv[2], sys.argv[3]
    gap, count = int(sys.argv[4]) / 1e6, int(sys.argv[5])
    core = int(sys.argv[6]) if len(sys.argv) > 6 else -1
    if core >= 0:
        os.sched_setaffinity(0, {core})
    with fabkv.Client(server, protocol=protocol, provider=provider) as c:
        c.put(b"sparse-key", b"v" * 32)
        lat = []
        for i in range(count + 10):
            if gap > 0:
                time.sleep(gap)
            t0 = time.perf_counter_ns()
            c.get(b"sparse-key")
            if i >= 10:
                lat.append((time.perf_counter_ns() - t0) / 1e3)
    lat.sort()
    print(f"gap_us={int(gap * 1e6)} count={len(lat)} p50_us={lat[len(lat) // 2]:.1f} "
          f"p90_us={lat[int(len(lat) * 0.9)]:.1f}")


if __name__ == "__main__":
    main()
