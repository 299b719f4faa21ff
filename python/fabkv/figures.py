#!/usr/bin/python3
"""make figures: the seed papers' figures and tables run here, with the papers' numbers and the
NIC model's predictions side by side in one report.

    python3 python/fabkv/figures.py run [--quick] [--out DIR] [--only ID,...]
    python3 python/fabkv/figures.py render --input records.jsonl --out DIR

`run` runs every fabkv-bench / fabkv-perf invocation the figures need (each once, however many
figures read it), writes their records to DIR/records.jsonl, each tagged with the run's id, and
then renders. `render` writes DIR/figures.md, DIR/figures.json and a PNG per figure from
recorded JSON lines. docs/figures.md says what each figure runs and how to read the report.
Standard library and matplotlib only (Debian's /usr/bin/python3, like report.py); runs by path
or as fabkv.figures.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

try:
    from . import model, report
except ImportError:  # run by path: this file's folder is on sys.path
    import model
    import report
try:
    from . import paper
except ImportError:
    try:
        import paper
    except ImportError:  # no python/fabkv/paper.py: the report says the paper columns are empty
        paper = None

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PAPER_TOML = os.path.join(HERE, "paper.toml")

# --- the experiments -------------------------------------------------------------------------

SURVEY = "memcached,redis,fabkv:herd,fabkv:hydradb,fabkv:pilaf,fabkv:farm,fabkv:drtm"
HERD48 = "fabkv:herd,fabkv:pilaf,fabkv:farm,fabkv:farm-var"
# Server on core 0, the load generator on core 1, as the demo (scripts/demo-bench.sh) pins them.
PINNED = ["--provider", "shm", "--server-core", "0", "--client-core", "1", "--key-size", "16",
          "--quiet"]


@dataclass
class Run:
    """One invocation of fabkv-bench (tool "bench") or fabkv-perf ("perf"); its records get
    `figures_run` = id and the tags."""
    id: str
    args: list
    tags: dict = field(default_factory=dict)
    tool: str = "bench"


def _t(quick, full, fast):
    return fast if quick else full


def _timing(quick):
    return ["--duration", _t(quick, "0.8", "0.2"), "--warmup", _t(quick, "0.3", "0.1")]


def survey_runs(q):
    keys = _t(q, "100000", "20000")
    base = PINNED + _timing(q) + ["--systems", SURVEY, "--window", "1"]
    rr = _t(q, "1,0.9,0.5,0", "1,0.5")
    yield Run("survey-matrix", base + ["--keys", keys, "--clients", _t(q, "1,8,24", "1,8"),
                                       "--read-ratio", rr, "--distribution", "uniform,zipf",
                                       "--value-size", "32"])
    yield Run("survey-fig19", base + ["--keys", "10000", "--clients", "8", "--read-ratio", "0.5",
                                      "--distribution", "uniform", "--value-size",
                                      _t(q, "8,32,128,512", "8,512")])
    yield Run("survey-fig14", PINNED + _timing(q) + [
        "--systems", _t(q, "fabkv:farm,fabkv:pilaf", "fabkv:farm"), "--window", "1",
        "--keys", keys, "--clients", "8", "--read-ratio", "1", "--distribution", "uniform,zipf",
        "--value-size", _t(q, "8,16,32,64", "8,64")])
    yield Run("survey-fig20", base + ["--keys", keys, "--clients", "8", "--client-mode",
                                      "independent", "--read-ratio", _t(q, "1,0.5,0", "1,0.5"),
                                      "--distribution", "uniform,zipf", "--value-size", "32"])
    for inline in (False, True):
        yield Run(f"survey-fig18{'-inline' if inline else ''}", [
            "--provider", "shm", "--mode", "inbound", "--verbs", "read,write", "--sizes",
            _t(q, "8,32,128,512", "8,512"), "--server-core", "0", "--client-core", "1",
            "--log", "warn"] + _timing(q) + (["--inline"] if inline else []),
            {"inline": inline}, tool="perf")


def herd_runs(q):
    keys = _t(q, "100000", "20000")
    yield Run("herd-48", PINNED + _timing(q) + [
        "--systems", HERD48, "--keys", keys, "--window", "4", "--value-size", "32",
        "--clients", _t(q, "1,2,4,8,16", "1,8"), "--read-ratio", "1,0.95,0.5,0"])
    sizes = _t(q, [8, 32, 128, 512, 1024], [8, 512])
    common = PINNED + _timing(q) + ["--keys", "10000", "--window", "4", "--clients", "8",
                                    "--read-ratio", "0.95"]
    yield Run("herd-fig10", common + ["--systems", "fabkv:herd,fabkv:pilaf,fabkv:farm-var",
                                      "--value-size", ",".join(map(str, sizes))])
    for size in sizes:  # farm's inline room sized to hold the item (scripts/farm-bench.sh)
        inline = (16 + size + 7) // 8 * 8
        yield Run(f"herd-fig10-farm-{size}", common + [
            "--systems", "fabkv:farm", "--value-size", str(size),
            "--server-arg=--farm-inline", f"--server-arg={inline}"], {"farm_inline": inline})
    for window in (4, 16):
        yield Run(f"herd-fig12-w{window}", PINNED + _timing(q) + [
            "--systems", "fabkv:herd", "--keys", "10000", "--value-size", "32",
            "--read-ratio", "0.95", "--window", str(window),
            "--clients", _t(q, "1,16,64,128", "1,64")], {"window": window})


def pilaf_runs(q):
    for fill in _t(q, [0.25, 0.5, 0.75, 0.9], [0.5, 0.75]):
        yield Run(f"pilaf-fig6-{fill}", PINNED + _timing(q) + [
            "--systems", "fabkv:pilaf", "--keys", _t(q, "100000", "20000"), "--fill", str(fill),
            "--read-ratio", "1", "--clients", "1", "--window", "4", "--value-size", "32"],
            {"fill": fill})
    for keys in _t(q, [100, 1000, 20000], [100, 20000]):
        yield Run(f"pilaf-fig9-{keys}", PINNED + _timing(q) + [
            "--systems", "fabkv:pilaf", "--keys", str(keys), "--read-ratio", "0.5",
            "--clients", "8", "--window", "1", "--value-size", "32"], {"unique_keys": keys})


def guidelines_runs(q):
    yield Run("guidelines-table3", PINNED + _timing(q) + [
        "--systems", "fabkv:seq-rpc,fabkv:seq-spec,fabkv:seq-atomic", "--clients", "8",
        "--window", "16"])
    yield Run("guidelines-fig10", PINNED + _timing(q) + [
        "--systems", "fabkv:drtm", "--keys", _t(q, "100000", "20000"), "--clients", "4",
        "--window", "4", "--value-size", "32",
        "--read-ratio", _t(q, "1,0.9,0.75,0.5,0.25,0", "1,0.9,0")])


def rfrpc_runs(q):
    common = PINNED + _timing(q) + ["--keys", "10000", "--clients", "4", "--read-ratio", "0.95"]
    for delay in _t(q, [0, 1000, 2000, 4000, 8000, 16000], [0, 4000, 16000]):
        for mode in ("fetch", "reply"):
            yield Run(f"rfrpc-fig5-{mode}-{delay}", common + [
                "--systems", "fabkv:rfrpc", "--window", "1", "--value-size", "8",
                "--server-arg=--rfrpc-mode", f"--server-arg={mode}",
                "--server-arg=--rfrpc-delay-ns", f"--server-arg={delay}"],
                {"rfrpc_mode": mode, "delay_us": delay / 1000})
    batch = ["--window", "8", "--value-size", "32"]
    for n in _t(q, [0, 1, 2, 4, 8, 16], [0, 4]):
        yield Run(f"rfrpc-batch-{n}", common + batch + [
            "--systems", "fabkv:rfrpc", "--server-arg=--rfrpc-mode", "--server-arg=fetch",
            "--server-arg=--rfrpc-batch-timeout-us", "--server-arg=100",
            "--server-arg=--rfrpc-batch-entries", f"--server-arg={n}"], {"batch_entries": n})
    yield Run("rfrpc-server-reply", common + batch + ["--systems", "fabkv:server-reply"])


def runs(quick):
    out = []
    for family in (survey_runs, herd_runs, pilaf_runs, guidelines_runs, rfrpc_runs):
        out += list(family(quick))
    return out


# --- records -------------------------------------------------------------------------------

def label(r):
    return report.label(r) if "system" in r else r.get("label", "?")


def sel(records, run, **where):
    """The records of `run` (a run id, or a prefix ending in '-') matching `where`: keys
    rr, dist, clients, vs, system, mode, or a tag name."""
    def value(r, k):
        w = r.get("workload") or {}
        return {"rr": lambda: w.get("read_ratio"), "dist": lambda: w.get("distribution"),
                "clients": lambda: r.get("clients"), "vs": lambda: w.get("value_size"),
                "system": lambda: label(r), "mode": lambda: report.client_mode(r)
                }.get(k, lambda: r.get(k))()
    rid = lambda r: r.get("figures_run", "")
    return [r for r in records
            if (rid(r) == run or (run.endswith("-") and rid(r).startswith(run)))
            and all(value(r, k) == v for k, v in where.items())]


def distinct(records, key):
    vals = {key(r) for r in records}
    return sorted(v for v in vals if v is not None)


@dataclass
class Item:
    """One value of a figure: (series, x) in a panel, from some records."""
    series: str
    x: object
    value: float
    records: list = field(default_factory=list)
    panel: str = ""
    nic: str = ""


def mops(r):
    return r["throughput_ops"] / 1e6 if r.get("throughput_ops") is not None else None


def mean_us(r):
    return (r.get("latency_us") or {}).get("mean")


def counter(name):
    return lambda r: (r.get("protocol_counters") or {}).get(name)


# --- the figures: fabkv's counterpart of each, as items named in the paper's terms ------------

HERD_NAMES = {"fabkv:herd": "HERD", "fabkv:pilaf": "Pilaf-em-OPT", "fabkv:farm": "FaRM-em",
              "fabkv:farm-var": "FaRM-em-VAR"}
HERD_WORKLOADS = {1.0: "GET", 0.95: "read-intensive", 0.5: "write-intensive", 0.0: "100% PUT"}


def herd_fig9(R):
    """Each system's peak over the client counts, per workload (HERD measured peaks)."""
    out = []
    for system, name in HERD_NAMES.items():
        for rr, x in HERD_WORKLOADS.items():
            rs = sel(R, "herd-48", system=system, rr=rr)
            if rs:
                best = max(rs, key=mops)
                out.append(Item(name, x, mops(best), [best]))
    return out


