#!/usr/bin/env bash
# memcached's own conformance checker (Debian libmemcached-tools: memccapable) against the
# memcached front end of a scratch fabkv-server: every ascii and binary test must pass.
# Usage: memccapable.sh FABKV_SERVER [server flags...]; exit 77 (skipped) without memccapable.
set -uo pipefail
server=$1; shift
if ! command -v memccapable >/dev/null; then
  echo "memccapable not installed (apt-get install libmemcached-tools; scripts/install-deps.sh does)"
  exit 77
fi
out=$(mktemp); trap 'rm -f "$out"; [ -n "${pid:-}" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null' EXIT
"$server" --listen 127.0.0.1:0 --memcached 127.0.0.1:0 --cores -1 --log warn "$@" >"$out" &
pid=$!
port=""
for _ in $(seq 200); do  # up to 20 s for the READY and MEMCACHED lines
  port=$(sed -n 's/^MEMCACHED .*:\([0-9]*\)$/\1/p' "$out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "fabkv-server exited"; cat "$out"; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "fabkv-server did not start"; cat "$out"; exit 1; }
timeout 120 memccapable -h 127.0.0.1 -p "$port" -v
rc=$?
kill -0 "$pid" 2>/dev/null || { echo "fabkv-server died during the run"; exit 1; }
exit $rc
