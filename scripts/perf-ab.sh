#!/usr/bin/env bash
# Two builds of fabkv measured interleaved, in the same minutes (issue #29's "before/after"):
# every RPC protocol at 1 client, window 1 (herd, server-reply, rfrpc, hydradb: p50 and
# throughput) and herd at saturation (8 clients at window 4 and 16), each round running build A
# then build B, with the SEND/SEND echo of build B next to them as the machine's pace of that
# round. The summary gives the median of the rounds per build and B / A per round.
#
#   scripts/perf-ab.sh BUILD_A BUILD_B [OUT_DIR]     default OUT_DIR: build/perf-ab
#
# BUILD_A/B: build directories (e.g. a worktree of the older commit built with
# `cmake -S . -B build ... && ninja -C build fabkv-bench fabkv-server fabkv-perf`).
# Environment: DURATION (2 s per run), REPEAT (3 rounds). Server on core 0, load on core 1.
# About 4 minutes at the defaults. Run it on a quiet machine: it measures wall clock.
set -euo pipefail
exec </dev/null
ROOT=$(cd "$(dirname "$0")/.." && pwd)
A=$(cd "${1:?BUILD_A}" && pwd)
B=$(cd "${2:?BUILD_B}" && pwd)
OUT=${3:-$ROOT/build/perf-ab}
DURATION=${DURATION:-2}
REPEAT=${REPEAT:-3}
mkdir -p "$OUT"
rm -f "$OUT/ab.jsonl"

run() {  # LABEL BUILD CLIENTS WINDOW SYSTEM
  local tmp="$OUT/one.jsonl"
  rm -f "$tmp"
  if ! "$2/bin/fabkv-bench" --provider shm --systems "$5" --clients "$3" --window "$4" \
    --read-ratio 0.95 --distribution uniform --keys 100000 --key-size 16 --value-size 32 \
    --duration "$DURATION" --warmup 0.5 --quiet --json "$tmp" >"$OUT/last.log" 2>&1; then
    echo "   FAILED: $1: $(tail -1 "$OUT/last.log")"
    return
  fi
  label "$tmp" "$1"
}
echo_run() {  # LABEL WINDOW
  local tmp="$OUT/one.jsonl"
  rm -f "$tmp"
  "$B/bin/fabkv-perf" --provider shm --mode echo --echo send-send --clients 1 --window "$2" \
    --sizes 48 --duration "$DURATION" --log warn --json "$tmp" >/dev/null 2>&1 || return 0
  label "$tmp" "$1"
}
label() {  # FILE LABEL: appends the run's lines to ab.jsonl, tagged
  python3 - "$1" "$2" "$OUT/ab.jsonl" <<'EOF'
import json, sys
src, lab, dst = sys.argv[1:]
with open(dst, "a") as f:
    for line in open(src):
        d = json.loads(line)
        d["ab"] = lab
        f.write(json.dumps(d) + "\n")
EOF
}

for r in $(seq "$REPEAT"); do
  echo "== round $r"
  echo_run "echo-w1/$r" 1
  for p in herd server-reply rfrpc hydradb; do
    run "$p/A/$r" "$A" 1 1 "fabkv:$p"
    run "$p/B/$r" "$B" 1 1 "fabkv:$p"
  done
  echo_run "echo-w32/$r" 32
  for w in 4 16; do
    run "sat-$w/A/$r" "$A" 8 "$w" fabkv:herd
    run "sat-$w/B/$r" "$B" 8 "$w" fabkv:herd
  done
done

python3 - "$OUT/ab.jsonl" "$REPEAT" <<'EOF' | tee "$OUT/summary.md"
import json, statistics, sys
path, repeat = sys.argv[1], int(sys.argv[2])
rows = {}
for line in open(path):
    d = json.loads(line)
    rows[d["ab"]] = d

def get(lab, key):
    d = rows.get(lab)
    if d is None: return None
    return d["latency_us"]["p50"] if key == "p50" else d["throughput_ops"] / 1e6

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def f(v, unit=""):
    return "-" if v is None else f"{v:.3f}{unit}" if unit == " M/s" else f"{v:.2f}{unit}"

rounds = range(1, repeat + 1)
echo = [get(f"echo-w1/{r}", "p50") for r in rounds]
echo32 = [get(f"echo-w32/{r}", "tput") for r in rounds]
print("The machine's pace per round (build B's SEND/SEND echo): p50 at window 1 "
      + ", ".join(f(e, " us") for e in echo) + "; throughput at window 32 "
      + ", ".join(f(e, " M/s") for e in echo32) + ".\n")
print("| measure | A (median) | B (median) | B / A per round | B / A (median) |")
print("|---|---|---|---|---|")
for name, key in [(p, k) for p in ("herd", "server-reply", "rfrpc", "hydradb")
                  for k in ("p50", "tput")] + [("sat-4", "tput"), ("sat-16", "tput")]:
    a = [get(f"{name}/A/{r}", key) for r in rounds]
    b = [get(f"{name}/B/{r}", key) for r in rounds]
    ratio = [y / x if x and y else None for x, y in zip(a, b)]
    unit = " us" if key == "p50" else " M/s"
    what = f"{name} {'p50, 1 x 1' if key == 'p50' else ('throughput, 1 x 1' if not name.startswith('sat') else 'throughput, 8 x ' + name[4:])}"
    print(f"| {what} | {f(med(a), unit)} | {f(med(b), unit)} "
          f"| {', '.join(f(x) for x in ratio)} | **{f(med(ratio))}** |")
EOF