def herd_fig10(R):
    out = []
    for r in sel(R, "herd-fig10") + sel(R, "herd-fig10-farm-"):
        name = HERD_NAMES.get(label(r))
        out.append(Item(name, float(r["workload"]["value_size"]), mops(r), [r]))
    return out


def herd_fig11(R):
    """Mean latency against throughput as clients are added, 95% GET."""
    return [Item(HERD_NAMES[label(r)], round(mops(r), 4), mean_us(r), [r],
                 panel=f"{r['clients']} clients")
            for r in sel(R, "herd-48", rr=0.95) if label(r) in HERD_NAMES]


def herd_fig12(R):
    return [Item(f"window {r['window']}", float(r["clients"]), mops(r), [r])
            for r in sel(R, "herd-fig12-")]


def pilaf_fig6(R):
    out = []
    for r in sel(R, "pilaf-fig6-"):
        out.append(Item("3-way cuckoo, average", float(r["fill"]),
                        counter("probes_per_hit")(r), [r]))
    return [i for i in out if i.value is not None]


def pilaf_fig9(R):
    out = []
    for r in sel(R, "pilaf-fig9-"):
        per_get = counter("retries_per_get")(r)
        if per_get is not None:
            out.append(Item("any race (both lines)", float(r["unique_keys"]), 100 * per_get, [r]))
    return out


SEQUENCERS = {"fabkv:seq-rpc": "Baseline", "fabkv:seq-spec": "Spec-S0",
              "fabkv:seq-atomic": "Atomics"}


def guidelines_table3(R):
    return [Item("sequencer", SEQUENCERS[label(r)], mops(r), [r])
            for r in sel(R, "guidelines-table3") if label(r) in SEQUENCERS]


def guidelines_fig10(R):
    """Throughput relative to GET-only, one series per NIC the paper measured (the same
    measurement here; the model differs per NIC)."""
    rs = sel(R, "guidelines-fig10")
    base = [r for r in rs if r["workload"]["read_ratio"] == 1.0]
    if not base:
        return []
    out = []
    for r in rs:
        x = round(100 * (1 - r["workload"]["read_ratio"]), 6)
        for series, nic in (("CX3", "cx3"), ("CIB", "cib")):
            out.append(Item(series, x, 100 * mops(r) / mops(base[0]), [r, base[0]], nic=nic))
    return out


