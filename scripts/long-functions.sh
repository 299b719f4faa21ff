#!/usr/bin/env bash
# Lists the functions over LIMIT lines (default 100) in the tracked C/C++ sources outside tests/,
# longest first: lines, name, file:first line. STYLE's "a function does one step" made checkable.
# Exits 1 when it lists any, so a check can call it.
#   scripts/long-functions.sh [LIMIT]
# Counts from the line of the name to the closing brace, as universal-ctags (Debian's
# universal-ctags package) reports them; a lambda is named after the function that holds it.
set -euo pipefail
LIMIT="${1:-100}"
cd "$(dirname "$0")/.."
git ls-files '*.cc' '*.h' '*.c' | grep -v '^tests/' |
  ctags --fields=+ne --kinds-c++=f --kinds-c=f --sort=no -L - -o - |
  awk -F'\t' -v limit="$LIMIT" '
    {
      line = 0; end = 0; scope = ""
      for (i = 4; i <= NF; i++) {
        if ($i ~ /^line:/) line = substr($i, 6)
        else if ($i ~ /^end:/) end = substr($i, 5)
        else if ($i ~ /^(class|struct|namespace|function):/) scope = substr($i, index($i, ":") + 1)
      }
      name = $1
      if (name ~ /^__anon/) name = "lambda in " scope
      else if (scope != "" && scope !~ /__anon/) name = scope "::" name
      gsub(/__anon[0-9a-f]+::/, "", name)
      n = end - line + 1
      if (end > 0 && n > limit) printf "%5d  %s  %s:%d\n", n, name, $2, line
    }' |
  sort -rn | { out="$(cat)"; [ -z "$out" ] || { printf '%s\n' "$out"; exit 1; }; }
