#!/usr/bin/env python3
"""The front end's answers in bounded memory against clients that walk its edges
(docs/memcached.md, "Memory bounds"), each case against a real fabkv-server --memcached:

  order         a GET of a value larger than its allowance, forwarded to the other worker, is
                fetched again later: the writes pipelined after it on the same connection must
                not show in its answer (they did: a `get k` answered by the `set k` after it, or
                a miss after a `delete k`).
  heads         connections whose answers wait behind a deferred value of their own, the
                workers' share of --memcached-conn-memory full of those answers: every one is
                answered (they waited for each other's room for ever, and so did every new
                connection of that worker).
  long-line     pymemcache's get_many of 100,000 keys of 240 bytes (a 24 MB line, longer than
                the sockets' buffers, sent whole before any answer is read, as pylibmc's text
                get_multi does too): all back (it hung).
  steady-reader a client pipelining GETs and reading steadily, but slower than the server
                answers: the server holds a few MiB for it, not what it has been sent (135 MB
                after 24 s).
  reader-kept   a client that reads 1 MB/s, with --memcached-conn-memory 4M: never closed for
                memory (it was, its socket not yet called writable by epoll).

Usage: answers_test.py FABKV_SERVER CASE. Exit 0: passed; 1: failed (what and why printed);
77: pymemcache is not installed (skipped). Every wait is bounded.
"""

import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from clients_test import Server, check, log, need_clients, run_case  # noqa: E402

TIMEOUT_S = 15.0


def connect(srv):
    s = socket.create_connection(("127.0.0.1", srv.port), timeout=TIMEOUT_S)
    return s


def read_until(s, end, deadline_s=TIMEOUT_S):
    """Bytes from `s` until they end with `end`; what came when the time is up or the peer
    closed otherwise (the caller's checks say what is missing)."""
    data = b""
    deadline = time.monotonic() + deadline_s
    while not data.endswith(end) and time.monotonic() < deadline:
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(1 << 20)
        except (socket.timeout, ConnectionError):
            break
        if not chunk:
            break
        data += chunk
    return data


def store(s, key, value):
    s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(value), value))
    check(read_until(s, b"\r\n") == b"STORED\r\n", f"set {key!r}")


def forwarded(srv):
    return int(srv.stats()["forwarded"])


def is_remote(srv, s, key):
    """Whether `key` belongs to the other worker than the one `s` is on."""
    before = forwarded(srv)
    s.sendall(b"get %s\r\n" % key)
    read_until(s, b"END\r\n")
    return forwarded(srv) - before == 1


def order(binary):
    srv = Server(binary, ["--workers", "2", "--memory", "256M"])
    try:
        big = b"A" * 200000  # far above a fresh connection's allowance (1 MiB / 16)
        wrong = 0
        remote_keys = 0
        for i in range(32):
            key = b"key%d" % i
            s = connect(srv)
            store(s, key, big)
            if not is_remote(srv, s, key):
                s.close()
                continue
            remote_keys += 1
            s.sendall(b"get %s\r\nset %s 0 0 3\r\nnew\r\nget %s\r\ndelete %s\r\nget %s\r\n"
                      % (key, key, key, key, key))
            want = (b"VALUE %s 0 200000\r\n%s\r\nEND\r\nSTORED\r\nVALUE %s 0 3\r\nnew\r\nEND\r\n"
                    b"DELETED\r\nEND\r\n" % (key, big, key))
            got = read_until(s, b"DELETED\r\nEND\r\n")
            if got != want:
                wrong += 1
                log(f"{key!r}: {got[:60]!r} ... {got[-60:]!r}")
            s.close()
        check(remote_keys >= 4, f"only {remote_keys} keys of the other worker")
        check(wrong == 0, f"{wrong} of {remote_keys} pipelines answered out of order")
        log(f"order: {remote_keys} pipelines over the other worker's keys, all in order")
    finally:
        srv.stop()