def rfrpc_fig5(R):
    names = {"fetch": "repeated remote fetching", "reply": "server-reply"}
    return [Item(names[r["rfrpc_mode"]], float(r["delay_us"]), mops(r), [r])
            for r in sel(R, "rfrpc-fig5-")]


def rfrpc_fig13(R):
    rs = sel(R, "rfrpc-batch-")
    out = [Item("RF-RPC-batch", round(mean_us(r), 2), mops(r), [r],
                panel=f"batch {r['batch_entries']}") for r in rs]
    if rs:
        best = max(rs, key=mops)
        out.append(Item("RF-RPC-batch", "peak", mops(best), [best]))
    out += [Item("server-reply (no batching)", round(mean_us(r), 2), mops(r), [r])
            for r in sel(R, "rfrpc-server-reply")]
    return out


def rfrpc_fig14(R):
    return [Item("RF-RPC-batch", float(r["batch_entries"]), mean_us(r), [r])
            for r in sel(R, "rfrpc-batch-")]


def survey_short(system):
    return system.split(":")[-1]


def survey_clients(R, dist, metric):
    """Survey figs. 12, 15-17: per read ratio (a panel) each system against clients."""
    return [Item(survey_short(label(r)), float(r["clients"]), metric(r), [r],
                 panel=f"{r['workload']['read_ratio'] * 100:.0f}% GET")
            for r in sel(R, "survey-matrix", dist=dist)]


def survey_fig13(R):
    cmax = max(distinct(sel(R, "survey-matrix"), lambda r: r["clients"]), default=None)
    return [Item(survey_short(label(r)), round(100 * r["workload"]["read_ratio"]), mops(r), [r],
                 panel=r["workload"]["distribution"])
            for r in sel(R, "survey-matrix", clients=cmax)]


def survey_fig14(R):
    return [Item(f"{survey_short(label(r))}, {r['workload']['distribution']}",
                 float(r["workload"]["value_size"]), mops(r), [r])
            for r in sel(R, "survey-fig14")]


def survey_fig18(R):
    return [Item(f"{r['spec']['verb'].upper()}{', inline' if r['inline'] else ''}",
                 float(r["spec"]["size"]), mops(r), [r])
            for r in sel(R, "survey-fig18") + sel(R, "survey-fig18-inline")]


def survey_fig19(R):
    return [Item(survey_short(label(r)), float(r["workload"]["value_size"]), mops(r), [r])
            for r in sel(R, "survey-fig19")]


def survey_fig20(R):
    def panel(r):
        return f"{r['workload']['distribution']}, {r['workload']['read_ratio'] * 100:.0f}% GET"
    return [Item(survey_short(label(r)), f"{r['clients']} clients", r["uniformity_ratio"], [r],
                 panel=panel(r))
            for r in sel(R, "survey-fig20", mode="independent")
            if r.get("uniformity_ratio") is not None]


# The survey's text states ratios (python/fabkv/paper.toml's survey points): the same ratios
# computed from fabkv's runs, named as the paper's points are.
BASELINES = ("memcached", "redis")


def _ratio(series, x, num, den):
    return [Item(series, x, num / den)] if num and den else []


def _median(xs):
    xs = [x for x in xs if x]
    return statistics.median(xs) if xs else None


def survey_fig12_ratio(R):
    """RDMA systems over the baselines: medians at the highest GET share and most clients."""
    rs = sel(R, "survey-matrix", dist="uniform")
    if not rs:
        return []
    rr = max(r["workload"]["read_ratio"] for r in rs)
    cmax = max(r["clients"] for r in rs)
    at = [r for r in rs if r["workload"]["read_ratio"] == rr and r["clients"] == cmax]
    rdma = _median(mops(r) for r in at if label(r) not in BASELINES)
    base = _median(mops(r) for r in at if label(r) in BASELINES)
    return _ratio("RDMA systems over Redis and Memcached", "read-intensive", rdma, base)


def survey_latency_ratios(R, dist):
    """Survey figs. 16-17's ratios: each system's mean latency at the most and the fewest
    GETs, at the most clients; the baselines' largest over the RDMA systems' smallest."""
    rs = sel(R, "survey-matrix", dist=dist)
    if not rs:
        return []
    cmax = max(r["clients"] for r in rs)
    rs = [r for r in rs if r["clients"] == cmax]
    hi, lo = max(r["workload"]["read_ratio"] for r in rs), min(r["workload"]["read_ratio"]
                                                               for r in rs)

    def lat(system, rr):
        return _median(mean_us(r) for r in rs if survey_short(label(r)) == system
                       and r["workload"]["read_ratio"] == rr)
    out = []
    for name, system in (("HydraDB", "hydradb"), ("FaRM", "farm")):
        out += _ratio(name, "latency drop as the GET share falls", lat(system, hi), lat(system, lo))
    out += _ratio("Pilaf", "latency rise as the GET share falls", lat("pilaf", lo),
                  lat("pilaf", hi))
    base = max((mean_us(r) for r in rs if label(r) in BASELINES), default=None)
    rdma = min((mean_us(r) for r in rs if label(r) not in BASELINES), default=None)
    return out + _ratio("Redis and Memcached over RDMA systems", "largest gap", base, rdma)


def survey_fig14_ratio(R):
    rs = sel(R, "survey-fig14", system="fabkv:farm")
    vmax = max((r["workload"]["value_size"] for r in rs), default=None)
    z = _median(mops(r) for r in rs if r["workload"]["value_size"] == vmax
                and r["workload"]["distribution"] == "zipf")
    u = _median(mops(r) for r in rs if r["workload"]["value_size"] == vmax
                and r["workload"]["distribution"] == "uniform")
    return _ratio("Zipfian over Uniform", "larger values", z, u)


def survey_fig18_ratio(R):
    def at(inline):
        rs = [r for r in sel(R, "survey-fig18" + ("-inline" if inline else ""))
              if r["spec"]["verb"] == "write"]
        smin = min((r["spec"]["size"] for r in rs), default=None)
        return _median(mops(r) for r in rs if r["spec"]["size"] == smin)
    return _ratio("inline WRITE over non-inline WRITE", "small payloads", at(True), at(False))


