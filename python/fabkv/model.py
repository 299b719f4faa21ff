#!/usr/bin/python3
"""A NIC cost model: a protocol's per-request verb mix -> predicted throughput on a NIC.

    python3 -m fabkv.model results.jsonl [--nic cx3|cib|cx3-rfrpc]

For each fabkv-bench record (docs/bench.md, "JSON record") the reader turns the raw counter
diffs `fabric_verbs{client, server}` over `requests` into the server's per-request work:
inbound verbs (what the clients post lands on the server's NIC), outbound verbs (what the
server posts), PCIe bytes in both directions, and server CPU. `predict()` charges that work to
four resources of one server, each with a capacity taken from the papers' microbenchmarks, and
the most used resource sets the throughput:

    t_in   = sum_k n_in[k]  / R_in[k]        inbound NIC processing (Mops per verb kind)
    t_out  = sum_k n_out[k] / R_out[k]       outbound NIC processing
    t_pcie = max(mmio / (B e_mmio) + dma / (B e_dma), up / B)   host<->NIC link (bytes)
    t_cpu  = cpu_us / cores                  server CPU
    Mops   = 1 / max(t_in, t_out, t_pcie, t_cpu)

docs/model.md gives the equations in full, every constant with its paper, section, figure or
table, the validation against the papers and the model's limits. Pure Python, no dependencies:
python/fabkv/report.py can import it.
"""
import argparse
import json
import math
import sys
from dataclasses import dataclass, field


@dataclass(frozen=True)
class C:
    """One constant and where it comes from."""
    value: float
    source: str


# Seeds: 000 = HERD, 001 = Design Guidelines, 004 = RF-RPC (../shared/seeds/README.md).
_PCIE2_X8 = {  # HERD sec. 3.1: ConnectX-3 on PCIe 2.0 x8; Guidelines fig. 2a: gen 2 sizes
    "lanes": C(8, "HERD sec. 3.1 (PCIe 2.0 x8)"),
    "lane_mb_s": C(500.0, "Guidelines fig. 2a (PCIe 2.0 per-lane bandwidth)"),
    "req_hdr": C(24, "Guidelines fig. 2a (PCIe 2.0 request header)"),
    "cpl_hdr": C(20, "Guidelines fig. 2a (PCIe 2.0 completion header)"),
}
_PCIE3_X16 = {
    "lanes": C(16, "Guidelines table 2 (CIB: PCIe 3.0 x16)"),
    "lane_mb_s": C(984.6, "Guidelines fig. 2a (PCIe 3.0 per-lane bandwidth)"),
    "req_hdr": C(26, "Guidelines fig. 2a (PCIe 3.0 request header)"),
    "cpl_hdr": C(22, "Guidelines fig. 2a (PCIe 3.0 completion header)"),
}
_COMMON = {
    "crc": C(128, "Guidelines sec. 2.1 (read completion combining size; 128 B assumed for AMD)"),
    "wqe_hdr_rc": C(36, "Guidelines table 1 (RC/UC WQE header)"),
    "wqe_hdr_ud": C(68, "Guidelines table 1 (UD WQE header)"),
    "e_mmio": C(80 / 87.5, "Guidelines sec. 5.2.1: non-batched SENDs reach 80 of the 87.5 Mops "
                "MMIO limit (link- and physical-layer overheads)"),
    "e_dma": C(97.2 / 105, "Guidelines sec. 4.2, 5.2.1: the sequencer reaches 97.2 of the "
               "105 M/s DMA limit"),
}

