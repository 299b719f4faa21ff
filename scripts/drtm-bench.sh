#!/usr/bin/env bash
# DrTM-KV's Guidelines fig. 10 shape on one provider, recorded for docs/results/drtm-*.md:
# throughput as the PUT fraction rises from 0 to 100% (read ratio 1 .. 0), with keys chosen
# uniformly from KEYS keys and with a few hot keys (HOT_KEYS: lock contention), HERD alongside
# on the same sweep as the RPC reference. 16 B keys, 32 B values (fig. 10's items); server on
# core 0, load on core 1; a warm-up first, so that the clients' location caches are warm (the
# paper assumes a 100% hit rate).
#
#   scripts/drtm-bench.sh [PROVIDER] [OUT_FILE]     defaults: shm, build/drtm-bench.jsonl
#
# Environment: BUILD, DURATION (3), WARMUP (1), KEYS (100000), HOT_KEYS (4), CLIENTS (4),
# WINDOW (4).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROVIDER=${1:-shm}
OUT=${2:-$BUILD/drtm-bench.jsonl}
DURATION=${DURATION:-3}
WARMUP=${WARMUP:-1}
KEYS=${KEYS:-100000}
HOT_KEYS=${HOT_KEYS:-4}
CLIENTS=${CLIENTS:-4}
WINDOW=${WINDOW:-4}
ninja -C "$BUILD" fabkv-bench fabkv-server >/dev/null
common=(--provider "$PROVIDER" --distribution uniform --fill 1 --key-size 16 --value-size 32
        --read-ratio 1,0.9,0.75,0.5,0.25,0 --clients "$CLIENTS" --window "$WINDOW"
        --duration "$DURATION" --warmup "$WARMUP" --json "$OUT" --quiet)
set -x
"$BUILD/bin/fabkv-bench" --systems fabkv:drtm,fabkv:herd --keys "$KEYS" "${common[@]}"
"$BUILD/bin/fabkv-bench" --systems fabkv:drtm,fabkv:herd --keys "$HOT_KEYS" "${common[@]}"