def survey_fig19_ratio(R):
    rs = [r for r in sel(R, "survey-fig19") if label(r) not in BASELINES]
    sizes = sorted({r["workload"]["value_size"] for r in rs})
    drops = []
    for system in {label(r) for r in rs}:
        t = {r["workload"]["value_size"]: mops(r) for r in rs if label(r) == system}
        if t.get(sizes[0]) and t.get(sizes[-1]):
            drops.append(t[sizes[0]] / t[sizes[-1]])
    return [Item("RDMA systems, smallest over largest value", "8 to 512 B", max(drops))] \
        if drops else []


# --- the papers' own designs through the model ---------------------------------------------

def herd_design(series, x, nic):
    rr = {v: k for k, v in HERD_WORKLOADS.items()}.get(x)
    mixers = {"HERD": model.herd_paper, "Pilaf-em-OPT": model.pilaf_em_opt,
              "FaRM-em": model.farm_em, "FaRM-em-VAR": lambda rr: model.farm_em(rr, var=True)}
    if rr is None or series not in mixers:
        return None
    return model.predict(mixers[series](rr), nic)["mops"]


def sequencer_design(series, x, nic):
    kind = {"Baseline": "baseline", "+RPC opts": "rpc-opts", "Spec-S0": "spec-s0",
            "Atomics": "atomics"}.get(x)
    if series != "sequencer" or kind is None:
        return None
    return model.predict(model.sequencer_paper(kind), nic)["mops"]


def drtm_design(series, x, nic):
    if not isinstance(x, (int, float)):
        return None
    f = x / 100
    return 100 * (model.predict(model.drtm_paper(f), nic)["mops"]
                  / model.predict(model.drtm_paper(0.0), nic)["mops"])


@dataclass
class Spec:
    """How fabkv reproduces one figure: the runs, the items, and how the model applies."""
    id: str
    runs: list           # run ids (a trailing '-': every run of that prefix)
    points: object       # records -> [Item]
    measures: str        # what fabkv's value is, in which unit
    model: str = "throughput"  # "throughput": model Mops of each item's record; "relative":
    #                            its record over the second record (both predicted); "": none
    no_model: str = ""   # why the model has no column, when it has none
    design: object = None  # (series, x, nic) -> the model's value for the paper's design
    limits: str = ""     # what cannot be reproduced here, and why
    table_panels: int = 0  # > 0: the table holds only the last n panels (the plot has all)
    plot_panels: bool = True  # False: panels group the comparisons only, one plot for all
    miss_why: dict = field(default_factory=dict)  # series -> why the model misses the paper
    trends_only: bool = False  # the series are one measurement (per NIC): compare trends only


SURVEY_NOTE = ("The survey ran two machines with ConnectX-3 NICs over InfiniBand; here one "
               "2-core machine, fabkv over shm and memcached/redis over loopback TCP.")
LATENCY = "the model predicts throughput, not latency"

SPECS = [
    Spec("herd-fig9", ["herd-48"], herd_fig9, "peak Mops over 1-16 clients, window 4",
         design=herd_design, miss_why={
             "FaRM-em-VAR": "the model charges a 144 B READ the NIC time of a 32 B one; the "
                            "papers state no size-dependent READ rate (docs/model.md, "
                            "Validation)"},
         limits="HERD's 51 client processes on 17 machines are logical clients of one load "
                "thread here; UC and UD transports do not exist on shm (fabkv's endpoints are "
                "reliable)."),
    Spec("herd-fig10", ["herd-fig10", "herd-fig10-farm-"], herd_fig10,
         "Mops at 8 clients, window 4, 95% GET",
         limits="fabkv's values are at least 8 B (the version prefix), so the 4 B point is 8 B. "
                "On shm a SEND of 193..4096 bytes is posted padded to 4097 (fault isolation: "
                "src/fabric/isolation.h), and the counters, hence the model's mix, see the "
                "padded size: herd's answers from 192 B values up cost the model 4 KiB each."),
    Spec("herd-fig11", ["herd-48"], herd_fig11, "mean latency (us) at each client count",
         model="", no_model=LATENCY, plot_panels=False),
    Spec("herd-fig12", ["herd-fig12-"], herd_fig12, "Mops of fabkv:herd, 95% GET",
         limits="The fall past 260 clients comes from RNIC cache misses on connection state; "
                "shm has no NIC cache, and one load thread drives every logical client, so "
                "this shows the server's per-client cost only."),
    Spec("pilaf-fig6", ["pilaf-fig6-"], pilaf_fig6, "entry READs per GET that found its key "
         "(probes_per_hit)", model="", no_model="probes are counted, not modelled",
         limits="Only 3-way cuckoo is implemented; the maximum and linear probing are not run."),
    Spec("pilaf-fig9", ["pilaf-fig9-"], pilaf_fig9, "% of GETs re-read after a torn entry or "
         "extent, 8 clients, 50% GET", model="", no_model="races are counted, not modelled"),
    Spec("guidelines-table3", ["guidelines-table3"], guidelines_table3,
         "Mops, 8 clients, window 16", design=sequencer_design, miss_why={
             "sequencer@Baseline": "the paper's limit is the CPU's contention on the shared "
                                   "counter, which the model does not see (docs/model.md)"},
         limits="'+RPC opts' (Doorbell batching, several queues) has no fabkv counterpart."),
    Spec("guidelines-fig10", ["guidelines-fig10"], guidelines_fig10,
         "% of the GET-only throughput, 4 clients, window 4", model="relative",
         design=drtm_design, trends_only=True,
         miss_why=dict.fromkeys(("CX3", "CIB"), "atomics contend with the READs on the NIC "
                                "(Guidelines sec. 3.4), which a sum of per-verb costs does not "
                                "see (docs/model.md)")),
    Spec("rfrpc-fig5", ["rfrpc-fig5-"], rfrpc_fig5, "Mops against the handler's delay (us)",
         model="", no_model="the model has no server processing time P"),
    Spec("rfrpc-fig13", ["rfrpc-batch-", "rfrpc-server-reply"], rfrpc_fig13,
         "Mops at each batch size's mean latency (us), 4 clients, window 8",
         limits="Batching has no server-reply mode in fabkv: server-reply is shown unbatched.",
         plot_panels=False),
    Spec("rfrpc-fig14", ["rfrpc-batch-"], rfrpc_fig14, "mean latency (us) per batch size "
         "(0 = no batching)", model="", no_model=LATENCY),
    Spec("survey-fig12", ["survey-matrix"],
         lambda R: survey_clients(R, "uniform", mops) + survey_fig12_ratio(R),
         "Mops, uniform keys", limits=SURVEY_NOTE, table_panels=1),
    Spec("survey-fig13", ["survey-matrix"], survey_fig13, "Mops at the largest client count",
         limits=SURVEY_NOTE),
    Spec("survey-fig14", ["survey-fig14"], lambda R: survey_fig14(R) + survey_fig14_ratio(R),
         "Mops of READ-based GETs, 8 clients",
         limits="fabkv's Zipf keys are scrambled over the key space (unclustered); the "
                "clustered deployment is not run. " + SURVEY_NOTE),
    Spec("survey-fig15", ["survey-matrix"], lambda R: survey_clients(R, "zipf", mops),
         "Mops, Zipf 0.99 keys", limits=SURVEY_NOTE, table_panels=1),
    Spec("survey-fig16", ["survey-matrix"],
         lambda R: survey_clients(R, "zipf", mean_us) + survey_latency_ratios(R, "zipf"),
         "mean latency (us), Zipf 0.99", model="", no_model=LATENCY, table_panels=1),
    Spec("survey-fig17", ["survey-matrix"],
         lambda R: survey_clients(R, "uniform", mean_us) + survey_latency_ratios(R, "uniform"),
         "mean latency (us), uniform", model="", no_model=LATENCY, table_panels=1),
    Spec("survey-fig18", ["survey-fig18", "survey-fig18-inline"],
         lambda R: survey_fig18(R) + survey_fig18_ratio(R),
         "Mops of one client's inbound READs/WRITEs (fabkv-perf, window 16)", model="",
         no_model="raw verbs: the model's per-verb rates are its input, not a prediction",
         limits="IPoIB is not available here."),
    Spec("survey-fig19", ["survey-fig19"], lambda R: survey_fig19(R) + survey_fig19_ratio(R),
         "Mops, 8 clients, 50% GET",
         limits=SURVEY_NOTE),
    Spec("survey-fig20", ["survey-fig20"], survey_fig20,
         "max/min completed requests per client, 8 clients, a load thread each "
         "(--client-mode independent)", model="", no_model="fairness is not modelled",
         limits="The 8 client threads share one core through the scheduler, whose fairness "
                "is part of the figure."),
]


