#!/usr/bin/env bash
# Instructions per request on both sides, counted by callgrind (deterministic, unlike wall
# clock on a shared machine): fabkv:herd on shm, 1 client, window 1, GETs only, against
# fabkv-perf's SEND/SEND echo (the pair of goal 1 in scripts/perf-goals.sh). Every process
# (fabkv-bench and the fabkv-server it starts; fabkv-perf's server and client) runs under
# callgrind; requests are counted as calls of fabkv::fabric::Endpoint::send, which each side
# makes once per request (the client its request, the server its answer). 100 keys: the
# fill's 100 PUTs stay out of the per-call averages of the GET path (under 1% of the calls).
#
#   scripts/perf-callgrind.sh [OUT_DIR]      default OUT_DIR: build/perf-callgrind
#
# Environment: REUSE (set: no runs, the tables from OUT_DIR's earlier files), BUILD, DURATION (measured seconds under callgrind, 4), TOP (functions per side
# in the table, 12), SYSTEM (the fabkv protocol measured, herd; another RPC protocol such as
# server-reply, rfrpc or hydradb gets the per-call cost of the RPC path they share instead),
# CLIENTS and WINDOW (1 and 1; the echo then runs one client at window CLIENTS x WINDOW, the
# saturation pairing of scripts/perf-goals.sh). Prints, per process, instructions per request in total (the spinning
# polls included: that share depends on the other side's pace) and in the functions that
# only run when there is a message ("work": fabkv's request handling, the post, and shm's
# per-message progress), then the top inclusive functions per request.
#
# Then, per process, the spinning loop's empty iteration ("idle:"): the instructions of one
# turn of the loop that waits for the other side, without the per-message work. On shm a
# message waits, on average, half such a turn before the loop sees it, on each side. It is
# an empty Endpoint::poll (per call, shm's per-message progress and the handling of what a
# read brought, Endpoint::poll_more, taken out) plus the rest of
# the turn: the loop function's own instructions and those of every call it makes at least
# once per two turns, less the per-message work and the polls inside them, per turn (turns:
# the calls of the function named in LOOP below). IDLE=1 also lists those calls per turn. It
# reads right when most turns are empty (tens of turns per request, printed): per-request
# work outside "work" that runs in the turns (clock reads, a completion's bookkeeping) is
# spread over them, a few hundred instructions per request.
set -euo pipefail
exec </dev/null
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
OUT=${1:-$BUILD/perf-callgrind}
DURATION=${DURATION:-4}
TOP=${TOP:-12}
SYSTEM=${SYSTEM:-herd}
CLIENTS=${CLIENTS:-1}
WINDOW=${WINDOW:-1}
command -v valgrind >/dev/null || { echo "valgrind missing: apt-get install valgrind (not part of make test's packages)"; exit 1; }
ninja -C "$BUILD" fabkv-bench fabkv-server fabkv-perf >/dev/null
mkdir -p "$OUT"
if [[ -z ${REUSE:-} ]]; then  # REUSE=1: only the tables, from OUT_DIR's files of an earlier run
rm -f "$OUT"/cg.* "$OUT"/*.jsonl

# Children too (the server fabkv-bench starts, fabkv-perf's roles); one file per process.
VG=(valgrind --tool=callgrind --trace-children=yes --fair-sched=yes --callgrind-out-file="$OUT/cg.%p")

"${VG[@]}" "$BUILD/bin/fabkv-bench" --provider shm --systems "fabkv:$SYSTEM" --clients "$CLIENTS" --window "$WINDOW" \
  --read-ratio 1 --distribution uniform --keys 100 --key-size 16 --value-size 32 \
  --duration "$DURATION" --warmup 0 --timeout-ms 60000 --quiet --json "$OUT/kv.jsonl" \
  >"$OUT/herd.log" 2>&1
"${VG[@]}" "$BUILD/bin/fabkv-perf" --provider shm --mode echo --echo send-send --clients 1 \
  --window $((CLIENTS * WINDOW)) --sizes 48 --duration "$DURATION" --log warn --json "$OUT/echo.jsonl" \
  >"$OUT/echo.log" 2>&1
fi

python3 - "$OUT" "$TOP" "${IDLE:-0}" "$SYSTEM" <<'EOF'
import glob, os, re, subprocess, sys

out, top, idle_detail, system = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4]
SEND = "fabkv::fabric::Endpoint::send("
# The work of one request without the polls that find nothing, per side: functions that run
# once per message (per call: the fill's PUTs go through other callers), none inside another;
# shm's progress of one inbound message on every side. (name, per call; else per request)
WORK = {
    "herd server": [("fabkv::server::Worker::on_completion_st(", 1),  # receive, check, collect
                    # Per request: a round's batch may hold several (CLIENTS, WINDOW > 1).
                    ("fabkv::rpc::RpcServer::flush_st(", 0),          # engine, answers built
                    ("fabkv::server::Worker::send_replies_st(", 0)],  # the answers' posts
    "herd client": [("fabkv::bench::Runner::LoadThread::issue(", 1),  # GET built and posted
                    ("fabkv::herd::(anonymous namespace)::HerdClient::complete(", 1)],  # answer
    "echo server": [("fabkv::perf::(anonymous namespace)::PerfServer::respond_st(", 1),
                    ("fabkv::fabric::Endpoint::recv(", 1)],          # the buffer reposted
    "echo client": [("fabkv::fabric::Endpoint::send(", 1),
                    ("fabkv::perf::(anonymous namespace)::PerfClient::on_completion(", 0)],
}
SHM = [("smr_start_common", 1), ("util_get_msg", 1)]  # one inbound message into its buffer
# The RPC path every RPC protocol shares (herd, server-reply, rfrpc, hydradb, ...), per call:
# what another SYSTEM's run is compared by. Its requests reach the server by WRITE or by SEND
# and its answers come back by SEND, WRITE or READ, so the per-message work has no common
# list of functions beyond these.
SHARED = {
    "client": ["fabkv::bench::Runner::LoadThread::issue(",      # GET built and posted
               "fabkv::rpc::RpcClient::submit(",                # of which: the RPC's request
               "fabkv::rpc::RpcClient::answer(",                # an answer matched, callback run
               "fabkv::bench::Runner::LoadThread::complete("],  # of which: the value checked
    "server": ["fabkv::rpc::RpcServer::accept_st(",             # a request taken
               "fabkv::rpc::RpcServer::flush_st(",              # engine, answers built
               "fabkv::server::Worker::send_replies_st("],      # the answers posted
}
# The spinning loop per side: (the function that holds the loop, the function called once per
# turn: its calls count the turns).
POLL = "fabkv::fabric::Endpoint::poll("
POLL_GOT = "fabkv::fabric::Endpoint::poll_more("
LOOP = {
    "herd server": ("fabkv::server::Worker::run_st(", "fabkv::server::Worker::round_st("),
    "herd client": ("fabkv::bench::Runner::LoadThread::loop(", "fabkv::Client::poll("),
    "echo server": ("fabkv::perf::run_server(", "fabkv::fabric::Endpoint::poll("),
    "echo client": ("fabkv::perf::(anonymous namespace)::PerfClient::phase(",
                    "fabkv::fabric::Endpoint::poll("),
}

def parse(path):
    """Per function: calls (summed over call sites), inclusive instructions, own instructions;
    per (caller, callee): calls and the instructions spent in them."""
    calls, names, callee, fn, own, edges, cost_next = {}, {}, None, None, {}, {}, None
    for line in open(path, errors="replace"):
        if line.startswith(("fn=", "cfn=")):
            key, val = line.rstrip("\n").split("=", 1)
            m = re.match(r"\((\d+)\)(?: (.*))?", val)
            if m:
                if m.group(2): names[m.group(1)] = m.group(2)
                val = names.get(m.group(1), "")
            if key == "cfn": callee = val
            else: fn = val
        elif line.startswith("calls=") and callee is not None:
            k = int(line.split("=")[1].split()[0])
            calls[callee] = calls.get(callee, 0) + k
            cost_next = (fn, callee, k)
            callee = None
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            v = int(parts[1]) if len(parts) > 1 else 0
            if cost_next is not None:  # the line after calls=: the callee's inclusive cost
                e = edges.setdefault(cost_next[:2], [0, 0])
                e[0] += cost_next[2]
                e[1] += v
                cost_next = None
            elif fn is not None:
                own[fn] = own.get(fn, 0) + v
    txt = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100",
                          "--auto=no", path], capture_output=True, text=True).stdout
    incl = {}
    for line in txt.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*?)\s*$", line)
        if not m: continue
        name = re.sub(r" \[/.*\]$", "", m.group(2))
        name = name[4:] if name.startswith("???:") else re.sub(r"^[^ (]*?:", "", name, count=1)
        incl.setdefault(name, int(m.group(1).replace(",", "")))
    return calls, incl, own, edges

def idle_turn(who, calls, incl, own, edges):
    """The loop's empty turn with one endpoint polled: (turns, the poll per call, the rest per
    turn, [(calls per turn, instructions per turn, callee)])."""
    loop_fn, turn_fn = LOOP[who]
    loop = next((f for f in own if f.startswith(loop_fn)), None)
    turns = sum(v for k, v in calls.items() if k.startswith(turn_fn))
    if loop is None or turns == 0: return None
    hot = [(k, v, c) for (f, c), (k, v) in edges.items() if f == loop and k >= turns / 2]
    direct = {c for (f, c) in edges if f == loop}
    # Per-message work nested in the hot calls (what the loop calls directly, a post, is in
    # none of them: its calls are fewer than half the turns).
    work = sum(incl[k] for w, _ in WORK[who] + SHM for k in incl
               if k.startswith(w) and calls.get(k) and k not in direct)
    # The endpoint's poll apart, per call: the server polls none in the turns before its
    # client comes and after it leaves.
    poll = next((k for k in incl if k.startswith(POLL) and calls.get(k)), None)
    if poll is None: return None
    shm = sum(incl[k] for w, _ in SHM for k in incl if k.startswith(w) and calls.get(k))
    # What a read that brought something did besides (the completions' conversion).
    got = next((incl[k] for k in incl if k.startswith(POLL_GOT) and calls.get(k)), 0)
    per_poll = (incl[poll] - shm - got) / calls[poll]
    rest = (own[loop] + sum(v for _, v, _ in hot) - work - (incl[poll] - shm)) / turns
    return turns, per_poll, rest, [(k / turns, v / turns, c) for k, v, c in hot]

def header(path, key):
    for line in open(path):
        if line.startswith(key): return line[len(key):].strip()
    return ""

sides = []
for path in sorted(glob.glob(os.path.join(out, "cg.*"))):
    c = header(path, "cmd:")
    exe = os.path.basename(c.split()[0]) if c else "?"
    padded = " " + c + " "
    if exe == "fabkv-server": who = f"{system} server"
    elif exe == "fabkv-bench": who = f"{system} client"
    elif exe == "fabkv-perf" and " serve " in padded: who = "echo server"
    elif exe == "fabkv-perf" and " client " in padded: who = "echo client"
    else: continue
    sides.append((who, path))

requests = 0
for who, path in sorted(sides):
    calls, incl, own, edges = parse(path)
    if who not in WORK:  # another RPC protocol: the shared path's functions, per call
        kind = who.split()[-1]
        if kind == "client":
            requests = sum(v for k, v in calls.items() if k.startswith(SHARED["client"][0]))
        n = requests
        if n == 0: continue
        print(f"== {who}: {n} requests; the shared RPC path, instructions per call "
              f"(calls per request)   ({os.path.basename(path)})")
        for f in SHARED[kind]:
            for k in incl:
                if k.startswith(f) and calls.get(k):
                    print(f"   {incl[k] / calls[k]:8,.0f}  {calls[k] / n:4.1f}x  {k[:110]}")
        continue
    n = sum(v for k, v in calls.items() if k.startswith(SEND))
    if n == 0: continue
    total = int(header(path, "summary:") or header(path, "totals:") or 0)
    parts = [(w, incl[k] / (calls[k] if per_call else n))
             for w, per_call in WORK[who] + SHM for k in incl if k.startswith(w) and calls.get(k)]
    work = sum(v for _, v in parts)
    print(f"== {who}: {n} requests; per request: {total / n:,.0f} instructions in all (spinning "
          f"polls included), {work:,.0f} in the per-message work   ({os.path.basename(path)})")
    print("   work: " + ", ".join(f"{w.rstrip('(').split('::')[-1]} {v:,.0f}" for w, v in parts))
    # Functions called about once or a few times per request: the work, not the spinning.
    rows = [(incl[f] / n, k / n, f) for f, k in calls.items()
            if f in incl and 0.5 * n <= k <= 4 * n]
    for per, ratio, f in sorted(rows, reverse=True)[:top]:
        print(f"   {per:8,.0f}  {ratio:4.1f}x  {f[:120]}")
    t = idle_turn(who, calls, incl, own, edges)
    if t:
        turns, per_poll, rest, hot = t
        print(f"   idle: {per_poll + rest:,.0f} instructions per empty turn of "
              f"{LOOP[who][0].rstrip('(').split('::')[-1]}: the endpoint's poll {per_poll:,.0f}, "
              f"the rest of the turn {rest:,.0f} ({turns:,} turns, {turns / n:,.0f} per request)")
        if idle_detail:
            print(f"      {own[next(f for f in own if f.startswith(LOOP[who][0]))] / turns:8,.1f}"
                  f"        the loop's own instructions (and what is inlined in it)")
            for k, v, c in sorted(hot, key=lambda x: -x[1]):
                print(f"      {v:8,.1f}  {k:4.2f}x  {c[:110]}")
EOF