NICS = {
    "cx3": {
        "name": "ConnectX-3, 40 Gb/s InfiniBand, PCIe 2.0 x8 (HERD's cluster, HERD sec. 3.1, 6)",
        **_PCIE2_X8, **_COMMON,
        "in_write": C(35.0, "HERD sec. 3.2.2, fig. 3b: inbound UC WRITEs up to 32 B, ~35 Mops"),
        "in_read": C(19.5, "HERD sec. 3.2.2: inbound and outbound READs ~19.5 Mops"),
        "in_recv": C(21.8, "Guidelines table 5, CX3 RECV (regular)"),
        "in_recv0": C(34.0, "Guidelines table 5, CX3 RECV 0 (header-only)"),
        "in_atomic": C(2.7, "Guidelines sec. 5.4, fig. 14: CX3 atomics 2.7 Mops for any Z"),
        "in_atomic1": C(2.7, "Guidelines sec. 5.4, fig. 14: CX3 atomics 2.7 Mops for any Z"),
        "out_write": C(21.0, "HERD sec. 3.2.2, fig. 4b: outbound (PIO) WRITEs 21 Mops"),
        "out_send": C(21.0, "HERD sec. 3.3: outbound UD SENDs nearly equal outbound WRITEs"),
        "out_send0": C(32.1, "Guidelines table 5, CX3 SEND 0 (header-only)"),
        "out_read": C(19.5, "HERD sec. 3.2.2: inbound and outbound READs ~19.5 Mops"),
        "out_atomic": C(2.7, "Guidelines sec. 5.4 (CX3 serialises atomics)"),
        "cores": C(16, "HERD sec. 3.1: the one socket next to the NIC (16-core Opteron 6272)"),
        "cpu_us": C(1 / 4.2, "HERD sec. 5.7, fig. 13: one core serves 4.2 Mops of HERD"),
        "cpu_us_batched": C(1 / 4.2, "HERD sec. 5.7 (HERD does not batch: as non-batched)"),
    },
    "cib": {
        "name": "Connect-IB, 2x 56 Gb/s InfiniBand, PCIe 3.0 x16 (Guidelines table 2)",
        **_PCIE3_X16, **_COMMON,
        "crc": C(128, "Guidelines sec. 2.1 (read completion combining size, Intel)"),
        "in_write": C(122.0, "Guidelines sec. 5.2.2, fig. 12a: inbound WRITEs as fast as "
                      "header-only RECVs (122 Mops)"),
        "in_read": C(121.6, "Guidelines table 4: inbound 64 B READs, NIC-bound"),
        "in_recv": C(82.0, "Guidelines tables 4, 5: CIB RECV (regular)"),
        "in_recv0": C(122.0, "Guidelines tables 4, 5: CIB RECV 0 (header-only)"),
        "in_atomic": C(52.0, "Guidelines table 4, sec. 5.4: atomics, Z >= 4096 addresses"),
        "in_atomic1": C(2.24, "Guidelines table 4, sec. 5.4: atomics on one address (Z = 1)"),
        "out_write": C(80.0, "Guidelines sec. 5.3.2: outbound UC WRITEs > 28 B, 80 Mops"),
        "out_send": C(157.0, "Guidelines table 4: batched header-only UD SENDs, NIC-bound"),
        "out_send0": C(157.0, "Guidelines table 4: batched header-only UD SENDs, NIC-bound"),
        "out_read": C(88.0, "Guidelines sec. 5.3.2: outbound READs 88 Mops, NIC-bound"),
        "out_atomic": C(52.0, "Guidelines table 4 (as inbound)"),
        "cores": C(14, "Guidelines table 2 (E5-2683-v3, 14 cores)"),
        "cpu_us": C(1 / 6.7, "Guidelines sec. 4.3.1: HERD 6.7 Mrps per core, non-batched"),
        "cpu_us_batched": C(1 / 12.3, "Guidelines sec. 4.3.1: HERD 12.3 Mrps per core, batched"),
    },
}
# RF-RPC measured ConnectX-3 with one outstanding operation per thread (RF-RPC sec. 2.2,
# fig. 1); its server-reply and Jakiro numbers come from that mode, not HERD's windows.
NICS["cx3-rfrpc"] = {
    **NICS["cx3"],
    "name": "ConnectX-3 as RF-RPC measured it: one outstanding op per thread (RF-RPC fig. 1)",
    "in_write": C(11.26, "RF-RPC sec. 2.2, fig. 1: peak inbound IOPS 11.26 Mops"),
    "in_read": C(11.26, "RF-RPC sec. 2.2, fig. 1: peak inbound IOPS 11.26 Mops"),
    "out_write": C(2.11, "RF-RPC sec. 2.2, fig. 1: peak outbound IOPS 2.11 Mops"),
    "out_send": C(2.11, "RF-RPC sec. 2.2, fig. 1: peak outbound IOPS 2.11 Mops"),
}

