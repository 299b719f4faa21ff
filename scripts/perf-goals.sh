#!/usr/bin/env bash
# The measurements of the performance issue in one run, each kv number next to the raw fabric
# number it is held against, taken in the same minute (docs/results/perf-2026-11-23.md):
#
#   1. latency, 1 client at window 1: fabkv:herd against fabkv-perf's SEND/SEND echo, and
#      fabkv:server-reply against the WRITE/WRITE echo, on every provider of PROVIDERS, REPEAT
#      interleaved rounds (the ratio of each round, then their median);
#   2. the baselines, 1 client at window 1, 95% GET, 16 B keys, 32 B values: fabkv:herd and
#      fabkv:server-reply against memcached and redis (shm);
#   3. saturation, 8 clients at window 4 and 16: fabkv:herd against the SEND/SEND echo with
#      the same requests outstanding (one load thread each: fabkv-perf's client at window
#      8 x W), and the server's CPU per million requests;
#   4. the load generator's own CPU per request against the null target (1 client at window 1
#      and 4, and the saturation shapes: which side bounds saturation).
#
#   scripts/perf-goals.sh [OUT_DIR]       default OUT_DIR: build/perf-goals
#
# Environment: BUILD, DURATION (3 s per run), REPEAT (3), PROVIDERS ("shm tcp"). Servers on
# core 0, load on core 1 (fabkv-bench and fabkv-perf pin them). About 4 minutes.
set -euo pipefail
exec </dev/null  # nothing below reads stdin; a background caller's terminal must not be read
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$BUILD/perf-goals}
DURATION=${DURATION:-3}
REPEAT=${REPEAT:-3}
PROVIDERS=${PROVIDERS:-shm tcp}
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-perf >/dev/null
mkdir -p "$OUT"
rm -f "$OUT/echo.jsonl" "$OUT/kv.jsonl"

echo_run() {  # PROVIDER KIND WINDOW ROUND
  "$BUILD/bin/fabkv-perf" --provider "$1" --mode echo --echo "$2" --clients 1 --window "$3" \
    --sizes 48 --duration "$DURATION" --log warn --json "$OUT/echo.jsonl" >/dev/null 2>&1
  tag "$OUT/echo.jsonl" "$4"
}
kv_run() {  # PROVIDER SYSTEMS CLIENTS WINDOW ROUND
  # A failed run is reported and left out of the tables; the others still run.
  if ! "$BUILD/bin/fabkv-bench" --provider "$1" --systems "$2" --clients "$3" --window "$4" \
    --read-ratio 0.95 --distribution uniform --keys 100000 --key-size 16 --value-size 32 \
    --duration "$DURATION" --warmup 0.5 --quiet --json "$OUT/kv.jsonl" >"$OUT/last.log" 2>&1; then
    echo "   FAILED: $2 on $1, $3 x window $4: $(tail -1 "$OUT/last.log")"
  fi
  tag "$OUT/kv.jsonl" "$5"
}
# Marks the lines a run appended with its round, so the summary pairs runs of the same minute.
tag() {
  python3 - "$1" "$2" <<'EOF'
import json, sys
path, rnd = sys.argv[1], sys.argv[2]
lines = [json.loads(l) for l in open(path)]
for d in lines:
    d.setdefault("round", rnd)
with open(path, "w") as f:
    for d in lines:
        f.write(json.dumps(d) + "\n")
EOF
}

for p in $PROVIDERS; do
  for r in $(seq "$REPEAT"); do
    echo "== latency, $p, round $r"
    echo_run "$p" send-send 1 "lat-$p-$r"
    kv_run "$p" fabkv:herd 1 1 "lat-$p-$r"
    echo_run "$p" write-write 1 "lat-$p-$r"
    kv_run "$p" fabkv:server-reply 1 1 "lat-$p-$r"
  done
done
echo "== baselines, shm"
kv_run shm fabkv:herd,fabkv:server-reply,memcached,redis 1 1 base
for w in 4 16; do
  echo "== saturation, 8 clients x window $w, shm"
  echo_run shm send-send $((8 * w)) "sat-$w"
  kv_run shm fabkv:herd 8 "$w" "sat-$w"
done
if "$BUILD/bin/fabkv-bench" --help | grep -q '\bnull\b'; then
  for w in 1 4; do
    echo "== load generator against the null target, window $w"
    kv_run shm null 1 "$w" "null-$w"
  done
  for w in 4 16; do
    echo "== load generator against the null target, 8 clients x window $w (saturation's shape)"
    kv_run shm null 8 "$w" "null-sat-$w"
  done
fi
python3 "$ROOT/scripts/perf-goals-summary.py" "$OUT" | tee "$OUT/summary.md"
