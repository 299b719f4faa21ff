#!/usr/bin/env bash
# HERD's server-side knobs measured in one run, next to fabkv-perf's raw WRITE/SEND echo on the
# same provider: response batching on/off, 1 or 2 response queues, WRITE or SEND requests.
# Server on core 0, load on core 1; 16 B keys, 32 B values, 95% GET, uniform.
#
#   scripts/herd-bench.sh [PROVIDER] [OUT_FILE]     defaults: shm, build/herd-bench.jsonl
#
# Environment: BUILD, CLIENTS (8), WINDOW (4), DURATION (3), KEYS (100000).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
PROVIDER=${1:-shm}
OUT=${2:-$BUILD/herd-bench.jsonl}
CLIENTS=${CLIENTS:-8}
WINDOW=${WINDOW:-4}
DURATION=${DURATION:-3}
KEYS=${KEYS:-100000}
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-perf >/dev/null

echo "== raw echo (fabkv-perf: one client process, window 4xW, 48 B each way), $PROVIDER"
"$BUILD/bin/fabkv-perf" --provider "$PROVIDER" --mode echo --echo write-send,send-send \
  --clients 1 --window $((WINDOW * 4)) --sizes 48 --duration "$DURATION" 2>/dev/null | grep -v " info "

run() {  # label, then fabkv-server flags
  local label=$1
  shift
  local log
  log=$(mktemp)
  "$BUILD/bin/fabkv-server" --provider "$PROVIDER" --listen 127.0.0.1:0 --cores 0 \
    --memory 512M "$@" >"$log" 2>/dev/null &
  local pid=$!
  local addr=""
  for _ in $(seq 100); do
    addr=$(sed -n 's/^READY //p' "$log")
    [ -n "$addr" ] && break
    sleep 0.1
  done
  if [ -z "$addr" ]; then
    echo "fabkv-server did not start for $label" >&2
    kill "$pid" 2>/dev/null || true
    return 1
  fi
  printf '%-34s ' "$label"
  "$BUILD/bin/fabkv-bench" --systems fabkv:herd --server "$addr" --provider "$PROVIDER" \
    --read-ratio 0.95 --distribution uniform --keys "$KEYS" --key-size 16 --value-size 32 \
    --clients "$CLIENTS" --window "$WINDOW" --duration "$DURATION" --warmup 0.5 --quiet \
    --json "$OUT" 2>/dev/null | tail -1
  kill -TERM "$pid"
  wait "$pid" 2>/dev/null || true
  rm -f "$log"
}

echo "== HERD (fabkv-bench, $CLIENTS clients x window $WINDOW), $PROVIDER"
run "write, batching, 1 queue" --transport write --batching on --queues 1
run "write, no batching, 1 queue" --transport write --batching off --queues 1
run "write, batching, 2 queues" --transport write --batching on --queues 2
run "send, batching, 1 queue" --transport send --batching on --queues 1
run "send, no batching, 1 queue" --transport send --batching off --queues 1
echo "(JSON lines appended to $OUT)"
