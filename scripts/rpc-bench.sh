#!/usr/bin/env bash
# server-reply next to HERD (write transport) on one provider, with fabkv-perf's raw echoes of
# the same shapes in the same minute: server-reply is WRITE/WRITE (request WRITten into the
# server's slot, answer WRITten into the client's ring), HERD is WRITE/SEND. 1 client at window 1
# (latency) and 8 clients at window 4 (throughput); 16 B keys, 32 B values, 95% GET, uniform.
# Server on core 0, load on core 1 (fabkv-bench and fabkv-perf pin them).
#
#   scripts/rpc-bench.sh [PROVIDER] [OUT_FILE]     defaults: shm, build/rpc-bench.jsonl
#
# Environment: BUILD, DURATION (3), KEYS (100000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROVIDER=${1:-shm}
OUT=${2:-$BUILD/rpc-bench.jsonl}
DURATION=${DURATION:-3}
KEYS=${KEYS:-100000}
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-perf >/dev/null

for shape in "1 1" "8 4"; do
  set -- $shape
  clients=$1 window=$2
  echo "== raw echo (fabkv-perf, 1 client process, window $((clients * window)), 48 B each way), $PROVIDER"
  "$BUILD/bin/fabkv-perf" --provider "$PROVIDER" --mode echo --echo write-write,write-send \
    --clients 1 --window $((clients * window)) --sizes 48 --duration "$DURATION" 2>/dev/null |
    grep -v " info "
  echo "== fabkv-bench, $clients client(s) x window $window, $PROVIDER"
  "$BUILD/bin/fabkv-bench" --systems fabkv:server-reply,fabkv:herd --provider "$PROVIDER" \
    --read-ratio 0.95 --distribution uniform --keys "$KEYS" --key-size 16 --value-size 32 \
    --clients "$clients" --window "$window" --duration "$DURATION" --quiet --json "$OUT" 2>/dev/null
done
echo "(JSON lines appended to $OUT)"