RESOURCES = ("inbound", "outbound", "pcie", "cpu")


@dataclass
class Verb:
    """`n` operations per request of one kind, as the server's NIC sees them."""
    kind: str                # write, read, send, recv, atomic
    n: float                 # per request
    payload: float = 0.0     # bytes per operation
    inlined: bool = True     # payload in the WQE (outbound WRITE/SEND)
    transport: str = "rc"    # rc/uc (36 B WQE header) or ud (68 B)
    signaled: float = 0.0    # fraction posted with a completion (outbound)
    batch: float = 1.0       # WQEs per Doorbell (outbound; 1 = WQE-by-MMIO)
    contended: bool = False  # atomics on one address
    header_only: bool = False  # SEND/RECV without payload (Guidelines sec. 3.2)


@dataclass
class Mix:
    """A protocol's per-request work at the server: what arrives and what it posts."""
    name: str
    inbound: list = field(default_factory=list)
    outbound: list = field(default_factory=list)
    cpu_requests: float = None  # requests the server CPU handles per request (default: posts)
    cpu_us: float = None        # per handled request, core-us (default: the NIC profile's)
    cores: float = None         # server cores (default: the NIC profile's machine)


def _lines(nbytes):
    return max(1, math.ceil(nbytes / 64))


def _dma_read(nbytes, p):
    """Host->NIC bytes of one DMA read of nbytes: data plus a completion header per Crc."""
    return nbytes + math.ceil(nbytes / p["crc"].value) * p["cpl_hdr"].value if nbytes else 0.0


def _outbound_pcie(v, p):
    """(mmio, dma, up) PCIe bytes of one outbound operation posted by the server."""
    pr = p["req_hdr"].value
    hdr = p["wqe_hdr_ud"].value if v.transport == "ud" else p["wqe_hdr_rc"].value
    lines = 1 if v.header_only else _lines(hdr + (v.payload if v.inlined else 0))
    mmio = dma = 0.0
    reads = 0
    if v.batch > 1:  # Doorbell: one 8 B MMIO per batch, then the NIC DMA-reads the WQEs
        mmio += (8 + pr) / v.batch
        dma += _dma_read(lines * 64, p)
        reads += 1
    else:  # WQE-by-MMIO: one write-combined 64 B MMIO per WQE cache line
        mmio += lines * (64 + pr)
    if not v.inlined and v.payload and v.kind in ("write", "send"):
        dma += _dma_read(v.payload, p)
        reads += 1
    up = reads * pr + v.signaled * (64 + pr)  # read requests; CQEs (64 B assumed)
    return mmio, dma, up


def _inbound_pcie(v, p):
    """(dma, up) PCIe bytes of one operation arriving at the server (responder side)."""
    pr = p["req_hdr"].value
    if v.kind == "read":
        return _dma_read(v.payload, p), pr
    if v.kind == "write":
        return 0.0, v.payload + math.ceil(v.payload / 128) * pr
    if v.kind == "recv":  # payload DMA (none when header-only) and the CQE
        return 0.0, (0.0 if v.header_only else v.payload + pr) + 64 + pr
    if v.kind == "atomic":  # read-modify-write over PCIe
        return _dma_read(8, p), pr + 8 + pr
    return 0.0, 0.0


def _rate(p, direction, v):
    key = f"{direction}_{v.kind}"
    if v.kind in ("recv", "send") and v.header_only:
        key = f"{direction}_{v.kind}0"
    if v.kind == "atomic" and direction == "in" and v.contended:
        key = "in_atomic1"
    return p[key].value


