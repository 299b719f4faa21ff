#!/usr/bin/python3
"""RF-RPC (fabkv:rfrpc) measured next to server-reply and herd, for docs/results/rfrpc-*.md.

Two experiments, each on the providers given (default shm and tcp), server on core 0 and the
load generator on core 1, 16-byte keys, uniform, 95% GET, window 1:

  compare  RF-RPC fig. 13's comparison: rfrpc (fetch only, and hybrid), server-reply and herd
           at 16 and 32-byte values and at growing values, with the verbs per request.
  delay    RF-RPC fig. 5 / fig. 9's shape: throughput of rfrpc in fetch, reply and hybrid mode
           as the worker's processing time grows (--rfrpc-delay-ns, the test hook).
  batch    RF-RPC fig. 13 / 14's shape: rfrpc throughput and latency against the batch size N
           (window 8 per client; N = 0 is no batching), and eq. 3's tuning for two llimits.
  fsweep   the calibration run of RF-RPC eq. 2: I(F), rfrpc's throughput in fetch mode with
           8-byte values (every result fits any F) for each fetch size F
           (`fabkv-bench calibrate` runs these two sweeps itself and chooses R and F).

Every run starts its own fabkv-server (so the rfrpc knobs can differ per run) and drives it
with `fabkv-bench --server`; each JSON line fabkv-bench writes is annotated with the experiment,
the rfrpc mode and the delay, and appended to OUT. Every wait is bounded.

  scripts/rfrpc-bench.py OUT.jsonl [--providers shm,tcp] [--experiments compare,delay,fsweep,batch]
                                   [--duration 2] [--clients 4] [--retries R] [--label-suffix S]
                                   [--keys 100000]
  scripts/rfrpc-plot.py OUT.jsonl DIR      # the figures
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("BUILD", os.path.join(ROOT, "build"))
SERVER = os.path.join(BUILD, "bin", "fabkv-server")
BENCH = os.path.join(BUILD, "bin", "fabkv-bench")


class Server:
    """A fabkv-server on core 0, stopped with SIGTERM (SIGKILL after 10 s)."""

    def __init__(self, provider, protocols, extra):
        argv = [SERVER, "--provider", provider, "--listen", "127.0.0.1:0", "--cores", "0",
                "--protocols", protocols, "--memory", "256M", "--engine", "cache",
                "--poll", "spin", "--log", "warn"] + extra
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                  text=True)
        deadline = time.time() + 20
        line = ""
        while time.time() < deadline:
            line = self.p.stdout.readline()
            if line.startswith("READY ") or self.p.poll() is not None:
                break
        if not line.startswith("READY "):
            self.stop()
            raise RuntimeError("fabkv-server did not start: " + " ".join(argv))
        self.address = line.split()[1]

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait(10)


KEYS = 100000


def run(out, provider, system, server_extra, tags, value_size, clients, duration, window=1):
    protocol = system.split(":", 1)[1]
    srv = Server(provider, protocol, server_extra)
    try:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as tmp:
            argv = [BENCH, "--systems", system, "--server", srv.address, "--provider", provider,
                    "--clients", str(clients), "--window", str(window),
                    "--value-size", str(value_size),
                    "--keys", str(KEYS), "--key-size", "16", "--read-ratio", "0.95",
                    "--distribution", "uniform", "--duration", str(duration), "--warmup", "0.5",
                    "--client-core", "1", "--json", tmp.name, "--quiet"]
            subprocess.run(argv, check=True, timeout=120 + 4 * duration, stdin=subprocess.DEVNULL)
            for line in tmp:
                j = json.loads(line)
                j.update(tags)
                out.write(json.dumps(j) + "\n")
                out.flush()
                reads = (j.get("fabric_ops_per_request") or {}).get("read")
                print(f"{provider:4} {tags['label']:22} v={value_size:5} c={clients} "
                      f"delay={tags.get('delay_ns', 0):6}  {j['throughput_ops']:10.0f} ops/s  "
                      f"p50 {j['latency_us']['p50']:8.1f} us  reads/req {reads}", flush=True)
    finally:
        srv.stop()


# (label, system, server flags): the rfrpc modes are the server's to choose (--rfrpc-mode).
RFRPC_FETCH = ("rfrpc-fetch", "fabkv:rfrpc", ["--rfrpc-mode", "fetch"])
RFRPC_HYBRID = ("rfrpc-hybrid", "fabkv:rfrpc", ["--rfrpc-mode", "hybrid"])
RFRPC_REPLY = ("rfrpc-reply", "fabkv:rfrpc", ["--rfrpc-mode", "reply"])
SERVER_REPLY = ("server-reply", "fabkv:server-reply", [])
HERD = ("herd", "fabkv:herd", [])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--providers", default="shm,tcp")
    ap.add_argument("--experiments", default="compare,delay,fsweep,batch")
    ap.add_argument("--label-suffix", default="", help="added to the rfrpc labels (e.g. -R40)")
    ap.add_argument("--systems", default="", help="compare only these labels (comma list)")
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--clients", type=int, default=4)
    ap.add_argument("--retries", default="", help="--rfrpc-retries for every rfrpc server")
    ap.add_argument("--keys", type=int, default=100000, help="key space (tcp loads slowly)")
    a = ap.parse_args()
    global KEYS
    KEYS = a.keys
    extra_r = ["--rfrpc-retries", a.retries] if a.retries else []
    with open(a.out, "a") as out:
        for provider in a.providers.split(","):
            if "compare" in a.experiments:
                for v in (16, 32, 256, 1024, 4096):
                    for label, system, extra in (RFRPC_FETCH, RFRPC_HYBRID, SERVER_REPLY, HERD):
                        if a.systems and label not in a.systems.split(","):
                            continue
                        rf = "rfrpc" in label
                        run(out, provider, system, extra + (extra_r if rf else []),
                            {"experiment": "compare",
                             "label": label + (a.label_suffix if rf else "")},
                            v, a.clients, a.duration)
            if "delay" in a.experiments:
                for d in (0, 1000, 2000, 4000, 8000, 16000, 32000):
                    for label, system, extra in (RFRPC_FETCH, RFRPC_REPLY, RFRPC_HYBRID):
                        run(out, provider, system, extra + extra_r + ["--rfrpc-delay-ns", str(d)],
                            {"experiment": "delay", "label": label + a.label_suffix,
                             "delay_ns": d}, 32, a.clients, a.duration)
            if "fsweep" in a.experiments:
                for f in (64, 128, 256, 512, 1024, 2048, 4096, 8192):
                    label, system, extra = RFRPC_FETCH
                    run(out, provider, system, extra + ["--rfrpc-fetch-size", str(f)],
                        {"experiment": "fsweep", "label": label, "fetch_size": f}, 8,
                        a.clients, a.duration)
            if "batch" in a.experiments:
                base = ["--rfrpc-mode", "fetch", "--window", "8", "--rfrpc-batch-timeout-us", "100"]
                for n in (0, 1, 2, 4, 8):
                    run(out, provider, "fabkv:rfrpc", base + ["--rfrpc-batch-entries", str(n)],
                        {"experiment": "batch", "label": "rfrpc-batch", "batch_entries": n}, 32,
                        a.clients, a.duration, window=8)
                for llimit in (100, 1000):
                    run(out, provider, "fabkv:rfrpc",
                        base + ["--rfrpc-batch-entries", "8", "--rfrpc-batch-llimit-us", str(llimit)],
                        {"experiment": "batch", "label": f"rfrpc-auto-batch-{llimit}us",
                         "batch_entries": 8, "llimit_us": llimit}, 32, a.clients, a.duration,
                        window=8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
