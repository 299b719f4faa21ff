#!/usr/bin/python3
"""fabkv-bench report: PNG plots and summary.md from fabkv-bench's JSON Lines results.

    fabkv-bench report --input results.jsonl --out reports/DIR
    python3 python/fabkv/report.py --input ... --out ...   (this file alone, from a checkout)
    python3 -m fabkv.report --input ... --out ...          (the installed package; or fabkv-report)

It needs nothing of the package but this file, so fabkv-bench runs it by path with Debian's
python3, which has matplotlib, whatever the binding was built for.

Plots follow the survey's evaluation (002_..., sec. 4): throughput vs clients per read ratio and
distribution (figs. 12, 15), throughput vs read ratio (fig. 13), latency vs clients (figs. 16,
17), throughput vs value size (fig. 19), uniformity ratio per system (fig. 20: from the records of
fabkv-bench --client-mode independent when the file has any, and it says which). Repeated runs
of one configuration are summarised by their median. Needs matplotlib (Debian: python3-matplotlib).
"""
import argparse
import os
import statistics
import sys
from collections import defaultdict

try:
    from . import model
except ImportError:  # run by path (fabkv-bench report): this file's folder is on sys.path
    import model

REQUIRED = ["system", "protocol", "workload", "clients", "window", "duration_s", "ops",
            "throughput_ops", "latency_us", "per_client_ops", "uniformity_ratio",
            "fabric_ops_per_request", "fabric_bytes_per_request", "server_cpu_s"]


def label(r):
    return f"{r['system']}:{r['protocol']}" if r["system"] == "fabkv" else r["system"]


def load(path):
    """The runs of a results file (model.read_jsonl: one reader for both), or exit naming the
    line that is not a fabkv-bench record."""
    try:
        runs = model.read_jsonl(path, REQUIRED)
    except ValueError as e:
        sys.exit(f"report: {e}")
    if not runs:
        sys.exit(f"report: {path} has no runs")
    return runs


def key_of(r):
    """One configuration; the client mode last, so that a shared and an independent run of the
    same workload stay apart (they measure different things: docs/bench.md, "Client modes")."""
    w = r["workload"]
    return (label(r), w["distribution"], w["read_ratio"], w.get("read_modify_write", False),
            r["clients"], r["window"], w["value_size"], client_mode(r))


def median_runs(runs):
    """One summary per configuration: medians of the numbers over repeated runs."""
    groups = defaultdict(list)
    for r in runs:
        groups[key_of(r)].append(r)
    out = {}
    for k, rs in groups.items():
        def med(f):
            vals = [f(r) for r in rs if f(r) is not None]
            return statistics.median(vals) if vals else None
        verbs = None
        if rs[0]["fabric_ops_per_request"] is not None:
            verbs = {v: med(lambda r, v=v: (r["fabric_ops_per_request"] or {}).get(v))
                     for v in ("read", "write", "send", "recv", "atomic")}
        out[k] = {
            "n": len(rs),
            "throughput": med(lambda r: r["throughput_ops"]),
            "p50": med(lambda r: r["latency_us"]["p50"]),
            "p99": med(lambda r: r["latency_us"]["p99"]),
            "mean": med(lambda r: r["latency_us"]["mean"]),
            "uniformity": med(lambda r: r["uniformity_ratio"]),
            "cpu": med(lambda r: r["server_cpu_s"]),
            "verbs": verbs,
            "bytes": med(lambda r: r["fabric_bytes_per_request"]),
            "mismatches": sum(r.get("check", {}).get("mismatches", 0) for r in rs),
        }
    return out


def client_mode(r):
    """How fabkv-bench drove the clients (docs/bench.md, "Client modes"); records written
    before the field existed were all shared."""
    return r.get("client_mode", "shared")


def uniformity_source(runs):
    """The mode whose records fig. 20 plots and those records: the independent mode's when
    the file has any (there each client's count is its own), else the shared mode's (equal
    by construction)."""
    mode = "independent" if any(client_mode(r) == "independent" for r in runs) else "shared"
    return mode, [r for r in runs if client_mode(r) == mode]


def most_common(values):
    return max(set(values), key=values.count)


def fmt_num(x, digits=1):
    return "-" if x is None else f"{x:.{digits}f}"