def _pcie_and_nic(mix, p, t):
    """Adds NIC and PCIe time per request to t; returns the PCIe bytes, posts and batched posts."""
    mmio = dma = up = posts = batched = 0.0
    for v in mix.inbound:
        t["inbound"] += v.n / _rate(p, "in", v)
        d, u = _inbound_pcie(v, p)
        dma, up = dma + v.n * d, up + v.n * u
    for v in mix.outbound:
        t["outbound"] += v.n / _rate(p, "out", v)
        m, d, u = _outbound_pcie(v, p)
        mmio, dma, up = mmio + v.n * m, dma + v.n * d, up + v.n * u
        posts += v.n
        batched += v.n if v.batch > 1 else 0.0
    bw = p["lanes"].value * p["lane_mb_s"].value  # MB/s = bytes/us
    down_us = mmio / (bw * p["e_mmio"].value) + dma / (bw * p["e_dma"].value)
    t["pcie"] = max(down_us, up / bw)
    return {"mmio": mmio, "dma": dma, "up": up}, posts, batched


def predict(mix, nic="cx3"):
    """Predicted Mops, the limiting resource, and each resource's us per request and use."""
    p = NICS[nic] if isinstance(nic, str) else nic
    t = dict.fromkeys(RESOURCES, 0.0)
    pcie, posts, batched = _pcie_and_nic(mix, p, t)
    handled = posts if mix.cpu_requests is None else mix.cpu_requests
    per = mix.cpu_us
    if per is None:
        per = p["cpu_us_batched"].value if batched else p["cpu_us"].value
    t["cpu"] = handled * per / (p["cores"].value if mix.cores is None else mix.cores)
    worst = max(t.values())
    return {
        "mix": mix.name,
        "nic": nic if isinstance(nic, str) else p["name"],
        "mops": 1.0 / worst if worst > 0 else math.inf,
        "limit": max(t, key=t.get),
        "us_per_request": t,
        "utilisation": {k: (x / worst if worst > 0 else 0.0) for k, x in t.items()},
        "pcie_bytes": pcie,
    }


# --- fabkv-bench records -> Mix ----------------------------------------------------------

# fabkv's endpoints are reliable (rdm: connected QPs under verbs;ofi_rxm on RDMA hardware), so
# its WQEs have the 36 B RC header; the atomics of seq-atomic all hit one counter.
_CONTENDED = {"seq-atomic"}


def _per(stats, requests):
    posted = stats.get("posted", 0)
    return {
        "n": posted / requests,
        "payload": stats.get("bytes", 0) / posted if posted else 0.0,
        "inlined": posted > 0 and stats.get("inlined", 0) * 2 >= posted,
        "signaled": stats.get("signaled", 0) / posted if posted else 0.0,
        "header_only": posted > 0 and stats.get("bytes", 0) == 0,  # X = 0: Guidelines sec. 3.2
    }


def mix_from_record(rec):
    """The server's per-request verb mix of one fabkv-bench record (needs fabric_verbs)."""
    fv = rec.get("fabric_verbs") or {}
    client, server = fv.get("client"), fv.get("server")
    requests = rec.get("requests") or rec.get("ops")
    if not client or not server or not requests:
        raise ValueError("record has no fabric_verbs{client, server} or no requests")
    name = f"{rec.get('system', '?')}:{rec.get('protocol', '?')}"
    mix = Mix(name=name)
    for kind, stats in client.items():  # what the clients post arrives at the server
        if kind == "recv" or not stats.get("posted"):
            continue
        x = _per(stats, requests)
        inbound_kind = "recv" if kind == "send" else kind
        mix.inbound.append(Verb(inbound_kind, x["n"], x["payload"], header_only=x["header_only"],
                                contended=rec.get("protocol") in _CONTENDED))
    for kind, stats in server.items():  # what the server posts leaves its NIC
        if kind == "recv" or not stats.get("posted"):
            continue
        x = _per(stats, requests)
        mix.outbound.append(Verb(kind, x["n"], x["payload"], inlined=x["inlined"],
                                 signaled=x["signaled"], header_only=x["header_only"]))
    return mix


