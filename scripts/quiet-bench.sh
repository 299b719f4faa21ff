#!/usr/bin/env bash
# A quiet server against a busy one (issue 39, part 2; docs/results/quiet-2026-11-29.md): the
# p50 of one GET after GAP us of silence against `fabkv-server` with default flags (--poll
# adaptive), next to the same GETs back to back, one bare wake-up (fabkv-sparse --wake-anchor)
# and memcached after the same pause (scripts/sparse.py memcached: a blocking kernel-TCP
# socket, as pymemcache waits). Server (or memcached) on core 0, client on core 1.
#
#   scripts/quiet-bench.sh OUT_DIR BIN_DIR [BIN_DIR...]
#
# Each BIN_DIR holds a fabkv-server and a fabkv-sparse (e.g. one before a change, one after);
# they are interleaved in every round. The anchor runs with ANCHOR_BIN's fabkv-sparse (default:
# the last BIN_DIR's; --wake-anchor is new with issue 39). Environment: ROUNDS (3), GAP (20000),
# COUNT (200),
# CASES ("shm:herd shm:pilaf shm:server-reply tcp:herd tcp:pilaf tcp:rfrpc
# tcp:server-reply"),
# CLIENT_POLL (spin: the client library's default), MC_PORT (11399).
set -euo pipefail
OUT=$1
shift
ROUNDS=${ROUNDS:-3}
GAP=${GAP:-20000}
COUNT=${COUNT:-200}
CASES=${CASES:-"shm:herd shm:pilaf shm:server-reply tcp:herd tcp:pilaf tcp:rfrpc tcp:server-reply"}
CLIENT_POLL=${CLIENT_POLL:-spin}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$OUT"
echo "# $(hostname), $(nproc) CPUs, kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)," \
  "$(date -u +%FT%TZ)"

SERVER_PID=""
trap '[ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; true' EXIT
sparse() {  # bin provider protocol gap count -> the p50 line
  local bin=$1 provider=$2 protocol=$3 gap=$4 count=$5 addr="" spin=""
  rm -f "$OUT/server.out"
  taskset -c 0 "$bin/fabkv-server" --provider "$provider" --listen 127.0.0.1:0 --log warn \
    --protocols "$protocol" >"$OUT/server.out" 2>"$OUT/server.err" &
  SERVER_PID=$!
  for _ in $(seq 200); do
    addr=$(sed -n 's/^READY //p' "$OUT/server.out" 2>/dev/null || true)
    [ -n "$addr" ] && break
    sleep 0.05
  done
  [ "$gap" = 0 ] && spin=--spin-gap
  taskset -c 1 "$bin/fabkv-sparse" --server "$addr" --provider "$provider" --protocol "$protocol" \
    --gap-us "$gap" --count "$count" --core -1 --client-poll "$CLIENT_POLL" $spin | tail -1
  kill "$SERVER_PID"
  wait "$SERVER_PID" 2>/dev/null || true
  SERVER_PID=""
}
p50() { sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p'; }

ANCHOR_BIN=${ANCHOR_BIN:-${!#}}
for round in $(seq "$ROUNDS"); do
  echo "anchor wake-up $round $(taskset -c 1 "$ANCHOR_BIN/fabkv-sparse" --wake-anchor 0 \
    --gap-us "$GAP" --count "$COUNT" --core -1 | p50)"
  for bin in "$@"; do
    tag=$(basename "$bin")
    for c in $CASES; do
      provider=${c%%:*} protocol=${c#*:}
      q=$(sparse "$bin" "$provider" "$protocol" "$GAP" "$COUNT" | p50)
      echo "quiet $tag $provider $protocol $round $q"
      b=$(sparse "$bin" "$provider" "$protocol" 0 2000 | p50)
      echo "b2b $tag $provider $protocol $round $b"
    done
  done
  if command -v memcached >/dev/null; then
    port=${MC_PORT:-11399}
    taskset -c 0 memcached -u "$(id -un)" -p "$port" -U 0 -l 127.0.0.1 -t 1 >"$OUT/mc.out" 2>&1 &
    SERVER_PID=$!
    sleep 0.5
    mc="$ROOT/scripts/sparse.py"
    echo "quiet memcached tcp text $round $(python3 "$mc" memcached "$port" "$GAP" "$COUNT" 1 | p50)"
    echo "b2b memcached tcp text $round $(python3 "$mc" memcached "$port" 0 2000 1 | p50)"
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
  fi
done | tee "$OUT/raw.txt"

echo "# medians over $ROUNDS rounds (p50 of each run, us)"
python3 - "$OUT/raw.txt" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    f = line.split()
    if len(f) < 4 or not f[-1].replace(".", "").isdigit():
        continue
    key = " ".join(f[:2]) if f[0] == "anchor" else " ".join(f[:4])
    runs[key].append(float(f[-1]))
for key in sorted(runs):
    print(f"{key:40} median {statistics.median(runs[key]):7.1f}   runs {runs[key]}")
PY
