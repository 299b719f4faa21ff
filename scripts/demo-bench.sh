#!/usr/bin/env bash
# The main job's benchmark: builds fabkv-bench and fabkv-server if needed, runs a short default
# matrix (clients 1,4,8 x 95%/50% GET x uniform/Zipf, 16 B keys, 32 B values, 2 s per run)
# against fabkv:herd and fabkv:pilaf over shm, memcached and redis (each server pinned to core 0, the load
# generator to core 1), prints the summary table and writes the report with its plots.
#
#   scripts/demo-bench.sh [OUT_DIR]        default OUT_DIR: reports/<timestamp>
#
# Environment overrides: BUILD (build dir), SYSTEMS, CLIENTS, READ_RATIOS, DISTRIBUTIONS,
# VALUE_SIZES, DURATION, KEYS, PROVIDER, JOBS. A few minutes on 2 cores.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$ROOT/reports/$(date +%Y%m%d-%H%M%S)}
SYSTEMS=${SYSTEMS:-fabkv:herd,fabkv:pilaf,memcached,redis}
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
ninja -C "$BUILD" -j"${JOBS:-2}" fabkv-bench fabkv-server >/dev/null

mkdir -p "$OUT"
RESULTS="$OUT/results.jsonl"
echo "fabkv-bench: $SYSTEMS on $PROVIDER, clients $CLIENTS, GET ratio $READ_RATIOS, $DISTRIBUTIONS," \
     "values $VALUE_SIZES B, ${DURATION}s per run -> $OUT"
"$BUILD/bin/fabkv-bench" matrix --systems "$SYSTEMS" --provider "$PROVIDER" \
  --clients "$CLIENTS" --read-ratio "$READ_RATIOS" --distribution "$DISTRIBUTIONS" \
  --keys "$KEYS" --key-size 16 --value-size "$VALUE_SIZES" --window 1 \
  --duration "$DURATION" --warmup 0.5 --json "$RESULTS"
"$BUILD/bin/fabkv-bench" report --input "$RESULTS" --out "$OUT"
echo
# The tables of summary.md (runs, ratios, verbs per request).
sed -n '/^## /,$p' "$OUT/summary.md"
echo
echo "report: $OUT (summary.md, results.jsonl and the PNG plots)"
