#!/usr/bin/env python3
"""Restart time against items, with and without log rewrites (docs/durability.md).

For each item count N: a fabkv-server (store engine, one worker on core 0, --oplog-sync no)
is filled with N keys by fabkv-bench (16 B keys, 32 B values), which then overwrites them at
random (PUT only) for --overwrite-s seconds; the server stops (SIGTERM) and starts again on
its log, and the time from exec to its READY line (the replay) is measured --restarts times.
Once with rewrites off (--oplog-rewrite-percentage 0: the log holds every PUT ever made), once
with the defaults (rewrites as the log doubles over 64 MiB). Prints one line per case.

  scripts/oplog-restart.py [--items 1000000,4000000] [--overwrite-s 20] [--restarts 3]
"""
import argparse
import os
import shutil
import signal
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def start(build, log, rewrite, memory):
    argv = [f"{build}/bin/fabkv-server", "--provider", "shm", "--listen", "127.0.0.1:0",
            "--engine", "store", "--memory", memory, "--cores", "0", "--log", "warn",
            "--oplog", log, "--oplog-sync", "no"]
    if not rewrite:
        argv += ["--oplog-rewrite-percentage", "0"]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if not line.startswith("READY "):
        raise SystemExit(f"server did not start: {line!r}")
    return p, line.split()[1], time.monotonic() - t0


def stop(p):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=120)


def log_bytes(d):
    return sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)
               if f.endswith((".incr", ".base")))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--items", default="1000000,4000000")
    ap.add_argument("--overwrite-s", type=float, default=20)
    ap.add_argument("--restarts", type=int, default=3)
    ap.add_argument("--build", default=os.environ.get("BUILD", f"{ROOT}/build"))
    ap.add_argument("--dir", default="/var/tmp")
    a = ap.parse_args()
    for n in [int(x) for x in a.items.split(",")]:
        memory = f"{max(1, n * 256 // (1 << 30) + 1)}G"
        for rewrite in (False, True):
            d = tempfile.mkdtemp(prefix="fabkv-restart-", dir=a.dir)
            log = f"{d}/log"
            p, addr, _ = start(a.build, log, rewrite, memory)
            try:
                fill(a, addr, n)
            except BaseException:
                p.kill()  # never leave a server behind
                shutil.rmtree(d)
                raise
            stop(p)
            size = log_bytes(d)
            times = []
            for _ in range(a.restarts):
                p, _, t = start(a.build, log, rewrite, memory)
                times.append(t)
                stop(p)
            print(f"items {n:>8}  rewrites {'on ' if rewrite else 'off'}  log {size / 2**20:8.1f} MiB"
                  f"  restart (exec to READY) median {statistics.median(times):6.2f} s"
                  f"  [{', '.join(f'{t:.2f}' for t in times)}]", flush=True)
            shutil.rmtree(d)


def fill(a, addr, n):
    """N keys, then PUT-only overwrites for --overwrite-s seconds."""
    subprocess.run([f"{a.build}/bin/fabkv-bench", "--systems=fabkv:herd", f"--server={addr}",
                    f"--keys={n}", "--fill=1", "--read-ratio=0", "--key-size=16",
                    "--value-size=32", "--clients=4", "--window=4",
                    f"--duration={a.overwrite_s}", "--quiet"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

if __name__ == "__main__":
    main()
