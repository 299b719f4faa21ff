#!/usr/bin/python3
"""Figures for docs/results/rfrpc-*.md from scripts/rfrpc-bench.py's JSON lines.

  scripts/rfrpc-plot.py IN.jsonl OUT_DIR

  rfrpc-delay-<provider>.png    throughput of rfrpc fetch / reply / hybrid against the worker's
                                processing delay (the shape of RF-RPC fig. 5 and fig. 9)
  rfrpc-compare-<provider>.png  throughput against value size: rfrpc (fetch, hybrid),
                                server-reply, herd (the comparison of RF-RPC fig. 7 / 13)
  rfrpc-batch-<provider>.png    throughput and mean latency against the batch size (the shape
                                of RF-RPC fig. 13 / 14), eq. 3's tuned runs as lines
and a markdown table of every run on stdout (throughput, p50, verbs per request, READs per
call and failed-fetch rate from the protocol counters).
"""
import collections
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def load(path):
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def reads_per_call(j):
    p = j.get("protocol_counters") or {}
    calls = p.get("calls") or 0
    if not calls:
        return None, None
    reads = p.get("fetch_reads", 0)
    return reads / calls, (p.get("failed_fetches", 0) / reads if reads else 0.0)


def main():
    rows = load(sys.argv[1])
    out = sys.argv[2]
    os.makedirs(out, exist_ok=True)
    by = collections.defaultdict(list)
    for j in rows:
        by[(j["experiment"], j["provider"])].append(j)
    for (exp, prov), rs in sorted(by.items()):
        if exp == "batch":
            fixed = sorted((j for j in rs if j["label"] == "rfrpc-batch"),
                           key=lambda j: j["batch_entries"])
            fig, ax = plt.subplots(figsize=(6, 4))
            xs = [j["batch_entries"] for j in fixed]
            ax.plot(xs, [j["throughput_ops"] / 1e3 for j in fixed], marker="o", color="C0",
                    label="throughput")
            ax.set_xlabel("batch size N (0 = no batching)")
            ax.set_ylabel("throughput (K ops/s)", color="C0")
            ax2 = ax.twinx()
            ax2.plot(xs, [j["latency_us"]["mean"] for j in fixed], marker="s", color="C1",
                     label="mean latency")
            ax2.set_ylabel("mean latency (us)", color="C1")
            for j in rs:
                if j["label"] != "rfrpc-batch":
                    ax.axhline(j["throughput_ops"] / 1e3, ls="--", color="C2", alpha=0.6)
                    ax.text(0.5, j["throughput_ops"] / 1e3, j["label"], fontsize=7, color="C2")
            ax.set_title(f"rfrpc batching on {prov} ({rs[0]['clients']} clients, window 8)")
            ax.grid(True, alpha=0.3)
            fig.tight_layout()
            fig.savefig(os.path.join(out, f"rfrpc-batch-{prov}.png"), dpi=100)
            plt.close(fig)
            continue
        if exp == "fsweep":
            continue
        fig, ax = plt.subplots(figsize=(6, 4))
        series = collections.defaultdict(list)
        for j in rs:
            x = j["delay_ns"] / 1000 if exp == "delay" else j["workload"]["value_size"]
            series[j["label"]].append((x, j["throughput_ops"] / 1e3))
        for label, pts in sorted(series.items()):
            pts.sort()
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=label)
        if exp == "delay":
            ax.set_xlabel("worker processing delay per request (us)")
        else:
            ax.set_xlabel("value size (bytes)")
            ax.set_xscale("log", base=2)
        ax.set_ylabel("throughput (K ops/s)")
        ax.set_title(f"rfrpc {exp} on {prov} ({rs[0]['clients']} clients, window 1)")
        ax.grid(True, alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(out, f"rfrpc-{exp}-{prov}.png"), dpi=100)
        plt.close(fig)
    print("| experiment | provider | system | value | delay us / F / N | K ops/s | p50 us | p99 us | "
          "WRITE/req | READ/req | SEND/req | RECV/req | READs/call | failed-fetch rate | "
          "switches to reply |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for j in rows:
        f = j.get("fabric_ops_per_request") or {}
        rpc, fail = reads_per_call(j)
        p = j.get("protocol_counters") or {}
        print(f"| {j['experiment']} | {j['provider']} | {j['label']} | {j['workload']['value_size']} "
              f"| {j.get('delay_ns', 0) / 1000 if j['experiment'] == 'delay' else j.get('fetch_size', j.get('batch_entries', ''))} "
              f"| {j['throughput_ops'] / 1e3:.0f} "
              f"| {j['latency_us']['p50']:.1f} | {j['latency_us']['p99']:.1f} "
              f"| {f.get('write', 0):.3f} | {f.get('read', 0):.3f} | {f.get('send', 0):.3f} "
              f"| {f.get('recv', 0):.3f} | {'' if rpc is None else f'{rpc:.3f}'} "
              f"| {'' if fail is None else f'{fail:.3f}'} | {p.get('switches_to_reply', '')} |")


if __name__ == "__main__":
    main()