def read_jsonl(path, required=()):
    """Every record of a JSON Lines file (fabkv-bench's, fabkv-perf's), blank lines skipped;
    ValueError names the file and line that is not JSON or lacks one of `required`."""
    out = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not JSON ({e})") from None
            missing = [k for k in required if k not in rec]
            if missing:
                raise ValueError(f"{path}:{n}: missing {', '.join(missing)}")
            out.append(rec)
    return out


def read_records(path):
    """The records of a fabkv-bench JSON Lines file that carry fabric verb counters."""
    return [r for r in read_jsonl(path) if (r.get("fabric_verbs") or {}).get("server") is not None]


# --- the papers' own designs, as verb mixes -------------------------------------------------

SK, SV = 16, 32  # HERD sec. 5.3: fig. 9's 48-byte items


def herd_paper(read_ratio=0.95):
    """HERD sec. 4.2-4.3: a UC WRITE request (GET: 16 B keyhash; PUT: keyhash, 2 B LEN, value),
    an inlined unsignaled UD SEND response (GET: the value)."""
    req = read_ratio * SK + (1 - read_ratio) * (SK + 2 + SV)
    return Mix(f"HERD (paper) rr={read_ratio:g}",
               inbound=[Verb("write", 1, req)],
               outbound=[Verb("send", 1, read_ratio * SV, transport="ud")])


def herd_cib(batch=1.0):
    """Guidelines sec. 4.3.1: HERD (16 B keys, 32 B values, 95% GET) on CIB, responses one by
    one by WQE-by-MMIO or by Doorbell (batch size not given: 16, as in sec. 5.2.1)."""
    mix = herd_paper(0.95)
    mix.name = f"HERD on CIB ({'batched' if batch > 1 else 'non-batched'}, paper)"
    mix.outbound[0].batch = batch
    return mix


def drtm_paper(put_fraction):
    """Guidelines sec. 4.3.2: emulated DrTM-KV, GET = 1 READ of a 48 B item, PUT = 2 atomics
    on random items (16 M of them: Z >= 4096 on CIB)."""
    return Mix(f"DrTM-KV (paper) put={put_fraction:g}",
               inbound=[Verb("read", 1 - put_fraction, SK + SV),
                        Verb("atomic", 2 * put_fraction, 8)])


# Guidelines sec. 4.3.2, fig. 10: throughput relative to GET-only, (nic, PUT fraction, ratio).
DRTM_RATIOS = [("cx3", 0.1, 0.28), ("cib", 0.1, 0.69), ("cx3", 1.0, 0.04), ("cib", 1.0, 0.12)]


def drtm_validation():
    """[(nic, PUT fraction, paper ratio, model ratio)] for DRTM_RATIOS."""
    def mops(f, nic):
        return predict(drtm_paper(f), nic)["mops"]
    return [(nic, f, paper, mops(f, nic) / mops(0, nic)) for nic, f, paper in DRTM_RATIOS]


def pilaf_em_opt(read_ratio=1.0):
    """HERD sec. 5.1.1: GET = 1.6 32 B bucket READs + one SV READ; PUT = a SK+SV SEND to the
    server and a SEND back, all optimisations on (unreliable, inlined, selectively signaled)."""
    w = 1 - read_ratio
    return Mix(f"Pilaf-em-OPT (paper) rr={read_ratio:g}",
               inbound=[Verb("read", read_ratio * 1.6, 32), Verb("read", read_ratio, SV),
                        Verb("recv", w, SK + SV)],
               outbound=[Verb("send", w, 0, transport="ud")] if w else [])