# --- side by side: one row per (panel, series, x) ----------------------------------------------

DEFAULT_NIC = "cx3"


def figure_nic(fig):
    return (getattr(fig, "nic", "") if fig is not None else "") or DEFAULT_NIC


def model_of(spec, item, nic):
    """(value, limiting resource) the model predicts for the item's records on `nic`."""
    recs = [r for r in item.records if (r.get("fabric_verbs") or {}).get("server") is not None]
    if not spec.model or len(recs) != len(item.records) or not recs:
        return None
    try:
        pred = [model.predict(model.mix_from_record(r), nic) for r in recs]
    except (ValueError, KeyError, ZeroDivisionError):
        return None
    if spec.model == "relative":
        return 100 * pred[0]["mops"] / pred[1]["mops"], pred[0]["limit"]
    return pred[0]["mops"], pred[0]["limit"]


def side_by_side(spec, fig, items):
    """Rows {panel, series, x, paper, relation, fabkv, model, limit, design, nic}."""
    rows = {}

    def row(panel, series, x, nic):
        return rows.setdefault((panel, series, x), {
            "panel": panel, "series": series, "x": x, "paper": None, "relation": "",
            "fabkv": None, "model": None, "limit": None, "design": None, "nic": nic})

    for p in (fig.points if fig is not None else []):
        r = row("", p.series, p.x, fig.nic_of(p) or DEFAULT_NIC)
        r["paper"], r["relation"] = p.y, p.relation
    for it in items:
        r = row(it.panel, it.series, it.x, it.nic or figure_nic(fig))
        r["nic"] = it.nic or r["nic"]
        r["fabkv"] = it.value
        m = model_of(spec, it, r["nic"])
        if m:
            r["model"], r["limit"] = m
    if spec.design:
        for r in rows.values():
            r["design"] = spec.design(r["series"], r["x"], r["nic"])
    return sorted(rows.values(), key=row_order)


def row_order(r):
    x = r["x"]
    return (r["panel"], r["series"], 0 if isinstance(x, (int, float)) else 1,
            x if isinstance(x, (int, float)) else str(x))


# --- where the shape agrees: computed from the numbers ------------------------------------------

TOLERANCE = 0.10  # two values within 10% of each other count as equal


def direction(a, b, tol=TOLERANCE):
    """+1 when a > b, -1 when a < b, 0 when within tol of each other."""
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    r = a / b
    return 0 if abs(r - 1) <= tol else (1 if r > 1 else -1)


def pairs(ref, other, tol=TOLERANCE, trends_only=False):
    """How many orderings between pairs of keys `other` shares with `ref`: (agree, total,
    [(key a, key b, ref ratio, other ratio)] that differ). Keys are (panel, series, x); a pair
    is two series at one x (an ordering) or one series at two x (a trend), in one panel;
    with trends_only, trends only (series that are the same measurement on different NICs).
    Equal in one and within 2 tol in the other counts as agreeing."""
    keys = sorted((k for k in ref if k in other and ref[k] and other[k]), key=str)
    agree, total, bad = 0, 0, []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[0] != b[0] or (a[1] != b[1] and (trends_only or a[2] != b[2])):
                continue
            d1, d2 = direction(ref[a], ref[b]), direction(other[a], other[b])
            if d1 is None or d2 is None:
                continue
            total += 1
            soft = (d1 == 0 or d2 == 0) and direction(other[a], other[b], 2 * tol) == \
                direction(ref[a], ref[b], 2 * tol)
            if d1 == d2 or soft:
                agree += 1
            else:
                bad.append((a, b, ref[a] / ref[b], other[a] / other[b]))
    return agree, total, bad


def key_text(k):
    panel, series, x = k
    xs = f"{x:g}" if isinstance(x, float) else str(x)
    return f"{series} at {xs}" + (f" ({panel})" if panel else "")


