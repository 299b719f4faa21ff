#!/usr/bin/env python3
"""Markdown table of fabkv-bench JSON lines from scripts/hydradb-bench.sh: per run the system,
the workload, throughput, latency, verbs per request (client and server together) and, for
hydradb, the cache hit rate and stale detections from the client's protocol counters.

    scripts/hydradb-summary.py FILE.jsonl [FILE.jsonl ...]
"""
import json
import sys


def fmt_ops(o):
    return "/".join(f"{o.get(k, 0):.2f}" for k in ("read", "write", "send", "recv"))


def main():
    print("| provider | system | keys | GET % | value B | clients x W | ops/s | p50 us | p99 us "
          "| READ/WRITE/SEND/RECV per req | hit rate | stale (flag / foreign) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for path in sys.argv[1:]:
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                j = json.loads(line)
                w = j["workload"]
                pc = j.get("protocol_counters") or {}
                hit = stale = ""
                if j.get("protocol") == "hydradb" and pc.get("gets"):
                    hit = f"{pc.get('cache_hits', 0) / pc['gets']:.3f}"
                    stale = f"{pc.get('stale_replaced', 0)} / {pc.get('stale_foreign', 0)}"
                lat = j["latency_us"]
                print(f"| {j['provider']} | {j['protocol']} | {w['keys']} | "
                      f"{100 * w['read_ratio']:.0f} | {w['value_size']} | "
                      f"{j['clients']} x {j['window']} | {j['throughput_ops'] / 1e3:.0f} K | "
                      f"{lat['p50']:.1f} | {lat['p99']:.1f} | "
                      f"{fmt_ops(j['fabric_ops_per_request'])} | {hit} | {stale} |")


if __name__ == "__main__":
    main()
