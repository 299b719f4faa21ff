#!/usr/bin/env python3
"""One memcached GET every GAP us over kernel TCP, timed from after the client woke.

The anchor of docs/results/quiet-2026-11-29.md: a blocking socket with TCP_NODELAY, as
pymemcache waits (its recv blocks), so that the figure holds the server's wake-up and the
client's. GAP 0 sends back to back. Prints "p50_us=..." like fabkv-sparse.

    scripts/memcached-sparse.py PORT GAP_US COUNT [CORE]
"""
import os
import socket
import sys
import time


def main() -> None:
    port, gap, count = int(sys.argv[1]), int(sys.argv[2]) / 1e6, int(sys.argv[3])
    if len(sys.argv) > 4:
        os.sched_setaffinity(0, {int(sys.argv[4])})
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"set sparse-key 0 0 32\r\n" + b"v" * 32 + b"\r\n")
    s.recv(100)
    lat = []
    for i in range(count + 10):
        if gap > 0:
            time.sleep(gap)
        t0 = time.perf_counter_ns()
        s.sendall(b"get sparse-key\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(4096)
        if i >= 10:
            lat.append((time.perf_counter_ns() - t0) / 1e3)
    lat.sort()
    print(f"gap_us={int(gap * 1e6)} count={len(lat)} p50_us={lat[len(lat) // 2]:.1f} "
          f"p90_us={lat[int(len(lat) * 0.9)]:.1f}")


if __name__ == "__main__":
    main()
