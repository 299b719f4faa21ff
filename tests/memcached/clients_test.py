#!/usr/bin/env python3
"""memcached's own clients against a real fabkv-server --memcached (docs/memcached.md, "Memory
bounds"), with the server's resident memory (VmRSS) sampled all along.

  multiget  pylibmc's get_multi of 100,000 keys (text protocol: one get line of 590 KB, which
            the front end reads in pieces; and binary), and pymemcache's get_many of 100,000:
            every value back, and the server's memory bounded.
  soak      about 30 s of pylibmc (text and binary), pymemcache, memcslap and pymemcache
            through nutcracker (twemproxy), with the clients checking what they read, while raw
            sockets read slowly or not at all (large multi-gets, key listings) and others reset
            their connections mid-answer. The server must serve throughout, hold no more than
            --memcached-conn-memory (16 MiB here, so that slow readers are closed for memory)
            beyond its start plus the stated slack, end with its connections gone, and stop
            cleanly; a client that reads back its own key must get what it wrote (the engines'
            memory holds all the soak writes: a miss is an error unless the cache evicted).

Usage: clients_test.py FABKV_SERVER multiget|soak [--seconds N] [--unmeasured]
FABKV_SOAK_LOG=debug: the server's --log level (its log is shown when it fails).
--unmeasured: run the loads without checking the memory bounds (a sanitized server, whose
resident size is mostly the sanitizer's).
Every wait is bounded (sockets and clients time out; the soak stops itself). Exit 0: passed;
1: failed (what and why printed); 77: a client is not installed (skipped).
"""

import argparse
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

MIB = 1 << 20
MEASURED = True  # --unmeasured: False
TIMEOUT_S = 10.0
# The soak's --memcached-conn-memory, and what the server may grow beyond it: one round's
# intake (docs/memcached.md, "Memory bounds"), the allocator's slack and the clients' open
# connections' small buffers.
CONN_MEMORY = 16 * MIB
SLACK = 64 * MIB


def log(*a):
    print(*a, flush=True)


class Failed(Exception):
    pass


def check(ok, what):
    if not ok:
        raise Failed(what)


def rss(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """fabkv-server --memcached on a free port; stop() wants exit 0 within 20 s of SIGTERM."""

    def __init__(self, binary, extra):
        argv = [binary, "--listen", "127.0.0.1:0", "--memcached", "127.0.0.1:0", "--cores", "-1",
                "--log", os.environ.get("FABKV_SOAK_LOG", "warn")] + extra
        # stderr to a file: a pipe nobody reads until the end could fill and stop the server.
        self.err = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.err, text=True)
        deadline = time.monotonic() + 20
        self.port = None
        while time.monotonic() < deadline and self.port is None:
            line = self.proc.stdout.readline()
            if not line:
                raise Failed(f"fabkv-server exited: {self.stderr()}")
            if line.startswith("MEMCACHED "):
                self.port = int(line.split()[1].rsplit(":", 1)[1])
        check(self.port is not None, "fabkv-server did not say where memcached is")
        self.peak = self.base = rss(self.proc.pid)
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self):
        while not self._stop.wait(0.05):
            try:
                self.peak = max(self.peak, rss(self.proc.pid))
            except OSError:
                return

    def alive(self):
        return self.proc.poll() is None

    def rebase(self):
        """The resident size from here on is measured against now (after the data is in)."""
        time.sleep(0.2)
        self.base = self.peak = rss(self.proc.pid)

    def growth(self):
        return self.peak - self.base

    def stats(self):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=TIMEOUT_S)
        s.sendall(b"stats\r\n")
        data = b""
        while not data.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        s.close()
        out = {}
        for line in data.decode().split("\r\n"):
            parts = line.split(" ", 2)
            if len(parts) == 3 and parts[0] == "STAT":
                out[parts[1]] = parts[2]
        return out

    def stderr(self):
        self.err.seek(0)
        return self.err.read()[-3000:]

    def stop(self):
        self._stop.set()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise Failed("fabkv-server did not stop within 20 s of SIGTERM")
        check(rc == 0, f"fabkv-server exited {rc}: {self.stderr()}")


def need_clients(names):
    missing = []
    for n in names:
        try:
            __import__(n)
        except ImportError:
            missing.append(n)
    if missing:
        log(f"SKIP: {', '.join(missing)} not installed (Debian python3-{missing[0]})")
        sys.exit(77)


# ---- multiget -----------------------------------------------------------------------------

