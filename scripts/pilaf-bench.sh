#!/usr/bin/env bash
# Pilaf next to Pilaf-VO and HERD on one provider (Pilaf sec. 5 shape), recorded for
# docs/results/pilaf-*.md: 95% and 50% GET at 75% table fill, 1 and 8 clients, window 1; the
# same with the three entry READs in parallel; and a value-size sweep at 95% GET.
# Server on core 0, load on core 1; 16 B keys, uniform keys.
#
#   scripts/pilaf-bench.sh [PROVIDER] [OUT_FILE]     defaults: shm, build/pilaf-bench.jsonl
#
# Environment: BUILD, DURATION (3), KEYS (100000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROVIDER=${1:-shm}
OUT=${2:-$BUILD/pilaf-bench.jsonl}
DURATION=${DURATION:-3}
KEYS=${KEYS:-100000}
ninja -C "$BUILD" fabkv-bench fabkv-server >/dev/null
common=(--provider "$PROVIDER" --distribution uniform --keys "$KEYS" --fill 0.75 --key-size 16
        --window 1 --duration "$DURATION" --json "$OUT" --quiet)
set -x
"$BUILD/bin/fabkv-bench" --systems fabkv:pilaf,fabkv:pilaf-vo,fabkv:herd --read-ratio 0.95,0.5 \
  --value-size 32 --clients 1,8 "${common[@]}"
"$BUILD/bin/fabkv-bench" --systems fabkv:pilaf --pilaf-parallel-probes --read-ratio 0.95,0.5 \
  --value-size 32 --clients 1,8 "${common[@]}"
"$BUILD/bin/fabkv-bench" --systems fabkv:pilaf,fabkv:pilaf-vo --read-ratio 0.95 \
  --value-size 256,1024,4096 --clients 8 "${common[@]}"
