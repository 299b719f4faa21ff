#!/usr/bin/env python3
"""One GET every GAP us, timed from after the client woke (docs/results/quiet-2026-11-29.md).
Prints "p50_us=..." like fabkv-sparse.

    scripts/sparse.py memcached PORT GAP_US COUNT [CORE]
        memcached (or any memcached text server) over kernel TCP: a blocking socket with
        TCP_NODELAY, as pymemcache waits (its recv blocks), so that the figure holds the
        server's wake-up and the client's; the anchor of the results.
    PYTHONPATH=build/python scripts/sparse.py fabkv HOST:PORT PROVIDER PROTOCOL GAP_US COUNT [CORE]
        fabkv-sparse as a new user would write it: `fabkv.Client` with its defaults (it spins
        while it waits for an answer: docs/client.md, "Waiting").

GAP 0 sends back to back. CORE pins the client (-1 or none: wherever the scheduler puts it, as
a user's script runs).
"""
import os
import socket
import sys
import time


def memcached_get(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"set sparse-key 0 0 32\r\n" + b"v" * 32 + b"\r\n")
    s.recv(100)

    def get():
        s.sendall(b"get sparse-key\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(4096)

    return get


def fabkv_get(server, provider, protocol):
    import fabkv
    c = fabkv.Client(server, protocol=protocol, provider=provider)
    c.put(b"sparse-key", b"v" * 32)
    return lambda: c.get(b"sparse-key")


def main() -> None:
    if sys.argv[1] == "memcached":
        get, rest = memcached_get(int(sys.argv[2])), sys.argv[3:]
    else:
        get, rest = fabkv_get(sys.argv[2], sys.argv[3], sys.argv[4]), sys.argv[5:]
    gap, count = int(rest[0]) / 1e6, int(rest[1])
    if len(rest) > 2 and int(rest[2]) >= 0:
        os.sched_setaffinity(0, {int(rest[2])})
    lat = []
    for i in range(count + 10):
        if gap > 0:
            time.sleep(gap)
        t0 = time.perf_counter_ns()
        get()
        if i >= 10:
            lat.append((time.perf_counter_ns() - t0) / 1e3)
    lat.sort()
    print(f"gap_us={int(gap * 1e6)} count={len(lat)} p50_us={lat[len(lat) // 2]:.1f} "
          f"p90_us={lat[int(len(lat) * 0.9)]:.1f}")


if __name__ == "__main__":
    main()