def plots(table, out, uniformity=None):
    """uniformity: (mode, table of that mode's records) for fig. 20; None: `table`, shared."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(table)
    systems = sorted({k[0] for k in keys})
    dists = sorted({k[1] for k in keys})
    ratios = sorted({k[2] for k in keys}, reverse=True)
    vsizes = [k[6] for k in keys]
    vs0 = most_common(vsizes)
    win0 = most_common([k[5] for k in keys])
    written = []

    def sel(system=None, dist=None, rr=None, clients=None, vs=vs0):
        return {k: v for k, v in table.items()
                if (system is None or k[0] == system) and (dist is None or k[1] == dist)
                and (rr is None or k[2] == rr) and (clients is None or k[4] == clients)
                and (vs is None or k[6] == vs) and k[5] == win0}

    def save(fig, name):
        fig.tight_layout()
        path = os.path.join(out, name)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(name)

    def grid(title, ylabel, series):
        fig, axes = plt.subplots(len(dists), len(ratios), squeeze=False,
                                 figsize=(4 * len(ratios) + 1, 3.2 * len(dists)))
        for i, d in enumerate(dists):
            for j, rr in enumerate(ratios):
                ax = axes[i][j]
                for si, s in enumerate(systems):
                    for name, style, f in series:  # one colour per system, a style per series
                        pts = sorted((k[4], f(v)) for k, v in sel(s, d, rr).items() if f(v) is not None)
                        if pts:
                            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, marker="o",
                                    color=f"C{si}", label=f"{s}{name}")
                ax.set_title(f"{d}, {rr * 100:.0f}% GET", fontsize=9)
                ax.set_xlabel("clients")
                ax.set_ylabel(ylabel)
                ax.set_yscale("log")
                ax.grid(True, alpha=0.3)
        axes[0][0].legend(fontsize=7)
        fig.suptitle(title + f" ({vs0} B values, window {win0})", fontsize=10)
        return fig

    save(grid("Throughput vs clients", "ops/s", [("", "-", lambda v: v["throughput"])]),
         "throughput_vs_clients.png")
    save(grid("Latency vs clients", "us",
              [(" p50", "-", lambda v: v["p50"]), (" p99", "--", lambda v: v["p99"])]),
         "latency_vs_clients.png")

    cmax = max(k[4] for k in keys)
    fig, axes = plt.subplots(1, len(dists), squeeze=False, figsize=(4.5 * len(dists), 3.4))
    for i, d in enumerate(dists):
        ax = axes[0][i]
        for s in systems:
            pts = sorted((k[2] * 100, v["throughput"]) for k, v in sel(s, d, clients=cmax).items())
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
        ax.set_title(f"{d}, {cmax} clients", fontsize=9)
        ax.set_xlabel("% GET")
        ax.set_ylabel("ops/s")
        ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=7)
    save(fig, "throughput_vs_read_ratio.png")

    fig, ax = plt.subplots(figsize=(5, 3.4))
    d0, rr0 = dists[0], ratios[0]
    for s in systems:
        pts = sorted((k[6], v["throughput"]) for k, v in sel(s, d0, rr0, cmax, vs=None).items())
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=s)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("value size (B)")
    ax.set_ylabel("ops/s")
    ax.set_title(f"Throughput vs value size ({d0}, {rr0 * 100:.0f}% GET, {cmax} clients)", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    save(fig, "throughput_vs_value_size.png")

    umode, utable = uniformity if uniformity is not None else ("shared", table)
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(dists) * len(ratios)), 3.4))
    groups = [(d, rr) for d in dists for rr in ratios]
    width = 0.8 / max(1, len(systems))
    for si, s in enumerate(systems):
        xs, ys = [], []
        for gi, (d, rr) in enumerate(groups):
            u = [v["uniformity"] for k, v in utable.items()
                 if (k[0], k[1], k[2], k[4], k[5], k[6]) == (s, d, rr, cmax, win0, vs0)
                 and v["uniformity"] is not None]
            if u:
                xs.append(gi + si * width)
                ys.append(u[0])
        ax.bar(xs, ys, width, label=s)
    ax.set_xticks([g + 0.4 - width / 2 for g in range(len(groups))])
    ax.set_xticklabels([f"{d}\n{rr * 100:.0f}% GET" for d, rr in groups], fontsize=8)
    ax.set_ylabel("max/min per-client ops")
    how = ("a load thread per client" if umode == "independent"
           else "round-robin: equal by construction")
    ax.set_title(f"Uniformity ratio ({cmax} clients, {umode} client mode: {how}; "
                 f"1 = perfectly fair)", fontsize=9)
    ax.axhline(1.0, color="black", linewidth=0.5)
    ax.set_ylim(bottom=0.9)  # the ratio is >= 1: start near it so small unfairness shows
    ax.legend(fontsize=7)
    save(fig, "uniformity_ratio.png")
    return written


def summary(table, runs, out, plot_names):
    lines = ["# fabkv-bench report", ""]
    m = runs[0].get("machine", {})
    lines.append(f"Machine: {m.get('model', '?')}, {m.get('cpus', '?')} CPUs, kernel "
                 f"{m.get('kernel', '?')}. Runs: {len(runs)} "
                 f"({runs[0].get('timestamp', '?')} .. {runs[-1].get('timestamp', '?')}).")
    loads = [r.get("machine", {}).get("loadavg_1m") for r in runs]
    loads = [x for x in loads if x is not None]
    if loads:
        lines.append(f"1-minute load average during the runs: {min(loads):.1f} .. {max(loads):.1f} "
                     f"(on {m.get('cpus', '?')} CPUs; above ~2 other work shared the cores).")
    umode, _ = uniformity_source(runs)
    lines.append(f"Uniformity figure (uniformity_ratio.png): records of the {umode} client mode"
                 + ("." if umode == "independent" else
                    " (a load thread round-robins over its clients, so their counts are equal "
                    "by construction; --client-mode independent measures fairness)."))
    cmds = sorted({r.get("command", "") for r in runs if r.get("command")})
    if cmds:
        lines += ["", "Commands:", ""] + [f"    {c}" for c in cmds]
    lines += ["", "## Runs (median of repeats)", "",
              "| system | dist | GET % | clients | window | value B | K ops/s | p50 us | p99 us "
              "| uniformity | server CPU s | verbs/req r/w/s/recv/atomic | bytes/req |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in sorted(table, key=lambda k: (k[1], -k[2], k[6], k[4], k[0])):
        v = table[k]
        verbs = "-" if v["verbs"] is None else "/".join(fmt_num(v["verbs"][x], 2) for x in
                                                        ("read", "write", "send", "recv", "atomic"))
        rr = f"{k[2] * 100:.0f}" + (" RMW" if k[3] else "")
        system = k[0] + (f" ({k[7]})" if k[7] != "shared" else "")
        lines.append(f"| {system} | {k[1]} | {rr} | {k[4]} | {k[5]} | {k[6]} | "
                     f"{v['throughput'] / 1e3:.1f} | {fmt_num(v['p50'])} | {fmt_num(v['p99'])} | "
                     f"{fmt_num(v['uniformity'], 2)} | {fmt_num(v['cpu'], 2)} | {verbs} | "
                     f"{fmt_num(v['bytes'])} |")

    # fabkv vs each baseline on the same configuration.
    fabkv = sorted({k[0] for k in table if k[0].startswith("fabkv")})
    bases = [b for b in ("memcached", "redis") if any(k[0] == b for k in table)]
    if fabkv and bases:
        lines += ["", "## Ratios (fabkv / baseline, same configuration)", "",
                  "| fabkv | baseline | dist | GET % | clients | value B | throughput x | p50 ratio |",
                  "|---|---|---|---|---|---|---|---|"]
        for k in sorted(table, key=lambda k: (k[1], -k[2], k[6], k[4])):
            if k[0] not in fabkv:
                continue
            for b in bases:
                bk = (b,) + k[1:]
                if bk not in table:
                    continue
                f, o = table[k], table[bk]
                tx = f["throughput"] / o["throughput"] if o["throughput"] else None
                pr = f["p50"] / o["p50"] if o["p50"] else None
                lines.append(f"| {k[0]} | {b} | {k[1]} | {k[2] * 100:.0f} | {k[4]} | {k[6]} | "
                             f"{fmt_num(tx, 1)} | {fmt_num(pr, 3)} |")

    # Verbs per request per protocol, over all its runs.
    per = defaultdict(list)
    for r in runs:
        if r["fabric_ops_per_request"] is not None:
            per[label(r)].append(r)
    if per:
        lines += ["", "## Fabric verbs per request (client + server, all runs)", "",
                  "| protocol | read | write | send | recv | atomic | bytes |", "|---|---|---|---|---|---|---|"]
        for p, rs in sorted(per.items()):
            cells = [fmt_num(statistics.median(r["fabric_ops_per_request"][v] for r in rs), 2)
                     for v in ("read", "write", "send", "recv", "atomic")]
            b = statistics.median(r["fabric_bytes_per_request"] for r in rs)
            lines.append(f"| {p} | " + " | ".join(cells) + f" | {b:.1f} |")
    bad = sum(v["mismatches"] for v in table.values())
    lines += ["", f"GET checking: {bad} mismatching values over all runs.", "",
              "Plots: " + ", ".join(f"[{n}]({n})" for n in plot_names), ""]
    text = "\n".join(lines)
    with open(os.path.join(out, "summary.md"), "w") as f:
        f.write(text)
    return text


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", required=True, help="fabkv-bench JSON Lines results")
    ap.add_argument("--out", required=True, help="folder for the PNGs and summary.md")
    ap.add_argument("--print", action="store_true", help="print summary.md")
    a = ap.parse_args(argv)
    if not os.path.exists(a.input):
        sys.exit(f"report: no results file {a.input}")
    runs = load(a.input)
    os.makedirs(a.out, exist_ok=True)
    table = median_runs(runs)
    umode, uruns = uniformity_source(runs)
    # The throughput and latency plots from one mode (shared when there are such runs), so
    # that a configuration run in both modes is one point, not two.
    pmode = "shared" if any(client_mode(r) == "shared" for r in runs) else "independent"
    try:
        names = plots({k: v for k, v in table.items() if k[7] == pmode}, a.out,
                      (umode, median_runs(uruns)))
    except ImportError:
        sys.exit("report: matplotlib is missing (apt-get install python3-matplotlib)")
    text = summary(table, runs, a.out, names)
    if a.print:
        print(text)
    print(f"report: wrote {os.path.join(a.out, 'summary.md')} and {len(names)} plots")


if __name__ == "__main__":
    main()
