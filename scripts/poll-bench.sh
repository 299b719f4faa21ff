#!/usr/bin/env bash
# fabkv-server --poll spin against --poll adaptive (docs/results/poll-2026-11-23.md):
#   idle    the server's CPU over IDLE_S seconds (utime+stime from /proc/<pid>/stat), with no
#           client and with one client connected and silent
#   bench   what adaptive costs under a closed loop: fabkv-bench, 1 client, window 1, spin and
#           adaptive interleaved in PAIRS pairs (ABBA order), herd and pilaf
#   sparse  what it costs to wake an idle server: fabkv-sparse, one GET every GAP us (the client
#           sleeps through the gap and times the GET from after it woke), for each gap of GAPS
# on shm and tcp. Server worker on core 0, clients on core 1 (docs/bench.md).
#
#   scripts/poll-bench.sh [idle|bench|sparse|all] [OUT_DIR]      defaults: all, build/poll-bench
#
# Environment: BUILD, SPIN_US (adaptive's --poll-spin-us, default: the server's), PAIRS (3),
# IDLE_S (10), DURATION (5), GAPS ("50 500 5000"), PROVIDERS ("shm tcp"),
# BENCH_PROTOCOLS ("herd pilaf"), SPARSE_EXTRA ("adaptive-1000": more servers for sparse,
# adaptive-N = --poll adaptive --poll-spin-us N).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
WHAT=${1:-all}
OUT=${2:-$BUILD/poll-bench}
PAIRS=${PAIRS:-3}
IDLE_S=${IDLE_S:-10}
DURATION=${DURATION:-5}
GAPS=${GAPS:-"50 500 5000"}
PROVIDERS=${PROVIDERS:-"shm tcp"}
SPARSE_EXTRA=${SPARSE_EXTRA:-"adaptive-1000"}
BENCH_PROTOCOLS=${BENCH_PROTOCOLS:-"herd pilaf"}
BIN=$BUILD/bin
TCK=$(getconf CLK_TCK)
mkdir -p "$OUT"
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-sparse fabkv-cli >/dev/null

# fabkv-bench starts the server it measures (--fabkv-server-bin): one wrapper per mode;
# adaptive-N is adaptive with --poll-spin-us N.
for mode in spin adaptive $SPARSE_EXTRA; do
  case $mode in
    spin) flags="--poll spin" ;;
    adaptive) flags="--poll adaptive${SPIN_US:+ --poll-spin-us $SPIN_US}" ;;
    adaptive-*) flags="--poll adaptive --poll-spin-us ${mode#adaptive-}" ;;
  esac
  # fabkv-bench passes --poll spin itself: the wrapper drops any --poll it is given.
  cat >"$OUT/fabkv-server-$mode" <<EOF