def ordering_text(values):
    """The ordering of the series at the (panel, x) with the most of them, e.g. 'a > b ~ c'."""
    groups = {}
    for (panel, series, x), v in values.items():
        if v:
            groups.setdefault((panel, x), []).append((v, series))
    if not groups:
        return ""

    def rank(g):  # the most series; then the last panel and the largest x
        (panel, x), vs = g
        return len(vs), panel, isinstance(x, (int, float)), x if isinstance(x, (int, float)) else 0
    (panel, x), vs = max(groups.items(), key=rank)
    x = f"{x:g}" if isinstance(x, float) else x
    if len(vs) < 2:
        return ""
    vs.sort(reverse=True)
    text = vs[0][1]
    for (v0, _), (v1, s1) in zip(vs, vs[1:]):
        text += (" ~ " if direction(v0, v1) == 0 else " > ") + s1
    return f"at {x}{f' ({panel})' if panel else ''}: {text}"


FABRIC_WHY = {
    "shm": "on shm a verb is a memory copy by the CPU between two processes of a shared "
           "2-core machine, not work of a NIC",
    "tcp": "on tcp a verb is a message through the kernel's TCP stack",
}



def _listed(bad, n=3):
    return "; ".join(f"{key_text(a)} vs {key_text(b)}: paper {r1:.2f}x, here {r2:.2f}x"
                     for a, b, r1, r2 in bad[:n]) + ("; ..." if len(bad) > n else "")


def shape_sentence(paper, fabkv, model_vals, fabric="shm", nic="cx3", absolute=True,
                   trends_only=False):
    """The report's sentence on a figure, from its numbers: `paper`, `fabkv`, `model_vals` map
    (panel, series, x) to values. Compares orderings (pairs), then the absolute scale."""
    out = []
    agree, total, bad = pairs(paper, fabkv, trends_only=trends_only)
    if total:
        out.append(f"{agree} of {total} orderings between the paper's numbers hold here"
                   + ("" if not bad else f" (not: {_listed(bad)})"))
    elif paper:
        out.append("no two of the paper's numbers have counterparts measured here, so no "
                   "ordering can be compared with the paper")
    else:
        out.append("the paper's text states no number for this figure (its claims are above)")
    order = "" if trends_only else ordering_text(fabkv)
    if order:
        out.append(f"measured here {order}")
    if model_vals:
        a2, n2, _ = pairs(fabkv, model_vals, trends_only=trends_only)
        if n2:
            out.append(f"the model on {nic} with fabkv's own verb mixes orders {a2} of {n2} "
                       "pairs as measured here")
    if bad and model_vals:
        judged = [(a, b) for a, b, *_ in bad if model_vals.get(a) and model_vals.get(b)]
        kept = [(a, b) for a, b in judged if direction(paper[a], paper[b], 2 * TOLERANCE)
                == direction(model_vals[a], model_vals[b], 2 * TOLERANCE)]
        if kept:
            out.append(f"with the same verb mixes the model keeps the paper's order in "
                       f"{len(kept)} of the {len(bad)} pairs that differ here, so there the "
                       "difference is the cost of a verb on this fabric, not the protocols' "
                       "verb counts")
        if len(kept) < len(judged):
            out.append(f"in {len(judged) - len(kept)} the model with fabkv's verb mixes does "
                       "not keep the paper's order either: fabkv's verb mix differs from the "
                       "paper's design there (model columns)")
    common = [k for k in paper if fabkv.get(k) and paper[k]]
    if common and not absolute:
        out.append("where both have a number: " + "; ".join(
            f"{key_text(k)}: paper {paper[k]:.3g}, here {fabkv[k]:.3g}" for k in common[:4]))
    if absolute and common:
        scale = statistics.median(fabkv[k] / paper[k] for k in common)
        if not 0.5 <= scale <= 2:
            out.append(f"fabkv's absolute numbers are {scale:.2g}x the paper's: "
                       f"{FABRIC_WHY.get(fabric, 'this fabric is not the paper NIC')}, so only "
                       "ratios between protocols compare")
    text = "; ".join(out)
    return text[0].upper() + text[1:] + "."


def why(miss_why, row):
    text = miss_why.get(f"{row['series']}@{row['x']}") or miss_why.get(row["series"])
    return f" ({text})" if text else ""


def model_check(rows, miss_why, tolerance=0.20):
    """The model of the paper's designs against the paper's numbers, as one sentence."""
    errs = [(r, r["design"] / r["paper"] - 1) for r in rows
            if r["design"] and r["paper"] and r["relation"] in ("=", "~")]
    if not errs:
        return ""
    misses = [(r, e) for r, e in errs if abs(e) > tolerance]
    text = (f"The model of the paper's own designs is within {tolerance:.0%} of the paper at "
            f"{len(errs) - len(misses)} of {len(errs)} points")
    if misses:
        text += "; it misses " + "; ".join(
            f"{r['series']} at {r['x']} by {e:+.0%}" + why(miss_why, r) for r, e in misses)
    return text + "."


# --- the report ----------------------------------------------------------------------------

def fmt(v, relation=""):
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    rel = "" if relation in ("", "=") else relation
    return rel + (f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}")


def load_papers(path):
    """{id: figure} of a paper.toml (fabkv.paper's schema); {} when there is none."""
    if paper is None or not os.path.exists(path):
        return {}
    return {f.id: f for f in paper.load(path)}


def fabric_of(items):
    provs = [r.get("provider") for it in items for r in it.records if r.get("provider")]
    return max(set(provs), key=provs.count) if provs else "shm"


def values(rows, col):
    return {(r["panel"], r["series"], r["x"]): r[col] for r in rows if r[col] is not None}


def commands(records, spec):
    cmds = []
    for run in spec.runs:
        for r in sel(records, run):
            c = r.get("figures_command")
            if c and c not in cmds:
                cmds.append(c)
    return cmds


