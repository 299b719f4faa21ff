#!/usr/bin/env bash
# The main job's benchmark: builds fabkv-bench and fabkv-server if needed, runs a short default
# matrix (clients 1,4,8 x 95%/50% GET x uniform/Zipf, 16 B keys, 32 B values, 2 s per run)
# against fabkv:herd and fabkv:pilaf over shm, fabkv:memcached (fabkv-server --memcached, driven
# as memcached is, docs/memcached.md), memcached and redis (each server pinned to core 0, the load
# generator to core 1), then the raw SEND/SEND echo of the same fabric (fabkv-perf) and the
# load generator alone (the null target), prints the summary table and the headline (issue
# #12: fabkv/memcached, fabkv/redis and fabkv/echo at 1 client, window 1) and writes the
# report with its plots.
#
#   scripts/demo-bench.sh [OUT_DIR]        default OUT_DIR: reports/<timestamp>
#
# Environment overrides: BUILD (build dir), SYSTEMS, CLIENTS, READ_RATIOS, DISTRIBUTIONS,
# VALUE_SIZES, DURATION, KEYS, PROVIDER, JOBS. A few minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$ROOT/reports/$(date +%Y%m%d-%H%M%S)}
SYSTEMS=${SYSTEMS:-fabkv:herd,fabkv:pilaf,fabkv:memcached,memcached,redis}
CLIENTS=${CLIENTS:-1,4,8}
READ_RATIOS=${READ_RATIOS:-0.95,0.5}
DISTRIBUTIONS=${DISTRIBUTIONS:-uniform,zipf}
VALUE_SIZES=${VALUE_SIZES:-32}
DURATION=${DURATION:-2}
KEYS=${KEYS:-100000}
PROVIDER=${PROVIDER:-shm}

if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
fi
ninja -C "$BUILD" -j"${JOBS:-2}" fabkv-bench fabkv-server fabkv-perf >/dev/null

mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
echo "fabkv-bench: $SYSTEMS on $PROVIDER, clients $CLIENTS, GET ratio $READ_RATIOS, $DISTRIBUTIONS," \
     "values $VALUE_SIZES B, ${DURATION}s per run -> $OUT"
"$BUILD/bin/fabkv-bench" matrix --systems "$SYSTEMS" --provider "$PROVIDER" \
  --clients "$CLIENTS" --read-ratio "$READ_RATIOS" --distribution "$DISTRIBUTIONS" \
  --keys "$KEYS" --key-size 16 --value-size "$VALUE_SIZES" --window 1 \
  --duration "$DURATION" --warmup 0.5 --json "$RESULTS"
# The raw fabric's request/response floor, pinned like the runs above: one 48-byte SEND each
# way (fabkv:herd's request and response are about that size), 1 client, window 1.
"$BUILD/bin/fabkv-perf" --provider "$PROVIDER" --mode echo --echo send-send --window 1 \
  --clients 1 --sizes 48 --server-core 0 --client-core 1 --log warn --json "$OUT/echo.jsonl" >/dev/null
# The load generator alone: its own CPU per request against the null target (no server).
"$BUILD/bin/fabkv-bench" --systems null --clients 1 --window 1 --keys "$KEYS" --key-size 16 \
  --value-size 32 --duration 1 --warmup 0.3 --quiet --json "$OUT/null.jsonl" >/dev/null
"$BUILD/bin/fabkv-bench" report --input "$RESULTS" --out "$OUT"
echo
# The tables of summary.md (runs, ratios, verbs per request).
sed -n '/^## /,$p' "$OUT/summary.md"
echo
/usr/bin/python3 - "$RESULTS" "$OUT/echo.jsonl" "$OUT/null.jsonl" <<'PY'
import json, statistics, sys

def lines(path):
    try:
        with open(path) as f:
            return [json.loads(l) for l in f if l.strip()]
    except OSError:
        return []

runs, echo, null = (lines(p) for p in sys.argv[1:4])
label = lambda r: f"{r['system']}:{r['protocol']}" if r["system"] == "fabkv" else r["system"]
one = [r for r in runs if r["clients"] == 1 and r["window"] == 1]
dists = sorted({r["workload"]["distribution"] for r in one})
dist = "uniform" if "uniform" in dists else (dists[0] if dists else None)
rr = max((r["workload"]["read_ratio"] for r in one if r["workload"]["distribution"] == dist), default=None)
sel = [r for r in one if r["workload"]["distribution"] == dist and r["workload"]["read_ratio"] == rr]
vs = min((r["workload"]["value_size"] for r in sel), default=None)
sel = [r for r in sel if r["workload"]["value_size"] == vs]
med = lambda rs, f: statistics.median(f(r) for r in rs) if rs else None
systems = {}
for r in sel:
    systems.setdefault(label(r), []).append(r)
tput = {s: med(rs, lambda r: r["throughput_ops"]) for s, rs in systems.items()}
p50 = {s: med(rs, lambda r: r["latency_us"]["p50"]) for s, rs in systems.items()}
x = lambda a, b: f"{a / b:.1f}x" if a is not None and b else "-"
q = lambda a, b: f"{a / b:.3f}" if a is not None and b else "-"

print(f"## Headline: 1 client, window 1 ({dist}, {rr * 100:.0f}% GET, {vs} B values; "
      "issue #12 goals: >= 20x the baselines' throughput, p50 <= 0.1x theirs, <= 1.25x the echo)"
      if sel else "## Headline: no 1-client, window-1 runs in this matrix")
print()
if sel:
    print("| system | K ops/s | p50 us | throughput / memcached | p50 / memcached | throughput / redis | p50 / redis |")
    print("|---|---|---|---|---|---|---|")
    for s in sorted(systems, key=lambda s: (not s.startswith("fabkv"), s)):
        cells = [f"{tput[s] / 1e3:.1f}", f"{p50[s]:.2f}"]
        for b in ("memcached", "redis"):
            fabkv = s.startswith("fabkv")
            cells += [x(tput[s], tput.get(b)) if fabkv else "", q(p50[s], p50.get(b)) if fabkv else ""]
        print(f"| {s} | " + " | ".join(cells) + " |")
    print()
e50 = echo[0]["latency_us"]["p50"] if echo else None
h50 = p50.get("fabkv:herd")
if e50 and h50:
    print(f"Echo ratio: fabkv:herd p50 {h50:.2f} us / raw SEND-SEND echo p50 {e50:.2f} us "
          f"(fabkv-perf --mode echo --echo send-send, 48 B, 1 client, window 1) = {h50 / e50:.2f}")
if null:
    n = null[0]
    print(f"Load generator: {n['load_cpu_us_per_request']:.3f} us of its own CPU per request against "
          f"the null target ({n['throughput_ops'] / 1e6:.2f} M req/s, every GET checked: "
          f"{n['check']['mismatches']} mismatches)")
PY
echo
echo "report: $OUT (summary.md, results.jsonl, echo.jsonl, null.jsonl and the PNG plots)"
