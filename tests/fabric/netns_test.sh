#!/usr/bin/env bash
# Two hosts over tcp on one machine: network namespaces A and B joined by a veth pair, with
# ONLY the RFC 2544 benchmarking addresses 198.18.0.1/24 (A) and 198.18.0.2/24 (B).
# A runs `fabkv-perf serve`; B runs fabkv-perf client runs against it.
#
#   netns_test.sh /path/to/fabkv-perf
#
# Exit 0: passed. Exit 77: namespaces cannot be made here (reported by ctest as skipped).
# Anything else: failed.
set -u

PERF=${1:?usage: netns_test.sh /path/to/fabkv-perf}
SKIP=77
NS_A="fabkv-a-$$"
NS_B="fabkv-b-$$"
VETH_A="fkva$$"
VETH_B="fkvb$$"
ADDR_A=198.18.0.1
ADDR_B=198.18.0.2
WORK=
SERVER_PID=

skip() { echo "SKIP: $*"; exit "$SKIP"; }
fail() { echo "FAIL: $*"; exit 1; }

cleanup() {
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    kill -TERM "$SERVER_PID" 2>/dev/null
    # Bounded: give it 5 s, then SIGKILL.
    for _ in $(seq 50); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null
  fi
  # Deleting a namespace deletes the veth end inside it (and so the pair).
  ip netns del "$NS_A" 2>/dev/null
  ip netns del "$NS_B" 2>/dev/null
  ip link del "$VETH_A" 2>/dev/null
  [[ -n "$WORK" ]] && rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[[ -x "$PERF" ]] || fail "fabkv-perf not found at '$PERF'"
command -v ip >/dev/null 2>&1 || skip "no 'ip' command (iproute2) on this machine"
command -v timeout >/dev/null 2>&1 || skip "no 'timeout' command on this machine"
[[ $(id -u) -eq 0 ]] || skip "network namespaces need root (running as uid $(id -u))"
if ! err=$(ip netns add "$NS_A" 2>&1); then
  skip "cannot create a network namespace: $err"
fi
if ! err=$(ip netns add "$NS_B" 2>&1); then
  skip "cannot create a second network namespace: $err"
fi
if ! err=$(ip link add "$VETH_A" netns "$NS_A" type veth peer name "$VETH_B" netns "$NS_B" 2>&1); then
  skip "cannot create a veth pair between namespaces: $err"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/fabkv-netns.XXXXXX") || fail "mktemp"

in_a() { ip netns exec "$NS_A" "$@"; }
in_b() { ip netns exec "$NS_B" "$@"; }

in_a ip link set lo up || fail "lo up in $NS_A"
in_b ip link set lo up || fail "lo up in $NS_B"
in_a ip addr add "$ADDR_A/24" dev "$VETH_A" || fail "address in $NS_A"
in_b ip addr add "$ADDR_B/24" dev "$VETH_B" || fail "address in $NS_B"
in_a ip link set "$VETH_A" up || fail "veth up in $NS_A"
in_b ip link set "$VETH_B" up || fail "veth up in $NS_B"

# The link is up once B reaches A (no ping needed: wait for the carrier, bounded).
for _ in $(seq 50); do
  [[ $(in_b cat "/sys/class/net/$VETH_B/operstate" 2>/dev/null) == up ]] && break
  sleep 0.1
done
[[ $(in_b cat "/sys/class/net/$VETH_B/operstate" 2>/dev/null) == up ]] || fail "veth did not come up"

# The server in A, on an ephemeral port; it prints "READY HOST:PORT" when it listens.
in_a timeout -k 5 90 "$PERF" serve --provider tcp --listen "$ADDR_A:0" --core -1 \
  >"$WORK/server.out" 2>"$WORK/server.err" &
SERVER_PID=$!
ADDRESS=
for _ in $(seq 150); do
  ADDRESS=$(sed -n 's/^READY //p' "$WORK/server.out" 2>/dev/null | head -n1)
  [[ -n "$ADDRESS" ]] && break
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if [[ -z "$ADDRESS" ]]; then
  cat "$WORK/server.err"
  fail "the server in $NS_A did not become ready within 15 s"
fi
[[ "$ADDRESS" == "$ADDR_A":* ]] || fail "the server listens on '$ADDRESS', not on $ADDR_A"
echo "server in $NS_A ready at $ADDRESS"

failures=0
run_b() {  # name, then fabkv-perf client arguments; every run must be listed and exit 0
  local name=$1; shift
  local out="$WORK/$name.out"
  echo "== $name: fabkv-perf --server $ADDRESS $*"
  in_b timeout -k 5 60 "$PERF" --server "$ADDRESS" --provider tcp --duration 0.3 --warmup 0.1 \
    --client-core -1 "$@" >"$out" 2>"$WORK/$name.err"
  local rc=$?
  cat "$out"
  if [[ $rc -ne 0 ]]; then
    cat "$WORK/$name.err"
    echo "FAIL: $name exited with status $rc"
    failures=$((failures + 1))
    return
  fi
  if grep -q 'error:' "$out"; then
    echo "FAIL: $name: a run reported an error"
    failures=$((failures + 1))
  fi
  grep -q "provider tcp" "$out" || { echo "FAIL: $name: provider is not tcp"; failures=$((failures + 1)); }
}
expect_row() {  # name, regex a table row must match
  if ! grep -Eq "$2" "$WORK/$1.out"; then
    echo "FAIL: $1: no table row matching '$2'"
    failures=$((failures + 1))
  fi
}

run_b inbound --mode inbound --verbs write,read,send
for v in write read send; do expect_row inbound "^inbound[^ ]* *${v}.* [0-9]+\.[0-9]+ "; done
run_b echo --mode echo --echo write-send
expect_row echo "^echo[^ ]* *write-send.* [0-9]+\.[0-9]+ "

kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.err"; fail "the server died during the runs"; }
[[ $failures -eq 0 ]] || fail "$failures check(s) failed"
echo "PASS: fabkv-perf across namespaces $NS_A ($ADDR_A) and $NS_B ($ADDR_B) over tcp"
exit 0