def multiget(binary):
    need_clients(["pylibmc", "pymemcache"])
    import pylibmc
    from pymemcache.client.base import Client
    server = Server(binary, ["--workers", "2", "--memory", "512M"])
    try:
        keys = [f"key:{i}" for i in range(100000)]
        values = {k: f"v{i}" for i, k in enumerate(keys)}
        text = pylibmc.Client([f"127.0.0.1:{server.port}"])
        check(text.set_multi(values) == [], "pylibmc set_multi of 100,000 keys")
        server.rebase()
        for name, client in [("text", text),
                             ("binary", pylibmc.Client([f"127.0.0.1:{server.port}"],
                                                       binary=True))]:
            t = time.monotonic()
            got = client.get_multi(keys)
            took = time.monotonic() - t
            right = sum(got.get(k) == v for k, v in values.items())
            check(got == values, f"pylibmc ({name}) get_multi of 100,000 keys: "
                                 f"{len(got)} back, {right} right")
            log(f"pylibmc ({name}) get_multi of 100,000 keys: all back in {took:.2f} s")
        pm = Client(("127.0.0.1", server.port), connect_timeout=TIMEOUT_S, timeout=TIMEOUT_S)
        t = time.monotonic()
        got = pm.get_many(keys)
        check({k: v.decode() for k, v in got.items()} == values,
              f"pymemcache get_many of 100,000 keys: {len(got)} back")
        log(f"pymemcache get_many of 100,000 keys: all back in {time.monotonic() - t:.2f} s")
        grown = server.growth()
        log(f"server resident memory during the multi-gets: +{grown / MIB:.1f} MiB")
        check(not MEASURED or grown < 48 * MIB,
              f"the server grew by {grown / MIB:.1f} MiB (bound 48 MiB)")
    finally:
        server.stop()


# ---- soak ---------------------------------------------------------------------------------