def heads(binary):
    srv = Server(binary, ["--workers", "2", "--memory", "1G", "--memcached-conn-memory", "5M"])
    try:
        probe = connect(srv)
        local, remote = [], []
        for i in range(40):
            key = b"key%d" % i
            (remote if is_remote(srv, probe, key) else local).append(key)
        check(len(local) >= 2 and remote, "keys on both workers")
        store(probe, remote[0], b"R" * 200000)
        store(probe, local[0], b"L" * 60000)
        store(probe, local[1], b"B" * 900000)
        conns = []
        for _ in range(200):  # three connections on the probe's worker
            s = connect(srv)
            if is_remote(srv, s, remote[0]):
                conns.append(s)
                if len(conns) == 3:
                    break
            else:
                s.close()
        check(len(conns) == 3, "three connections on one worker")
        # Each: the other worker's value first (deferred), then its own answers queued behind
        # it; the last one's two 900 KB values fill the share.
        lines = [b"get %s %s\r\n" % (remote[0], b" ".join([local[0]] * 30))] * 2
        lines.append(b"get %s %s %s\r\n" % (remote[0], local[1], local[1]))
        for s, line in zip(conns, lines):
            s.sendall(line)
        counts = [None] * 3

        def read(i):
            counts[i] = read_until(conns[i], b"END\r\n").count(b"VALUE ")

        threads = [threading.Thread(target=read, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        check(counts == [31, 31, 3], f"values answered per connection: {counts}, want 31, 31, 3")
        s = connect(srv)
        s.sendall(b"version\r\n")
        check(read_until(s, b"\r\n").startswith(b"VERSION"), "a new connection is answered")
        log(f"heads: answered {counts}")
    finally:
        srv.stop()


def long_line(binary):
    need_clients(["pymemcache"])
    from pymemcache.client.base import Client
    srv = Server(binary, ["--workers", "2", "--memory", "1G"])
    try:
        keys = ["k%08d-" % i + "x" * 230 for i in range(100000)]
        value = b"v" * 2000
        c = Client(("127.0.0.1", srv.port), timeout=60, connect_timeout=10)
        for i in range(0, len(keys), 1000):
            c.set_many({k: value for k in keys[i:i + 1000]}, noreply=False)
        t0 = time.monotonic()
        got = c.get_many(keys)
        check(len(got) == len(keys), f"get_many: {len(got)} of {len(keys)} values")
        check(all(v == value for v in got.values()), "get_many: a wrong value")
        log(f"long-line: {len(got)} values in {time.monotonic() - t0:.1f} s")
    finally:
        srv.stop()


def steady_reader(binary):
    srv = Server(binary, ["--workers", "2", "--memory", "1G"])
    try:
        s = connect(srv)
        for i in range(8):
            store(s, b"key%d" % i, b"v" * 4000)
        s.close()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        commands = b"".join(b"get key%d\r\n" % (i % 8) for i in range(2000000))  # 20 MB

        def send():
            try:
                s.sendall(commands)
            except OSError:  # closed when the test has seen enough
                pass

        threading.Thread(target=send, daemon=True).start()
        rate = 5e6  # bytes a second the client reads: less than the server sends
        t0 = time.monotonic()
        got = 0
        held = []
        while time.monotonic() - t0 < 8:
            s.settimeout(TIMEOUT_S)
            chunk = s.recv(16384)
            check(chunk, "the server closed the connection")
            got += len(chunk)
            ahead = got / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
            if len(held) < (time.monotonic() - t0) // 2:
                held.append(int(srv.stats()["conn_buffer_bytes"]))
        s.close()
        log(f"steady-reader: read {got / 1e6:.0f} MB; conn_buffer_bytes every 2 s: {held}")
        check(got > 0, "the client read nothing")
        # One connection's answers: 1 MiB and an item, room kept for forwarded GETs, its
        # buffers' capacity and a read of input.
        check(max(held) < 8 << 20, f"the server held {max(held)} bytes for one reader")
    finally:
        srv.stop()


def reader_kept(binary):
    srv = Server(binary, ["--workers", "1", "--memory", "1G", "--memcached-conn-memory", "4M"])
    stop = threading.Event()
    try:
        s = connect(srv)
        for i in range(8):
            store(s, b"key%d" % i, b"v" * 4000)
        store(s, b"big", b"B" * 1000000)
        s.close()

        # Clients that ask for 4 MB and never read keep the total used up, so that the server
        # keeps closing the longest stalled: they are, the reader must never be.
        def stallers():
            held = []
            while not stop.wait(0.05):
                try:
                    c = socket.socket()
                    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    c.connect(("127.0.0.1", srv.port))
                    c.sendall(b"get big big big big\r\n")
                    held.append(c)
                except OSError:
                    pass
                if len(held) > 40:
                    held.pop(0).close()
            for c in held:
                c.close()

        threading.Thread(target=stallers, daemon=True).start()
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        line = b"get " + b" ".join(b"key%d" % (i % 8) for i in range(3000)) + b"\r\n"
        s.sendall(line * 16)  # whole commands, 290 KB: they fit the sockets' buffers
        rate = 1e6  # 16 KiB every 16 ms
        t0 = time.monotonic()
        got = 0
        ended = None
        while time.monotonic() - t0 < 8:
            s.settimeout(TIMEOUT_S)
            try:
                chunk = s.recv(16384)
            except ConnectionError as e:
                ended = str(e)
                break
            if not chunk:
                ended = "closed"
                break
            got += len(chunk)
            ahead = got / rate - (time.monotonic() - t0)
            if ahead > 0:
                time.sleep(ahead)
        stop.set()
        closed = int(srv.stats()["conns_closed_for_memory"])
        log(f"reader-kept: read {got / 1e6:.1f} MB; conns_closed_for_memory {closed}")
        check(closed > 0, "the stallers were never closed: the total was never used up")
        check(ended is None, f"a client that reads was closed for memory ({ended})")
    finally:
        stop.set()
        srv.stop()


CASES = {"order": order, "heads": heads, "long-line": long_line,
         "steady-reader": steady_reader, "reader-kept": reader_kept}


def main():
    if len(sys.argv) != 3 or sys.argv[2] not in CASES:
        log(f"usage: {sys.argv[0]} FABKV_SERVER {'|'.join(CASES)}")
        return 2
    return run_case(lambda: CASES[sys.argv[2]](sys.argv[1]))


if __name__ == "__main__":
    sys.exit(main())