def section(spec, fig, rows, items, records, png):
    """The markdown of one figure and its sentence."""
    nic = figure_nic(fig)
    unit = (fig.unit if fig is not None and fig.unit else "")
    title = f"{fig.title} ({fig.paper} {fig.ref})" if fig is not None else "(not in paper.toml)"
    lines = [f"## {spec.id}: {title}", ""]
    if fig is not None:
        lines += [f"**Paper's setup.** {fig.setup}", ""]
        if getattr(fig, "testbed", ""):
            lines += [f"**Paper's testbed.** {fig.testbed}", ""]
        if fig.claims:
            lines += ["**The paper's claims.**", ""] + [f"- {c}" for c in fig.claims] + [""]
    else:
        lines += ["The paper's numbers are missing: python/fabkv/paper.toml has no such id.", ""]
    cmds = commands(records, spec)
    lines += [f"**fabkv here.** {spec.measures}; " + (
        f"{len(items)} values from:" if items else "no records: the run did not complete "
        "(see the runner's output).")] + [""] + [f"    {c}" for c in cmds] + [""]
    if spec.limits:
        lines += [f"**Not reproduced here.** {spec.limits}", ""]
    lines += [f"**Model.** " + (f"{model.NICS[nic]['name']}" + (
        "" if fig is not None and fig.nic else " (the paper's NIC is not in the model: "
        "ConnectX-3 shown)") if spec.model else f"none: {spec.no_model}."), ""]
    shown = rows
    if spec.table_panels:
        keep = sorted({r["panel"] for r in rows if r["panel"]})[-spec.table_panels:]
        shown = [r for r in rows if not r["panel"] or r["panel"] in keep]
        lines += [f"The table shows panel {', '.join(keep)}; the plot has all.", ""]
    lines += [f"| panel | series | x | paper ({unit or 'text'}) | fabkv here | "
              f"model: fabkv's mix on {nic} | model: paper's design on {nic} |",
              "|---|---|---|---|---|---|---|"]
    for r in shown:
        m = "-" if r["model"] is None else f"{fmt(r['model'])} ({r['limit']})"
        lines.append(f"| {r['panel']} | {r['series']} | {fmt(r['x'])} | "
                     f"{fmt(r['paper'], r['relation'])} | {fmt(r['fabkv'])} | {m} | "
                     f"{fmt(r['design'])} |")
    if png:
        lines += ["", f"![{spec.id}]({png})"]
    return lines


def verdict(spec, fig, rows, items):
    absolute = spec.model == "throughput" and fig is not None and fig.unit in ("Mops", "Mrps")
    text = shape_sentence(values(rows, "paper"), values(rows, "fabkv"), values(rows, "model"),
                          fabric_of(items), figure_nic(fig), absolute, spec.trends_only)
    check = model_check(rows, spec.miss_why)
    return text + (" " + check if check else "")


def _draw(ax, rows, col, style, label_suffix=""):
    """Column `col` of `rows`: per series a line over numeric x, or a bar (measured: style "-")
    or a marker (model "--": diamonds; paper "x": black crosses) per string x. Series colours
    and category places come from all of `rows`, so that the three columns line up."""
    series = sorted({r["series"] for r in rows})
    cats = sorted({str(r["x"]) for r in rows if not isinstance(r["x"], (int, float))})
    w = 0.8 / max(1, len(series))
    for i, s in enumerate(series):
        pts = [(r["x"], r[col]) for r in rows if r["series"] == s and r[col] is not None]
        num = sorted(p for p in pts if isinstance(p[0], (int, float)))
        cat = [(cats.index(str(p[0])) + i * w, p[1]) for p in pts
               if not isinstance(p[0], (int, float))]
        if style == "x":
            both = num + cat
            ax.plot([p[0] for p in both], [p[1] for p in both], "kx", markersize=9)
            continue
        if num:
            ax.plot([p[0] for p in num], [p[1] for p in num], style, marker="o", color=f"C{i}",
                    label=s + label_suffix)
        if cat and style == "-":
            ax.bar([p[0] for p in cat], [p[1] for p in cat], w, color=f"C{i}",
                   label=s + label_suffix)
        elif cat:
            ax.plot([p[0] for p in cat], [p[1] for p in cat], "D", color=f"C{i}",
                    markeredgecolor="black", label=s + label_suffix)
    if cats:
        ax.set_xticks([c + 0.4 - w / 2 for c in range(len(cats))])
        ax.set_xticklabels(cats, fontsize=7)


def _spans(vals, factor=30):
    vals = [v for v in vals if isinstance(v, (int, float)) and v > 0]
    return len(vals) > 1 and max(vals) / min(vals) > factor


def _scales(ax, rows):
    """Logarithmic axes where the values span more than 30x (clients 1-128, keys 100-20000)."""
    if _spans([r["x"] for r in rows]) and all(
            isinstance(r["x"], (int, float)) and r["x"] > 0 for r in rows):
        ax.set_xscale("log", base=2)
    if _spans([r["fabkv"] for r in rows]):
        ax.set_yscale("log")


