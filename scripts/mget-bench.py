#!/usr/bin/env python3
"""Multi-get throughput against a memcached-protocol server: C connections, each with one
`get` of K keys in flight at a time (16 B keys, 32 B values, preloaded), for D seconds; prints
one JSON line {host, port, conns, keys_per_get, gets, keys_per_s}. The same script drives
memcached and fabkv-server --memcached, so the comparison is like for like; a Python client is
slow, so run it on its own core and read the result as a comparison, not a ceiling.

  scripts/mget-bench.py HOST:PORT [--conns 50] [--keys-per-get 16] [--keys 10000] [--duration 5]
"""
import argparse, json, random, selectors, socket, time

ap = argparse.ArgumentParser()
ap.add_argument("address")
ap.add_argument("--conns", type=int, default=50)
ap.add_argument("--keys-per-get", type=int, default=16)
ap.add_argument("--keys", type=int, default=10000)
ap.add_argument("--duration", type=float, default=5.0)
a = ap.parse_args()
host, port = a.address.rsplit(":", 1)
port = int(port)
key = lambda i: b"key%013d" % i  # 16 bytes
value = b"v" * 32

load = socket.create_connection((host, port), timeout=10)
batch = b"".join(b"set %s 0 0 32 noreply\r\n%s\r\n" % (key(i), value) for i in range(a.keys))
load.sendall(batch + b"version\r\n")
buf = b""
while b"VERSION" not in buf:
    buf += load.recv(65536)
load.close()

rng = random.Random(1)
sel = selectors.DefaultSelector()
state = {}
def send(s):
    ks = b" ".join(key(rng.randrange(a.keys)) for _ in range(a.keys_per_get))
    s.sendall(b"get " + ks + b"\r\n")
for _ in range(a.conns):
    s = socket.create_connection((host, port), timeout=10)
    s.setblocking(False)
    state[s] = bytearray()
    sel.register(s, selectors.EVENT_READ)
for s in state:
    s.setblocking(True); send(s); s.setblocking(False)
gets = 0
end = time.monotonic() + a.duration
while time.monotonic() < end:
    for k, _ in sel.select(timeout=1.0):
        s = k.fileobj
        b = state[s]
        b += s.recv(1 << 20)
        if b.endswith(b"END\r\n"):
            if b.count(b"VALUE ") != a.keys_per_get:
                raise SystemExit("missing values: %r" % bytes(b[:200]))
            gets += 1
            b.clear()
            s.setblocking(True); send(s); s.setblocking(False)
print(json.dumps({"host": host, "port": port, "conns": a.conns, "keys_per_get": a.keys_per_get,
                  "gets": gets, "keys_per_s": round(gets * a.keys_per_get / a.duration)}))
