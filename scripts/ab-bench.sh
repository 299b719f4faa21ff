#!/usr/bin/env bash
# Before/after benchmark of two builds of fabkv, interleaved: round r runs build A's fabkv-bench
# (with its own fabkv-server) on every system, then build B's, then the next round starts with
# B, so that drift of the machine over the run falls on both alike. For a change that must not
# change speed (a refactoring): compare the medians per system (docs/results/ holds such runs).
#
#   scripts/ab-bench.sh A_BIN_DIR B_BIN_DIR OUT.jsonl
#
# Environment: SYSTEMS (default: every key-value protocol and one sequencer), ROUNDS (3),
# CLIENTS (1,4), WINDOW (1, outstanding requests per client), DURATION (2 s), PROVIDER (shm).
# Server on core 0, load on core 1 (fabkv-bench's defaults). Each line of OUT.jsonl is a
# fabkv-bench result with "build": "A" or "B" added. A summary (median throughput per system
# and build, B/A) is printed at the end.
set -euo pipefail
A=${1:?A_BIN_DIR}; B=${2:?B_BIN_DIR}; OUT=${3:?OUT.jsonl}
SYSTEMS=${SYSTEMS:-fabkv:herd,fabkv:server-reply,fabkv:pilaf,fabkv:farm,fabkv:drtm,fabkv:hydradb,fabkv:rfrpc,fabkv:seq-rpc}
ROUNDS=${ROUNDS:-3}; CLIENTS=${CLIENTS:-1,4}; DURATION=${DURATION:-2}; PROVIDER=${PROVIDER:-shm}
WINDOW=${WINDOW:-1}
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
: >"$OUT"
run() {  # build-label bin-dir
  "$2/fabkv-bench" matrix --systems "$SYSTEMS" --provider "$PROVIDER" --clients "$CLIENTS" \
    --read-ratio 0.95 --distribution uniform --value-size 32 --window "$WINDOW" \
    --duration "$DURATION" --warmup 0.5 --keys 100000 --quiet --json "$tmp/run.jsonl" >/dev/null
  /usr/bin/python3 -c 'import json,sys
for l in open(sys.argv[1]):
    r = json.loads(l); r["build"] = sys.argv[2]; print(json.dumps(r))' "$tmp/run.jsonl" "$1" >>"$OUT"
  rm -f "$tmp/run.jsonl"
}
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then run A "$A"; run B "$B"; else run B "$B"; run A "$A"; fi
  echo "round $((r + 1))/$ROUNDS done" >&2
done
/usr/bin/python3 - "$OUT" <<'PY'
import json, statistics, sys
rows = {}
for l in open(sys.argv[1]):
    r = json.loads(l)
    k = (f"{r['system']}:{r['protocol']}" if r["system"] == "fabkv" else r["system"], r["clients"])
    rows.setdefault(k, {}).setdefault(r["build"], []).append(r)
print(f"{'system':22} {'clients':>7} {'A ops/s':>10} {'B ops/s':>10} {'B/A':>6} {'A p50':>7} {'B p50':>7}")
for (s, c), b in sorted(rows.items()):
    t = {k: statistics.median(x["throughput_ops"] for x in v) for k, v in b.items()}
    p = {k: statistics.median(x["latency_us"]["p50"] for x in v) for k, v in b.items()}
    ratio = t["B"] / t["A"] if t.get("A") and t.get("B") else float("nan")
    print(f"{s:22} {c:>7} {t.get('A', 0):>10.0f} {t.get('B', 0):>10.0f} {ratio:>6.3f} "
          f"{p.get('A', 0):>7.1f} {p.get('B', 0):>7.1f}")
PY
