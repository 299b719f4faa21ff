#!/usr/bin/env bash
# Where herd's distance to the raw SEND/SEND echo goes, in wall clock (issue #29), by taking
# one thing away at a time, interleaved rounds on shm:
#
#   - the key space: herd's GETs over 100,000 keys (perf-goals.sh's workload) against the
#     same over 100 keys, whose items stay in the server core's caches: what the lookup's
#     memory misses cost (the echo touches no data);
#   - an endpoint per client (fabric/isolation.h): at saturation, 8 clients x window 4 (8
#     endpoints the worker polls every round) against 1 client at window 32 (one endpoint,
#     as the echo's one client at window 32 has), the same requests outstanding.
#
#   scripts/perf-gap.sh [OUT_DIR]          default OUT_DIR: build/perf-gap
#
# Environment: BUILD, DURATION (2 s per run), REPEAT (3 rounds). Server on core 0, load on
# core 1. About 2 minutes at the defaults. Run it on a quiet machine: it measures wall clock.
set -euo pipefail
exec </dev/null
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$BUILD/perf-gap}
DURATION=${DURATION:-2}
REPEAT=${REPEAT:-3}
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-perf >/dev/null
mkdir -p "$OUT"
rm -f "$OUT/echo.jsonl" "$OUT/kv.jsonl"

echo_run() {  # WINDOW LABEL
  "$BUILD/bin/fabkv-perf" --provider shm --mode echo --echo send-send --clients 1 --window "$1" \
    --sizes 48 --duration "$DURATION" --log warn --json "$OUT/echo.jsonl" >/dev/null 2>&1
  label "$OUT/echo.jsonl" "$2"
}
kv_run() {  # CLIENTS WINDOW KEYS LABEL
  if ! "$BUILD/bin/fabkv-bench" --provider shm --systems fabkv:herd --clients "$1" --window "$2" \
    --read-ratio 0.95 --distribution uniform --keys "$3" --key-size 16 --value-size 32 \
    --duration "$DURATION" --warmup 0.5 --quiet --json "$OUT/kv.jsonl" >"$OUT/last.log" 2>&1; then
    echo "   FAILED: herd $1 x window $2, $3 keys: $(tail -1 "$OUT/last.log")"
  fi
  label "$OUT/kv.jsonl" "$4"
}
label() {  # FILE LABEL: tags the lines the run appended
  python3 - "$1" "$2" <<'EOF'
import json, sys
path, lab = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(path)]
with open(path, "w") as f:
    for d in lines:
        d.setdefault("gap", lab)
        f.write(json.dumps(d) + "\n")
EOF
}

for r in $(seq "$REPEAT"); do
  echo "== round $r"
  echo_run 1 "echo-w1-$r"
  kv_run 1 1 100000 "herd-w1-100000-$r"
  kv_run 1 1 100 "herd-w1-100-$r"
  echo_run 32 "echo-w32-$r"
  kv_run 8 4 100000 "herd-8x4-100000-$r"
  kv_run 8 4 100 "herd-8x4-100-$r"
  kv_run 1 32 100000 "herd-1x32-100000-$r"
done

python3 - "$OUT" "$REPEAT" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
out, repeat = sys.argv[1], int(sys.argv[2])
rows = {}
for name in ("echo", "kv"):
    try:
        for line in open(f"{out}/{name}.jsonl"):
            d = json.loads(line)
            rows[d["gap"]] = d
    except FileNotFoundError:
        pass

def med(f):
    xs = [v for v in (f(r) for r in range(1, repeat + 1)) if v is not None]
    return statistics.median(xs) if xs else None

def p50(lab):
    return rows[lab]["latency_us"]["p50"] if lab in rows else None

def tput(lab):
    return rows[lab]["throughput_ops"] if lab in rows else None

def ratio(a, b):
    return lambda r: (a(r) / b(r)) if a(r) is not None and b(r) else None

def fmt(v, unit=""):
    return "-" if v is None else f"{v:.2f}{unit}"

echo1 = lambda r: p50(f"echo-w1-{r}")
big1 = lambda r: p50(f"herd-w1-100000-{r}")
small1 = lambda r: p50(f"herd-w1-100-{r}")
print("## 1 client, window 1: p50 (median of the rounds)\n")
print("| echo | herd, 100,000 keys | herd, 100 keys | herd / echo | herd (100 keys) / echo |")
print("|---|---|---|---|---|")
print(f"| {fmt(med(echo1), ' us')} | {fmt(med(big1), ' us')} | {fmt(med(small1), ' us')} "
      f"| **{fmt(med(ratio(big1, echo1)))}** | **{fmt(med(ratio(small1, echo1)))}** |")

echo32 = lambda r: tput(f"echo-w32-{r}")
sat = {k: (lambda r, k=k: tput(f"herd-{k}-{r}")) for k in ("8x4-100000", "8x4-100", "1x32-100000")}
print("\n## Saturation, 32 requests outstanding: throughput (median of the rounds)\n")
print("| echo, 1 x 32 | herd 8 x 4, 100,000 keys | herd 8 x 4, 100 keys | herd 1 x 32, 100,000 keys |")
print("|---|---|---|---|")
m = lambda f: None if med(f) is None else med(f) / 1e6
print(f"| {fmt(m(echo32), ' M/s')} | {fmt(m(sat['8x4-100000']), ' M/s')} "
      f"| {fmt(m(sat['8x4-100']), ' M/s')} | {fmt(m(sat['1x32-100000']), ' M/s')} |")
print(f"| herd / echo | **{fmt(med(ratio(sat['8x4-100000'], echo32)))}** "
      f"| **{fmt(med(ratio(sat['8x4-100'], echo32)))}** "
      f"| **{fmt(med(ratio(sat['1x32-100000'], echo32)))}** |")
EOF
