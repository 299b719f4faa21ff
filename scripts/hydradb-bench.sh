#!/usr/bin/env bash
# HydraDB next to server-reply and HERD (write transport) on one provider, recorded for
# docs/results/hydradb-*.md, with fabkv-perf's per-verb latencies of the same minute:
#   1. 16 B keys, 32 B values, 95% GET, uniform over KEYS keys, 1 client x window 1 and
#      8 clients x window 4;
#   2. growing values (256 B .. 16 KiB over SWEEP_KEYS keys), 1 client x window 1, 95% GET;
#   3. the repeat-GET advantage: 100% GET over HOT_KEYS keys (every key re-read within the
#      1 s lease: almost every GET is one READ) against the same over KEYS_COLD keys (most
#      GETs find no live lease: RPC), 1 client x window 1;
#   4. fabkv-perf latency of one READ, one WRITE and a WRITE/WRITE echo (the verbs above).
# Server on core 0, load on core 1 (fabkv-bench and fabkv-perf pin them).
#
#   scripts/hydradb-bench.sh [PROVIDER] [OUT_FILE]    defaults: shm, build/hydradb-bench.jsonl
#
# Environment: BUILD, DURATION (3), KEYS (100000), SWEEP_KEYS (10000), HOT_KEYS (1000),
# KEYS_COLD (2000000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROVIDER=${1:-shm}
OUT=${2:-$BUILD/hydradb-bench.jsonl}
DURATION=${DURATION:-3}
KEYS=${KEYS:-100000}
HOT_KEYS=${HOT_KEYS:-1000}
KEYS_COLD=${KEYS_COLD:-2000000}
SWEEP_KEYS=${SWEEP_KEYS:-10000}
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-perf >/dev/null
bench=("$BUILD/bin/fabkv-bench" --provider "$PROVIDER" --distribution uniform --key-size 16
       --duration "$DURATION" --quiet --json "$OUT")
systems=fabkv:hydradb,fabkv:server-reply,fabkv:herd
set -x
"${bench[@]}" --systems "$systems" --keys "$KEYS" --read-ratio 0.95 --value-size 32 --clients 1 --window 1
"${bench[@]}" --systems "$systems" --keys "$KEYS" --read-ratio 0.95 --value-size 32 --clients 8 --window 4
"${bench[@]}" --systems "$systems" --keys "$SWEEP_KEYS" --read-ratio 0.95 --value-size 256,1024,4096,16384 \
  --clients 1 --window 1 --server-memory 1G
"${bench[@]}" --systems fabkv:hydradb,fabkv:server-reply --keys "$HOT_KEYS" --read-ratio 1 \
  --value-size 32 --clients 1 --window 1
"${bench[@]}" --systems fabkv:hydradb,fabkv:server-reply --keys "$KEYS_COLD" --read-ratio 1 \
  --value-size 32 --clients 1 --window 1 --server-memory 1G
"$BUILD/bin/fabkv-perf" --provider "$PROVIDER" --mode latency --verbs read,write --sizes 64,1024 \
  --duration "$DURATION" 2>/dev/null | grep -v " info " || true
"$BUILD/bin/fabkv-perf" --provider "$PROVIDER" --mode echo --echo write-write --clients 1 \
  --window 1 --sizes 48 --duration "$DURATION" 2>/dev/null | grep -v " info " || true
set +x
echo "(JSON lines appended to $OUT)"
