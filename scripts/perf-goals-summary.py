#!/usr/bin/env python3
"""The summary of scripts/perf-goals.sh: reads OUT_DIR/echo.jsonl (fabkv-perf) and
OUT_DIR/kv.jsonl (fabkv-bench), each line tagged with its round, and prints the goal tables
in Markdown."""
import json
import statistics
import sys
from pathlib import Path


def load(path):
    p = Path(path)
    return [json.loads(line) for line in p.open()] if p.exists() else []


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def main():
    out = Path(sys.argv[1])
    echo = load(out / "echo.jsonl")
    kv = load(out / "kv.jsonl")

    def echo_of(rnd, kind):
        for e in echo:
            if e.get("round") == rnd and e["spec"]["echo"] == kind:
                return e
        return None

    def kv_of(rnd, name):
        for k in kv:
            label = k["system"] if k["system"] != "fabkv" else "fabkv:" + k["protocol"]
            if k.get("round") == rnd and label == name:
                return k
        return None

    print("## 1. Latency at 1 client, window 1 (p50, kv / echo of the same round)\n")
    print("| provider | round | echo send-send | herd | herd / echo | echo write-write "
          "| server-reply | server-reply / echo |")
    print("|---|---|---|---|---|---|---|---|")
    providers = sorted({r.split("-")[1] for r in {e.get("round", "") for e in echo}
                        if r.startswith("lat-")})
    for p in providers:
        ratios = {"herd": [], "sr": []}
        rounds = sorted({e["round"] for e in echo if e.get("round", "").startswith(f"lat-{p}-")})
        for rnd in rounds:
            es, ew = echo_of(rnd, "send-send"), echo_of(rnd, "write-write")
            h, s = kv_of(rnd, "fabkv:herd"), kv_of(rnd, "fabkv:server-reply")
            # A pair whose kv run failed (it has no line) shows as "-".
            def cells(echo_run, kv_run, key):
                if not (echo_run and kv_run):
                    return "-", "-", "-"
                r = kv_run["latency_us"]["p50"] / echo_run["latency_us"]["p50"]
                ratios[key].append(r)
                return (f"{echo_run['latency_us']['p50']:.2f} us",
                        f"{kv_run['latency_us']['p50']:.2f} us", f"{r:.2f}")
            hc, sc = cells(es, h, "herd"), cells(ew, s, "sr")
            print(f"| {p} | {rnd.split('-')[-1]} | {' | '.join(hc)} | {' | '.join(sc)} |")
        print(f"| {p} | median | | | **{median(ratios['herd']):.2f}** | | "
              f"| **{median(ratios['sr']):.2f}** |")

    base = [k for k in kv if k.get("round") == "base"]
    if base:
        print("\n## 2. Against the baselines (shm, 1 client, window 1, 95% GET, 16/32 B)\n")
        print("| system | ops/s | p50 | p99 | GETs checked |")
        print("|---|---|---|---|---|")
        for k in base:
            label = k["system"] if k["system"] != "fabkv" else "fabkv:" + k["protocol"]
            print(f"| {label} | {k['throughput_ops'] / 1e3:.0f} K | {k['latency_us']['p50']:.2f} us "
                  f"| {k['latency_us']['p99']:.2f} us | {k['check']['gets_checked']} "
                  f"({'ok' if k['check']['ok'] else 'MISMATCH'}) |")
        fab = [k for k in base if k["system"] == "fabkv"]
        others = [k for k in base if k["system"] != "fabkv"]
        if fab and others:
            best = max(fab, key=lambda k: k["throughput_ops"])
            rival = max(others, key=lambda k: k["throughput_ops"])
            name = "fabkv:" + best["protocol"]
            print(f"\n{name} / {rival['system']} (the faster baseline): "
                  f"throughput **{best['throughput_ops'] / rival['throughput_ops']:.1f}x**, "
                  f"p50 **{best['latency_us']['p50'] / rival['latency_us']['p50']:.3f}x**")
            for o in others:
                print(f"- {name} / {o['system']}: {best['throughput_ops'] / o['throughput_ops']:.1f}x "
                      f"throughput, p50 {best['latency_us']['p50'] / o['latency_us']['p50']:.3f}x")

    sat = [(w, echo_of(f"sat-{w}", "send-send"), kv_of(f"sat-{w}", "fabkv:herd"),
            kv_of(f"null-sat-{w}", "null")) for w in (4, 16)]
    if any(e and k for _, e, k, _ in sat):
        print("\n## 3. Saturation (shm, 8 clients; echo: one client at window 8 x W)\n")
        print("Which side bounds: the server's busy share is 1 - (its poll rounds/s under load) / "
              "(its rounds/s idle); the load thread's own share is its CPU per request against "
              "the null target at the same clients and window, over herd's time per request "
              "(1 / throughput: the one load thread spins the whole run).\n")
        print("| window | echo send-send | herd | herd / echo | server CPU s per M requests "
              "| server busy | load thread's own share | bound by |")
        print("|---|---|---|---|---|---|---|---|")
        for w, e, k, n in sat:
            if not (e and k):
                continue
            cpu = k.get("server_cpu_s")
            per_m = f"{cpu / k['requests'] * 1e6:.2f}" if cpu else "-"
            busy = (k.get("server_busy") or {}).get("fraction")
            own = None
            if n and n.get("load_cpu_us_per_request") is not None:
                own = n["load_cpu_us_per_request"] / (1e6 / k["throughput_ops"])
            bound = "-" if busy is None else ("server" if busy >= 0.9 else "load thread")
            print(f"| {w} | {e['throughput_ops'] / 1e6:.3f} M/s | {k['throughput_ops'] / 1e6:.3f} M/s "
                  f"| **{k['throughput_ops'] / e['throughput_ops']:.2f}** | {per_m} "
                  f"| {'-' if busy is None else f'{busy:.2f}'} "
                  f"| {'-' if own is None else f'{own:.2f}'} | {bound} |")

    null = [k for k in kv if k.get("round", "").startswith("null-")]
    if null:
        print("\n## 4. The load generator against the null target\n")
        print("| clients | window | requests/s | load CPU per request | GETs checked |")
        print("|---|---|---|---|---|")
        for k in null:
            cpu = k.get("load_cpu_us_per_request")
            print(f"| {k['clients']} | {k['window']} | {k['throughput_ops'] / 1e6:.2f} M "
                  f"| {cpu:.3f} us | {k['check']['gets_checked']} |" if cpu is not None else
                  f"| {k['clients']} | {k['window']} | {k['throughput_ops'] / 1e6:.2f} M | - | - |")


if __name__ == "__main__":
    main()