def farm_em(read_ratio=1.0, var=False, sp=8):
    """HERD sec. 5.1.2: GET = one 6*(SK+SV) B READ (FaRM-em) or a 6*(SK+SP) B READ and a SV B
    READ (FaRM-em-VAR; SP, the pointer size, is not given: 8 B assumed); PUT = a SK+SV B UC
    WRITE in and a UC WRITE back."""
    w = 1 - read_ratio
    gets = ([Verb("read", read_ratio, 6 * (SK + sp)), Verb("read", read_ratio, SV)] if var
            else [Verb("read", read_ratio, 6 * (SK + SV))])
    return Mix(f"FaRM-em{'-VAR' if var else ''} (paper) rr={read_ratio:g}",
               inbound=gets + ([Verb("write", w, SK + SV)] if w else []),
               outbound=[Verb("write", w, 0)] if w else [])


def sequencer_paper(kind):
    """Guidelines sec. 4.2: the three sequencers (8 B counter) on CIB."""
    if kind == "baseline":  # HERD RPCs: WRITE request, non-batched UD SEND, 7.0 Mrps/core
        return Mix("seq HERD-RPC baseline (paper)", inbound=[Verb("write", 1, 8)],
                   outbound=[Verb("send", 1, 8, transport="ud")], cpu_us=1 / 7.0)
    if kind == "rpc-opts":  # + Doorbell batching (15.9 per batch at 6 cores), multi-queue
        return Mix("seq +RPC opts (paper)", inbound=[Verb("write", 1, 8)],
                   outbound=[Verb("send", 1, 8, transport="ud", batch=15.9)],
                   cpu_us=1 / 27.4, cores=6)
    if kind == "spec-s0":  # header-only SENDs both ways, batched responses
        return Mix("seq Spec-S0 (paper)", inbound=[Verb("recv", 1, 0, header_only=True)],
                   outbound=[Verb("send", 1, 0, transport="ud", batch=15.9, header_only=True)],
                   cpu_requests=0)
    if kind == "atomics":  # every client fetch-and-adds one counter
        return Mix("seq atomics (paper)", inbound=[Verb("atomic", 1, 8, contended=True)])
    raise ValueError(kind)


def rfrpc_paper(kind):
    """RF-RPC sec. 5.1, 5.3: Jakiro = a WRITE request and 1.005 READs of F = 256 B per call;
    ServerReply = a WRITE request and a WRITE of the result (16 B key, 32 B value)."""
    if kind == "jakiro":
        return Mix("Jakiro (paper)", inbound=[Verb("write", 1, SK), Verb("read", 1.005, 256)],
                   cpu_requests=1)
    return Mix("ServerReply (paper)", inbound=[Verb("write", 1, SK)],
               outbound=[Verb("write", 1, SV)])


# What the papers measured, (mix, nic, Mops, where).
PAPER_RESULTS = [
    (herd_paper(0.95), "cx3", 18.5, "HERD sec. 5.3, fig. 9 (read-intensive, ~18.5)"),
    (herd_paper(0.5), "cx3", 18.5, "HERD sec. 5.3, fig. 9 (write-intensive, ~18.5)"),
    (pilaf_em_opt(1.0), "cx3", 7.5, "HERD sec. 5.3, fig. 9 (Pilaf-em-OPT GETs 7.5)"),
    (farm_em(1.0), "cx3", 9.2, "HERD sec. 5.3, fig. 9 (FaRM-em GETs 9.2)"),
    (farm_em(1.0, var=True), "cx3", 7.5, "HERD sec. 5.3, fig. 9 (FaRM-em-VAR GETs 7.5)"),
    (herd_cib(1), "cib", 72.8, "Guidelines sec. 4.3.1, fig. 9 (non-batched peak 72.8)"),
    (herd_cib(16), "cib", 98.3, "Guidelines sec. 4.3.1, fig. 9 (batched peak 98.3, DMA bw)"),
    (sequencer_paper("baseline"), "cib", 26.0, "Guidelines table 3 (baseline, CPU)"),
    (sequencer_paper("rpc-opts"), "cib", 97.2, "Guidelines table 3 (+RPC opts, DMA bw)"),
    (sequencer_paper("spec-s0"), "cib", 122.0, "Guidelines table 3 (Spec-S0, NIC)"),
    (sequencer_paper("atomics"), "cib", 2.24, "Guidelines table 3 (atomics, PCIe RTT)"),
    (rfrpc_paper("jakiro"), "cx3-rfrpc", 5.5, "RF-RPC sec. 5.3.1, fig. 7 (Jakiro 5.5)"),
    (rfrpc_paper("reply"), "cx3-rfrpc", 2.1, "RF-RPC sec. 5.3.1, fig. 7 (ServerReply 2.1)"),
    (rfrpc_paper("jakiro"), "cx3", 5.5, "RF-RPC fig. 7 against HERD's windowed CX3"),
    (rfrpc_paper("reply"), "cx3", 2.1, "RF-RPC fig. 7 against HERD's windowed CX3"),
]


