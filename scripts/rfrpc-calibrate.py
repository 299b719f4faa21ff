#!/usr/bin/python3
"""RF-RPC's (R, F) selection (RF-RPC sec. 3.2, eq. 1-2) from scripts/rfrpc-bench.py's runs.

  scripts/rfrpc-calibrate.py IN.jsonl [--value-size V] [--toml OUT.toml]
  scripts/rfrpc-calibrate.py --run OUT.jsonl [--providers shm] [--duration 2] [--clients 4]
                             [--value-size V] [--toml OUT.toml]

With --run it first runs the calibration sweeps (scripts/rfrpc-bench.py --experiments
delay,fsweep, appending to OUT.jsonl), then selects from them. Per provider:
- N, the bound of R: RF-RPC fig. 5 picks the processing time P* beyond which repeated remote
  fetching is no more than 10% faster than server-reply (7 us on its NIC, N = 5). Here P* is
  the smallest delay of the `delay` experiment where rfrpc-fetch's throughput is within 10% of
  rfrpc-reply's, and N the failed fetches per call measured there (READs per call - 1): the
  retries a call needs at that processing time. R = N (the paper's choice too).
- F: I(F) is rfrpc-fetch's throughput in the `fsweep` experiment (8-byte values: every result
  fits). For a workload whose results have sizes S_i, eq. 2 scores each candidate F as
  sum_i (I(F) if F >= S_i else I(F) / 2) and picks the best. The results of the `compare`
  workloads (95% GET hits of value v: 48 + v bytes with their 16-byte header, 5% PUTs: 48
  bytes) are scored per value size; --value-size picks the workload whose F is used.
Prints the table that docs/results/rfrpc-*.md records and the fabkv-server flags to use; with
--toml also writes them as an [rfrpc] table for `fabkv-server --config OUT.toml` (one provider:
the first one given, or the only one in IN).
"""
import argparse
import collections
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def select(rows, prov, value_size):
    """Prints the selection for one provider; returns (R or None, F or None)."""
    print(f"## {prov}")
    delay = collections.defaultdict(dict)
    for j in rows:
        if j["provider"] == prov and j["experiment"] == "delay":
            delay[j["delay_ns"]][j["label"].split("-R")[0]] = j
    n = None
    for d in sorted(delay):
        f, r = delay[d].get("rfrpc-fetch"), delay[d].get("rfrpc-reply")
        if not f or not r:
            continue
        ratio = f["throughput_ops"] / r["throughput_ops"]
        p = f.get("protocol_counters") or {}
        rpc = p.get("fetch_reads", 0) / max(1, p.get("calls", 0))
        print(f"delay {d / 1000:g} us: fetch/reply throughput {ratio:.2f}, READs per call "
              f"{rpc:.2f}")
        if n is None and ratio <= 1.10:
            n = max(1, round(rpc - 1))
            print(f"  -> P* = {d / 1000:g} us, N = R = {n}")
    if n is None:
        print("  fetching stays >10% ahead at every delay measured: N beyond the range")
    isweep = {j["fetch_size"]: j["throughput_ops"] for j in rows
              if j["provider"] == prov and j["experiment"] == "fsweep"}
    chosen = None
    if isweep:
        print("I(F): " + ", ".join(f"{f}: {v / 1e3:.0f}K" for f, v in sorted(isweep.items())))
        for v in sorted({16, 32, 256, 1024, 4096, value_size}):
            sizes = [(0.95, 16 + 32 + v), (0.05, 16 + 32)]
            best = max(isweep, key=lambda f: sum(w * (isweep[f] if f >= s else isweep[f] / 2)
                                                 for w, s in sizes))
            print(f"value {v}: F = {best}  (--rfrpc-fetch-size {best})")
            if v == value_size:
                chosen = best
    flags = ([f"--rfrpc-retries {n}"] if n is not None else []) + \
            ([f"--rfrpc-fetch-size {chosen}"] if chosen is not None else [])
    print(f"flags ({prov}, {value_size}-byte values): " + (" ".join(flags) or "(none: no data)"))
    return n, chosen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("jsonl", help="the runs (with --run: appended to first)")
    ap.add_argument("--run", action="store_true", help="run the delay and fsweep sweeps first")
    ap.add_argument("--providers", default="shm", help="with --run: providers to calibrate")
    ap.add_argument("--duration", default="2", help="with --run: seconds per run")
    ap.add_argument("--clients", default="4", help="with --run: clients per run")
    ap.add_argument("--value-size", type=int, default=32, help="the workload's value size")
    ap.add_argument("--toml", help="write the chosen R and F as an [rfrpc] table here")
    a = ap.parse_args()
    if a.run:
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "rfrpc-bench.py"), a.jsonl,
                        "--providers", a.providers, "--experiments", "delay,fsweep",
                        "--duration", a.duration, "--clients", a.clients],
                       check=True, stdin=subprocess.DEVNULL)
    rows = [json.loads(l) for l in open(a.jsonl) if l.strip()]
    present = sorted({j["provider"] for j in rows})
    provs = [p for p in a.providers.split(",") if p in present] if a.run else present
    chosen = {p: select(rows, p, a.value_size) for p in provs}
    if a.toml and provs:
        prov = provs[0]
        r, f = chosen[prov]
        with open(a.toml, "w") as out:
            out.write(f"# RF-RPC eq. 1-2 on {prov} for {a.value_size}-byte values "
                      f"(scripts/rfrpc-calibrate.py {os.path.basename(a.jsonl)})\n[rfrpc]\n")
            if r is not None:
                out.write(f"retries = {r}\n")
            if f is not None:
                out.write(f"fetch_size = {f}\n")
        print(f"wrote {a.toml}: fabkv-server --provider {prov} --config {a.toml} ...")
    return 0


if __name__ == "__main__":
    sys.exit(main())
