#!/usr/bin/env bash
# FaRM-KV (farm, farm-var) next to HERD and Pilaf on one provider (HERD sec. 5.1.2 / 5.4's
# comparison), recorded for docs/results/farm-*.md: 48-byte items (16 B keys, 32 B values),
# 95% and 50% GET, 1 and 4 clients, window 1, uniform keys, 75% of the key space loaded (as
# scripts/pilaf-bench.sh: a quarter of the GETs miss); then a value-size sweep of farm against
# farm-var at 95% GET, where farm's inline room is set to hold each size (--farm-inline), on a
# server started here.
# Server on core 0, load on core 1.
#
#   scripts/farm-bench.sh [PROVIDER] [OUT_FILE]     defaults: shm, build/farm-bench.jsonl
#
# Environment: BUILD, DURATION (3), KEYS (100000), PART (all | sweep: the value-size sweep only).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROVIDER=${1:-shm}
OUT=${2:-$BUILD/farm-bench.jsonl}
DURATION=${DURATION:-3}
KEYS=${KEYS:-100000}
ninja -C "$BUILD" fabkv-bench fabkv-server >/dev/null
common=(--provider "$PROVIDER" --distribution uniform --keys "$KEYS" --fill 0.75 --key-size 16
        --window 1 --duration "$DURATION" --json "$OUT" --quiet)
PART=${PART:-all}
set -x
[ "$PART" = sweep ] || "$BUILD/bin/fabkv-bench" --systems fabkv:farm,fabkv:farm-var,fabkv:herd,fabkv:pilaf \
  --read-ratio 0.95,0.5 --value-size 32 --clients 1,4 "${common[@]}" </dev/null
# The sweep: one server per inline size (farm), one farm-var server, each on core 0.
for size in 32 128 512 2048; do
  inline=$(( (16 + size + 7) / 8 * 8 ))
  for proto in farm farm-var; do
    log=$(mktemp)
    taskset -c 0 "$BUILD/bin/fabkv-server" --provider "$PROVIDER" --listen 127.0.0.1:0 \
      --protocols "$proto" --farm-inline "$inline" --poll spin --memory 1G --log warn \
      >"$log" 2>&1 </dev/null &
    pid=$!
    for _ in $(seq 100); do grep -q '^READY ' "$log" && break; sleep 0.1; done
    addr=$(sed -n 's/^READY //p' "$log" | head -1)
    "$BUILD/bin/fabkv-bench" --server "$addr" --systems "fabkv:$proto" --read-ratio 0.95 \
      --value-size "$size" --clients 4 --client-core 1 "${common[@]}" </dev/null || true
    kill "$pid"; wait "$pid" || true
    rm -f "$log"
  done
done
