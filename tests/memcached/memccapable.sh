#!/usr/bin/env bash
# memcached's own conformance checker (Debian libmemcached-tools: memccapable) against the
# memcached front end of a scratch fabkv-server: every ascii and binary test must pass, and the
# server must then stop cleanly: SIGTERM ends it with exit 0 (a sanitizer's report, which makes
# the exit status non-zero, fails the test and is shown).
# Usage: memccapable.sh FABKV_SERVER [server flags...]; exit 77 (skipped) without memccapable.
set -uo pipefail
server=$1; shift
if ! command -v memccapable >/dev/null; then
  echo "memccapable not installed (apt-get install libmemcached-tools; scripts/install-deps.sh does)"
  exit 77
fi
out=$(mktemp); err=$(mktemp)
trap 'rm -f "$out" "$err"; [ -n "${pid:-}" ] && kill -9 "$pid" 2>/dev/null; wait 2>/dev/null' EXIT
"$server" --listen 127.0.0.1:0 --memcached 127.0.0.1:0 --cores -1 --log warn "$@" >"$out" 2>"$err" &
pid=$!
# Its stderr from the first sanitizer report on (at most 8000 bytes), else its last 6000 bytes.
stderr_excerpt() {
  echo "fabkv-server's stderr:"
  first=$(grep -n -m1 -E 'ERROR: (Address|Leak)Sanitizer|WARNING: ThreadSanitizer|runtime error:' "$err" | cut -d: -f1)
  if [ -n "$first" ]; then tail -n +"$first" "$err" | head -c 8000; else tail -c 6000 "$err"; fi
}
port=""
for _ in $(seq 200); do  # up to 20 s for the READY and MEMCACHED lines
  port=$(sed -n 's/^MEMCACHED .*:\([0-9]*\)$/\1/p' "$out")
  [ -n "$port" ] && break
  kill -0 "$pid" 2>/dev/null || { echo "fabkv-server exited"; cat "$out"; stderr_excerpt; exit 1; }
  sleep 0.1
done
[ -n "$port" ] || { echo "fabkv-server did not start"; cat "$out"; stderr_excerpt; exit 1; }
timeout 120 memccapable -h 127.0.0.1 -p "$port" -v
rc=$?
# Stop it as a user would and judge how it ended (20 s at most, then SIGKILL: status 137).
kill -TERM "$pid" 2>/dev/null
( sleep 20; kill -9 "$pid" 2>/dev/null ) &
timer=$!
wait "$pid"
status=$?
kill "$timer" 2>/dev/null
pid=""
if [ "$status" -ne 0 ]; then
  echo "fabkv-server ended with status $status after SIGTERM (0 expected; 128+n: killed by signal n)"
  stderr_excerpt
  exit 1
fi
exit $rc
