#!/usr/bin/env bash
# Resident memory of fabkv over tcp (docs/fabric.md, "The memory of an rdm endpoint over tcp"):
# a fabkv-server with its defaults on a free loopback port, then
#   1. one Python client (herd): VmRSS/VmHWM before connecting, connected, after 4,000 requests
#      (PUT and GET of 1,000 bytes);
#   2. fabkv-bench holding 64 tcp clients for 2 s: the bench process's and the server's peak.
#
#   scripts/tcp-memory.sh BIN_DIR PYTHON_DIR     (e.g. build/bin build/python; PYTHON_DIR "-":
#                                                 no Python client)
#
# Prints one line per figure, in MiB. Uses python3 on PATH with PYTHON_DIR on PYTHONPATH.
set -euo pipefail
BIN=${1:?BIN_DIR}; PYDIR=${2:?PYTHON_DIR}
PORT=$((20000 + RANDOM % 20000))
log=$(mktemp); server=""
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; rm -f "$log"' EXIT
mem() {  # pid -> "rss=.. hwm=.." in MiB
  awk '/VmHWM/ { h = $2 } /VmRSS/ { r = $2 }
       END { if (h == 0) exit 1; printf "rss=%d hwm=%d", r / 1024, h / 1024 }' "/proc/$1/status"
}
"$BIN/fabkv-server" --provider tcp --listen 127.0.0.1:$PORT --cores -1 --log warn >"$log" 2>&1 &
server=$!
sleep 2
echo "server idle: $(mem $server)"
[ "$PYDIR" != "-" ] && PYTHONPATH=$PYDIR timeout 60 python3 - 127.0.0.1:$PORT <<'PY'
import sys, fabkv
def mem():
    d = {}
    for line in open("/proc/self/status"):
        k, v = line.split(":", 1)
        if k in ("VmRSS", "VmHWM"): d[k] = int(v.split()[0]) // 1024
    return f"rss={d['VmRSS']} hwm={d['VmHWM']}"
print("python client, before connecting:", mem())
c = fabkv.Client(sys.argv[1], protocol="herd", provider="tcp")
print("python client, connected:", mem())
for i in range(2000):
    c.put(b"k%d" % (i % 100), b"v" * 1000)
    assert c.get(b"k%d" % (i % 100)) == b"v" * 1000
print("python client, after 4000 requests:", mem())
c.close()
PY
echo "server after the python client: $(mem $server)"
timeout 120 "$BIN/fabkv-bench" --server 127.0.0.1:$PORT --provider tcp --systems fabkv:herd \
  --clients 64 --window 1 --duration 2 --warmup 0.3 --keys 1000 --client-core -1 --quiet \
  >"$log.bench" 2>&1 &
bench=$!
peak=""
while kill -0 $bench 2>/dev/null; do  # $bench is timeout; fabkv-bench is its child
  child=$(pgrep -P $bench || true)
  if [ -n "$child" ]; then peak=$(mem "$child" 2>/dev/null || echo "$peak"); fi  # not a zombie
  sleep 0.1
done
wait $bench || { cat "$log.bench"; exit 1; }
echo "fabkv-bench holding 64 tcp clients: $peak"
echo "server after 64 tcp clients: $(mem $server)"
tail -1 "$log.bench"; rm -f "$log.bench"