def validation():
    """[(name, nic, paper Mops, model Mops, error, limit, where)] for PAPER_RESULTS."""
    rows = []
    for mix, nic, paper, where in PAPER_RESULTS:
        r = predict(mix, nic)
        rows.append((mix.name, nic, paper, r["mops"], r["mops"] / paper - 1, r["limit"], where))
    return rows


# --- CLI ------------------------------------------------------------------------------------

def _verbs_text(mix):
    def one(d, v):
        note = " header-only" if v.header_only else ""
        if d == "out" and v.payload and not v.inlined and not note:
            note = " not inlined"
        return f"{d} {v.kind} {v.n:.2f}x{v.payload:.0f}B{note}"

    parts = [one("in", v) for v in mix.inbound if v.n]
    parts += [one("out", v) for v in mix.outbound if v.n]
    return ", ".join(parts) or "no verbs"


def format_prediction(rec, r, mix):
    """One record's table: its verbs per request, then each resource's time and use."""
    w = rec.get("workload") or {}
    measured = rec.get("throughput_ops")
    meas = f"{measured / 1e6:.3f} Mops measured here" if measured else "not measured"
    lines = [f"{mix.name} rr={w.get('read_ratio')} vs={w.get('value_size')} "
             f"c={rec.get('clients')} w={rec.get('window')}: {meas}",
             f"  verbs/request: {_verbs_text(mix)}",
             f"  model on {r['nic']}: {r['mops']:.1f} Mops, limited by {r['limit']}",
             f"    {'resource':10} {'us/request':>10} {'use':>5}"]
    for k in RESOURCES:
        lines.append(f"    {k:10} {r['us_per_request'][k]:10.4f} {r['utilisation'][k]:5.2f}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m fabkv.model", description=__doc__.split("\n")[0])
    ap.add_argument("results", nargs="?", help="fabkv-bench JSON Lines (docs/bench.md)")
    ap.add_argument("--nic", choices=sorted(NICS), default="cx3")
    ap.add_argument("--validate", action="store_true", help="the papers' numbers vs the model")
    a = ap.parse_args(argv)
    if a.validate or not a.results:
        print(f"{'design':38} {'nic':10} {'paper':>7} {'model':>7} {'error':>7}  limit")
        for name, nic, paper, model, err, limit, _ in validation():
            print(f"{name:38} {nic:10} {paper:7.2f} {model:7.2f} {err:+7.0%}  {limit}")
        print("\nDrTM-KV throughput relative to GET-only (Guidelines fig. 10)")
        for nic, f, paper, ratio in drtm_validation():
            print(f"  {nic:4} PUT {f:4.0%}: paper {paper:.2f}  model {ratio:.2f}")
        return 0
    try:
        records = read_records(a.results)
    except (OSError, ValueError) as e:
        print(f"fabkv.model: {e}", file=sys.stderr)
        return 1
    if not records:
        print(f"fabkv.model: {a.results}: no record with fabric_verbs", file=sys.stderr)
        return 1
    print(f"NIC: {NICS[a.nic]['name']}")
    for rec in records:
        mix = mix_from_record(rec)
        print(format_prediction(rec, predict(mix, a.nic), mix))
    return 0


if __name__ == "__main__":
    sys.exit(main())
