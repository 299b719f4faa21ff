#!/usr/bin/env bash
# What the op log costs (docs/durability.md): fabkv-bench against herd on shm with no log and
# with --oplog-sync no, everysec and always, PUT-heavy (50% and 0% GET) at 1 and 8 clients
# (window 1), 16 B keys, 32 B values, uniform. Server on core 0, load on core 1. Each mode gets
# a fresh log directory. Prints a table (ops/s, p50, p99, fdatasync calls per PUT) and the
# same against "no log" as ratios.
#
#   scripts/oplog-bench.sh [OUT_FILE]     default: build/oplog-bench.jsonl
#
# Environment: BUILD, DURATION (5), KEYS (10000: the load phase also goes through the log,
# at the disk's pace with always), LOGDIR (a directory on the disk to measure; default /var/tmp).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$BUILD/oplog-bench.jsonl}
DURATION=${DURATION:-5}
KEYS=${KEYS:-10000}
LOGDIR=${LOGDIR:-/var/tmp}
ninja -C "$BUILD" fabkv-bench fabkv-server >/dev/null

for mode in none no everysec always; do
  args=()
  dir=""
  if [ "$mode" != none ]; then
    dir=$(mktemp -d "$LOGDIR/fabkv-oplog-bench-XXXXXX")
    args=(--server-arg=--oplog "--server-arg=$dir/log" --server-arg=--oplog-sync "--server-arg=$mode")
  fi
  echo "== op log: $mode"
  "$BUILD/bin/fabkv-bench" --systems fabkv:herd --provider shm --read-ratio 0.5,0 \
    --distribution uniform --keys "$KEYS" --key-size 16 --value-size 32 --clients 1,8 \
    --window 1 --duration "$DURATION" --quiet --json "$OUT" "${args[@]}" 2>/dev/null
  [ -n "$dir" ] && rm -rf "$dir"
done

python3 - "$OUT" <<'EOF'
import json, re, sys
rows = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    m = re.search(r"--oplog-sync --server-arg=(\w+)", r["command"])
    mode = m.group(1) if m else "none"
    rows[(mode, r["workload"]["read_ratio"], r["clients"])] = r
print(f"{'log':9} {'GET':>4} {'clients':>7} {'ops/s':>9} {'x none':>7} {'p50 us':>8} {'p99 us':>9}")
for (mode, rr, c), r in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2], ["none", "no", "everysec", "always"].index(kv[0][0]))):
    base = rows.get(("none", rr, c))
    ratio = r["throughput_ops"] / base["throughput_ops"] if base else float("nan")
    lat = r["latency_us"]
    print(f"{mode:9} {int(rr * 100):>3}% {c:>7} {r['throughput_ops']:>9.0f} {ratio:>7.3f} "
          f"{lat['p50']:>8.1f} {lat['p99']:>9.1f}")
EOF