class Soak:
    def __init__(self, server, seconds, seed):
        self.server = server
        self.deadline = time.monotonic() + seconds
        self.seed = seed
        self.errors = []
        self.counts = {}
        self.lock = threading.Lock()

    def running(self):
        return time.monotonic() < self.deadline and not self.errors

    def count(self, what, n=1):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + n

    # What a client read of its own key: what it last wrote, or nothing once the cache has
    # evicted it (counted; the soak then wants evictions in the server's stats).
    def same(self, key, got, wrote, what):
        if wrote is None or got == wrote:
            return
        if got is None:
            self.count("misses of written keys")
            self.count(f"misses: {what}")
            return
        raise Failed(f"{what} {key}: {len(got)} bytes, not the {len(wrote)} written")

    def fail(self, what):
        with self.lock:
            self.errors.append(what)

    def thread(self, name, fn, *args):
        def run():
            try:
                fn(random.Random(f"{self.seed}-{name}"), *args)
            except Exception as e:  # a client's failure fails the soak, with its name
                self.fail(f"{name}: {type(e).__name__}: {e}")
        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        return t

    # pylibmc: its own keys, every read checked against what it last wrote.
    def pylibmc_client(self, rnd, binary, port, tag):
        import pylibmc
        mc = pylibmc.Client([f"127.0.0.1:{port}"], binary=binary,
                            behaviors={"connect_timeout": 5000, "receive_timeout": 5000000,
                                       "send_timeout": 5000000})
        mine = {}
        while self.running():
            k = f"{tag}:{rnd.randrange(500)}"
            op = rnd.random()
            if op < 0.2:
                v = os.urandom(rnd.choice([10, 1000, 20000, 300000]))
                mc.set(k, v)
                mine[k] = v
            elif op < 0.65:
                ks = [f"{tag}:{rnd.randrange(500)}" for _ in range(rnd.choice([1, 50, 2000]))]
                got = mc.get_multi(ks)
                for x in set(ks):
                    self.same(x, got.get(x), mine.get(x), "pylibmc get_multi")
            elif op < 0.8:
                mc.delete(k)
                mine.pop(k, None)
            elif op < 0.9:
                if k in mine and not mc.touch(k, 1000):
                    self.same(k, None, mine[k], "pylibmc touch")  # evicted, or wrong
            else:
                self.same(k, mc.get(k), mine.get(k), "pylibmc get")
            self.count("pylibmc")

    # pymemcache: set_many/get_many/gets/cas, checked; optionally through a proxy.
    def pymemcache_client(self, rnd, port, tag, what):
        from pymemcache.client.base import Client
        mc = Client(("127.0.0.1", port), connect_timeout=5, timeout=10)
        mine = {}
        while self.running():
            op = rnd.random()
            if op < 0.3:
                batch = {f"{tag}:{rnd.randrange(300)}": os.urandom(rnd.choice([5, 500, 5000]))
                         for _ in range(rnd.choice([1, 10, 50]))}
                check(mc.set_many(batch) == [], "set_many")
                mine.update(batch)
            elif op < 0.7:
                ks = [f"{tag}:{rnd.randrange(300)}" for _ in range(rnd.choice([1, 30, 500]))]
                got = mc.get_many(ks)
                for x in set(ks):
                    self.same(x, got.get(x), mine.get(x), "pymemcache get_many")
            else:
                k = f"{tag}:{rnd.randrange(300)}"
                v, cas = mc.gets(k)
                self.same(k, v, mine.get(k), "pymemcache gets")
                if v is not None:
                    nv = os.urandom(64)
                    if mc.cas(k, nv, cas):
                        mine[k] = nv
            self.count(what)

    # memcslap: its own load, in bounded rounds (each a short process).
    def memcslap(self, rnd, port):
        while self.running():
            test = rnd.choice(["set", "get", "mget"])
            r = subprocess.run(["memcslap", f"--servers=127.0.0.1:{port}", f"--test={test}",
                                "--concurrency=4", "--execute-number=2000", "--quiet"]
                               + (["--binary"] if rnd.random() < 0.5 else []),
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
            check(r.returncode == 0, f"memcslap --test={test} exited {r.returncode}: "
                                     f"{r.stderr.decode()[-500:]}")
            self.count("memcslap")

    # A client that asks for much and reads slowly, or not at all, then goes.
    def slow_reader(self, rnd, port):
        big = [f"big:{i}" for i in range(8)]
        while self.running():
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.settimeout(TIMEOUT_S)
            s.connect(("127.0.0.1", port))
            kind = rnd.random()
            if kind < 0.4:
                keys = " ".join(rnd.choice(big) for _ in range(200))
                s.sendall(f"get {keys}\r\n".encode())
            elif kind < 0.6:
                s.sendall(b"lru_crawler metadump all\r\n")
            else:
                s.sendall(b"get " + b" ".join(b"k%d" % i for i in range(20000)) + b"\r\n")
            end = time.monotonic() + rnd.uniform(0.2, 2.0)
            rate = rnd.choice([0, 1024, 65536])  # bytes per 10 ms; 0: never reads
            s.settimeout(0.01)
            while time.monotonic() < end and self.running():
                if rate:
                    try:
                        if not s.recv(rate):
                            break
                    except (socket.timeout, ConnectionError):
                        pass
                time.sleep(0.01)
            s.close()
            self.count("slow readers")

    # A client that pipelines, reads a little and resets (RST, SO_LINGER 0) mid-answer.
    def resetter(self, rnd, port):
        while self.running():
            s = socket.socket()
            s.settimeout(TIMEOUT_S)
            s.connect(("127.0.0.1", port))
            cmds = []
            for _ in range(rnd.randrange(1, 200)):
                k = f"r:{rnd.randrange(100)}"
                op = rnd.random()
                if op < 0.3:
                    v = "x" * rnd.choice([1, 100, 10000])
                    cmds.append(f"set {k} 0 0 {len(v)}\r\n{v}\r\n")
                elif op < 0.6:
                    keys = " ".join(f"big:{rnd.randrange(8)}" for _ in range(4))
                    cmds.append(f"get {keys}\r\n")
                elif op < 0.7:
                    cmds.append(f"gat 100 {k} big:0\r\n")
                elif op < 0.8:
                    cmds.append("stats cachedump 1 0\r\n")
                else:
                    cmds.append(f"mg {k} v\r\n")
            data = "".join(cmds).encode()
            cut = rnd.choice([len(data), rnd.randrange(1, len(data) + 1)])  # maybe mid-command
            try:
                s.sendall(data[:cut])
                if rnd.random() < 0.5:
                    s.recv(rnd.choice([1, 4096, 65536]))
            except (socket.timeout, ConnectionError):
                pass
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            s.close()
            self.count("resets")
            time.sleep(0.005)


def nutcracker(port, workdir):
    listen, stats = free_port(), free_port()
    conf = os.path.join(workdir, "nutcracker.yml")
    with open(conf, "w") as f:
        f.write("soak:\n"
                f"  listen: 127.0.0.1:{listen}\n"
                "  hash: md5\n  distribution: ketama\n  auto_eject_hosts: false\n"
                "  timeout: 5000\n  servers:\n"
                f"   - 127.0.0.1:{port}:1\n")
    proc = subprocess.Popen(["nutcracker", "-c", conf, "-o", os.path.join(workdir, "nc.log"),
                             "-p", os.path.join(workdir, "nc.pid"), "-s", str(stats),
                             "-a", "127.0.0.1"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", listen), timeout=1).close()
            return proc, listen
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise Failed("nutcracker did not listen")


def soak(binary, seconds):
    need_clients(["pylibmc", "pymemcache"])
    for tool in ["memcslap", "nutcracker"]:
        if subprocess.run(["which", tool], stdout=subprocess.DEVNULL).returncode != 0:
            log(f"SKIP: {tool} not installed")
            sys.exit(77)
    # The engines' memory holds what the clients write in the soak's time, so that a miss of a
    # key a client wrote is an error (else it must come with evictions in the stats).
    server = Server(binary, ["--workers", "2", "--memory", "1G",
                             "--memcached-conn-memory", str(CONN_MEMORY)])
    workdir = tempfile.mkdtemp(prefix="fabkv-soak-")
    proxy = None
    try:
        setup = socket.create_connection(("127.0.0.1", server.port), timeout=TIMEOUT_S)
        value = b"b" * (512 * 1024)
        data = b"".join(b"set big:%d 0 0 %d noreply\r\n%s\r\n" % (i, len(value), value)
                        for i in range(8))
        data += b"".join(b"set k%d 0 0 1 noreply\r\nx\r\n" % i for i in range(20000))
        setup.sendall(data + b"mn\r\n")
        got = b""
        while not got.endswith(b"MN\r\n"):
            got += setup.recv(4096)
        setup.close()
        proxy, proxy_port = nutcracker(server.port, workdir)
        server.rebase()
        s = Soak(server, seconds, seed=38)
        threads = [
            s.thread("pylibmc-text", s.pylibmc_client, False, server.port, "pt"),
            s.thread("pylibmc-binary", s.pylibmc_client, True, server.port, "pb"),
            s.thread("pymemcache", s.pymemcache_client, server.port, "pm", "pymemcache"),
            s.thread("nutcracker", s.pymemcache_client, proxy_port, "nc", "nutcracker"),
            s.thread("memcslap", s.memcslap, server.port),
        ]
        threads += [s.thread(f"slow-{i}", s.slow_reader, server.port) for i in range(6)]
        threads += [s.thread(f"reset-{i}", s.resetter, server.port) for i in range(2)]
        while s.running():
            time.sleep(0.1)
            if not server.alive():
                s.fail("the server died")
        for t in threads:
            t.join(timeout=40)
            if t.is_alive():
                s.fail(f"{t.name} did not stop")
        check(not s.errors, "; ".join(s.errors))
        check(server.alive(), "the server died")
        for what in ["pylibmc", "pymemcache", "nutcracker", "memcslap", "slow readers", "resets"]:
            check(s.counts.get(what, 0) > 0, f"no {what} ran")
        grown = server.growth()
        st = server.stats()
        check(s.counts.get("misses of written keys", 0) == 0 or int(st["evictions"]) > 0,
              f"written keys were missing, and the cache evicted nothing: {s.counts}")
        log(f"soak {seconds} s: {s.counts}; server +{grown / MIB:.1f} MiB resident at peak, "
            f"{st.get('conns_closed_for_memory')} closed for memory, "
            f"{st.get('evictions')} evictions, {int(st.get('bytes_read', 0)) // MIB} MiB read")
        check(not MEASURED or grown < CONN_MEMORY + SLACK,
              f"the server grew by {grown / MIB:.1f} MiB (bound {(CONN_MEMORY + SLACK) / MIB:.0f})")
        # Everyone has gone (nutcracker keeps its own): the connections are closed.
        deadline = time.monotonic() + TIMEOUT_S
        while int(server.stats()["curr_connections"]) > 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        check(int(server.stats()["curr_connections"]) <= 3,
              f"{server.stats()['curr_connections']} connections left open")
    finally:
        if proxy is not None:
            proxy.terminate()
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proxy.kill()
        server.stop()


def run_case(fn):
    """Runs one case: the exit status ctest reads (0 passed, 1 failed, with what and why)."""
    try:
        fn()
    except Exception as e:  # a check, or a client's own error (pylibmc raises on a reset)
        log(f"FAILED: {type(e).__name__}: {e}")
        return 1
    log("1 passed, 0 failed")
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("server")
    ap.add_argument("what", choices=["multiget", "soak"])
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--unmeasured", action="store_true")
    a = ap.parse_args()
    global MEASURED
    MEASURED = not a.unmeasured
    if a.what == "multiget":
        return run_case(lambda: multiget(a.server))
    return run_case(lambda: soak(a.server, a.seconds))


if __name__ == "__main__":
    sys.exit(main())