def plot(spec, fig, rows, out):
    """figure-id.png: per panel fabkv's values (solid); the model (dashed) and the paper's
    numbers (black crosses) on a second axis when the unit is throughput on the NIC."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    if any(isinstance(r["x"], (int, float)) for r in rows):  # a ratio the text states (named
        rows = [r for r in rows if isinstance(r["x"], (int, float))]  # x) stays in the table
    panels = sorted({r["panel"] for r in rows if r["fabkv"] is not None}) if spec.plot_panels \
        else [None]
    if not panels:
        return None
    f, axes = plt.subplots(1, len(panels), squeeze=False, figsize=(4.2 * len(panels) + 1, 3.4))
    for ax, panel in zip(axes[0], panels):
        mine = [r for r in rows if panel is None or r["panel"] in (panel, "")]
        _draw(ax, mine, "fabkv", "-", " (here)")
        other = ax.twinx() if spec.model == "throughput" else ax
        if spec.model:
            _draw(other, mine, "model", "--", " (model)")
        _draw(other, mine, "paper", "x")
        if other is not ax:
            other.set_ylabel(f"model / paper ({figure_nic(fig)}, Mops)", fontsize=8)
        _scales(ax, mine)
        ax.set_title(panel or "", fontsize=9)
        ax.set_xlabel(fig.x[:50] if fig is not None else "x", fontsize=8)
        ax.set_ylabel(spec.measures[:45], fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[0][0].legend(fontsize=6)
    f.suptitle(f"{spec.id}: fabkv here (solid, bars), model (dashed, diamonds), paper (x)",
               fontsize=9)
    f.tight_layout()
    name = f"{spec.id}.png"
    f.savefig(os.path.join(out, name), dpi=100)
    plt.close(f)
    return name


def render(records, out, paper_path=PAPER_TOML, only=None, failures=()):
    """figures.md, figures.json and the PNGs in `out`; returns the markdown. `failures`: the
    runs that failed, named at the top."""
    os.makedirs(out, exist_ok=True)
    papers = load_papers(paper_path)
    try:
        import matplotlib  # noqa: F401
        can_plot = True
    except ImportError:
        can_plot = False
    md = ["# The papers' figures, run here", "", intro(records, papers, can_plot), ""]
    if failures:
        md += ["**Runs that failed** (their figures lack those values):", ""]
        md += [f"- {f}" for f in failures] + [""]
    doc = []
    for spec in SPECS:
        if only and spec.id not in only:
            continue
        fig = papers.get(spec.id)
        items = [i for i in spec.points(records) if i.value is not None]
        rows = side_by_side(spec, fig, items)
        png = plot(spec, fig, rows, out) if can_plot and items else None
        text = verdict(spec, fig, rows, items)
        md += section(spec, fig, rows, items, records, png) + ["", f"**Shape.** {text}", ""]
        doc.append({"id": spec.id, "title": fig.title if fig else None, "measures": spec.measures,
                    "nic": figure_nic(fig), "model": spec.model or None,
                    "no_model": spec.no_model or None, "limits": spec.limits or None,
                    "rows": rows, "sentence": text, "png": png})
    with open(os.path.join(out, "figures.md"), "w") as f:
        f.write("\n".join(md))
    with open(os.path.join(out, "figures.json"), "w") as f:
        json.dump(doc, f, indent=1, default=str)
    return "\n".join(md)


def intro(records, papers, can_plot):
    m = next((r.get("machine") for r in records if r.get("machine")), {}) or {}
    loads = [r["machine"]["loadavg_1m"] for r in records
             if (r.get("machine") or {}).get("loadavg_1m") is not None]
    text = (f"{len(records)} records; machine {m.get('model', '?')}, {m.get('cpus', '?')} "
            f"CPUs, kernel {m.get('kernel', '?')}")
    if loads:
        text += f"; 1-minute load average {min(loads):.1f} .. {max(loads):.1f}"
    text += (". Each section: the paper's setup and claims (python/fabkv/paper.toml), what "
             "fabkv ran, and one table with the paper's numbers, fabkv's measurement here and "
             "the NIC model's predictions (python/fabkv/model.py) side by side; then a sentence "
             "computed from those numbers. docs/figures.md says how to read it.")
    if not papers:
        text += " python/fabkv/paper.toml was not found: the paper columns are empty."
    if not can_plot:
        text += " matplotlib is missing: no plots."
    return text


# --- the runner ----------------------------------------------------------------------------

def _opt(args, name, default="1"):
    return args[args.index(name) + 1] if name in args else default


def timeout_of(run):
    """A bound for one invocation: every point of its sweep at its duration, plus starts."""
    points = 1
    for name in ("--systems", "--clients", "--read-ratio", "--distribution", "--value-size",
                 "--client-mode", "--sizes", "--verbs"):
        points *= len(_opt(run.args, name).split(","))
    per = float(_opt(run.args, "--duration", "1")) + float(_opt(run.args, "--warmup", "0.5"))
    return 60 + points * (per + 5) + 20 * len(_opt(run.args, "--systems").split(","))


def execute(run, build, sink):
    """Runs one invocation; appends its records, tagged, to `sink`. Returns (records, error)."""
    tool = {"bench": "fabkv-bench", "perf": "fabkv-perf"}[run.tool]
    argv = [os.path.join(build, "bin", tool)] + run.args
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "run.jsonl")
        try:
            p = subprocess.run(argv + ["--json", path], stdin=subprocess.DEVNULL,
                               capture_output=True, text=True, timeout=timeout_of(run))
            err = None if p.returncode == 0 else (
                f"exit {p.returncode}: {(p.stderr.strip().splitlines() or [''])[-1]}")
        except subprocess.TimeoutExpired:
            err = f"timed out after {timeout_of(run):.0f} s"
        recs = []
        if os.path.exists(path):
            with open(path) as f:
                recs = [json.loads(line) for line in f if line.strip()]
    command = " ".join([tool] + run.args)
    for r in recs:
        r.update(run.tags, figures_run=run.id, figures_command=command)
        sink.write(json.dumps(r) + "\n")
    sink.flush()
    return recs, err


def needed(only):
    """The run ids (prefixes) the chosen figures read; None: all."""
    if not only:
        return None
    return [p for s in SPECS if s.id in only for p in s.runs]


def run_all(quick, out, build, only=None):
    os.makedirs(out, exist_ok=True)
    wanted = needed(only)
    todo = [r for r in runs(quick) if wanted is None or any(
        r.id == w or (w.endswith("-") and r.id.startswith(w)) for w in wanted)]
    start = time.monotonic()
    failures = []
    with open(os.path.join(out, "records.jsonl"), "w") as sink:
        for i, run in enumerate(todo, 1):
            t0 = time.monotonic()
            recs, err = execute(run, build, sink)
            print(f"figures: [{i}/{len(todo)}] {run.id}: {len(recs)} records in "
                  f"{time.monotonic() - t0:.0f} s" + (f" ({err})" if err else ""), flush=True)
            if err:
                failures.append(f"{run.id}: {err}")
    wall = time.monotonic() - start
    print(f"figures: {len(todo)} runs in {wall:.0f} s", flush=True)
    return wall, failures


def read_records(path):
    """Every record of a records.jsonl: fabkv's, the baselines' and fabkv-perf's."""
    return model.read_jsonl(path)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run the experiments, then render")
    r.add_argument("--quick", action="store_true", help="fewer points, shorter runs")
    r.add_argument("--out", default=os.path.join(ROOT, "reports",
                                                 "figures-" + time.strftime("%Y%m%d-%H%M%S")))
    r.add_argument("--build", default=os.environ.get("BUILD", os.path.join(ROOT, "build")))
    r.add_argument("--only", default="", help="figure ids, comma-separated (default: all)")
    r.add_argument("--paper", default=PAPER_TOML, help="the papers' numbers (paper.toml)")
    g = sub.add_parser("render", help="the report from recorded JSON lines")
    g.add_argument("--input", required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--only", default="")
    g.add_argument("--paper", default=PAPER_TOML)
    a = ap.parse_args(argv)
    only = [x for x in a.only.split(",") if x]
    failures = []
    if a.cmd == "run":
        wall, failures = run_all(a.quick, a.out, a.build, only)
        with open(os.path.join(a.out, "runs.json"), "w") as f:
            json.dump({"quick": a.quick, "wall_s": round(wall, 1), "failures": failures}, f)
        a.input = os.path.join(a.out, "records.jsonl")
    try:
        records = read_records(a.input)
    except (OSError, ValueError) as e:
        print(f"figures: {a.input}: {e}", file=sys.stderr)
        return 1
    render(records, a.out, a.paper, only, failures)
    print(f"figures: wrote {os.path.join(a.out, 'figures.md')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