#!/usr/bin/env bash
args=()
while [ \$# -gt 0 ]; do
  if [ "\$1" = --poll ]; then shift 2; continue; fi
  args+=("\$1"); shift
done
exec $BIN/fabkv-server "\${args[@]}" $flags
EOF
  chmod +x "$OUT/fabkv-server-$mode"
done

echo "# $(hostname), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)," \
  "kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%FT%TZ)"

SERVER_PID=""
ADDR=""
start_server() {  # provider mode [more flags]
  local provider=$1 mode=$2
  shift 2
  rm -f "$OUT/server.out"  # not truncated by the redirect below: that happens in the child
  "$OUT/fabkv-server-$mode" --provider "$provider" --listen 127.0.0.1:0 --cores 0 --log warn \
    "$@" >"$OUT/server.out" 2>"$OUT/server.err" &
  SERVER_PID=$!
  for _ in $(seq 200); do
    ADDR=$(sed -n 's/^READY //p' "$OUT/server.out" 2>/dev/null || true)
    [ -n "$ADDR" ] && return 0
    sleep 0.1
  done
  echo "server did not start: $(tail -1 "$OUT/server.err")" >&2
  exit 1
}
stop_server() {
  kill "$SERVER_PID" 2>/dev/null || true
  wait "$SERVER_PID" 2>/dev/null || true
}
HOLDER=""
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; [ -n "$HOLDER" ] && kill "$HOLDER" 2>/dev/null; true' EXIT
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# (fabkv-cli is a client too: while it asks, the server has one admitted.)
poll_stats() {  # provider
  "$BIN/fabkv-cli" --server "$ADDR" --provider "$1" stats |
    python3 -c 'import json,sys; p=json.load(sys.stdin)["workers"][0]["poll"]; print("blocks=%d woken_by_fabric=%d timeouts=%d idle_wait=%s" % (p["blocks"], p["woken_by_fabric"], p["timeouts"], p["idle_wait"]))'
}

if [ "$WHAT" = idle ] || [ "$WHAT" = all ]; then
  echo "## idle: server CPU over ${IDLE_S} s"
  for provider in $PROVIDERS; do
    for client in none one; do
      for mode in spin adaptive; do
        start_server "$provider" "$mode"
        HOLDER=""
        if [ "$client" = one ]; then
          "$BIN/fabkv-sparse" --server "$ADDR" --provider "$provider" --core 1 \
            --gap-us $(((IDLE_S + 3) * 1000000)) --count 1 >/dev/null &
          HOLDER=$!
        fi
        sleep 1
        t0=$(ticks "$SERVER_PID")
        sleep "$IDLE_S"
        t1=$(ticks "$SERVER_PID")
        stats=$(poll_stats "$provider")
        echo "$provider client=$client $mode: $(awk -v d=$((t1 - t0)) -v t="$TCK" -v s="$IDLE_S" \
          'BEGIN { printf "%.2f s CPU in %d s (%.1f%% of a core)", d / t, s, 100 * d / t / s }') $stats"
        if [ -n "$HOLDER" ]; then kill "$HOLDER" 2>/dev/null; wait "$HOLDER" 2>/dev/null || true; fi
        HOLDER=""
        stop_server
      done
    done
  done
fi

if [ "$WHAT" = bench ] || [ "$WHAT" = all ]; then
  echo "## bench: fabkv-bench 1 client, window 1, ${DURATION} s, interleaved pairs"
  for provider in $PROVIDERS; do
    for protocol in $BENCH_PROTOCOLS; do
      for pair in $(seq "$PAIRS"); do
        order="spin adaptive"
        [ $((pair % 2)) -eq 0 ] && order="adaptive spin"
        for mode in $order; do
          "$BIN/fabkv-bench" --systems "fabkv:$protocol" --provider "$provider" --clients 1 \
            --window 1 --read-ratio 0.95 --keys 10000 --key-size 16 --value-size 32 \
            --duration "$DURATION" --warmup 1 --server-core 0 --client-core 1 --quiet \
            --fabkv-server-bin "$OUT/fabkv-server-$mode" --json "$OUT/bench.jsonl" >/dev/null
          tail -1 "$OUT/bench.jsonl" | python3 -c '
import json, sys
r = json.load(sys.stdin)
l = r["latency_us"]
print("%s %s pair %s %-8s %8.0f ops/s  p50 %5.2f us  p99 %6.2f us  server_cpu %.2f s" % (
    r["provider"], r["protocol"], sys.argv[1], sys.argv[2], r["throughput_ops"], l["p50"],
    l["p99"], r["server_cpu_s"] or -1))' "$pair" "$mode"
        done
      done
    done
  done
fi

if [ "$WHAT" = sparse ] || [ "$WHAT" = all ]; then
  echo "## sparse: one GET every GAP us (fabkv-sparse), herd"
  for provider in $PROVIDERS; do
    for gap in $GAPS; do
      count=$((3000000 / gap))
      [ "$count" -gt 2000 ] && count=2000
      [ "$count" -lt 200 ] && count=200
      for mode in spin adaptive $SPARSE_EXTRA; do
        start_server "$provider" "$mode"
        line=$("$BIN/fabkv-sparse" --server "$ADDR" --provider "$provider" --core 1 \
          --gap-us "$gap" --count "$count")
        echo "$provider $mode $line $(poll_stats "$provider")"
        stop_server
      done
    done
  done
fi
